//! Record and replay of a handler's provider exchanges.
//!
//! With `[handlers.X] record = "DIR"`, every call of handler X appends one [`CallRecord`] (a
//! JSON line) to `DIR/X.jsonl`: the function, its inputs, every HTTP exchange the guest made
//! through the host, and what it returned. Secrets and signatures are redacted before anything
//! is written ([`Redactor`]): credential and authorization headers, signature headers,
//! signed-URL query parameters (`_jwt`, `signature`, …) and the value of every configured
//! secret, wherever it appears. `slotd plugin replay` ([`super::replay`]) runs a handler against
//! such a file offline.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::path::Path;

use base64::Engine as _;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::bindings::http::{HttpError, Request, Response};
use slotd_core::config::HandlerConfig;

/// What redacted text is replaced with.
pub const REDACTED: &str = "***";

/// A request as recorded (after redaction).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedRequest {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    /// UTF-8 text, or `base64:` and the bytes in base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

/// A response as recorded (after redaction).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// An `http-error` as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RecordedError {
    Denied { message: String },
    Timeout,
    TooLarge { limit: u64 },
    Invalid { message: String },
    Transport { message: String },
}

/// One request and what came back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exchange {
    pub request: RecordedRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<RecordedResponse>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RecordedError>,
}

/// One handler call: a line of a recording.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CallRecord {
    pub handler: String,
    pub version: String,
    /// `tick`, `finalize`, `cancel`, `plan`, `on_callback`, …
    pub function: String,
    /// The handler's plain settings at the time (what `config.get` answered).
    pub settings: BTreeMap<String, String>,
    pub input: serde_json::Value,
    pub exchanges: Vec<Exchange>,
    /// What the call returned (`{"ok": …}`, `{"err": …}` or `{"fault": …}`).
    pub output: serde_json::Value,
}

/// Text encoding of a body: UTF-8 as is, anything else as `base64:…`.
pub fn body_text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.starts_with("base64:") => s.to_string(),
        _ => format!(
            "base64:{}",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        ),
    }
}

/// The bytes of a body written by [`body_text`].
pub fn body_bytes(text: &str) -> Result<Vec<u8>, String> {
    match text.strip_prefix("base64:") {
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| format!("a recorded body is not valid base64: {e}")),
        None => Ok(text.as_bytes().to_vec()),
    }
}

/// Query parameters whose values are signatures or tokens.
const SIGNED_PARAMS: &[&str] = &[
    "_jwt",
    "jwt",
    "signature",
    "sig",
    "token",
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    "key-pair-id",
    "policy",
];

/// Hides secrets and signatures in recorded text.
pub struct Redactor {
    /// Values of the handler's configured secrets (long enough to be matched safely).
    secrets: Vec<String>,
}

impl Redactor {
    pub fn new(config: &HandlerConfig) -> Redactor {
        let secrets = config
            .secrets
            .values()
            .filter_map(|s| std::str::from_utf8(s.expose()).ok())
            .filter(|s| s.len() >= 4)
            .map(str::to_string)
            .collect();
        Redactor { secrets }
    }

    /// A header whose value is a credential or a signature.
    pub fn sensitive_header(name: &str) -> bool {
        let n = name.to_ascii_lowercase();
        matches!(
            n.as_str(),
            "authorization" | "proxy-authorization" | "cookie" | "set-cookie" | "x-api-key"
        ) || ["signature", "secret", "token", "api-key"]
            .iter()
            .any(|w| n.contains(w))
    }

    /// `text` with every secret value and signed-URL parameter value replaced.
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), REDACTED);
            }
        }
        redact_params(&out)
    }

    pub fn headers(&self, headers: &[(String, String)]) -> Vec<(String, String)> {
        headers
            .iter()
            .map(|(n, v)| {
                let v = if Self::sensitive_header(n) {
                    REDACTED.to_string()
                } else {
                    self.text(v)
                };
                (n.clone(), v)
            })
            .collect()
    }

    pub fn request(&self, req: &Request) -> RecordedRequest {
        RecordedRequest {
            method: req.method.clone(),
            url: self.text(&req.url),
            headers: self.headers(&req.headers),
            body: req.body.as_deref().map(|b| self.text(&body_text(b))),
        }
    }

    pub fn answer(
        &self,
        answer: &Result<Response, HttpError>,
    ) -> (Option<RecordedResponse>, Option<RecordedError>) {
        match answer {
            Ok(r) => (
                Some(RecordedResponse {
                    status: r.status,
                    headers: self.headers(&r.headers),
                    body: self.text(&body_text(&r.body)),
                }),
                None,
            ),
            Err(e) => (None, Some(recorded_error(e))),
        }
    }

    /// Redact every string inside a JSON value.
    pub fn json(&self, v: serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::String(s) => serde_json::Value::String(self.text(&s)),
            serde_json::Value::Array(a) => {
                serde_json::Value::Array(a.into_iter().map(|x| self.json(x)).collect())
            }
            serde_json::Value::Object(o) => {
                serde_json::Value::Object(o.into_iter().map(|(k, x)| (k, self.json(x))).collect())
            }
            other => other,
        }
    }
}

