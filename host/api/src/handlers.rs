//! `GET /v1/handlers`: the handler versions serving right now, so an operator can tell which
//! build (name, version, sha256, file) answers each task type after a hot reload.
//!
//! `?all=true` lists every version of every file this process has seen, with its state
//! (active, refused with the reason, quarantined, unloaded); `GET /v1/handlers/history` reads
//! the durable history (`?name=&limit=`), which outlives restarts.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Tenant;
use super::error::{ApiError, log_store_error};
use slotd_runtime::{PoolInfo, TaskTypeInfo, VersionRecord, VersionState};
use slotd_store::HandlerVersionRow;
use slotd_units::services::Services;

/// Most history rows one request returns.
const HISTORY_LIMIT_MAX: u32 = 1000;

/// Routes under `/v1/handlers`.
pub fn router() -> OpenApiRouter<Services> {
    OpenApiRouter::new()
        .routes(routes!(list, super::releases::publish))
        .routes(routes!(history))
}

/// One loaded handler as shown.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HandlerView {
    pub name: String,
    pub version: String,
    /// The `slotd:handler` contract version the component was built against ("1.0.0" … "1.5.0").
    pub contract: String,
    /// The optional parts of the contract it uses (`cancel`, `routing`: 1.1 and later; `costs`: 1.2).
    pub features: slotd_runtime::Features,
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

/// `GET /v1/handlers`: the active handlers, or with `?all=true` every version seen.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum HandlerList {
    Active(Vec<HandlerView>),
    All(Vec<VersionRecord>),
}

/// Query of `GET /v1/handlers`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Every version seen, not only the active ones.
    #[serde(default)]
    pub all: bool,
}

/// List handlers
///
/// The handler versions serving now, by name; with `?all=true`, every version of every file
/// this process has seen (refused, quarantined, unloaded too), oldest first.
#[utoipa::path(
    get,
    path = "/v1/handlers",
    tag = "handlers",
    operation_id = "list_handlers",
    params(ListQuery),
    responses(
        (status = 200, description = "The handlers", body = HandlerList),
        (status = 400, description = "A bad query parameter"),
    ),
)]
async fn list(
    State(services): State<Services>,
    Tenant(_tenant): Tenant,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<HandlerList>, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    if q.all {
        return Ok(Json(HandlerList::All(services.registry.versions())));
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
    Ok(Json(HandlerList::Active(handlers)))
}

fn bad_query(e: QueryRejection) -> ApiError {
    ApiError::BadRequest {
        detail: format!("bad query: {}", e.body_text()),
        field: None,
    }
}

/// Query of `GET /v1/handlers/history`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// Only this handler's versions.
    pub name: Option<String>,
    /// Most rows (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// Handler history
///
/// The durable version history (loaded, refused, quarantined, unloaded), newest first; it
/// outlives restarts.
#[utoipa::path(
    get,
    path = "/v1/handlers/history",
    tag = "handlers",
    operation_id = "handler_history",
    params(HistoryQuery),
    responses(
        (status = 200, description = "The history", body = Vec<HandlerVersionRow>),
        (status = 400, description = "A bad query parameter"),
    ),
)]
async fn history(
    State(services): State<Services>,
    Tenant(_tenant): Tenant,
    query: Result<Query<HistoryQuery>, QueryRejection>,
) -> Result<Json<Vec<HandlerVersionRow>>, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let limit = match q.limit {
        None => 100,
        Some(n) if (1..=HISTORY_LIMIT_MAX).contains(&n) => n,
        Some(n) => {
            return Err(ApiError::bad_field(
                "limit",
                format!("limit {n} is not a number from 1 to {HISTORY_LIMIT_MAX}"),
            ));
        }
    };
    let rows = services
        .store
        .handler_version_list(q.name.as_deref(), limit)
        .await
        .map_err(log_store_error("reading the handler version history"))?;
    Ok(Json(rows))
}
