//! `POST /v1/callbacks/{handler}`: provider webhooks. The body goes to the handler's
//! `on-callback` (which verifies any signature with host signing and maps it to changes), and
//! the changes are applied like a tick's. No API key: providers cannot send one; a handler that
//! needs authenticity checks the provider's signature.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use serde::Serialize;

use super::error::ApiError;
use crate::runtime::HandlerFault;
use crate::scheduler::apply_callback;
use crate::services::Services;

/// Routes under `/v1/callbacks`.
pub fn router() -> Router<Services> {
    Router::new().route("/v1/callbacks/{handler}", post(receive))
}

/// What a webhook did (for the provider's logs and for tests).
#[derive(Debug, Serialize)]
struct Received {
    applied: usize,
    ignored: usize,
    refused: usize,
}

async fn receive(
    State(services): State<Services>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Received>, ApiError> {
    let handler = services
        .registry
        .by_name(&name)
        .ok_or_else(|| ApiError::NotFound(format!("no handler named {name:?} is loaded")))?;
    let headers: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(k, v)| {
            v.to_str()
                .ok()
                .map(|v| (k.as_str().to_string(), v.to_string()))
        })
        .collect();
    let changes = match handler.on_callback(&headers, &body).await {
        Ok(c) => c,
        Err(HandlerFault::Error(msg)) => {
            return Err(ApiError::BadRequest {
                detail: format!("callback refused by handler {name}: {msg}"),
                field: None,
            });
        }
        Err(fault) => {
            tracing::warn!(handler = %name, %fault, "handler faulted on a callback");
            return Err(ApiError::Unavailable(format!(
                "handler {name} is unavailable"
            )));
        }
    };
    let now = services.clock.now_ms();
    let report = apply_callback(&services, &handler, changes, now)
        .await
        .map_err(|e| {
            tracing::error!(handler = %name, error = %e, "applying a callback failed");
            ApiError::Unavailable("could not record the callback; retry later".into())
        })?;
    metrics::counter!("slotd_callbacks_total", "handler" => name).increment(1);
    Ok(Json(Received {
        applied: report.applied,
        ignored: report.ignored,
        refused: report.refused,
    }))
}
