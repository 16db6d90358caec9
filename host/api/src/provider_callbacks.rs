//! `POST /v1/callbacks/{handler}/{token}`: provider webhooks, authenticated by construction
//! (docs/trust-model.md).
//!
//! The token is the one slotd minted into the callback URL it handed the handler (see
//! [`slotd_units::provider_callback_token`]). It is checked before anything else: without a valid one the
//! answer is 401 and the handler is not even called. Where the handler has a `webhook_secret`,
//! the provider's Standard Webhooks signature is checked next, by the host, the same way (401,
//! handler not called). With both, the body goes to the handler's `on-callback` and the changes it returns are applied like a tick's, but only to the
//! units the token names. The bare `POST /v1/callbacks/{handler}` of earlier versions carries
//! no token and is always refused. No API key: providers cannot send one.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use slotd_runtime::HandlerFault;
use slotd_scheduler::apply_provider_callback;
use slotd_units::provider_callback_token;
use slotd_units::services::Services;

/// Routes under `/v1/callbacks`.
pub fn router() -> OpenApiRouter<Services> {
    OpenApiRouter::new()
        .routes(routes!(without_token))
        .routes(routes!(receive))
}

/// What a webhook did (for the provider's logs and for tests).
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct Received {
    /// Unit changes applied.
    applied: usize,
    /// Changes for units already past them (a repeat), ignored.
    ignored: usize,
    /// Changes the state machine or the token's scope refused.
    refused: usize,
}

/// A callback without a token
///
/// The bare provider callback URL of earlier versions: always refused, since it proves nothing.
#[utoipa::path(
    post,
    path = "/v1/callbacks/{handler}",
    tag = "callbacks",
    operation_id = "callback_without_token",
    security(()),
    params(("handler" = String, Path, description = "The handler name")),
    request_body(content = Object, description = "The provider's notification", content_type = "application/json"),
    responses((status = 401, description = "Always: the URL carries no provider callback token")),
)]
async fn without_token(State(services): State<Services>, Path(name): Path<String>) -> ApiError {
    tracing::warn!(handler = %name, "callback without a token refused");
    services.metrics.record(|| {
        metrics::counter!("slotd_provider_callbacks_refused_total", "reason" => "no-token")
            .increment(1)
    });
    ApiError::CallbackToken(
        "callback URL carries no token; use the URL slotd handed the handler".into(),
    )
}

/// The secret under `[handlers.X]` whose presence makes the host require a Standard Webhooks
/// signature on every callback for X (the same secret the handler may verify with).
pub const WEBHOOK_SECRET: &str = "webhook_secret";

/// Where the handler has a webhook secret, the provider's Standard Webhooks signature must
/// verify before the handler sees the body: a missing or wrong one is 401, like a bad token.
fn verify_signature(
    services: &Services,
    name: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), ApiError> {
    let Some(secret) = services
        .config
        .handlers
        .get(name)
        .and_then(|h| h.secrets.get(WEBHOOK_SECRET))
    else {
        return Ok(());
    };
    // A malformed secret is refused at start-up; here it can only fail closed.
    let key = secret.signing_key().map_err(|e| {
        tracing::error!(handler = %name, error = %e, "webhook secret unusable; callback refused");
        ApiError::CallbackToken(format!("handlers.{name}.{WEBHOOK_SECRET} is unusable"))
    })?;
    let header = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    let now_secs = services.clock.now_ms() / 1000;
    slotd_core::standard_webhooks::verify_headers(&key, header, body, now_secs).map_err(|e| {
        tracing::warn!(handler = %name, error = %e, "callback with a bad signature refused");
        services.metrics.record(|| {
            metrics::counter!("slotd_provider_callbacks_refused_total", "reason" => "bad-signature")
                .increment(1)
        });
        ApiError::CallbackToken(format!("webhook signature: {e:#}"))
    })
}

/// A provider callback
///
/// A provider's notification about jobs, at the URL slotd handed the handler: the token names
/// the handler and the units it may touch; with a `webhook_secret` configured the Standard
/// Webhooks signature must verify too. The handler's `on-callback` turns the body into unit
/// changes, applied like a tick's.
#[utoipa::path(
    post,
    path = "/v1/callbacks/{handler}/{token}",
    tag = "callbacks",
    operation_id = "callback",
    security(()),
    params(
        ("handler" = String, Path, description = "The handler name"),
        ("token" = String, Path, description = "The provider callback token slotd minted into the URL"),
    ),
    request_body(content = Object, description = "The provider's notification", content_type = "application/json"),
    responses(
        (status = 200, description = "Applied", body = Received),
        (status = 400, description = "The handler refused the body"),
        (status = 401, description = "A bad token or signature"),
        (status = 404, description = "The handler is not loaded"),
    ),
)]
async fn receive(
    State(services): State<Services>,
    Path((name, token)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Received>, ApiError> {
    let scope = provider_callback_token::verify(&services.provider_callback_key, &name, &token)
        .map_err(|e| {
            tracing::warn!(handler = %name, error = %e, "callback with a bad token refused");
            services.metrics.record(|| {
                metrics::counter!("slotd_provider_callbacks_refused_total", "reason" => "bad-token")
                    .increment(1)
            });
            ApiError::CallbackToken(e.to_string())
        })?;
    // The release that created the jobs while it drains, else the one serving.
    let handler = services
        .registry
        .for_release(&name, scope.release.as_deref())
        .ok_or_else(|| ApiError::NotFound(format!("no handler named {name:?} is loaded")))?;
    verify_signature(&services, &name, &headers, &body)?;
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
            // The handler's own checks (a provider signature, a malformed body) refused it.
            tracing::warn!(handler = %name, reason = %msg, "callback refused by the handler");
            services.metrics.record(|| {
                metrics::counter!("slotd_provider_callbacks_refused_total", "reason" => "handler-refused")
                    .increment(1)
            });
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
    let report = apply_provider_callback(&services, &handler, &scope, changes, now)
        .await
        .map_err(|e| {
            tracing::error!(handler = %name, error = %e, "applying a callback failed");
            ApiError::Unavailable("could not record the callback; retry later".into())
        })?;
    services.metrics.record(|| {
        metrics::counter!("slotd_provider_callbacks_total", "handler" => name).increment(1)
    });
    Ok(Json(Received {
        applied: report.applied,
        ignored: report.ignored,
        refused: report.refused,
    }))
}
