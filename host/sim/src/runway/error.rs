//! Runway's error answers: an HTTP status and a JSON body with a string `error`; validation
//! refusals add `issues` and `docUrl` (RUNWAY_API.md, "Errors"). One type so every refusal
//! looks the same on the wire.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::validate::Issue;

/// Where validation answers point (`docUrl`).
pub const DOC_URL: &str = "https://docs.dev.runwayml.com/api";

/// A refusal as Runway sends it.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub body: Value,
    /// `Retry-After` in whole seconds, when the refusal sends one.
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// `{"error": message}` with `status`.
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: json!({ "error": message.into() }),
            retry_after: None,
        }
    }

    /// 400 listing every issue found in a create body.
    pub(crate) fn validation(issues: Vec<Issue>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            body: json!({
                "error": "Validation of body failed",
                "issues": issues,
                "docUrl": DOC_URL,
            }),
            retry_after: None,
        }
    }

    /// 400 for a body that cannot be validated at all (not JSON, wrong content type).
    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404 for an unknown, deleted or cancelled-and-gone task, in Runway's words.
    pub(crate) fn task_not_found() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "Could not find Task")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self.retry_after {
            Some(secs) => (
                self.status,
                [(axum::http::header::RETRY_AFTER, secs.to_string())],
                Json(self.body),
            )
                .into_response(),
            None => (self.status, Json(self.body)).into_response(),
        }
    }
}
