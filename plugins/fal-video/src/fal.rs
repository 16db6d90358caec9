//! Talking to fal: requests to absolute URLs (fal hands out `status_url`, `response_url` and
//! `cancel_url`; the history lives on another host), every one sent through `send-authorized`
//! with the `api_key` credential so the guest never holds the key; the queue URLs of a
//! request; and reading fal's error bodies (`{"detail": [{loc, msg, type}]}` or
//! `{"detail": "<text>", "error_type": …}`).

use serde_json::Value;
use slotd_sdk::polling::path_segment;
use slotd_sdk::retry_after::retry_after_ms;
use slotd_sdk::{AuthorizedRequest, Host, HttpError, Outcome, ProviderError, Request, Response};

use crate::models::Model;
use crate::settings::Config;

/// An answer, or why there is none.
pub type Answer = Result<Response, HttpError>;

/// The code of a key fal refuses (401): the host pauses the pool, spends no retry budget.
pub const ACCOUNT_REFUSED: &str = "account_refused";
/// The code of a locked account (403, e.g. an exhausted balance).
pub const ACCOUNT_EXHAUSTED: &str = "account_exhausted";
/// The code of an answer this handler cannot read.
pub const UNEXPECTED_ANSWER: &str = "unexpected_answer";

/// One request to fal.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    Get(String),
    /// A submit: the input as the JSON body, with the submit headers.
    Submit(String, Value),
    Put(String),
}

/// fal for one handler call.
pub struct Fal<'h> {
    pub host: &'h dyn Host,
    pub cfg: &'h Config,
}

impl Fal<'_> {
    /// The request a call becomes (without the key: the host inserts it).
    pub fn request(&self, call: &Call) -> Request {
        let mut headers = vec![("Accept".to_string(), "application/json".to_string())];
        let (method, url, body) = match call {
            Call::Get(url) => ("GET", url, None),
            Call::Put(url) => ("PUT", url, None),
            Call::Submit(url, input) => {
                headers.push(("Content-Type".into(), "application/json".into()));
                if let Some(p) = self.cfg.priority {
                    headers.push(("X-Fal-Queue-Priority".into(), p.as_str().into()));
                }
                if let Some(s) = self.cfg.start_timeout_s {
                    headers.push(("X-Fal-Request-Timeout".into(), s.to_string()));
                }
                if let Some(ttl) = self.cfg.media_ttl_s {
                    headers.push((
                        "X-Fal-Object-Lifecycle-Preference".into(),
                        format!("{{\"expiration_duration_seconds\": {ttl}}}"),
                    ));
                }
                ("POST", url, Some(input.to_string().into_bytes()))
            }
        };
        Request {
            method: method.into(),
            url: url.clone(),
            headers,
            body,
            timeout_ms: self.cfg.timeout_ms,
        }
    }

    /// Send calls concurrently in one `send-authorized`; one answer per call, in order.
    pub fn send(&self, calls: &[Call]) -> Vec<Answer> {
        if calls.is_empty() {
            return Vec::new();
        }
        let requests = calls
            .iter()
            .map(|c| AuthorizedRequest {
                request: self.request(c),
                credentials: vec![Config::credential()],
            })
            .collect();
        let mut answers = self.host.send_authorized(requests).into_iter();
        calls
            .iter()
            .map(|_| {
                answers.next().unwrap_or_else(|| {
                    Err(HttpError::Transport(
                        "the host returned fewer answers than requests".into(),
                    ))
                })
            })
            .collect()
    }
}

/// `POST {base}/{model id}`, with `fal_webhook=<url-encoded callback>` when slotd has one.
pub fn submit_url(cfg: &Config, model: Model, callback: Option<&str>) -> String {
    let mut url = format!("{}/{}", cfg.base_url, model.id());
    if let Some(cb) = callback {
        url.push_str("?fal_webhook=");
        url.push_str(&path_segment(cb));
    }
    url
}

/// `{base}/{owner}/{app}/requests/{id}{suffix}` (suffix `""`, `/status` or `/cancel`).
pub fn request_url(cfg: &Config, model: Model, id: &str, suffix: &str) -> String {
    format!(
        "{}/{}/requests/{}{suffix}",
        cfg.base_url,
        model.app(),
        path_segment(id)
    )
}

/// `scheme://authority` of an http(s) URL, lowercased.
fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let scheme = scheme.to_ascii_lowercase();
    (matches!(scheme.as_str(), "http" | "https") && !authority.is_empty())
        .then(|| format!("{scheme}://{}", authority.to_ascii_lowercase()))
}

/// A URL fal handed out, if it is on the base URL's host (else it is not followed: the key
/// goes only where it is configured to).
pub fn on_base_host(cfg: &Config, url: Option<&str>) -> Option<String> {
    let url = url?.trim();
    let same = origin(url).is_some_and(|o| Some(o) == origin(&cfg.base_url));
    (same && !url.chars().any(char::is_whitespace)).then(|| url.to_string())
}

