//! What the answer to a submit (`POST {base_url}/{model id}`) means. The question that matters
//! is whether a request was queued: fal has no idempotency key, so an answer that does not
//! settle it is [`Submitted::Unknown`] (see [`crate::unknown`]), never "try again".
//!
//! "Not created": a clear 4xx, and (contract 1.5 convention [`NOT_CREATED`]) a server error fal
//! answered: any 5xx carrying fal's own error (`{"detail": …}`, `error_type`,
//! `X-Fal-Error-Type`), and a 500, 503 or other 5xx without one (a 503 ingress page is the
//! gateway shedding load before the queue). A 502 or 504 **without** fal's error is an ingress
//! page from a gateway that may have lost fal's answer to a request it queued (how FAL_API.md
//! and the simulator show a lost answer): unknown, like a timeout.

use serde_json::Value;
use slotd_sdk::retry_after::retry_after_ms;
use slotd_sdk::{HttpError, Outcome, ProviderError, Response};

use crate::fal::{self, ACCOUNT_EXHAUSTED, ACCOUNT_REFUSED, Answer};
use crate::settings::Config;

/// The code of a model id fal does not know (404 on submit).
pub const UNKNOWN_MODEL: &str = "unknown_model";
/// The code of a submit the host could not send as configured.
pub const MISCONFIGURED: &str = "misconfigured";
/// The code of a submit refused for too many requests (nothing created).
pub const RATE_LIMITED: &str = "rate_limited";
/// The contract's code (1.5 convention) for a submit fal answered with a server error and
/// queued nothing for: the host sends the unit back to `pending` instead of keeping it in
/// doubt.
pub const NOT_CREATED: &str = "not_created";

/// What a submit answer says.
#[derive(Clone, Debug, PartialEq)]
pub enum Submitted {
    /// Queued: the request id, and the queue URLs fal gave on the base URL's host.
    Accepted {
        id: String,
        status_url: Option<String>,
        response_url: Option<String>,
        cancel_url: Option<String>,
    },
    /// Nothing was created; the unit may be submitted again (a `retry-after`).
    Refused(Outcome),
    /// Refused for good.
    Failed(ProviderError),
    /// A request may or may not exist, for this reason.
    Unknown(String),
}

/// Classify a submit answer.
pub fn classify(cfg: &Config, answer: &Answer, now_ms: u64) -> Submitted {
    let r = match answer {
        Ok(r) => r,
        Err(e @ (HttpError::Denied(_) | HttpError::Invalid(_))) => {
            return Submitted::Failed(ProviderError::new(
                Some(MISCONFIGURED),
                format!("the submit could not be sent as configured: {e}"),
            ));
        }
        Err(e) => return Submitted::Unknown(e.to_string()),
    };
    match r.status {
        200..=299 => accepted(cfg, r),
        401 => Submitted::Refused(fal::retry(r, now_ms, Some(ACCOUNT_REFUSED))),
        403 => Submitted::Refused(fal::retry(r, now_ms, Some(ACCOUNT_EXHAUSTED))),
        429 => Submitted::Refused(fal::retry(r, now_ms, Some(RATE_LIMITED))),
        404 => {
            let e = fal::error(r);
            Submitted::Failed(ProviderError::new(
                Some(UNKNOWN_MODEL),
                format!("fal does not serve this model id ({})", e.message),
            ))
        }
        // A proxy's request timeout says nothing about what fal did.
        408 => Submitted::Unknown(lost(r)),
        400..=499 => Submitted::Failed(fal::error(r)),
        // A gateway's page: fal's answer to a queued request may be what it lost.
        502 | 504 if !from_fal(r) => Submitted::Unknown(lost(r)),
        500..=599 => Submitted::Refused(not_created(r, now_ms)),
        // 1xx/3xx, which a JSON API does not answer.
        _ => Submitted::Unknown(lost(r)),
    }
}

/// Whether fal itself wrote the error (its error body or header), not a gateway in front.
fn from_fal(r: &Response) -> bool {
    let body: Option<Value> = serde_json::from_slice(&r.body).ok();
    let fal_body = body
        .as_ref()
        .and_then(Value::as_object)
        .is_some_and(|b| b.contains_key("detail") || b.contains_key("error_type"));
    fal_body || r.header("x-fal-error-type").is_some()
}

