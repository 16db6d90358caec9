//! [`ApiError`]: every way a request can fail, rendered as `application/problem+json`
//! (RFC 9457) with `type`, `title`, `status`, `detail` and, for validation problems, `field`.
//!
//! The rendering never leaks internals: a database or handler failure shows a generic detail,
//! and the real cause is logged once, by the request handler that saw it (see
//! [`log_store_error`]), inside the request span. Nothing here logs.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use slotd_store::StoreError;

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Seconds a client should wait before retrying after a 503.
pub const RETRY_AFTER_SECS: u32 = 1;

/// Why a request failed. Client mistakes are 4xx; only slotd's own trouble is 5xx.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request itself is malformed (bad JSON, unknown field, wrong type, bad query).
    #[error("{detail}")]
    BadRequest {
        detail: String,
        field: Option<String>,
    },
    /// No usable API key.
    #[error("missing or invalid API key")]
    Unauthorized,
    /// A provider callback without a valid callback token (docs/trust-model.md).
    #[error("{0}")]
    CallbackToken(String),
    /// The caller may not do this (e.g. a tenant's key asking for another tenant's list);
    /// the detail names the rule.
    #[error("{0}")]
    Forbidden(String),
    /// No such resource for this tenant (another tenant's task looks the same as none).
    #[error("{0}")]
    NotFound(String),
    /// The request contradicts what is stored (a handler version already published as
    /// another file).
    #[error("{0}")]
    Conflict(String),
    /// The route exists but not with this method.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// The body is over the configured limit.
    #[error("request body is over the {limit}-byte limit")]
    PayloadTooLarge { limit: usize },
    /// Well-formed but refused: the handler's `plan` said no, or the unit count is out of range.
    #[error("{detail}")]
    Unprocessable {
        detail: String,
        field: Option<String>,
    },
    /// Without API keys, a `Host` that is not a loopback name (a DNS-rebinding page would
    /// send its own domain). 421: the request was directed at a server that will not answer
    /// for that name.
    #[error(
        "Host {host:?} is not a loopback name; without API keys slotd answers only localhost, \
         127.0.0.1 and [::1] (DNS-rebinding protection)"
    )]
    MisdirectedHost { host: String },
    /// Without API keys, a write whose `Origin` is another site (a cross-site page).
    #[error(
        "Origin {origin:?} is not a loopback origin; without API keys slotd refuses \
         cross-site writes"
    )]
    CrossOrigin { origin: String },
    /// Without API keys, a write whose body is not declared JSON (what an HTML form can send).
    #[error(
        "a request body must be sent with Content-Type: application/json (got {found}); \
         without API keys slotd refuses other types (cross-site form protection)"
    )]
    UnsupportedMediaType { found: String },
    /// The tenant spent its request budget (`[api] rate_limit`); retry after the given time.
    #[error("rate limit exceeded for this API key; retry in {retry_after_secs} s")]
    RateLimited { retry_after_secs: u64 },
    /// More requests in flight than `[api] max_concurrent_requests`; retry shortly.
    #[error("too many requests in flight; retry shortly")]
    Overloaded,
    /// A dependency is down (database, handler); retry later.
    #[error("{0}")]
    Unavailable(String),
    /// A handler's code crashed on this request's input: not worth retrying (no Retry-After).
    #[error("{0}")]
    HandlerFault(String),
    /// The request ran past the server's deadline.
    #[error("request timed out")]
    Timeout,
    /// Something slotd did not expect; details are in the log, not in the answer.
    #[error("internal error")]
    Internal,
}

impl ApiError {
    /// A 400 for a query string that does not even decode.
    pub fn malformed_query(rejection: axum::extract::rejection::QueryRejection) -> Self {
        ApiError::BadRequest {
            detail: format!("the query string is malformed: {}", rejection.body_text()),
            field: None,
        }
    }

    /// A 400 naming the offending field.
    pub fn bad_field(field: &str, detail: impl Into<String>) -> Self {
        ApiError::BadRequest {
            detail: detail.into(),
            field: Some(field.to_string()),
        }
    }

    /// A 422 about the request as a whole.
    pub fn unprocessable(detail: impl Into<String>) -> Self {
        ApiError::Unprocessable {
            detail: detail.into(),
            field: None,
        }
    }