/// The body as JSON.
pub fn json(r: &Response) -> Result<Value, String> {
    serde_json::from_slice(&r.body).map_err(|e| {
        format!(
            "fal's HTTP {} answer is not JSON ({} bytes): {e}",
            r.status,
            r.body.len()
        )
    })
}

/// fal's error in an answer: its code (the first detail's `type`, else `error_type` or the
/// `X-Fal-Error-Type` header, else `http_<status>`) and a message.
pub fn error(r: &Response) -> ProviderError {
    let body: Option<Value> = serde_json::from_slice(&r.body).ok();
    let detail = body.as_ref().and_then(|b| b.get("detail"));
    let first = detail.and_then(Value::as_array).and_then(|d| d.first());
    let code = first
        .and_then(|d| d.get("type"))
        .and_then(Value::as_str)
        .or_else(|| body.as_ref()?.get("error_type")?.as_str())
        .or_else(|| r.header("x-fal-error-type"))
        .map_or_else(|| format!("http_{}", r.status), str::to_string);
    let text = match detail {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) => items.iter().map(detail_text).collect::<Vec<_>>().join("; "),
        _ => excerpt(&r.body),
    };
    let message = if text.trim().is_empty() {
        format!("fal HTTP {}", r.status)
    } else {
        format!("fal HTTP {}: {}", r.status, text.trim())
    };
    ProviderError::new(Some(&code), message)
}

/// `loc: msg (type)` of one detail item.
fn detail_text(d: &Value) -> String {
    let loc = d
        .get("loc")
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .map(|p| p.as_str().map_or_else(|| p.to_string(), str::to_string))
                .collect::<Vec<_>>()
                .join(".")
        })
        .unwrap_or_default();
    let msg = d.get("msg").and_then(Value::as_str).unwrap_or("refused");
    let kind = d.get("type").and_then(Value::as_str).unwrap_or("?");
    format!("{loc}: {msg} ({kind})")
}

/// At most 200 characters of a body.
fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(200).collect()
}

/// A retry after `Retry-After` (when sent) with fal's error, coded `code` when given.
pub fn retry(r: &Response, now_ms: u64, code: Option<&str>) -> Outcome {
    let mut error = error(r);
    if let Some(code) = code {
        error.code = Some(code.to_string());
    }
    if r.status == 401 {
        error
            .message
            .push_str(" (check handlers.fal-video.api_key)");
    }
    Outcome::RetryAfter {
        after_ms: retry_after_ms(&r.headers, now_ms),
        error,
    }
}

/// The retry for an answer about the account (401, 403), else `None`.
pub fn account(r: &Response, now_ms: u64) -> Option<Outcome> {
    match r.status {
        401 => Some(retry(r, now_ms, Some(ACCOUNT_REFUSED))),
        403 => Some(retry(r, now_ms, Some(ACCOUNT_EXHAUSTED))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slotd_sdk::testing::ScriptedHost;

    #[test]
    fn urls_of_a_request_and_of_the_base_host_only() {
        let cfg = Config::read(&ScriptedHost::new()).unwrap_or_else(|e| panic!("{e}"));
        let m = Model::TextToVideo;
        assert_eq!(
            request_url(&cfg, m, "r 1", "/status"),
            "https://queue.fal.run/fal-ai/pika/requests/r%201/status"
        );
        assert_eq!(
            submit_url(&cfg, m, Some("https://s.test/cb?t=a&b")),
            "https://queue.fal.run/fal-ai/pika/v2.2/text-to-video\
             ?fal_webhook=https%3A%2F%2Fs.test%2Fcb%3Ft%3Da%26b"
        );
        let ok = "https://QUEUE.fal.run/fal-ai/pika/requests/1/status";
        assert_eq!(on_base_host(&cfg, Some(ok)).as_deref(), Some(ok));
        for bad in [
            "https://evil.test/fal-ai/pika/requests/1",
            "https://queue.fal.run@evil.test/x",
            "http://queue.fal.run/x",
            "https://queue.fal.run.evil.test/x",
        ] {
            assert_eq!(on_base_host(&cfg, Some(bad)), None, "{bad}");
        }
    }

    #[test]
    fn errors_carry_the_first_detail_type() {
        let r = Response::new(
            422,
            r#"{"detail": [{"loc": ["body", "prompt"], "msg": "Field required", "type": "missing"}]}"#,
        );
        let e = error(&r);
        assert_eq!(e.code.as_deref(), Some("missing"));
        assert_eq!(
            e.message,
            "fal HTTP 422: body.prompt: Field required (missing)"
        );
        let r = Response::new(
            403,
            r#"{"detail": "User is locked", "error_type": "locked"}"#,
        );
        assert_eq!(error(&r).code.as_deref(), Some("locked"));
        assert_eq!(
            error(&Response::new(502, "<html>")).code.as_deref(),
            Some("http_502")
        );
    }
}
