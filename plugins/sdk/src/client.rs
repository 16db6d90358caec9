//! A provider client over the host's `http`: requests relative to a base URL with fixed
//! headers or host-inserted [`Credential`]s, JSON bodies, rounds of concurrent requests (one
//! `send-batch` or `send-authorized` each), and what an answer means by its HTTP status
//! ([`Class`], [`failure`]) for providers without an error vocabulary of their own.

use serde_json::Value;

use crate::host::{AuthorizedRequest, Credential, Host, HttpError, Request, Response};
use crate::retry_after::retry_after_ms;
use crate::types::{Outcome, ProviderError};

/// One request, relative to the client's base URL (the path starts with `/`).
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    /// `GET path`.
    Get(String),
    /// `POST path` with a JSON body.
    Post(String, Value),
    /// `DELETE path`.
    Delete(String),
}

/// A client bound to one handler call.
#[derive(Clone)]
pub struct Client<'h> {
    host: &'h dyn Host,
    base_url: String,
    headers: Vec<(String, String)>,
    credentials: Vec<Credential>,
    timeout_ms: Option<u32>,
}

impl<'h> Client<'h> {
    /// A client for `base_url` (surrounding whitespace and trailing slashes dropped).
    pub fn new(host: &'h dyn Host, base_url: &str) -> Client<'h> {
        Client {
            host,
            base_url: base_url.trim().trim_end_matches('/').to_string(),
            headers: Vec::new(),
            credentials: Vec::new(),
            timeout_ms: None,
        }
    }

    /// Every request with this timeout (the host caps it).
    pub fn with_timeout_ms(mut self, timeout_ms: Option<u32>) -> Client<'h> {
        self.timeout_ms = timeout_ms;
        self
    }

    /// Every request with this credential, inserted by the host (`send-authorized`).
    pub fn with_credential(mut self, credential: Credential) -> Client<'h> {
        self.credentials.push(credential);
        self
    }

    /// Set a header sent with every request (replacing one of the same name).
    pub fn set_header(&mut self, name: &str, value: impl Into<String>) {
        let value = value.into();
        match self
            .headers
            .iter_mut()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
        {
            Some(slot) => slot.1 = value,
            None => self.headers.push((name.to_string(), value)),
        }
    }

    /// The base URL with no trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The host the client sends through.
    pub fn host(&self) -> &'h dyn Host {
        self.host
    }

    /// The request a call becomes: the client's headers, then `content-type` for a body.
    pub fn request(&self, call: &Call) -> Request {
        let mut headers = self.headers.clone();
        let (method, path, body) = match call {
            Call::Get(path) => ("GET", path, None),
            Call::Delete(path) => ("DELETE", path, None),
            Call::Post(path, body) => {
                headers.push(("content-type".to_string(), "application/json".to_string()));
                ("POST", path, Some(body.to_string().into_bytes()))
            }
        };
        Request {
            method: method.to_string(),
            url: format!("{}{path}", self.base_url),
            headers,
            body,
            timeout_ms: self.timeout_ms,
        }
    }

    /// Send calls concurrently in one round; one answer per call, in order.
    pub fn send(&self, calls: &[Call]) -> Vec<Result<Response, HttpError>> {
        if calls.is_empty() {
            return Vec::new();
        }
        let requests = calls.iter().map(|c| self.request(c));
        let answers = if self.credentials.is_empty() {
            self.host.send_batch(requests.collect())
        } else {
            let authorized = requests.map(|request| AuthorizedRequest {
                request,
                credentials: self.credentials.clone(),
            });
            self.host.send_authorized(authorized.collect())
        };
        let mut answers = answers.into_iter();
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

/// The body as JSON.
pub fn json(response: &Response) -> Result<Value, String> {
    serde_json::from_slice(&response.body).map_err(|e| {
        format!(
            "HTTP {} answer is not JSON ({} bytes): {e}",
            response.status,
            response.body.len()
        )
    })
}

/// What an answer means by its HTTP status or transport error alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// 2xx.
    Success,
    /// 429: too many requests; transient.
    RateLimited,
    /// 404.
    NotFound,
    /// Any other 4xx: the provider refused the request as made.
    Refused,
    /// 5xx: the provider failed; transient.
    Unavailable,
    /// 1xx or 3xx, which a JSON API does not answer.
    Unexpected,
    /// No answer in time; transient, and slowness rather than failure.
    Timeout,
    /// Connection, protocol or size-cap failure; transient.
    Unreachable,
    /// The request could not be sent as configured (host not allowed, bad URL, no secret).
    Misconfigured,
}

impl Class {
    /// The class of an HTTP status.
    pub fn of_status(status: u16) -> Class {
        match status {
            200..=299 => Class::Success,
            429 => Class::RateLimited,
            404 => Class::NotFound,
            400..=499 => Class::Refused,
            500..=599 => Class::Unavailable,
            _ => Class::Unexpected,
        }
    }

    /// The class of a transport error.
    pub fn of_error(error: &HttpError) -> Class {
        match error {
            HttpError::Timeout => Class::Timeout,
            HttpError::Transport(_) | HttpError::TooLarge(_) => Class::Unreachable,
            HttpError::Denied(_) | HttpError::Invalid(_) => Class::Misconfigured,
        }
    }

    /// The class of an answer.
    pub fn of(answer: &Result<Response, HttpError>) -> Class {
        match answer {
            Ok(r) => Class::of_status(r.status),
            Err(e) => Class::of_error(e),
        }
    }

    /// Whether trying again later may succeed.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            Class::RateLimited | Class::Unavailable | Class::Timeout | Class::Unreachable
        )
    }
}

/// The provider error for a transport failure: code `timeout` for a timeout (the contract's
/// code for slowness, which spends no retry budget), `http` for the rest.
pub fn transport_error(error: &HttpError) -> ProviderError {
    let code = if matches!(error, HttpError::Timeout) {
        "timeout"
    } else {
        "http"
    };
    ProviderError::new(Some(code), error.to_string())
}

/// The outcome of an answer that is not a success, by status alone; `None` for a 2xx.
/// Transient classes retry (after the `Retry-After` the answer carries, counted from `now_ms`);
/// the others fail with code `http_<status>` (or `http`) and the start of the body.
pub fn failure(answer: &Result<Response, HttpError>, now_ms: u64) -> Option<Outcome> {
    let class = Class::of(answer);
    let (error, after_ms) = match answer {
        Ok(_) if class == Class::Success => return None,
        Ok(r) => (status_error(r), retry_after_ms(&r.headers, now_ms)),
        Err(e) => (transport_error(e), None),
    };
    Some(if class.is_transient() {
        Outcome::RetryAfter { after_ms, error }
    } else {
        Outcome::Fail(error)
    })
}

/// Body text shown in an error, at most this many characters.
const BODY_EXCERPT_CHARS: usize = 200;

/// `http_<status>` with the start of the body.
fn status_error(r: &Response) -> ProviderError {
    let body = String::from_utf8_lossy(&r.body);
    let excerpt: String = body.chars().take(BODY_EXCERPT_CHARS).collect();
    let message = if excerpt.trim().is_empty() {
        format!("HTTP {}", r.status)
    } else {
        format!("HTTP {}: {}", r.status, excerpt.trim())
    };
    ProviderError::new(Some(&format!("http_{}", r.status)), message)
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
