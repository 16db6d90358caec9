//! What the answer to a create (`POST /v1/image_to_video` or `/v1/text_to_video`) means.
//! The question that matters is whether a task was made: Runway has no idempotency key, so an
//! answer that does not settle it is [`Created::Unknown`] (see [`crate::unknown`]), never
//! "try again".

use slotd_sdk::client::transport_error;
use slotd_sdk::retry_after::retry_after_ms;
use slotd_sdk::{HttpError, ProviderError, Response};

use crate::answers;

/// The meaning of a create answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Created {
    /// Runway made task `id` (`estimatedCost.credits` when sent).
    Accepted {
        id: String,
        estimated_credits: Option<f64>,
    },
    /// Not made, and Runway answered 429: its rate limit or a model's daily generation limit,
    /// which only the organization's figures tell apart ([`crate::rate_limit`] turns this into
    /// [`Created::Refused`]). `error` is Runway's status and text, `after_ms` its
    /// `Retry-After`.
    TooMany {
        after_ms: Option<u64>,
        error: ProviderError,
    },
    /// Not made, for now: the daily limit (a 429 with the day spent, code
    /// [`QUOTA_EXHAUSTED`]: the host closes the model's pool until `after_ms` or its own
    /// estimate, and spends no retry budget), the rate limit (any other 429) or a server error
    /// Runway answered (a 5xx other than 504), both code [`NOT_CREATED`]: the host sends the
    /// unit back to `pending`, spending one retry. Creating again later is safe.
    Refused {
        after_ms: Option<u64>,
        error: ProviderError,
    },
    /// Not made because Runway refuses the account's key (401): the job is not at fault.
    /// Creating again is safe once the key is accepted (contract 1.2 `account_refused`).
    AccountRefused(ProviderError),
    /// Not made, and the same request will not succeed (400, 403, other 4xx), or it was
    /// never sent (the host refused it as configured).
    Failed(ProviderError),
    /// Maybe made: a timeout, a transport error, a 504 (Runway overloaded: RUNWAY_API.md counts
    /// it among the lost answers), a 1xx/3xx, a success without a readable id.
    Unknown(String),
}

/// Classify the answer to a create; `now_ms` dates a `Retry-After`.
pub fn classify(answer: &Result<Response, HttpError>, now_ms: u64) -> Created {
    let r = match answer {
        Ok(r) => r,
        // Never sent: `allowed_hosts` or the `api_key` secret is missing.
        Err(e @ (HttpError::Denied(_) | HttpError::Invalid(_))) => {
            return Created::Failed(transport_error(e));
        }
        Err(HttpError::Timeout) => return Created::Unknown("the request timed out".into()),
        Err(e @ (HttpError::Transport(_) | HttpError::TooLarge(_))) => {
            return Created::Unknown(e.to_string());
        }
    };
    match r.status {
        200..=299 => match answers::created(r) {
            Ok((id, estimated_credits)) => Created::Accepted {
                id,
                estimated_credits,
            },
            Err(why) => Created::Unknown(why),
        },
        401 => Created::AccountRefused(account_refused(r)),
        429 => Created::TooMany {
            after_ms: retry_after_ms(&r.headers, now_ms),
            error: answers::error(r),
        },
        // A gateway timeout: Runway may have made the task behind it.
        504 => Created::Unknown(answers::error(r).message),
        500..=599 => Created::Refused {
            after_ms: retry_after_ms(&r.headers, now_ms),
            error: not_created(r),
        },
        400..=499 => Created::Failed(with_hint(answers::error(r), hint(r.status))),
        _ => Created::Unknown(answers::error(r).message),
    }
}

/// The error of a create answered with a 5xx other than 504: code [`NOT_CREATED`] (contract
/// 1.5 convention), Runway's status and text in the message (e.g. `runway http_503: HTTP 503:
/// busy (Runway is shedding load; no task was created)`).
pub fn not_created(r: &Response) -> ProviderError {
    let error = with_hint(answers::error(r), hint(r.status));
    let code = error.code.unwrap_or_else(|| format!("http_{}", r.status));
    ProviderError::new(
        Some(NOT_CREATED),
        format!("runway {code}: {}", error.message),
    )
}

/// The error of a 401: code [`ACCOUNT_REFUSED`], Runway's status and text in the message
/// (e.g. `runway http_401: HTTP 401: Invalid API key (Runway refused the API key: …)`).
pub fn account_refused(r: &Response) -> ProviderError {
    let error = with_hint(answers::error(r), hint(r.status));
    let code = error.code.unwrap_or_else(|| format!("http_{}", r.status));
    ProviderError::new(
        Some(ACCOUNT_REFUSED),
        format!("runway {code}: {}", error.message),
    )
}

/// The contract's code (1.3 convention) for a create refused by a quota: Runway's daily limit,
/// reported only when the organization's figures say the day is spent ([`crate::rate_limit`]).
pub const QUOTA_EXHAUSTED: &str = "quota_exhausted";

/// The contract's code (1.5 convention) for a create Runway answered with an error and made no
/// task for (a server error, or its rate limit's 429): the host sends the unit back to
/// `pending` instead of keeping it in doubt, and closes nothing.
pub const NOT_CREATED: &str = "not_created";

/// The contract's code (1.2) for an answer refusing the account's credentials: Runway's 401.
/// Runway documents no "not enough credits" answer, so this handler never reports
/// `account_exhausted`.
pub const ACCOUNT_REFUSED: &str = "account_refused";

