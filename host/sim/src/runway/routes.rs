//! The simulator's HTTP surface: Runway's `/v1/…` paths behind the key/version checks and the
//! fault layer, signed output files under `/_files/`, and `/_sim/stats`, `/_sim/jobs`,
//! `/_sim/reads`.
//! Handlers only parse and answer; the organization's logic lives in `state` and `lifecycle`.

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::auth::require_key_and_version;
use super::error::ApiError;
use super::faults::inject;
use super::model::Endpoint;
use super::state::Sim;
use super::validate::{create_request, prompt_text};
use crate::files::{file_len, file_stream};

/// Create bodies may carry data URIs up to 5 MB; larger bodies get a JSON 413.
const BODY_MAX_BYTES: usize = 16 * 1024 * 1024;

/// The whole router with its state.
pub(crate) fn router(sim: Sim) -> Router {
    let i2v = Endpoint::ImageToVideo;
    let t2v = Endpoint::TextToVideo;
    let v1 = Router::new()
        .route(i2v.path(), post(move |s, h, b| create(s, i2v, h, b)))
        .route(t2v.path(), post(move |s, h, b| create(s, t2v, h, b)))
        .route("/v1/tasks/{id}", get(task_get).delete(task_delete))
        .route("/v1/organization", get(organization))
        .layer(DefaultBodyLimit::max(BODY_MAX_BYTES))
        .layer(from_fn_with_state(sim.clone(), inject))
        .layer(from_fn_with_state(sim.clone(), require_key_and_version));
    Router::new()
        .merge(v1)
        .route("/_files/{task}/video.mp4", get(download))
        .route("/_sim/stats", get(stats))
        .route("/_sim/jobs", get(jobs))
        .route("/_sim/reads", get(reads))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .with_state(sim)
}

async fn create(
    State(sim): State<Sim>,
    endpoint: Endpoint,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let content_type = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let checked = body
        .map_err(|e| {
            ApiError::new(
                e.status(),
                format!("Request body could not be read: {}", e.body_text()),
            )
        })
        .and_then(|b| Ok((create_request(endpoint, content_type, &b)?, prompt_text(&b))));
    match checked {
        Ok((req, prompt)) => match sim.create(req, prompt) {
            Ok(answer) => Json(answer).into_response(),
            Err(e) => e.into_response(),
        },
        Err(e) => {
            let code = e.status.as_u16().to_string();
            sim.count(|s| {
                s.validation_refusals += 1;
                *s.creates_refused.entry(code).or_default() += 1;
            });
            e.into_response()
        }
    }
}

async fn task_get(State(sim): State<Sim>, Path(id): Path<String>) -> Response {
    match sim.get(&id) {
        Ok(task) => Json(task).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn task_delete(State(sim): State<Sim>, Path(id): Path<String>) -> Response {
    match sim.delete(&id) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn organization(State(sim): State<Sim>) -> Response {
    Json(sim.organization()).into_response()
}

/// A signed output link: 403 when expired or altered, 404 when the task is gone, else the
/// task's deterministic MP4-ish bytes.
async fn download(
    State(sim): State<Sim>,
    Path(task_id): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let query = query.unwrap_or_default();
    if let Err(e) = sim
        .links
        .verify(&task_id, &query, super::state::unix_ms_u64())
    {
        sim.count(|s| s.link_refusals += 1);
        return ApiError::new(StatusCode::FORBIDDEN, e.message()).into_response();
    }
    if !sim.output_available(&task_id) {
        return ApiError::new(StatusCode::NOT_FOUND, "No such file").into_response();
    }
    (
        [
            (CONTENT_TYPE, "video/mp4".to_owned()),
            (CONTENT_LENGTH, file_len(&task_id).to_string()),
        ],
        Body::from_stream(file_stream(task_id)),
    )
        .into_response()
}

async fn stats(State(sim): State<Sim>) -> Response {
    Json(sim.stats()).into_response()
}

async fn jobs(State(sim): State<Sim>) -> Response {
    Json(sim.jobs()).into_response()
}

async fn reads(State(sim): State<Sim>) -> Response {
    Json(sim.reads()).into_response()
}

async fn no_route() -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "Not found").into_response()
}

async fn wrong_method() -> Response {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed").into_response()
}
