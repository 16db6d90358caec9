//! `GET /v1/handlers`: the handler versions serving right now, so an operator can tell which
//! build (name, version, sha256, file) answers each task type after a hot reload.
//!
//! `?all=true` lists every version of every file this process has seen, with its state
//! (active, refused with the reason, quarantined, unloaded); `GET /v1/handlers/history` reads
//! the durable history (`?name=&limit=`), which outlives restarts.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::auth::Tenant;
use super::error::{ApiError, log_store_error};
use crate::runtime::{PoolInfo, TaskTypeInfo, VersionState};
use crate::services::Services;

/// Most history rows one request returns.
const HISTORY_LIMIT_MAX: u32 = 1000;

/// Routes under `/v1/handlers`.
pub fn router() -> Router<Services> {
    Router::new()
        .route("/v1/handlers", get(list))
        .route("/v1/handlers/history", get(history))
}

/// One loaded handler as shown.
#[derive(Debug, Serialize)]
pub struct HandlerView {
    pub name: String,
    pub version: String,
    /// The `slotd:handler` contract version the component was built against ("1.0.0", "1.1.0").
    pub contract: String,
    /// The optional parts of the contract it uses (`cancel`, `routing`; 1.1 and later).
    pub features: crate::runtime::Features,
    /// sha256 of the component file, hex.
    pub sha256: String,
    pub path: String,
    pub task_types: Vec<TaskTypeInfo>,
    pub pools: Vec<PoolInfo>,
    /// Always `active` in this list (the field matches `?all=true`).
    pub state: VersionState,
    /// When this version was loaded (Unix ms).
    pub loaded_at: i64,
    /// Crashing calls in a row so far (quarantine at `[limits] quarantine_after`).
    pub consecutive_faults: u32,
}

/// Query of `GET /v1/handlers`.
#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    /// Every version seen, not only the active ones.
    #[serde(default)]
    pub all: bool,
}

/// `GET /v1/handlers`: a JSON array, by name; with `?all=true`, every version seen, oldest
/// first.
async fn list(
    State(services): State<Services>,
    Tenant(_tenant): Tenant,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    if q.all {
        return Ok(Json(services.registry.versions()).into_response());
    }
    let handlers: Vec<HandlerView> = services
        .registry
        .all()
        .iter()
        .map(|h| HandlerView {
            name: h.info.name.clone(),
            version: h.info.version.clone(),
            contract: h.contract.clone(),
            features: h.features,
            sha256: h.sha256.clone(),
            path: h.path.display().to_string(),
            task_types: h.info.task_types.clone(),
            pools: h.info.pools.clone(),
            state: VersionState::Active,
            loaded_at: h.loaded_at_ms,
            consecutive_faults: h.consecutive_faults(),
        })
        .collect();
    Ok(Json(handlers).into_response())
}

fn bad_query(e: QueryRejection) -> ApiError {
    ApiError::BadRequest {
        detail: format!("bad query: {}", e.body_text()),
        field: None,
    }
}

/// Query of `GET /v1/handlers/history`.
#[derive(Debug, Deserialize)]
pub struct HistoryQuery {
    pub name: Option<String>,
    pub limit: Option<u32>,
}

/// `GET /v1/handlers/history`: the durable version history, newest first.
async fn history(
    State(services): State<Services>,
    Tenant(_tenant): Tenant,
    query: Result<Query<HistoryQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let limit = q.limit.unwrap_or(100).clamp(1, HISTORY_LIMIT_MAX);
    let rows = services
        .store
        .handler_version_list(q.name.as_deref(), limit)
        .await
        .map_err(log_store_error("reading the handler version history"))?;
    Ok(Json(rows).into_response())
}
