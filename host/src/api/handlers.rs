//! `GET /v1/handlers`: the handler versions serving right now, so an operator can tell which
//! build (name, version, sha256, file) answers each task type after a hot reload.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

use super::auth::Tenant;
use crate::runtime::{PoolInfo, TaskTypeInfo};
use crate::services::Services;

/// Routes under `/v1/handlers`.
pub fn router() -> Router<Services> {
    Router::new().route("/v1/handlers", get(list))
}

/// One loaded handler as shown.
#[derive(Debug, Serialize)]
pub struct HandlerView {
    pub name: String,
    pub version: String,
    /// sha256 of the component file, hex.
    pub sha256: String,
    pub path: String,
    pub task_types: Vec<TaskTypeInfo>,
    pub pools: Vec<PoolInfo>,
}

/// `GET /v1/handlers`: a JSON array, by name.
async fn list(State(services): State<Services>, Tenant(_tenant): Tenant) -> Json<Vec<HandlerView>> {
    let handlers = services
        .registry
        .all()
        .iter()
        .map(|h| HandlerView {
            name: h.info.name.clone(),
            version: h.info.version.clone(),
            sha256: h.sha256.clone(),
            path: h.path.display().to_string(),
            task_types: h.info.task_types.clone(),
            pools: h.info.pools.clone(),
        })
        .collect();
    Json(handlers)
}