/// The retry of a submit fal answered with a server error: code [`NOT_CREATED`], fal's status,
/// error type and text in the message (`fal internal_error: fal HTTP 500: Internal server
/// error (no request was queued)`), after `Retry-After` when sent.
fn not_created(r: &Response, now_ms: u64) -> Outcome {
    let error = fal::error(r);
    let code = error.code.unwrap_or_else(|| format!("http_{}", r.status));
    Outcome::RetryAfter {
        after_ms: retry_after_ms(&r.headers, now_ms),
        error: ProviderError::new(
            Some(NOT_CREATED),
            format!("fal {code}: {} (no request was queued)", error.message),
        ),
    }
}

/// A 2xx: queued when it names the request.
fn accepted(cfg: &Config, r: &Response) -> Submitted {
    let body = match fal::json(r) {
        Ok(body) => body,
        Err(why) => return Submitted::Unknown(why),
    };
    let text = |key: &str| body.get(key).and_then(Value::as_str);
    match text("request_id")
        .map(str::trim)
        .filter(|id| !id.is_empty())
    {
        Some(id) => Submitted::Accepted {
            id: id.to_string(),
            status_url: fal::on_base_host(cfg, text("status_url")),
            response_url: fal::on_base_host(cfg, text("response_url")),
            cancel_url: fal::on_base_host(cfg, text("cancel_url")),
        },
        None => Submitted::Unknown(format!(
            "fal's HTTP {} answer names no request_id",
            r.status
        )),
    }
}

/// Why an answer leaves the outcome unknown.
fn lost(r: &Response) -> String {
    let text: String = String::from_utf8_lossy(&r.body).chars().take(120).collect();
    match text.trim() {
        "" => format!("HTTP {}", r.status),
        t => format!("HTTP {}: {t}", r.status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use slotd_sdk::testing::{ScriptedHost, json_answer};

    fn cfg() -> Config {
        Config::read(&ScriptedHost::new()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn server_errors_fal_answered_are_not_created_and_gateway_pages_are_unknown() {
        let internal = json!({"detail": "Internal server error", "error_type": "internal_error"});
        assert_eq!(
            classify(&cfg(), &json_answer(500, &internal), 0),
            Submitted::Refused(Outcome::RetryAfter {
                after_ms: None,
                error: ProviderError::new(
                    Some(NOT_CREATED),
                    "fal internal_error: fal HTTP 500: Internal server error (no request was \
                     queued)"
                ),
            })
        );
        let not_created = |r: Response| match classify(&cfg(), &Ok(r), 0) {
            Submitted::Refused(Outcome::RetryAfter { after_ms, error }) => {
                (error.code.as_deref() == Some(NOT_CREATED)).then_some(after_ms)
            }
            _ => None,
        };
        let busy = Response::new(503, "<html>503 Service Temporarily Unavailable</html>")
            .with_header("Retry-After", "2");
        assert_eq!(not_created(busy), Some(Some(2_000)));
        assert!(not_created(Response::new(500, "")).is_some());
        let runner = r#"{"detail": "runner gone", "error_type": "runner_disconnected"}"#;
        assert!(not_created(Response::new(502, runner)).is_some());
        let typed = Response::new(504, "").with_header("X-Fal-Error-Type", "startup_timeout");
        assert!(not_created(typed).is_some());
        for page in [
            Response::new(502, "<html>502 Bad Gateway</html>"),
            Response::new(504, "<html>504 Gateway Time-out</html>"),
            Response::new(504, ""),
            Response::new(502, "[1]"),
        ] {
            assert!(
                matches!(
                    classify(&cfg(), &Ok(page.clone()), 0),
                    Submitted::Unknown(_)
                ),
                "{page:?}"
            );
        }
    }

    #[test]
    fn only_a_named_request_is_accepted_and_foreign_urls_are_dropped() {
        let body = json!({"request_id": "r1", "status": "IN_QUEUE",
            "status_url": "https://queue.fal.run/fal-ai/pika/requests/r1/status",
            "response_url": "https://elsewhere.test/fal-ai/pika/requests/r1",
            "cancel_url": "https://queue.fal.run/fal-ai/pika/requests/r1/cancel"});
        let got = classify(&cfg(), &json_answer(200, &body), 0);
        assert_eq!(
            got,
            Submitted::Accepted {
                id: "r1".into(),
                status_url: Some("https://queue.fal.run/fal-ai/pika/requests/r1/status".into()),
                response_url: None,
                cancel_url: Some("https://queue.fal.run/fal-ai/pika/requests/r1/cancel".into()),
            }
        );
        for body in [
            json!({"status": "IN_QUEUE"}),
            json!({"request_id": ""}),
            json!([1]),
        ] {
            assert!(matches!(
                classify(&cfg(), &json_answer(201, &body), 0),
                Submitted::Unknown(_)
            ));
        }
    }
}
