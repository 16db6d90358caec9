//! Fault injection in front of the `/v1/…` routes, behind the key and version checks: 5xx
//! (and, on task reads and on creates, 429) before the effect; slow and lost answers after it
//! (see [`RunwayOptions`](super::RunwayOptions) for why each sits where it does). Every task
//! read that reaches this layer goes into the request log with the status it was answered.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::CONTENT_LENGTH;
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::auth::is_create;
use super::error::ApiError;
use super::state::Sim;

pub(crate) async fn inject(State(sim): State<Sim>, req: Request, next: Next) -> Response {
    let arrived = tokio::time::Instant::now();
    let read = (req.method() == Method::GET)
        .then(|| req.uri().path().strip_prefix("/v1/tasks/"))
        .flatten()
        .filter(|id| !id.is_empty() && !id.contains('/'))
        .map(str::to_owned);
    let resp = faulted(&sim, req, next, read.is_some()).await;
    if let Some(id) = read {
        sim.log_read(id, arrived, resp.status().as_u16());
    }
    resp
}

async fn faulted(sim: &Sim, req: Request, next: Next, read: bool) -> Response {
    let draw = sim.draw_faults();
    let read_fault = if read { sim.draw_read_fault() } else { None };
    let create = is_create(&req);
    let create_fault = if create {
        sim.draw_create_fault()
    } else {
        None
    };
    if let Some(status) = draw.fail.or(read_fault).or(create_fault) {
        sim.count(|s| {
            if status == StatusCode::TOO_MANY_REQUESTS {
                s.faults.http_429 += 1;
                s.faults.rate_limited_creates += u64::from(create);
            } else {
                s.faults.http_5xx += 1;
            }
            if create {
                *s.creates_refused
                    .entry(status.as_u16().to_string())
                    .or_default() += 1;
            }
        });
        let message = if status == StatusCode::TOO_MANY_REQUESTS {
            "Too many requests, try again later".to_owned()
        } else {
            format!("Service unavailable ({}), try again later", status.as_u16())
        };
        return ApiError::new(status, message).into_response();
    }
    let resp = next.run(req).await;
    if draw.slow {
        sim.count(|s| s.faults.slow += 1);
        tokio::select! {
            _ = sim.base.cancel.cancelled() => {}
            _ = tokio::time::sleep(Duration::from_millis(sim.opts.slow_ms)) => {}
        }
    }
    if draw.lost {
        let made = create && resp.status().is_success();
        sim.count(|s| {
            s.faults.lost_answers += 1;
            s.faults.lost_create_answers += u64::from(made);
        });
        return lost(resp);
    }
    resp
}

/// The answer with a body that fails at once: hyper then closes the connection before writing
/// anything (the status line is still in its buffer), so the client sees a connection error.
/// The status becomes 200 and the length unknown, so that hyper polls the body even for a 204.
fn lost(resp: Response) -> Response {
    let (mut parts, _) = resp.into_parts();
    parts.status = StatusCode::OK;
    parts.headers.remove(CONTENT_LENGTH);
    let failing = futures::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "sim runway: answer lost on purpose",
        ))
    });
    Response::from_parts(parts, Body::from_stream(failing))
}
