//! The [`Host`] trait: the contract's imports (`http`, `signing`, `config`, `log`, `observe`) and the
//! guest's wall clock, as a handler's logic calls them. Inside a component the real one is
//! [`crate::WitHost`]; tests use [`crate::testing::ScriptedHost`]. Handler code written against
//! `&dyn Host` runs unchanged in both.

use std::fmt;

/// An outbound request (WIT `http.request`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, …
    pub method: String,
    /// Absolute http(s) URL; its host must be in the handler's `allowed_hosts`.
    pub url: String,
    /// Headers in the order sent.
    pub headers: Vec<(String, String)>,
    /// Body bytes, if any.
    pub body: Option<Vec<u8>>,
    /// Per-request timeout; the host caps it at its own maximum.
    pub timeout_ms: Option<u32>,
}

impl Request {
    /// A request with no headers, body or timeout.
    pub fn new(method: impl Into<String>, url: impl Into<String>) -> Request {
        Request {
            method: method.into(),
            url: url.into(),
            ..Request::default()
        }
    }

    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

/// An answer (WIT `http.response`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// Headers as received.
    pub headers: Vec<(String, String)>,
    /// Body bytes (the host caps their size).
    pub body: Vec<u8>,
}

impl Response {
    /// An answer with a status and a body, no headers.
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// The same answer with one more header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Response {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

/// The first value of a header in a list, by case-insensitive name, trimmed.
pub fn header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
}

/// Why a request got no answer (WIT `http-error`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpError {
    /// The host is not in the handler's `allowed_hosts`: a configuration mistake.
    Denied(String),
    /// Timed out: the request may or may not have taken effect.
    Timeout,
    /// The answer exceeded the host's size cap.
    TooLarge(u64),
    /// The request could not be made (bad URL, unknown secret): a configuration mistake.
    Invalid(String),
    /// Connection or protocol failure: the request may or may not have taken effect.
    Transport(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Denied(host) => {
                write!(f, "host {host} is not in this handler's allowed_hosts")
            }
            HttpError::Timeout => f.write_str("request timed out"),
            HttpError::TooLarge(n) => write!(f, "answer larger than the host's cap ({n} bytes)"),
            HttpError::Invalid(why) => write!(f, "invalid request: {why}"),
            HttpError::Transport(why) => write!(f, "transport error: {why}"),
        }
    }
}

impl std::error::Error for HttpError {}

/// A header the host fills in on the way out: `prefix` then the secret configured as `secret`
/// in `[handlers.<name>]` (WIT `http.credential`). The guest never sees the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    /// Header name, e.g. `Authorization`.
    pub header: String,
    /// Name of the configured secret, e.g. `api_key`.
    pub secret: String,
    /// Text before the secret, e.g. `Bearer `.
    pub prefix: String,
}

impl Credential {
    /// `Authorization: Bearer <secret>`.
    pub fn bearer(secret: impl Into<String>) -> Credential {
        Credential {
            header: "Authorization".into(),
            secret: secret.into(),
            prefix: "Bearer ".into(),
        }
    }
}

/// A request and the credential headers to insert into it (WIT `http.authorized-request`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthorizedRequest {
    /// The request without its credentials.
    pub request: Request,
    /// Headers the host inserts.
    pub credentials: Vec<Credential>,
}

/// Log levels of the host's `tracing` (WIT `log.level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Very detailed.
    Trace,
    /// For debugging.
    Debug,
    /// Normal operation.
    Info,
    /// Worth an operator's attention.
    Warn,
    /// Something failed.
    Error,
}

/// The start of the host's error message for a secret that is not configured (`signing` and
/// `send-authorized` both use it): the only signing error that means "not configured" rather
/// than "failed".
pub const NO_SECRET: &str = "no secret ";

/// What a handler needs from the host. Everything the guest does outside its own memory goes
/// through here.
pub trait Host {
    /// Send requests concurrently (bounded by the host); answers in the same order.
    fn send_batch(&self, requests: Vec<Request>) -> Vec<Result<Response, HttpError>>;

    /// Send requests concurrently with credential headers the host inserts; answers in the
    /// same order. A request naming an unconfigured secret is answered
    /// [`HttpError::Invalid`] starting with [`NO_SECRET`].
    fn send_authorized(&self, requests: Vec<AuthorizedRequest>)
    -> Vec<Result<Response, HttpError>>;

    /// HMAC-SHA256 of `data` keyed by the named secret, which the guest never reads.
    fn hmac_sha256(&self, secret: &str, data: &[u8]) -> Result<Vec<u8>, String>;

    /// A non-secret setting of this handler (`[handlers.<name>]`).
    fn config(&self, key: &str) -> Option<String>;

    /// A line in the host's log, tagged with the handler.
    fn log(&self, level: Level, message: &str);

    /// The guest's wall clock (WASI), Unix milliseconds. Prefer the call's `now_ms`; this is
    /// for the rare moment it is stale (re-signing a refused token, webhook timestamps).
    fn wall_clock_ms(&self) -> Option<u64>;

    /// Whether `signature` is an Ed25519 signature of `message` by one of the keys published
    /// as a JWKS at `keys_url` (contract 1.4 `signing.verify-ed25519`): the host fetches the
    /// keys through the allowlist and keeps them. `Err`: the keys could not be read, or the
    /// signature is not 64 bytes (fail closed). The default answers `Err` (a host without it).
    fn verify_ed25519(
        &self,
        keys_url: &str,
        message: &[u8],
        signature: &[u8],
    ) -> Result<bool, String> {
        let _ = (keys_url, message, signature);
        Err("this host cannot verify Ed25519 signatures (contract 1.4)".into())
    }

    /// Say that the provider holds `unit_id`'s job in its own queue, `position` jobs ahead
    /// when it says (contract 1.4 `observe.queued`); call it during `tick` beside a `running`
    /// change for that unit. The default does nothing.
    fn queued(&self, unit_id: &str, position: Option<u32>) {
        let _ = (unit_id, position);
    }

    /// Send one request.
    fn send(&self, request: Request) -> Result<Response, HttpError> {
        self.send_batch(vec![request])
            .pop()
            .unwrap_or_else(|| Err(HttpError::Transport("the host returned no answer".into())))
    }

    /// A warning (the level most handler messages deserve).
    fn warn(&self, message: &str) {
        self.log(Level::Warn, message);
    }
}
