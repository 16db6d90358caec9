//! slotd-api, the REST API (docs/api.md): [`router`] builds the axum `Router` over
//! [`Services`], and [`serve::serve`] serves it on a listener (header-read timeout, graceful
//! shutdown). Most tests drive the router with `oneshot` and no socket.
//!
//! # Layout
//! - `auth.rs`: the [`auth::Tenant`] extractor (bearer API keys → tenant); `caller.rs`: the
//!   `Caller` extractor (tenant and admin flag) of routes an admin may widen to every tenant.
//! - `error.rs`: [`error::ApiError`] → `application/problem+json`, never leaking internals.
//! - `tasks.rs`: read, list, cancel, retry, events; `task_create.rs`: `POST /v1/tasks/{type}`;
//!   the task's JSON shape is [`slotd_webhooks::task_view`], below the API and the webhook outbox.
//! - `pools.rs`, `handlers.rs`: what runs where; `health.rs`: `/healthz`, `/readyz`,
//!   `/metrics`; `openapi.rs`: the OpenAPI document every route is registered with.
//! - `console.rs`: the operator console at `/` (files in `console/`); `console_api.rs`: what
//!   it reads beyond the rest (`/v1/me`, pool timelines, webhook deliveries), derived by the
//!   pure `timeline.rs`.
//!
//! - `local_guard.rs`: the loopback default's web rules (loopback `Host`, JSON writes);
//!   `admission.rs`: the bound on requests in flight and per-tenant rate limits.
//!
//! Cross-cutting layers, outermost first: a `slotd.http` request span (tenant recorded once
//! known), `slotd_api_requests_total`, the loopback rules (without API keys), admission, a
//! request deadline answered as problem+json, the body size cap. The header-read timeout is
//! the listener's (see [`serve`]).

mod admission;
pub mod auth;
mod caller;
mod console;
mod console_api;
pub mod error;
mod events;
mod handlers;
mod health;
mod local_guard;
pub mod openapi;
mod pools;
mod provider_callbacks;
mod releases;
mod rollouts;
mod route_list;
pub mod serve;
mod task_create;
mod task_eta;
mod task_terms;
mod tasks;
mod tenants;
mod timeline;

#[cfg(test)]
mod console_tests;
#[cfg(test)]
mod releases_tests;
#[cfg(test)]
mod test_harness;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod web_tests;

use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use self::error::ApiError;
use slotd_core::config::Config;
use slotd_units::services::Services;

pub use self::auth::{LOCAL_TENANT, Tenant};
pub use self::local_guard::LocalGuard;
pub use slotd_webhooks::task_view::{TaskSummary, TaskView};

/// The shortest deadline a request gets. Creating a task waits for the handler's `plan`, so
/// the effective deadline is at least the handler call deadline plus [`REQUEST_TIMEOUT_SLACK`].
pub const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// Room beyond the handler call deadline for the database work around a `plan`.
pub const REQUEST_TIMEOUT_SLACK: Duration = Duration::from_secs(5);

/// Every route with its description (see `openapi.rs`).
fn routes() -> OpenApiRouter<Services> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .merge(tasks::router())
        .merge(events::router())
        .merge(provider_callbacks::router())
        .merge(console::router())
        // Not in the OpenAPI document yet: plain routes.
        .merge(console_api::router())
        .merge(pools::router())
        .merge(route_list::router())
        .merge(tenants::router())
        .merge(handlers::router())
        .merge(releases::router())
        .merge(rollouts::router())
        .merge(health::router())
        .routes(utoipa_axum::routes!(openapi_json))
}

/// The OpenAPI document of the API, as served at `/openapi.json`.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let (_, mut doc) = routes().split_for_parts();
    openapi::add_layer_errors(&mut doc);
    doc
}

/// [`openapi`] as the JSON text served and checked in (pretty, with a final newline).
pub fn openapi_json_text() -> String {
    // The document is built from static types; rendering it cannot fail.
    let mut doc = serde_json::to_value(openapi()).unwrap_or_default();
    openapi::tidy(&mut doc);
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

/// The OpenAPI document
///
/// This API's OpenAPI 3.1 description.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    operation_id = "openapi",
    security(()),
    responses((status = 200, description = "The document", body = Object)),
)]
async fn openapi_json() -> Response {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let text = TEXT.get_or_init(openapi_json_text).clone();
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        text,
    )
        .into_response()
}

/// The whole API over `services`.
pub fn router(services: Services) -> Router {
    let body_limit = services.config.max_body_bytes;
    let deadline = request_timeout(&services.config);
    let admission = admission::Admission::for_config(&services.config);
    let guard = LocalGuard::for_config(&services.config);
    let (routes, _) = routes().split_for_parts();
    routes
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn_with_state(deadline, enforce_deadline))
        .layer(middleware::from_fn_with_state(admission, admission::admit))
        .layer(middleware::from_fn_with_state(guard, guard_local))
        .layer(middleware::from_fn_with_state(
            services.metrics.clone(),
            record_request,
        ))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|req: &Request| {
                    tracing::info_span!(
                        "slotd.http",
                        method = %req.method(),
                        path = %req.uri().path(),
                        tenant = tracing::field::Empty,
                    )
                })
                // Handlers log the cause of a 5xx once, with context; a second generic line per
                // failure would only be noise.
                .on_failure(()),
        )
        .with_state(services)
}

/// What a scheduler-only process serves: `/healthz`, `/readyz` and `/metrics`, no API, so
/// orchestrators can probe it and Prometheus scrape it.
pub fn probe_router(services: Services) -> Router {
    let guard = LocalGuard::for_config(&services.config);
    let (health, _) = health::router().split_for_parts();
    health
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(guard, guard_local))
        .with_state(services)
}

/// The deadline of one request (see [`REQUEST_TIMEOUT_DEFAULT`]).
pub fn request_timeout(config: &Config) -> Duration {
    REQUEST_TIMEOUT_DEFAULT.max(config.limits.call_deadline + REQUEST_TIMEOUT_SLACK)
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such route".into())
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// Answer 503 problem+json when a request runs past its deadline (the work is dropped).
async fn enforce_deadline(State(deadline): State<Duration>, req: Request, next: Next) -> Response {
    match tokio::time::timeout(deadline, next.run(req)).await {
        Ok(response) => response,
        Err(_) => {
            tracing::warn!(deadline = ?deadline, "request deadline exceeded");
            ApiError::Timeout.into_response()
        }
    }
}

/// The loopback rules, when they apply (no API keys).
async fn guard_local(
    State(guard): State<Option<LocalGuard>>,
    req: Request,
    next: Next,
) -> Response {
    match guard {
        Some(guard) => local_guard::enforce(State(guard), req, next).await,
        None => next.run(req).await,
    }
}

/// Count every request by route template (not raw path: ids would explode the label set) and
/// status.
async fn record_request(
    State(metrics): State<slotd_core::telemetry::Metrics>,
    req: Request,
    next: Next,
) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let response = next.run(req).await;
    metrics.record(|| {
        metrics::counter!(
            "slotd_api_requests_total",
            "route" => route,
            "status" => response.status().as_u16().to_string(),
        )
        .increment(1)
    });
    response
}
