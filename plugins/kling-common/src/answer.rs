//! Kling's envelope (`{"code", "message", "request_id", "data"}`) and what each answer means
//! for a unit, following the error table of KLING_API.md. Success is `code == 0` on a 2xx,
//! checked even on HTTP 200.

use serde_json::Value;

use slotd_sdk::client::{self, Class as Status};
use slotd_sdk::{HttpError, ProviderError, Response};

/// The error code of an answer refusing the account's credentials (contract 1.2 convention):
/// 401 with 1000–1002 (or 1003/1004 still refused after re-signing), and 1100 "account
/// exception" (an account-level refusal, not the job's).
pub const ACCOUNT_REFUSED: &str = "account_refused";
/// The error code of an answer saying the account's balance or resource packs are used up
/// (429 with 1101 "in arrears" or 1102 "resource packs used up").
pub const ACCOUNT_EXHAUSTED: &str = "account_exhausted";

/// The error code of a create Kling answered with an HTTP 5xx (contract 1.5 convention): an
/// answer arrived, so the create was refused and no task was made for the submission. The host
/// sends the unit back to `pending` (spending one retry) instead of looking it up by
/// `external_task_id`. A timeout or a transport error is not an answer and stays transient.
pub const NOT_CREATED: &str = "not_created";

/// Back-off hint after a 1303 (Kling's advice: start at ≥ 1 s, back off exponentially; the
/// host grows it from there).
pub const CAPACITY_RETRY_MS: u64 = 1_000;

/// What a non-success answer means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// 1303: the account's concurrency is full; nothing was created. Not a failure.
    Capacity,
    /// 1302, 5000–5002, HTTP 5xx, timeouts, transport errors, malformed bodies: try again later.
    Transient,
    /// 1003/1004: the token is not yet valid or expired; re-sign once.
    TokenTime,
    /// 1000–1002, 1100, or HTTP 401 without a code: the provider refuses the account's
    /// credentials. The job is not at fault: retried with code [`ACCOUNT_REFUSED`].
    AccountRefused,
    /// 1101, 1102: the account's balance or resource packs are used up. Retried with code
    /// [`ACCOUNT_EXHAUSTED`].
    AccountExhausted,
    /// 404 / 1203: no such task (or external id).
    NotFound,
    /// 400/1201 saying the `external_task_id` is already used: the job exists; adopt it.
    Duplicate,
    /// 400/1201 for any other parameter problem.
    InvalidParameter,
    /// Everything else: no access to the API or model (1103), policy and moderation refusals.
    Permanent,
}

/// A classified refusal with the provider's code and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub class: Class,
    pub error: ProviderError,
    /// The HTTP status of the answer; `None` when no answer arrived (timeout, transport).
    pub status: Option<u16>,
}

impl Problem {
    fn new(class: Class, code: Option<&str>, message: impl Into<String>) -> Problem {
        Problem {
            class,
            error: ProviderError::new(code, message),
            status: None,
        }
    }

    fn answered(mut self, status: u16) -> Problem {
        self.status = Some(status);
        self
    }

    /// The error of a create this answer refused without making a task, when it is one: a
    /// transient refusal (not capacity, not the account) that arrived as an HTTP 5xx. Code
    /// [`NOT_CREATED`], Kling's code, message and the status in the message (`"kling 5000:
    /// internal error (HTTP 500, no task was created)"`).
    pub fn not_created(&self) -> Option<ProviderError> {
        let status = self.status.filter(|s| (500..600).contains(s))?;
        if self.class != Class::Transient {
            return None;
        }
        let code = self.error.code.as_deref().unwrap_or("?");
        let http = format!("HTTP {status}");
        let why = if self.error.message.contains(&http) {
            "no task was created".to_string()
        } else {
            format!("{http}, no task was created")
        };
        Some(ProviderError::new(
            Some(NOT_CREATED),
            format!("kling {code}: {} ({why})", self.error.message),
        ))
    }

    /// An account-level refusal: the contract's code ([`ACCOUNT_REFUSED`] or
    /// [`ACCOUNT_EXHAUSTED`]), Kling's own code and message in the message
    /// (`"kling 1002: invalid token"`).
    pub fn account(class: Class, kling_code: &str, message: &str) -> Problem {
        let code = if class == Class::AccountExhausted {
            ACCOUNT_EXHAUSTED
        } else {
            ACCOUNT_REFUSED
        };
        Problem {
            class,
            error: ProviderError::new(Some(code), format!("kling {kling_code}: {message}")),
            status: None,
        }
    }

    /// Whether the provider refused the account rather than the job.
    pub fn is_account(&self) -> bool {
        matches!(self.class, Class::AccountRefused | Class::AccountExhausted)
    }
}

