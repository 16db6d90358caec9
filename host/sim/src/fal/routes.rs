//! The simulator's HTTP surface. Fixed paths are routed by axum: the JWKS, the CDN, the request
//! history and `/_sim/…`. Everything else is fal's queue API, whose model ids have any number
//! of segments, so one fallback reads the method and path itself: `POST /{model id}` submits,
//! `GET|PUT /{owner}/{app}/requests/{id}[/status|/cancel]` reads or cancels. Handlers only
//! parse and answer; the logic lives in `state`, `submit` and `drive`.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use super::auth::authenticate;
use super::error::{FalError, REQUEST_ID_HEADER, ingress_page};
use super::job::FILE_NAME;
use super::options::LostAs;
use super::state::Sim;
use super::submit;
use crate::files::{file_len, file_stream};

/// Bodies may carry data URIs; larger bodies get a JSON 413.
const BODY_MAX_BYTES: usize = 16 * 1024 * 1024;

/// The whole router with its state.
pub(crate) fn router(sim: Sim) -> Router {
    Router::new()
        .route("/.well-known/jwks.json", get(jwks))
        .route("/_sim/jwks", get(jwks))
        .route("/_sim/stats", get(stats))
        .route("/_sim/jobs", get(jobs))
        .route("/_sim/accounts", get(accounts))
        .route(
            "/_sim/accounts/{account}",
            get(account).post(account_update),
        )
        .route("/_cdn/files/{id}/{name}", get(download))
        .route(
            "/v1/models/requests/by-endpoint",
            get(super::history::handler),
        )
        .fallback(queue_api)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(BODY_MAX_BYTES))
        .with_state(sim)
}

/// What a `GET`/`PUT` under `…/requests/{id}` asks for.
#[derive(Debug, PartialEq, Eq)]
enum Op {
    Status,
    Result,
    Cancel,
}

/// `(prefix, id, op)` of a queue path: the prefix is what comes before `requests` (`owner/app`,
/// or longer when a model path is inserted).
fn parse_op<'a>(method: &Method, segs: &[&'a str]) -> Option<(String, &'a str, Op)> {
    let i = segs.iter().rposition(|s| *s == "requests")?;
    let (prefix, id, tail) = (segs.get(..i)?, segs.get(i + 1)?, segs.get(i + 2..)?);
    if prefix.len() < 2 {
        return None;
    }
    let op = match (method.as_str(), tail) {
        ("GET", []) => Op::Result,
        ("GET", ["status"]) => Op::Status,
        ("PUT", ["cancel"]) => Op::Cancel,
        _ => return None,
    };
    Some((prefix.join("/"), id, op))
}

async fn queue_api(
    State(sim): State<Sim>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    sim.count(|s| s.requests += 1);
    let segs: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    if method == Method::POST {
        return submit(&sim, &segs.join("/"), uri.query(), &headers, body).await;
    }
    if method != Method::GET && method != Method::PUT {
        return wrong_method().await;
    }
    if sim.draw_read_fault() {
        sim.count(|s| s.faults.read_5xx += 1);
        return ingress_page(StatusCode::SERVICE_UNAVAILABLE);
    }
    let account = match authenticate(&sim, &headers) {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    let Some((prefix, id, op)) = parse_op(&method, &segs) else {
        sim.count(|s| s.not_found += 1);
        return FalError::detail(
            StatusCode::NOT_FOUND,
            format!("Not found: {method} {}", uri.path()),
        )
        .into_response();
    };
    let logs = url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .any(|(k, v)| k == "logs" && matches!(v.as_ref(), "1" | "true"));
    let resp = match op {
        Op::Status => match sim.status(&account, &prefix, id, logs) {
            Ok((code, body)) => (code, Json(body)).into_response(),
            Err(e) => return e.into_response(),
        },
        Op::Result => match sim.result(&account, &prefix, id) {
            Ok(body) => Json(body).into_response(),
            Err(e) => return e.into_response(),
        },
        Op::Cancel => {
            let (code, body) = sim.cancel(&account, &prefix, id);
            (code, Json(body)).into_response()
        }
    };
    with_request_id(resp, id)
}

fn with_request_id(mut resp: Response, id: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(id) {
        resp.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    resp
}

/// `POST /{model id}`: injected faults, the checks, acceptance, then the answer — or its loss.
async fn submit(
    sim: &Sim,
    model: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let refused = |reason: &str| {
        let reason = reason.to_owned();
        sim.count(|s| *s.submits_refused.entry(reason).or_default() += 1);
    };
    let faults = sim.draw_submit_faults();
    if let Some(code) = faults.before {
        sim.count(|s| match code {
            StatusCode::TOO_MANY_REQUESTS => s.faults.submit_429 += 1,
            _ => s.faults.submit_5xx += 1,
        });
        refused(&format!("fault_{}", code.as_u16()));
        return match code {
            StatusCode::SERVICE_UNAVAILABLE => ingress_page(code),
            StatusCode::TOO_MANY_REQUESTS => {
                FalError::request(code, "rate_limited", "Too many requests, try again later")
                    .retryable(true)
                    .into_response()
            }
            _ => FalError::request(code, "internal_error", "Internal server error")
                .retryable(true)
                .into_response(),
        };
    }
    let bytes = match body {
        Ok(b) => b,
        Err(e) => {
            refused("bad_body");
            let text = format!("The request body could not be read: {}", e.body_text());
            return FalError::detail(e.status(), text).into_response();
        }
    };
    let accepted = submit::check(sim, model, query, headers, &bytes)
        .and_then(|sub| sim.accept(sub, faults.lost.is_some()));
    let (id, answer) = match accepted {
        Ok(a) => a,
        Err((e, reason)) => {
            refused(reason);
            return e.into_response();
        }
    };
    if faults.slow {
        sim.count(|s| s.faults.slow += 1);
        tokio::select! {
            _ = sim.base.cancel.cancelled() => {}
            _ = tokio::time::sleep(Duration::from_millis(sim.opts.slow_ms)) => {}
        }
    }
    match faults.lost {
        None => with_request_id(Json(answer).into_response(), &id),
        Some(LostAs::BadGateway) => ingress_page(StatusCode::BAD_GATEWAY),
        Some(LostAs::GatewayTimeout) => ingress_page(StatusCode::GATEWAY_TIMEOUT),
        Some(LostAs::Drop | LostAs::Any) => dropped(),
    }
}

/// An answer whose body fails at once: hyper closes the connection before writing anything
/// (the status line is still in its buffer), so the client sees a connection error.
fn dropped() -> Response {
    let failing = futures::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "sim fal: answer lost on purpose",
        ))
    });
    let mut resp = Response::new(Body::from_stream(failing));
    resp.headers_mut().remove(CONTENT_LENGTH);
    resp
}

