//! Probes and metrics, outside `/v1` and without auth (load balancers and Prometheus do not
//! carry API keys): `/healthz` says the process answers, `/readyz` that the database does,
//! `/metrics` renders the Prometheus recorder.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::error::ApiError;
use crate::services::Services;

/// The Prometheus text exposition format.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// Probe and metrics routes.
pub fn router() -> Router<Services> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

/// Always 200 while the process serves requests.
async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

/// 200 when the database answers a ping, else 503 with `Retry-After`.
async fn readyz(State(services): State<Services>) -> Result<Json<serde_json::Value>, ApiError> {
    match services.store.ping().await {
        Ok(()) => Ok(Json(json!({ "status": "ready" }))),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check: database ping failed");
            Err(ApiError::Unavailable(
                "the database is not reachable".into(),
            ))
        }
    }
}

/// The Prometheus exposition, or 404 when no recorder is installed (some tests, embedders).
async fn metrics(State(services): State<Services>) -> Result<Response, ApiError> {
    let handle = services
        .metrics
        .as_ref()
        .ok_or_else(|| ApiError::NotFound("no metrics recorder is installed".into()))?;
    let mut response = handle.render().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(METRICS_CONTENT_TYPE),
    );
    Ok(response)
}
