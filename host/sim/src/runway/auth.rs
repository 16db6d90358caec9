//! The checks every `/v1/…` request passes first, in the contract's order: the API key
//! (`Authorization: Bearer <key>`, else 401), then the version header (`X-Runway-Version:
//! 2024-11-06`, else 400 naming the header).

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::model::Endpoint;
use super::options::RUNWAY_VERSION;
use super::state::Sim;

/// The version header's name.
pub const VERSION_HEADER: &str = "X-Runway-Version";

/// Which check a request failed.
#[derive(Debug)]
pub(crate) enum Refusal {
    Key(ApiError),
    Version(ApiError),
}

/// Checks the key, then the version.
pub(crate) fn check(headers: &HeaderMap, api_key: &str) -> Result<(), Refusal> {
    let auth = headers
        .get(AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or_default().trim());
    let unauthorized = |m: &str| Refusal::Key(ApiError::new(StatusCode::UNAUTHORIZED, m));
    let Some(auth) = auth.filter(|a| !a.is_empty()) else {
        return Err(unauthorized(
            "Missing API key: send Authorization: Bearer <API key>",
        ));
    };
    let Some(key) = auth
        .strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("bearer "))
    else {
        return Err(unauthorized(
            "The Authorization header must be Bearer <API key>",
        ));
    };
    if !same(key.trim().as_bytes(), api_key.as_bytes()) {
        return Err(unauthorized("Invalid API key"));
    }
    match headers.get(VERSION_HEADER).map(|v| v.to_str()) {
        Some(Ok(v)) if v.trim() == RUNWAY_VERSION => Ok(()),
        None => Err(Refusal::Version(ApiError::bad_request(format!(
            "Missing {VERSION_HEADER} header: send {VERSION_HEADER}: {RUNWAY_VERSION}"
        )))),
        Some(got) => Err(Refusal::Version(ApiError::bad_request(format!(
            "Unsupported {VERSION_HEADER} header {:?}: send {VERSION_HEADER}: {RUNWAY_VERSION}",
            got.unwrap_or("<not text>")
        )))),
    }
}

/// Constant-time comparison (the key is a secret).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether the request is a create (for the `creates_refused` counter).
pub(crate) fn is_create(req: &Request) -> bool {
    req.method() == Method::POST
        && [Endpoint::ImageToVideo, Endpoint::TextToVideo]
            .iter()
            .any(|e| req.uri().path() == e.path())
}

/// Middleware in front of every `/v1/…` route.
pub(crate) async fn require_key_and_version(
    State(sim): State<Sim>,
    req: Request,
    next: Next,
) -> Response {
    sim.count(|s| s.requests += 1);
    let refusal = match check(req.headers(), &sim.opts.api_key) {
        Ok(()) => return next.run(req).await,
        Err(r) => r,
    };
    let create = is_create(&req);
    let err = match refusal {
        Refusal::Key(e) => {
            sim.count(|s| s.auth_refusals += 1);
            e
        }
        Refusal::Version(e) => {
            sim.count(|s| s.version_refusals += 1);
            e
        }
    };
    if create {
        let code = err.status.as_u16().to_string();
        sim.count(|s| *s.creates_refused.entry(code).or_default() += 1);
    }
    err.into_response()
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderName, HeaderValue};

    use super::*;

    fn status(auth: Option<&str>, version: Option<&str>) -> Option<u16> {
        let mut h = HeaderMap::new();
        if let Some(a) = auth.and_then(|a| HeaderValue::from_str(a).ok()) {
            h.insert(AUTHORIZATION, a);
        }
        if let Some(v) = version.and_then(|v| HeaderValue::from_str(v).ok()) {
            h.insert(HeaderName::from_static("x-runway-version"), v);
        }
        match check(&h, "key_abc") {
            Ok(()) => None,
            Err(Refusal::Key(e) | Refusal::Version(e)) => Some(e.status.as_u16()),
        }
    }

    #[test]
    fn key_before_version() {
        let v = Some(RUNWAY_VERSION);
        assert_eq!(status(Some("Bearer key_abc"), v), None);
        assert_eq!(status(None, v), Some(401));
        assert_eq!(status(Some("Bearer key_abd"), None), Some(401));
        assert_eq!(status(Some("key_abc"), v), Some(401));
        assert_eq!(status(Some("Bearer key_abc"), None), Some(400));
        assert_eq!(
            status(Some("Bearer key_abc"), Some("2024-09-13")),
            Some(400)
        );
    }
}