fn recorded_error(e: &HttpError) -> RecordedError {
    match e {
        HttpError::Denied(m) => RecordedError::Denied { message: m.clone() },
        HttpError::Timeout => RecordedError::Timeout,
        HttpError::TooLarge(n) => RecordedError::TooLarge { limit: *n },
        HttpError::Invalid(m) => RecordedError::Invalid { message: m.clone() },
        HttpError::Transport(m) => RecordedError::Transport { message: m.clone() },
    }
}

/// The `http-error` a recorded error stands for.
pub fn http_error(e: &RecordedError) -> HttpError {
    match e {
        RecordedError::Denied { message } => HttpError::Denied(message.clone()),
        RecordedError::Timeout => HttpError::Timeout,
        RecordedError::TooLarge { limit } => HttpError::TooLarge(*limit),
        RecordedError::Invalid { message } => HttpError::Invalid(message.clone()),
        RecordedError::Transport { message } => HttpError::Transport(message.clone()),
    }
}

/// Replace the values of [`SIGNED_PARAMS`] query parameters (`?_jwt=…&`) in `text`.
fn redact_params(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find(['?', '&']) {
        out.push_str(&rest[..=pos]);
        rest = &rest[pos + 1..];
        let Some(eq) = rest.find('=') else { continue };
        let name = &rest[..eq];
        if name.is_empty()
            || name.len() > 40
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            || !SIGNED_PARAMS.contains(&name.to_ascii_lowercase().as_str())
        {
            continue;
        }
        out.push_str(name);
        out.push('=');
        let value = &rest[eq + 1..];
        let end = value
            .find(|c: char| c == '&' || c == '"' || c == '\\' || c == '#' || c.is_whitespace())
            .unwrap_or(value.len());
        if end > 0 {
            out.push_str(REDACTED);
        }
        rest = &value[end..];
    }
    out.push_str(rest);
    out
}

/// The exchanges of one call: recorded as they happen, or served from a recording.
pub enum Tape {
    /// One place per request, taken when the request starts ([`Tape::reserve`]) and filled
    /// when its answer is in: a concurrent batch is recorded in request order, as a replay
    /// asks, not in the order the answers happened to come back.
    Record(Mutex<Vec<Option<Exchange>>>),
    Replay(Mutex<Replaying>),
}

/// A recording being replayed: the exchanges not yet served and the differences seen.
#[derive(Default)]
pub struct Replaying {
    pub pending: VecDeque<Exchange>,
    pub differences: Vec<String>,
}

impl Tape {
    /// The next place in the recording, for a request about to be sent.
    pub fn reserve(&self) -> usize {
        match self {
            Tape::Record(list) => {
                let mut list = list.lock();
                list.push(None);
                list.len() - 1
            }
            Tape::Replay(_) => 0,
        }
    }

    /// Record (redacted) one exchange in the place [`Tape::reserve`] gave its request.
    pub fn record(
        &self,
        place: usize,
        redactor: &Redactor,
        req: &Request,
        answer: &Result<Response, HttpError>,
    ) {
        if let Tape::Record(list) = self {
            let (response, error) = redactor.answer(answer);
            if let Some(slot) = list.lock().get_mut(place) {
                *slot = Some(Exchange {
                    request: redactor.request(req),
                    response,
                    error,
                });
            }
        }
    }