/// Classify a transport failure (code `timeout` for slowness, `http` for the rest).
pub fn transport(e: &HttpError) -> Problem {
    let class = if Status::of_error(e).is_transient() {
        Class::Transient
    } else {
        Class::Permanent
    };
    Problem {
        class,
        error: client::transport_error(e),
        status: None,
    }
}

/// The `data` of a successful answer, or the classified problem (with the answer's status).
pub fn parse(response: &Response) -> Result<Value, Problem> {
    classify(response).map_err(|p| p.answered(response.status))
}

fn classify(response: &Response) -> Result<Value, Problem> {
    let status = response.status;
    let envelope: Value = match serde_json::from_slice(&response.body) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            let class = match status {
                404 => Class::NotFound,
                401 => {
                    return Err(Problem::account(
                        Class::AccountRefused,
                        &format!("http_{status}"),
                        "HTTP 401 with a body that is not a JSON object",
                    ));
                }
                403 => Class::Permanent,
                _ => Class::Transient,
            };
            return Err(Problem::new(
                class,
                Some(&format!("http_{status}")),
                format!(
                    "malformed answer (HTTP {status}, {} bytes, not a JSON object)",
                    response.body.len()
                ),
            ));
        }
    };
    let code = match envelope.get("code") {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    let message = envelope
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if code == Some(0) && (200..300).contains(&status) {
        return Ok(envelope.get("data").cloned().unwrap_or(Value::Null));
    }
    let Some(code) = code else {
        if status == 401 {
            return Err(Problem::account(
                Class::AccountRefused,
                &format!("http_{status}"),
                &format!("HTTP 401 without a Kling code: {message}"),
            ));
        }
        return Err(Problem::new(
            by_status(status),
            Some(&format!("http_{status}")),
            format!("HTTP {status} without a Kling code: {message}"),
        ));
    };
    let class = by_code(code, &message).unwrap_or_else(|| by_status(status));
    let message = if message.is_empty() {
        format!("Kling code {code} (HTTP {status})")
    } else {
        message
    };
    if matches!(class, Class::AccountRefused | Class::AccountExhausted) {
        return Err(Problem::account(class, &code.to_string(), &message));
    }
    Err(Problem::new(class, Some(&code.to_string()), message))
}

/// The classes the codes of KLING_API.md's error table belong to.
fn by_code(code: i64, message: &str) -> Option<Class> {
    Some(match code {
        1303 => Class::Capacity,
        1302 | 5000..=5002 => Class::Transient,
        1003 | 1004 => Class::TokenTime,
        1203 => Class::NotFound,
        1201 if mentions_duplicate(message) => Class::Duplicate,
        1201 => Class::InvalidParameter,
        1000..=1002 | 1100 => Class::AccountRefused,
        1101 | 1102 => Class::AccountExhausted,
        1103 | 1200 | 1202 | 1300 | 1301 | 1304 => Class::Permanent,
        _ => return None,
    })
}

/// Codes outside the table fall back to the HTTP status.
fn by_status(status: u16) -> Class {
    if status == 401 {
        return Class::AccountRefused;
    }
    match Status::of_status(status) {
        Status::RateLimited | Status::Unavailable => Class::Transient,
        Status::NotFound => Class::NotFound,
        _ => Class::Permanent,
    }
}

