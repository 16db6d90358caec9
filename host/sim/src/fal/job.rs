//! One request as the simulator keeps it (also after it ended: `/_sim/jobs` and the request
//! history), how it ended ([`Outcome`]), and how it looks on the wire: its URLs, its status, its
//! result (or the error the model returned), and its webhook body.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::error::{FalError, REQUEST_ID_HEADER, TIMEOUT_TYPE_HEADER};
use super::fate::{FailureKind, Fate, Spec};
use super::queue::Priority;
use crate::files::file_len;

/// The CDN file name of every result.
pub(crate) const FILE_NAME: &str = "output.mp4";

/// How a request ended.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Outcome {
    Success,
    /// The body broke the schema: the model's 422 `detail` list.
    Invalid(Value),
    Failed(FailureKind),
    Cancelled,
    /// `X-Fal-Request-Timeout` ran out before it started.
    TimedOut,
}

impl Outcome {
    /// The result's HTTP status.
    pub(crate) fn status_code(&self) -> u16 {
        match self {
            Outcome::Success => 200,
            Outcome::Invalid(_)
            | Outcome::Failed(
                FailureKind::ContentPolicyViolation | FailureKind::FileDownloadError,
            ) => 422,
            Outcome::Failed(FailureKind::RunnerServerError) => 500,
            Outcome::Cancelled => 499,
            Outcome::TimedOut => 504,
        }
    }

    /// `error_type` of the status (the first detail's `type` for a schema failure).
    pub(crate) fn error_type(&self) -> Option<String> {
        match self {
            Outcome::Success => None,
            Outcome::Invalid(details) => Some(
                details[0]["type"]
                    .as_str()
                    .unwrap_or("validation_error")
                    .to_owned(),
            ),
            Outcome::Failed(kind) => Some(kind.as_str().to_owned()),
            Outcome::Cancelled => Some("client_cancelled".into()),
            Outcome::TimedOut => Some("request_timeout".into()),
        }
    }

    /// `error` of the status and of the webhook.
    pub(crate) fn error(&self) -> Option<String> {
        (*self != Outcome::Success).then(|| format!("Invalid status code: {}", self.status_code()))
    }
}

/// One request.
#[derive(Clone, Debug)]
pub(crate) struct Job {
    pub id: String,
    pub account: String,
    /// The model id it was submitted to.
    pub endpoint: String,
    /// `owner/app`: where its status, result and cancel live.
    pub app: String,
    pub priority: Priority,
    pub input: Value,
    /// `X-Fal-Store-IO` (history payloads are kept only when true).
    pub store_io: bool,
    pub spec: Spec,
    pub fate: Fate,
    pub price_usd: f64,
    /// What it will end with if it runs to its end.
    pub planned: Outcome,
    /// How it ended, once `COMPLETED`.
    pub outcome: Option<Outcome>,
    /// Queue times (real ms since the simulator started).
    pub submitted_ms: i64,
    pub started_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    /// Ends it `request_timeout` if still queued then.
    pub deadline_ms: Option<i64>,
    pub webhook: Option<String>,
    /// The CDN file's lifetime after completion; `None`: never expires.
    pub media_ttl: Option<Duration>,
    pub file_sha256: Option<String>,
    /// Its submit answer was lost on purpose (the client saw an error or nothing).
    pub lost_answer: bool,
    /// sha256 (hex) of the input as JSON: equal inputs, equal hashes.
    pub input_sha256: String,
    pub unknown_keys: Vec<String>,
    pub webhook_attempts: u32,
    pub webhook_deliveries: u32,
}

