//! Fault injection in front of the `/v1/…` routes: 5xx before the effect, malformed bodies and
//! slow answers after it (see [`SimOptions`](super::SimOptions) for why each sits where it does).

use std::time::Duration;

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::header::CONTENT_LENGTH;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::state::Sim;

/// Answers are small JSON; anything larger is passed through untouched.
const MALFORM_MAX_BYTES: usize = 16 * 1024 * 1024;

pub(crate) async fn inject(State(sim): State<Sim>, req: Request, next: Next) -> Response {
    let draw = sim.draw_faults();
    if let Some(err) = draw.fail {
        return err.into_response();
    }
    let mut resp = next.run(req).await;
    if draw.malformed {
        sim.count(|s| s.faults.malformed += 1);
        resp = malform(resp).await;
    }
    if draw.slow {
        sim.count(|s| s.faults.slow += 1);
        tokio::select! {
            _ = sim.base.cancel.cancelled() => {}
            _ = tokio::time::sleep(Duration::from_millis(sim.opts.slow_ms)) => {}
        }
    }
    resp
}

/// Cuts the body in half (after at least one byte), keeping status and content type: the
/// result starts like JSON and is never valid JSON.
async fn malform(resp: Response) -> Response {
    let (mut parts, body) = resp.into_parts();
    let bytes = match to_bytes(body, MALFORM_MAX_BYTES).await {
        Ok(b) => b,
        Err(_) => return Response::from_parts(parts, Body::empty()),
    };
    let cut = (bytes.len() / 2).max(1).min(bytes.len());
    parts.headers.remove(CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(bytes.slice(..cut)))
}
