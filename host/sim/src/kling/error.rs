//! Kling's error answers: an HTTP status plus the envelope `{code, message, request_id,
//! data: null}`. One type so every refusal looks the same on the wire.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A refusal as Kling sends it.
#[derive(Debug, Clone)]
pub struct SimError {
    /// HTTP status of the answer.
    pub status: StatusCode,
    /// Kling's numeric code (1000–5002).
    pub code: u32,
    /// Human-readable detail; for parameter errors it names the field.
    pub message: String,
}

impl SimError {
    pub(crate) fn new(status: StatusCode, code: u32, message: impl Into<String>) -> Self {
        SimError {
            status,
            code,
            message: message.into(),
        }
    }

    /// 401 with one of the codes 1000–1004.
    pub(crate) fn auth(code: u32, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, code, message)
    }

    /// 400/1200: the request as a whole is unusable (body not a JSON object).
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, 1200, message)
    }

    /// 400/1201: one parameter is wrong; the message starts with its name.
    pub(crate) fn param(field: &str, problem: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::BAD_REQUEST, 1201, format!("{field}: {problem}"))
    }

    /// 404/1203: no such task (by task id or external id) or file.
    pub(crate) fn not_found(what: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, 1203, what)
    }

    /// 404/1202: no such route or method.
    pub(crate) fn no_route() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            1202,
            "invalid request method or path",
        )
    }

    /// 429/1303: the account's concurrency is used up; nothing was created.
    pub(crate) fn over_concurrency() -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            1303,
            "parallel task over resource pack limit",
        )
    }
}

/// The success envelope around `data`.
pub(crate) fn ok(data: Value) -> Response {
    Json(json!({
        "code": 0,
        "message": "SUCCEED",
        "request_id": request_id(),
        "data": data,
    }))
    .into_response()
}

pub(crate) fn request_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

impl IntoResponse for SimError {
    fn into_response(self) -> Response {
        let body = json!({
            "code": self.code,
            "message": self.message,
            "request_id": request_id(),
            "data": Value::Null,
        });
        (self.status, Json(body)).into_response()
    }
}