    /// A 422 naming the offending field.
    pub fn invalid_field(field: &str, detail: impl Into<String>) -> Self {
        ApiError::Unprocessable {
            detail: detail.into(),
            field: Some(field.to_string()),
        }
    }

    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized | ApiError::CallbackToken(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unprocessable { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::MisdirectedHost { .. } => StatusCode::MISDIRECTED_REQUEST,
            ApiError::CrossOrigin { .. } => StatusCode::FORBIDDEN,
            ApiError::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable(_) | ApiError::Timeout | ApiError::Overloaded => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::HandlerFault(_) => StatusCode::BAD_GATEWAY,
            ApiError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Stable problem type slug and human title.
    fn kind(&self) -> (&'static str, &'static str) {
        match self {
            ApiError::BadRequest { .. } => ("bad-request", "Bad request"),
            ApiError::Unauthorized => ("unauthorized", "Unauthorized"),
            ApiError::CallbackToken(_) => ("callback-token", "Unauthorized"),
            ApiError::Forbidden(_) => ("forbidden", "Forbidden"),
            ApiError::NotFound(_) => ("not-found", "Not found"),
            ApiError::Conflict(_) => ("conflict", "Conflict"),
            ApiError::MethodNotAllowed => ("method-not-allowed", "Method not allowed"),
            ApiError::PayloadTooLarge { .. } => ("payload-too-large", "Payload too large"),
            ApiError::Unprocessable { .. } => ("validation", "Validation failed"),
            ApiError::MisdirectedHost { .. } => ("misdirected-host", "Host not served"),
            ApiError::CrossOrigin { .. } => ("cross-origin", "Cross-origin write refused"),
            ApiError::UnsupportedMediaType { .. } => {
                ("unsupported-media-type", "Unsupported media type")
            }
            ApiError::RateLimited { .. } => ("rate-limited", "Too many requests"),
            ApiError::Overloaded => ("overloaded", "Server busy"),
            ApiError::Unavailable(_) => ("unavailable", "Service unavailable"),
            ApiError::HandlerFault(_) => ("handler-fault", "Handler fault"),
            ApiError::Timeout => ("timeout", "Request timed out"),
            ApiError::Internal => ("internal", "Internal error"),
        }
    }
}

/// The problem+json body (RFC 9457) of every error.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// A stable URN naming the kind of problem (`urn:slotd:problem:not-found`, …).
    #[serde(rename = "type")]
    kind: String,
    /// Short human summary of the kind.
    #[schema(value_type = String)]
    title: &'static str,
    /// The HTTP status, repeated.
    status: u16,
    /// What went wrong with this request.
    detail: String,
    /// The request field, query parameter or header at fault, for validation problems.
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<String>,
}

impl ApiError {
    /// The request field a 400 or 422 names, if it names one.
    pub fn field(&self) -> Option<&str> {
        match self {
            ApiError::BadRequest { field, .. } | ApiError::Unprocessable { field, .. } => {
                field.as_deref()
            }
            _ => None,
        }
    }

    /// The status and the field named: what tests of request checks compare.
    #[cfg(test)]
    pub(crate) fn status_and_field(&self) -> (u16, Option<String>) {
        (self.status().as_u16(), self.field().map(str::to_string))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let (slug, title) = self.kind();
        let field = self.field().map(str::to_string);
        let problem = Problem {
            kind: format!("urn:slotd:problem:{slug}"),
            title,
            status: status.as_u16(),
            detail: self.to_string(),
            field,
        };
        // Serializing a struct of strings cannot fail; fall back to a fixed body regardless.
        let body = serde_json::to_vec(&problem).unwrap_or_else(|_| {
            br#"{"type":"urn:slotd:problem:internal","title":"Internal error","status":500}"#
                .to_vec()
        });
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        match self {
            ApiError::Unauthorized => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"slotd\""),
                );
            }
            ApiError::Unavailable(_) | ApiError::Timeout | ApiError::Overloaded => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
            }
            ApiError::RateLimited { retry_after_secs } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            }
            _ => {}
        }
        response
    }
}

/// Turn a store failure into an answer, logging the cause once. Call it where the failure
/// happened (`.map_err(log_store_error("reading task"))`) so the log line carries the request
/// span and says what the request was doing.
pub fn log_store_error(doing: &'static str) -> impl FnOnce(StoreError) -> ApiError {
    move |e| match e {
        StoreError::Unavailable(reason) => {
            tracing::warn!(error = %reason, "{doing}: database unavailable");
            ApiError::Unavailable("the database is unavailable; retry shortly".into())
        }
        other => {
            tracing::error!(error = %other, "{doing} failed");
            ApiError::Internal
        }
    }
}