    /// The recorded answer to `req`, if the next recorded request is the same one (compared
    /// after redaction); otherwise a difference is noted and the request answered `invalid`.
    pub fn serve(&self, redactor: &Redactor, req: &Request) -> Option<Result<Response, HttpError>> {
        let Tape::Replay(state) = self else {
            return None;
        };
        let mut state = state.lock();
        let asked = redactor.request(req);
        let Some(next) = state.pending.pop_front() else {
            state.differences.push(format!(
                "the handler sent {} {} but the recording has no more requests",
                asked.method, asked.url
            ));
            return Some(Err(HttpError::Invalid(
                "replay: not in the recording".into(),
            )));
        };
        if next.request != asked {
            state.differences.push(format!(
                "request differs: recorded {} {} {:?}, replayed {} {} {:?}",
                next.request.method,
                next.request.url,
                next.request.body,
                asked.method,
                asked.url,
                asked.body
            ));
        }
        Some(match (&next.response, &next.error) {
            (Some(r), _) => match body_bytes(&r.body) {
                Ok(body) => Ok(Response {
                    status: r.status,
                    headers: r.headers.clone(),
                    body,
                }),
                Err(e) => Err(HttpError::Invalid(e)),
            },
            (None, Some(e)) => Err(http_error(e)),
            (None, None) => Err(HttpError::Invalid(
                "replay: the recorded exchange has neither a response nor an error".into(),
            )),
        })
    }

    /// The exchanges recorded so far (empty for a replay).
    pub fn take(&self) -> Vec<Exchange> {
        match self {
            // A place still empty is a request whose call ended before its answer did.
            Tape::Record(list) => std::mem::take(&mut *list.lock())
                .into_iter()
                .flatten()
                .collect(),
            Tape::Replay(_) => Vec::new(),
        }
    }
}

/// Append `record` to `DIR/<handler>.jsonl`.
pub fn append(dir: &Path, record: &CallRecord) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let path = dir.join(format!("{}.jsonl", record.handler));
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(&line)
}

/// Read every call of a recording, naming the line of any that does not parse.
pub fn read(path: &Path) -> anyhow::Result<Vec<CallRecord>> {
    use anyhow::Context;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading recording {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{} line {}: not a call record", path.display(), i + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use slotd_core::config::Secret;

    fn redactor() -> Redactor {
        let mut c = HandlerConfig::default();
        c.secrets
            .insert("api_key".into(), Secret::new("key_0123456789abcdef"));
        Redactor::new(&c)
    }

    #[test]
    fn secrets_signatures_and_signed_params_are_redacted() {
        let r = redactor();
        assert_eq!(
            r.text("token is key_0123456789abcdef here"),
            "token is *** here"
        );
        assert_eq!(
            r.text("https://cdn/x/video.mp4?_jwt=eyJ.abc.def&exp=12"),
            "https://cdn/x/video.mp4?_jwt=***&exp=12"
        );
        assert_eq!(
            r.text(r#"{"output":["https://c/v.mp4?a=1&X-Amz-Signature=ff00"]}"#),
            r#"{"output":["https://c/v.mp4?a=1&X-Amz-Signature=***"]}"#
        );
        assert_eq!(r.text("a?b=1&c=2"), "a?b=1&c=2");
        let h = r.headers(&[
            ("Authorization".into(), "Bearer xyz".into()),
            ("webhook-signature".into(), "v1,abc".into()),
            ("X-Runway-Version".into(), "2024-11-06".into()),
        ]);
        assert_eq!(h[0].1, REDACTED);
        assert_eq!(h[1].1, REDACTED);
        assert_eq!(h[2].1, "2024-11-06");
    }

    #[test]
    fn bodies_round_trip_as_text_or_base64() {
        for bytes in [&b"{\"a\":1}"[..], &[0xff, 0x00, 0x10][..], b"base64:x"] {
            assert_eq!(body_bytes(&body_text(bytes)).as_deref(), Ok(bytes));
        }
        assert!(body_bytes("base64:!!").is_err());
    }

    /// A concurrent batch whose second answer arrives first is recorded in request order.
    #[test]
    fn a_batch_is_recorded_in_request_order_whatever_order_the_answers_come_in() {
        let (r, tape) = (redactor(), Tape::Record(Default::default()));
        let get = |url: &str| Request {
            method: "GET".into(),
            url: url.into(),
            headers: Vec::new(),
            body: None,
            timeout_ms: None,
        };
        let (first, second, unanswered) = (tape.reserve(), tape.reserve(), tape.reserve());
        tape.record(second, &r, &get("http://p/2"), &Err(HttpError::Timeout));
        tape.record(first, &r, &get("http://p/1"), &Err(HttpError::Timeout));
        let urls: Vec<String> = tape.take().into_iter().map(|e| e.request.url).collect();
        assert_eq!(urls, ["http://p/1", "http://p/2"], "{unanswered} left out");
    }
}