impl Job {
    pub(crate) fn status_name(&self) -> &'static str {
        match (self.started_ms, self.ended_ms) {
            (_, Some(_)) => "COMPLETED",
            (Some(_), None) => "IN_PROGRESS",
            (None, None) => "IN_QUEUE",
        }
    }

    /// `{base}/{owner}/{app}/requests/{id}`.
    pub(crate) fn response_url(&self, base: &str) -> String {
        format!("{base}/{}/requests/{}", self.app, self.id)
    }

    pub(crate) fn file_url(&self, base: &str) -> String {
        format!("{base}/_cdn/files/{}/{FILE_NAME}", self.id)
    }

    /// The URLs every queue answer carries.
    pub(crate) fn links(&self, base: &str) -> Value {
        let response = self.response_url(base);
        json!({
            "request_id": self.id,
            "response_url": response,
            "status_url": format!("{response}/status"),
            "cancel_url": format!("{response}/cancel"),
        })
    }

    /// The status answer: 202 while queued or running, 200 once completed.
    pub(crate) fn status(
        &self,
        base: &str,
        position: Option<usize>,
        logs: Option<Value>,
        inference_s: Option<f64>,
        hide_errors: bool,
    ) -> (StatusCode, Value) {
        let mut body = self.links(base);
        body["status"] = json!(self.status_name());
        body["logs"] = logs.unwrap_or(Value::Null);
        body["metrics"] = json!({});
        match self.status_name() {
            "IN_QUEUE" => body["queue_position"] = json!(position.unwrap_or(0)),
            "IN_PROGRESS" => {}
            _ => {
                if let Some(s) = inference_s {
                    body["metrics"] = json!({ "inference_time": s });
                }
                if let Some(o) = self.outcome.as_ref().filter(|_| !hide_errors) {
                    if let Some(e) = o.error() {
                        body["error"] = json!(e);
                    }
                    if let Some(t) = o.error_type() {
                        body["error_type"] = json!(t);
                    }
                }
                return (StatusCode::OK, body);
            }
        }
        (StatusCode::ACCEPTED, body)
    }

    /// The success body: the video on the simulator's CDN.
    pub(crate) fn output(&self, base: &str) -> Value {
        json!({ "video": {
            "url": self.file_url(base),
            "content_type": "video/mp4",
            "file_name": FILE_NAME,
            "file_size": file_len(&self.id),
        }})
    }

    /// What the model returned: the output, or the error (`None` while unfinished).
    pub(crate) fn result(&self, base: &str) -> Option<Result<Value, FalError>> {
        let outcome = self.outcome.as_ref()?;
        let image = |input: &Value| -> (Value, Value) {
            match input.get("image_url") {
                Some(u) => (json!(["body", "image_url"]), u.clone()),
                None => (
                    json!(["body", "image_urls", 0]),
                    input["image_urls"][0].clone(),
                ),
            }
        };
        let err = match outcome {
            Outcome::Success => return Some(Ok(self.output(base))),
            Outcome::Invalid(details) => {
                FalError::model(StatusCode::UNPROCESSABLE_ENTITY, details.clone())
            }
            Outcome::Failed(FailureKind::ContentPolicyViolation) => FalError::model(
                StatusCode::UNPROCESSABLE_ENTITY,
                json!([{
                    "loc": ["body", "prompt"],
                    "msg": "The content could not be processed because it contained material flagged by a content checker.",
                    "type": "content_policy_violation",
                    "url": "https://docs.fal.ai/errors#content_policy_violation",
                    "input": self.input.get("prompt").cloned().unwrap_or(Value::Null),
                }]),
            )
            .retryable(false),
            Outcome::Failed(FailureKind::FileDownloadError) => {
                let (loc, input) = image(&self.input);
                FalError::model(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    json!([{
                        "loc": loc,
                        "msg": "Failed to download the file. Please check if the URL is accessible.",
                        "type": "file_download_error",
                        "url": "https://docs.fal.ai/errors#file_download_error",
                        "input": input,
                    }]),
                )
                .retryable(false)
            }
            Outcome::Failed(FailureKind::RunnerServerError) => FalError::request(
                StatusCode::INTERNAL_SERVER_ERROR,
                "runner_server_error",
                "The runner failed while processing the request",
            )
            .retryable(true),
            Outcome::Cancelled => FalError::request(
                StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
                "client_cancelled",
                "The request was cancelled by the client",
            )
            .retryable(false),
            Outcome::TimedOut => FalError::request(
                StatusCode::GATEWAY_TIMEOUT,
                "request_timeout",
                "The request did not start within its X-Fal-Request-Timeout",
            )
            .retryable(false)
            .header(TIMEOUT_TYPE_HEADER, "user"),
        };
        Some(Err(err.header(REQUEST_ID_HEADER, self.id.clone())))
    }

    /// The webhook body fal POSTs when the request is done (`None` while unfinished).
    pub(crate) fn webhook_body(&self, base: &str) -> Option<Value> {
        let outcome = self.outcome.as_ref()?;
        let (status, payload) = match self.result(base)? {
            Ok(v) => ("OK", v),
            Err(e) => ("ERROR", e.body),
        };
        Some(json!({
            "error": outcome.error(),
            "gateway_request_id": self.id,
            "payload": payload,
            "request_id": self.id,
            "status": status,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_name_their_code_and_type() {
        let invalid = Outcome::Invalid(json!([{"loc": ["body", "prompt"], "type": "missing"}]));
        assert_eq!(
            (invalid.status_code(), invalid.error_type()),
            (422, Some("missing".to_owned()))
        );
        assert_eq!(invalid.error().as_deref(), Some("Invalid status code: 422"));
        assert_eq!(Outcome::Cancelled.status_code(), 499);
        assert_eq!(
            Outcome::TimedOut.error_type().as_deref(),
            Some("request_timeout")
        );
        assert_eq!(Outcome::Success.error(), None);
    }
}