/// What an operator should know about a status, beyond Runway's text.
fn hint(status: u16) -> &'static str {
    match status {
        401 => "Runway refused the API key: check the api_key secret of handlers.runway-video",
        403 => "the model may not be available to this Runway account",
        502 | 503 => "Runway is shedding load; no task was created",
        500..=599 => "Runway failed the create; no task was created",
        _ => "",
    }
}

fn with_hint(mut error: ProviderError, hint: &str) -> ProviderError {
    if !hint.is_empty() {
        error.message = format!("{} ({hint})", error.message);
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(status: u16, body: serde_json::Value) -> Result<Response, HttpError> {
        Ok(Response::new(status, body.to_string()))
    }

    fn code(created: &Created) -> Option<&str> {
        match created {
            Created::Failed(e)
            | Created::AccountRefused(e)
            | Created::Refused { error: e, .. }
            | Created::TooMany { error: e, .. } => e.code.as_deref(),
            _ => None,
        }
    }

    #[test]
    fn success_with_an_id_is_accepted() {
        let ok = answer(200, json!({"id": "t1", "estimatedCost": {"credits": 25}}));
        assert_eq!(
            classify(&ok, 0),
            Created::Accepted {
                id: "t1".into(),
                estimated_credits: Some(25.0)
            }
        );
        assert!(matches!(
            classify(&answer(200, json!({"task": "t1"})), 0),
            Created::Unknown(why) if why.contains("no task id")
        ));
        assert!(matches!(
            classify(&Ok(Response::new(201, "<html>")), 0),
            Created::Unknown(why) if why.contains("not JSON")
        ));
    }

    /// A 429 created nothing, and does not say why: Runway's status, text and `Retry-After`
    /// are kept for [`crate::rate_limit`], which asks the organization.
    #[test]
    fn a_429_is_too_many_requests_of_either_kind() {
        let limited = Ok(Response::new(429, r#"{"error":"Too many requests"}"#)
            .with_header("Retry-After", "120"));
        assert_eq!(
            classify(&limited, 0),
            Created::TooMany {
                after_ms: Some(120_000),
                error: ProviderError::new(Some("http_429"), "HTTP 429: Too many requests"),
            }
        );
        assert!(matches!(
            classify(&Ok(Response::new(429, "")), 0),
            Created::TooMany { after_ms: None, .. }
        ));
    }

    /// Contract 1.5: a server error Runway answered made no task: `not_created`, Runway's
    /// status and text kept, `Retry-After` honoured.
    #[test]
    fn server_errors_answered_are_not_created() {
        let busy = Ok(Response::new(503, r#"{"error":"busy"}"#).with_header("Retry-After", "5"));
        assert_eq!(
            classify(&busy, 0),
            Created::Refused {
                after_ms: Some(5_000),
                error: ProviderError::new(
                    Some(NOT_CREATED),
                    "runway http_503: HTTP 503: busy (Runway is shedding load; no task was \
                     created)"
                ),
            }
        );
        for (status, body) in [
            (500, r#"{"error":"Internal server error"}"#),
            (500, ""),
            (502, "<html>Bad Gateway</html>"),
            (503, ""),
            (599, "?"),
        ] {
            let got = classify(&Ok(Response::new(status, body)), 0);
            assert_eq!(code(&got), Some(NOT_CREATED), "{status} {body:?}");
            assert!(
                matches!(&got, Created::Refused { error, .. }
                    if error.message.starts_with(&format!("runway http_{status}: HTTP {status}"))
                        && error.message.contains("no task was created")),
                "{got:?}"
            );
        }
    }

    #[test]
    fn client_errors_fail_with_the_issue_code() {
        let invalid = answer(
            400,
            json!({"error": "Validation of body failed",
                   "issues": [{"code": "invalid_value", "path": ["ratio"], "message": "Invalid option"}]}),
        );
        let got = classify(&invalid, 0);
        assert_eq!(code(&got), Some("invalid_value"));
        assert!(matches!(&got, Created::Failed(e) if e.message.contains("ratio: Invalid option")));
        let unauthorized = classify(&answer(401, json!({"error": "Unauthorized"})), 0);
        assert_eq!(code(&unauthorized), Some(ACCOUNT_REFUSED));
        assert!(
            matches!(&unauthorized, Created::AccountRefused(e)
                if e.message.starts_with("runway http_401: HTTP 401: Unauthorized")
                    && e.message.contains("api_key")),
            "{unauthorized:?}"
        );
        let forbidden = classify(
            &answer(
                403,
                json!({"error": "Model variant gen4.5 is not available"}),
            ),
            0,
        );
        assert_eq!(code(&forbidden), Some("http_403"));
        assert!(matches!(
            classify(&answer(404, json!({})), 0),
            Created::Failed(_)
        ));
        let denied = classify(&Err(HttpError::Denied("api.dev.runwayml.com".into())), 0);
        assert!(matches!(&denied, Created::Failed(e) if e.message.contains("allowed_hosts")));
        let no_key = classify(&Err(HttpError::Invalid("no secret \"api_key\"".into())), 0);
        assert!(matches!(no_key, Created::Failed(_)));
    }

    #[test]
    fn lost_answers_are_unknown() {
        for (answer, why) in [
            (Err(HttpError::Timeout), "timed out"),
            (Err(HttpError::Transport("reset".into())), "reset"),
            (Err(HttpError::TooLarge(9)), "cap"),
            (Ok(Response::new(504, "Gateway Timeout")), "HTTP 504"),
            (
                Ok(Response::new(504, r#"{"error":"overloaded"}"#)),
                "overloaded",
            ),
            (Ok(Response::new(302, "")), "HTTP 302"),
        ] {
            assert!(
                matches!(classify(&answer, 0), Created::Unknown(ref m) if m.contains(why)),
                "{why}"
            );
        }
    }
}
