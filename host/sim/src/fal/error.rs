//! fal's error answers (FAL_API.md "Errors"): request errors `{"detail": text, "error_type"}`
//! with the same category in `X-Fal-Error-Type`, model errors `{"detail": [{loc, msg, type,
//! …}]}`, bare `{"detail": text}` for auth and lookups, and the ingress HTML pages of a gateway
//! that never reached the queue (no `x-fal-request-id`). One type so every refusal looks the
//! same on the wire.

use axum::Json;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub(crate) const ERROR_TYPE_HEADER: &str = "x-fal-error-type";
pub(crate) const RETRYABLE_HEADER: &str = "x-fal-retryable";
pub(crate) const REQUEST_ID_HEADER: &str = "x-fal-request-id";
pub(crate) const TIMEOUT_TYPE_HEADER: &str = "x-fal-request-timeout-type";

/// An error answer as fal sends it.
#[derive(Debug, Clone)]
pub(crate) struct FalError {
    pub status: StatusCode,
    pub body: Value,
    /// `X-Fal-Error-Type` (request errors).
    pub error_type: Option<&'static str>,
    /// `X-Fal-Retryable`, when said.
    pub retryable: Option<bool>,
    /// Other headers (`x-fal-request-id`, `X-Fal-Request-Timeout-Type`).
    pub headers: Vec<(&'static str, String)>,
}

impl FalError {
    /// `{"detail": text}`.
    pub(crate) fn detail(status: StatusCode, text: impl Into<String>) -> FalError {
        FalError {
            status,
            body: json!({ "detail": text.into() }),
            error_type: None,
            retryable: None,
            headers: Vec::new(),
        }
    }

    /// A request error: `{"detail": text, "error_type": kind}` and `X-Fal-Error-Type: kind`.
    pub(crate) fn request(
        status: StatusCode,
        kind: &'static str,
        text: impl Into<String>,
    ) -> FalError {
        FalError {
            status,
            body: json!({ "detail": text.into(), "error_type": kind }),
            error_type: Some(kind),
            retryable: None,
            headers: Vec::new(),
        }
    }

    /// A model error: `{"detail": [ … ]}` (422 for the input's problems).
    pub(crate) fn model(status: StatusCode, details: Value) -> FalError {
        FalError {
            status,
            body: json!({ "detail": details }),
            error_type: None,
            retryable: None,
            headers: Vec::new(),
        }
    }

    /// 422 for one problem with a query parameter, Pydantic-v2 style.
    pub(crate) fn query(param: &str, kind: &str, msg: impl Into<String>, input: &str) -> FalError {
        FalError::model(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!([{ "loc": ["query", param], "msg": msg.into(), "type": kind, "input": input }]),
        )
    }

    /// 400 `bad_request`.
    pub(crate) fn bad_request(text: impl Into<String>) -> FalError {
        FalError::request(StatusCode::BAD_REQUEST, "bad_request", text)
    }

    pub(crate) fn retryable(mut self, yes: bool) -> FalError {
        self.retryable = Some(yes);
        self
    }

    pub(crate) fn header(mut self, name: &'static str, value: impl Into<String>) -> FalError {
        self.headers.push((name, value.into()));
        self
    }

    /// 404 for a request id this caller may not see (unknown or another account's).
    pub(crate) fn request_not_found(id: &str) -> FalError {
        FalError::detail(StatusCode::NOT_FOUND, format!("Request {id:?} not found"))
    }
}

impl IntoResponse for FalError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, Json(self.body)).into_response();
        let h = resp.headers_mut();
        let mut put = |name: &'static str, value: &str| {
            if let Ok(v) = HeaderValue::from_str(value) {
                h.insert(HeaderName::from_static(name), v);
            }
        };
        if let Some(kind) = self.error_type {
            put(ERROR_TYPE_HEADER, kind);
        }
        if let Some(r) = self.retryable {
            put(RETRYABLE_HEADER, if r { "true" } else { "false" });
        }
        for (name, value) in &self.headers {
            put(name, value);
        }
        resp
    }
}

/// A gateway's HTML error page (nginx style), without `x-fal-request-id`: what a client sees
/// when the answer never came from the queue (FAL_API.md: "an nginx HTML page").
pub(crate) fn ingress_page(status: StatusCode) -> Response {
    let line = format!(
        "{} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Error")
    );
    let html = format!(
        "<html>\r\n<head><title>{line}</title></head>\r\n<body>\r\n<center><h1>{line}</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
    );
    (status, [(CONTENT_TYPE, "text/html")], html).into_response()
}
