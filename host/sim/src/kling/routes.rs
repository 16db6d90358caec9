//! The simulator's HTTP surface: Kling's `/v1/…` paths behind the JWT check and the fault
//! layer, result files under `/files/`, `/_sim/stats`, `/_sim/jobs` and `/_sim/account`. Handlers only parse and answer; the
//! account logic lives in [`state`](super::state).

use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};

use super::account;
use super::auth::require_jwt;
use super::error::{SimError, ok};
use super::faults::inject;
use super::state::Sim;
use super::task::Kind;
use super::validate::create_request;
use crate::files::{file_len, file_stream};

/// `pageNum` range Kling accepts.
const PAGE_NUM_MAX: u32 = 1000;
/// Create bodies may carry a raw base64 image (Kling accepts images up to 10 MB).
const BODY_MAX_BYTES: usize = 32 * 1024 * 1024;
/// `pageSize` when the query leaves it out.
const PAGE_SIZE_DEFAULT: u32 = 30;

/// The whole router with its state.
pub(crate) fn router(sim: Sim) -> Router {
    let mut v1 = Router::new();
    for kind in Kind::ALL {
        v1 = v1.route(kind.path(), collection(kind)).route(
            &format!("{}/{{id}}", kind.path()),
            get(move |s, p| one(s, kind, p)),
        );
    }
    let v1 = v1
        .layer(DefaultBodyLimit::max(BODY_MAX_BYTES))
        .layer(from_fn_with_state(sim.clone(), inject))
        .layer(from_fn_with_state(sim.clone(), require_jwt));
    Router::new()
        .merge(v1)
        .route("/files/{file}", get(download))
        .route("/_sim/stats", get(stats))
        .route("/_sim/jobs", get(jobs))
        .route("/_sim/account", get(account::show).post(account::update))
        .fallback(no_route)
        .method_not_allowed_fallback(no_route)
        .with_state(sim)
}

fn collection(kind: Kind) -> MethodRouter<Sim> {
    post(move |s, body| create(s, kind, body)).get(move |s, q| list(s, kind, q))
}

async fn create(State(sim): State<Sim>, kind: Kind, body: Bytes) -> Response {
    let req = match create_request(kind, &body) {
        Ok(r) => r,
        Err(e) => {
            sim.count(|s| s.validation_refusals += 1);
            return e.into_response();
        }
    };
    match sim.create(kind, req) {
        Ok(data) => ok(data),
        Err(e) => e.into_response(),
    }
}

async fn one(State(sim): State<Sim>, kind: Kind, Path(id): Path<String>) -> Response {
    match sim.query(kind, &id) {
        Ok(data) => ok(data),
        Err(e) => e.into_response(),
    }
}

async fn list(State(sim): State<Sim>, kind: Kind, RawQuery(query): RawQuery) -> Response {
    match page_params(kind, query.as_deref().unwrap_or_default()) {
        Ok((num, size)) => ok(sim.list(kind, num, size)),
        Err(e) => {
            sim.count(|s| s.validation_refusals += 1);
            e.into_response()
        }
    }
}

/// `pageNum` (1–1000, default 1) and `pageSize` (1–500 or 1000, default 30).
fn page_params(kind: Kind, query: &str) -> Result<(u32, u32), SimError> {
    let mut num = 1;
    let mut size = PAGE_SIZE_DEFAULT;
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        let (slot, max) = match key.as_ref() {
            "pageNum" => (&mut num, PAGE_NUM_MAX),
            "pageSize" => (&mut size, kind.page_size_max()),
            _ => continue,
        };
        *slot = value
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| {
                SimError::param(
                    &key,
                    format!("must be an integer from 1 to {max} (got {value:?})"),
                )
            })?;
    }
    Ok((num, size))
}

async fn download(State(sim): State<Sim>, Path(file): Path<String>) -> Response {
    let task_id = file
        .strip_suffix(".mp4")
        .or_else(|| file.strip_suffix(".mp3"))
        .unwrap_or_default();
    if task_id.is_empty() || !sim.download_allowed(task_id) {
        return SimError::not_found(format!("no result file {file:?}")).into_response();
    }
    let content_type = if file.ends_with(".mp3") {
        "audio/mpeg"
    } else {
        "video/mp4"
    };
    (
        [
            (CONTENT_TYPE, content_type.to_owned()),
            (CONTENT_LENGTH, file_len(task_id).to_string()),
        ],
        Body::from_stream(file_stream(task_id.to_owned())),
    )
        .into_response()
}

async fn stats(State(sim): State<Sim>) -> Response {
    Json(sim.stats()).into_response()
}

async fn jobs(State(sim): State<Sim>) -> Response {
    Json(sim.jobs()).into_response()
}

async fn no_route() -> Response {
    SimError::no_route().into_response()
}
