//! An authenticated Kling client for one handler call: reads `base_url` and `access_key` from
//! the handler's config, signs one token for the call (`now` from the tick context), and sends
//! rounds of requests through the host's `send-batch`, so every request of a round goes out
//! concurrently. Requests answered 1003/1004 are re-signed once (with the guest's wall clock,
//! since the tick's `now` is what produced the refused token) and resent in the same round.

use serde_json::Value;

use crate::answer::{self, Class, Problem};
use crate::jwt;
use crate::types::{Host, HttpError, Request, Response};

/// One request of a round, relative to `base_url`.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    Get(String),
    Post(String, Value),
}

/// A Kling client bound to one handler call.
pub struct Client<'h> {
    host: &'h dyn Host,
    base_url: String,
    access_key: String,
    token: String,
    /// A call re-signs at most once.
    resigned: bool,
    timeout_ms: Option<u32>,
}

impl<'h> Client<'h> {
    /// Reads the configuration and signs the call's token. An error names the missing setting.
    pub fn new(host: &'h dyn Host, handler: &str, now_ms: u64) -> Result<Client<'h>, String> {
        let setting = |key: &str| {
            host.config(key)
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| format!("{key} is not configured (set handlers.{handler}.{key})"))
        };
        let base_url = setting("base_url")?
            .trim()
            .trim_end_matches('/')
            .to_string();
        let access_key = setting("access_key")?;
        let timeout_ms = match host.config("request_timeout_ms") {
            None => None,
            Some(v) => Some(v.trim().parse::<u32>().map_err(|_| {
                format!("handlers.{handler}.request_timeout_ms must be an integer, got {v:?}")
            })?),
        };
        let token = jwt::token(host, &access_key, now_ms / 1000)?;
        Ok(Client {
            host,
            base_url,
            access_key,
            token,
            resigned: false,
            timeout_ms,
        })
    }

    /// The base URL with no trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Send a round concurrently; one parsed answer per call, in order.
    pub fn round(&mut self, calls: &[Call]) -> Vec<Result<Value, Problem>> {
        if calls.is_empty() {
            return Vec::new();
        }
        let mut answers = self.send(calls);
        let stale: Vec<usize> = answers
            .iter()
            .enumerate()
            .filter(|(_, a)| matches!(a, Err(p) if p.class == Class::TokenTime))
            .map(|(i, _)| i)
            .collect();
        if stale.is_empty() {
            return answers;
        }
        if !self.resigned && self.resign() {
            let again: Vec<Call> = stale.iter().map(|&i| calls[i].clone()).collect();
            for (i, answer) in stale.iter().zip(self.send(&again)) {
                answers[*i] = answer;
            }
        }
        // Still refused after one re-sign: try again on a later tick.
        for answer in &mut answers {
            if let Err(p) = answer
                && p.class == Class::TokenTime
            {
                p.class = Class::Transient;
            }
        }
        answers
    }

    fn resign(&mut self) -> bool {
        self.resigned = true;
        let Some(now_ms) = self.host.wall_clock_ms() else {
            return false;
        };
        match jwt::token(self.host, &self.access_key, now_ms / 1000) {
            Ok(token) => {
                self.token = token;
                true
            }
            Err(e) => {
                self.host.warn(&e);
                false
            }
        }
    }

    fn send(&self, calls: &[Call]) -> Vec<Result<Value, Problem>> {
        let requests: Vec<Request> = calls.iter().map(|c| self.request(c)).collect();
        let mut responses = self.host.send_batch(requests).into_iter();
        calls
            .iter()
            .map(|_| {
                let response: Result<Response, HttpError> = responses.next().unwrap_or_else(|| {
                    Err(HttpError::Transport(
                        "the host returned fewer answers than requests".into(),
                    ))
                });
                match response {
                    Ok(r) => answer::parse(&r),
                    Err(e) => Err(answer::transport(&e)),
                }
            })
            .collect()
    }

    fn request(&self, call: &Call) -> Request {
        let mut headers = vec![(
            "authorization".to_string(),
            format!("Bearer {}", self.token),
        )];
        let (method, path, body) = match call {
            Call::Get(path) => ("GET", path, None),
            Call::Post(path, body) => {
                headers.push(("content-type".to_string(), "application/json".to_string()));
                ("POST", path, Some(body.to_string().into_bytes()))
            }
        };
        Request {
            method,
            url: format!("{}{path}", self.base_url),
            headers,
            body,
            timeout_ms: self.timeout_ms,
        }
    }
}
