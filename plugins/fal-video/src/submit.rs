//! What the answer to a submit (`POST {base_url}/{model id}`) means. The question that matters
//! is whether a request was queued: fal has no idempotency key, so an answer that does not
//! settle it is [`Submitted::Unknown`] (see [`crate::unknown`]), never "try again". Only a
//! clear 4xx means "not created".

use serde_json::Value;
use slotd_sdk::{HttpError, Outcome, ProviderError, Response};

use crate::fal::{self, ACCOUNT_EXHAUSTED, ACCOUNT_REFUSED, Answer};
use crate::settings::Config;

/// The code of a model id fal does not know (404 on submit).
pub const UNKNOWN_MODEL: &str = "unknown_model";
/// The code of a submit the host could not send as configured.
pub const MISCONFIGURED: &str = "misconfigured";
/// The code of a submit refused for too many requests (nothing created).
pub const RATE_LIMITED: &str = "rate_limited";

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
        // 5xx, and 1xx/3xx that a JSON API does not answer.
        _ => Submitted::Unknown(lost(r)),
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