/// A CDN file: public, unsigned; 404 unless its request succeeded and it has not expired.
async fn download(State(sim): State<Sim>, Path((id, name)): Path<(String, String)>) -> Response {
    if name != FILE_NAME || !sim.file_available(&id) {
        if name != FILE_NAME {
            sim.count(|s| s.files_not_found += 1);
        }
        return FalError::detail(StatusCode::NOT_FOUND, "File not found").into_response();
    }
    (
        [
            (CONTENT_TYPE, "video/mp4".to_owned()),
            (CONTENT_LENGTH, file_len(&id).to_string()),
        ],
        Body::from_stream(file_stream(id)),
    )
        .into_response()
}

async fn jwks(State(sim): State<Sim>) -> Response {
    Json(sim.signer.jwks()).into_response()
}

async fn stats(State(sim): State<Sim>) -> Response {
    Json(sim.stats()).into_response()
}

async fn jobs(State(sim): State<Sim>) -> Response {
    Json(sim.jobs()).into_response()
}

async fn accounts(State(sim): State<Sim>) -> Response {
    Json(sim.stats().accounts).into_response()
}

async fn account(State(sim): State<Sim>, Path(name): Path<String>) -> Response {
    match sim.stats().accounts.remove(&name) {
        Some(a) => Json(a).into_response(),
        None => unknown_account(&name),
    }
}

/// `POST /_sim/accounts/{account}` with `{"exhausted": bool}`.
async fn account_update(State(sim): State<Sim>, Path(name): Path<String>, body: Bytes) -> Response {
    let exhausted = match serde_json::from_slice::<Value>(&body) {
        Ok(v) => v.get("exhausted").and_then(Value::as_bool),
        Err(_) => None,
    };
    let Some(exhausted) = exhausted else {
        let text = "the body must be {\"exhausted\": true|false}";
        return (StatusCode::BAD_REQUEST, Json(json!({ "detail": text }))).into_response();
    };
    match sim.set_exhausted(&name, exhausted) {
        Some(a) => Json(a).into_response(),
        None => unknown_account(&name),
    }
}

fn unknown_account(name: &str) -> Response {
    FalError::detail(StatusCode::NOT_FOUND, format!("No account {name:?}")).into_response()
}

async fn wrong_method() -> Response {
    FalError::detail(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_paths_name_prefix_id_and_operation() {
        let get = Method::GET;
        let parse = |m: &Method, p: &str| {
            let segs: Vec<&str> = p.split('/').filter(|s| !s.is_empty()).collect();
            parse_op(m, &segs).map(|(prefix, id, op)| (prefix, id.to_owned(), op))
        };
        assert_eq!(
            parse(&get, "/fal-ai/pika/requests/r1/status"),
            Some(("fal-ai/pika".into(), "r1".into(), Op::Status))
        );
        assert_eq!(
            parse(&get, "/fal-ai/pika/v2.2/text-to-video/requests/r1"),
            Some((
                "fal-ai/pika/v2.2/text-to-video".into(),
                "r1".into(),
                Op::Result
            ))
        );
        assert_eq!(
            parse(&Method::PUT, "/fal-ai/pika/requests/r1/cancel"),
            Some(("fal-ai/pika".into(), "r1".into(), Op::Cancel))
        );
        for bad in [
            "/fal-ai/pika/requests/r1/status/stream",
            "/pika/requests/r1",
            "/fal-ai/pika/requests",
            "/fal-ai/pika/requests/r1/cancel",
        ] {
            assert_eq!(parse(&get, bad), None, "{bad}");
        }
    }
}
