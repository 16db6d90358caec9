//! Probes and metrics, outside `/v1` and without auth (load balancers and Prometheus do not
//! carry API keys): `/healthz` says the process answers, `/readyz` that the database does,
//! `/metrics` renders the Prometheus recorder.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use slotd_units::services::Services;

/// The Prometheus text exposition format.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// Probe and metrics routes.
pub fn router() -> OpenApiRouter<Services> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
}

/// A probe's answer.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Probe {
    /// `ok` (`/healthz`) or `ready` (`/readyz`).
    pub status: &'static str,
}

/// Liveness
///
/// Always 200 while the process serves requests.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    operation_id = "healthz",
    security(()),
    responses((status = 200, description = "The process answers", body = Probe)),
)]
async fn healthz() -> Json<Probe> {
    Json(Probe { status: "ok" })
}

/// Readiness
///
/// 200 when the database answers a ping, else 503 with `Retry-After`.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    operation_id = "readyz",
    security(()),
    responses((status = 200, description = "The database answers", body = Probe)),
)]
async fn readyz(State(services): State<Services>) -> Result<Json<Probe>, ApiError> {
    match services.store.ping().await {
        Ok(()) => Ok(Json(Probe { status: "ready" })),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check: database ping failed");
            Err(ApiError::Unavailable(
                "the database is not reachable".into(),
            ))
        }
    }
}

/// Metrics
///
/// The Prometheus text exposition, or 404 when no recorder is installed (some embedders).
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    operation_id = "metrics",
    security(()),
    responses(
        (status = 200, description = "Prometheus text format 0.0.4", body = String, content_type = "text/plain"),
        (status = 404, description = "No metrics recorder is installed"),
    ),
)]
async fn metrics(State(services): State<Services>) -> Result<Response, ApiError> {
    let handle = services
        .prometheus
        .as_ref()
        .ok_or_else(|| ApiError::NotFound("no metrics recorder is installed".into()))?;
    let mut response = handle.render().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(METRICS_CONTENT_TYPE),
    );
    Ok(response)
}