/// Whether a 1201 message says the `external_task_id` is taken. Kling does not document the
/// wording; this accepts the simulator's ("is already used") and the usual variants.
pub fn mentions_duplicate(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("external_task_id")
        && ["already", "duplicate", "exist", "repeat", "used"]
            .iter()
            .any(|w| m.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Result<Value, Problem> {
        parse(&Response::new(status, body))
    }

    fn class(status: u16, code: i64, message: &str) -> Class {
        let body =
            serde_json::json!({"code": code, "message": message, "request_id": "r", "data": null});
        match answer(status, &body.to_string()) {
            Ok(_) => panic!("{status}/{code} classified as success"),
            Err(p) if p.is_account() => {
                let want = format!("kling {code}: {message}");
                assert_eq!(p.error.message, want);
                p.class
            }
            Err(p) => {
                assert_eq!(p.error.code.as_deref(), Some(code.to_string().as_str()));
                p.class
            }
        }
    }

    #[test]
    fn success_needs_code_zero() {
        assert_eq!(
            answer(
                200,
                r#"{"code":0,"message":"SUCCEED","data":{"task_id":"1"}}"#
            ),
            Ok(serde_json::json!({"task_id":"1"}))
        );
        assert!(answer(200, r#"{"code":5000,"message":"x","data":null}"#).is_err());
    }

    #[test]
    fn every_documented_code_has_its_class() {
        use Class::*;
        for (status, code, want) in [
            (401, 1000, AccountRefused),
            (401, 1001, AccountRefused),
            (401, 1002, AccountRefused),
            (401, 1003, TokenTime),
            (401, 1004, TokenTime),
            (429, 1100, AccountRefused),
            (429, 1101, AccountExhausted),
            (429, 1102, AccountExhausted),
            (403, 1103, Permanent),
            (400, 1200, Permanent),
            (400, 1201, InvalidParameter),
            (404, 1202, Permanent),
            (404, 1203, NotFound),
            (400, 1300, Permanent),
            (400, 1301, Permanent),
            (429, 1302, Transient),
            (429, 1303, Capacity),
            (429, 1304, Permanent),
            (500, 5000, Transient),
            (503, 5001, Transient),
            (504, 5002, Transient),
            (500, 9999, Transient),
            (400, 9999, Permanent),
            (401, 9999, AccountRefused),
        ] {
            assert_eq!(class(status, code, "m"), want, "{status}/{code}");
        }
    }

    #[test]
    fn account_refusals_carry_the_contract_code_and_klings() {
        let body = r#"{"code":1002,"message":"invalid token","request_id":"r"}"#;
        let p = answer(401, body).err();
        assert_eq!(
            p.map(|p| p.error),
            Some(ProviderError::new(
                Some(ACCOUNT_REFUSED),
                "kling 1002: invalid token"
            ))
        );
        let body = r#"{"code":1102,"message":"resource pack exhausted","request_id":"r"}"#;
        let p = answer(429, body).err();
        assert_eq!(
            p.as_ref().and_then(|p| p.error.code.as_deref()),
            Some(ACCOUNT_EXHAUSTED)
        );
        assert_eq!(
            p.map(|p| p.error.message),
            Some("kling 1102: resource pack exhausted".to_string())
        );
        for body in ["", "<html>401</html>", r#"{"message":"no"}"#] {
            let p = answer(401, body).err();
            assert_eq!(p.as_ref().map(|p| p.class), Some(Class::AccountRefused));
            assert_eq!(
                p.and_then(|p| p.error.code),
                Some(ACCOUNT_REFUSED.to_string()),
                "{body}"
            );
        }
    }

    #[test]
    fn server_errors_say_not_created_and_the_rest_do_not() {
        let not_created = |status: u16, body: &str| answer(status, body).err()?.not_created();
        let coded = r#"{"code":5000,"message":"internal error","request_id":"r"}"#;
        assert_eq!(
            not_created(500, coded),
            Some(ProviderError::new(
                Some(NOT_CREATED),
                "kling 5000: internal error (HTTP 500, no task was created)"
            ))
        );
        let timeout = r#"{"code":5002,"message":"internal timeout","request_id":"r"}"#;
        assert!(not_created(504, timeout).is_some());
        // Without an envelope: Kling's status and the body's size, said once.
        let page = not_created(502, "<html>bad gateway</html>");
        assert_eq!(
            page.map(|e| e.message),
            Some(
                "kling http_502: malformed answer (HTTP 502, 24 bytes, not a JSON object) (no \
                 task was created)"
                    .to_string()
            )
        );
        assert!(not_created(503, r#"{"message":"down"}"#).is_some());
        // Capacity, the account, refusals of the job, 4xx and 2xx are something else.
        for (status, body) in [
            (500, r#"{"code":1303,"message":"over limit"}"#),
            (500, r#"{"code":1102,"message":"packs used up"}"#),
            (500, r#"{"code":1301,"message":"moderation"}"#),
            (429, r#"{"code":1302,"message":"too fast"}"#),
            (200, r#"{"code":5000,"message":"internal error"}"#),
            (200, "{\"code\":0,\"mess"),
        ] {
            assert_eq!(not_created(status, body), None, "{status} {body}");
        }
        assert_eq!(transport(&HttpError::Timeout).not_created(), None);
        assert_eq!(
            transport(&HttpError::Transport("reset".into())).status,
            None
        );
    }

    #[test]
    fn duplicates_are_recognised_by_message() {
        let sim =
            r#"external_task_id: "u-1-video-0" is already used by another task of this account"#;
        assert_eq!(class(400, 1201, sim), Class::Duplicate);
        assert_eq!(
            class(400, 1201, "prompt: is required"),
            Class::InvalidParameter
        );
    }

    #[test]
    fn malformed_bodies_and_transport_errors_are_transient() {
        for body in ["", "{\"code\":0,\"mess", "[1,2]", "<html>"] {
            assert_eq!(
                answer(200, body).map_err(|p| p.class),
                Err(Class::Transient)
            );
        }
        assert_eq!(answer(404, "").map_err(|p| p.class), Err(Class::NotFound));
        assert_eq!(transport(&HttpError::Timeout).class, Class::Transient);
        assert_eq!(
            transport(&HttpError::Timeout).error.code.as_deref(),
            Some("timeout"),
            "the host keeps slowness off the retry budget by this code"
        );
        assert_eq!(
            transport(&HttpError::Denied("x".into())).class,
            Class::Permanent
        );
    }
}
