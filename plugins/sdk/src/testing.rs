//! [`ScriptedHost`]: a [`Host`] in memory, so a handler's logic runs in ordinary `cargo test`
//! on the build machine. It answers requests from scripted routes (first match wins), records
//! every request and batch, keeps fake configuration and secrets (HMAC computed as the real
//! host does), inserts credential headers the way `send-authorized` does, and collects logs.
//!
//! [`jobs`]: units, ticks and a request spy for submit → poll → result handlers.
//!
//! Enable with the `testing` feature (typically in `[dev-dependencies]`).

use std::cell::RefCell;
use std::collections::BTreeMap;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::host::{AuthorizedRequest, Host, HttpError, Level, NO_SECRET, Request, Response};

#[path = "testing_jobs.rs"]
pub mod jobs;

/// HMAC-SHA256 of `data` keyed by `key`, as the host's `signing.hmac-sha256` computes it.
pub fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mut mac) => {
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
        // HMAC accepts keys of any length; this arm is never taken.
        Err(_) => Vec::new(),
    }
}

type Answer = Result<Response, HttpError>;
type Matcher = Box<dyn Fn(&Request) -> bool>;
type Responder = Box<dyn FnMut(&Request) -> Answer>;

/// The Unix milliseconds a [`ScriptedHost`]'s wall clock reads unless told otherwise.
pub const DEFAULT_NOW_MS: u64 = 1_781_080_794_000;

/// An in-memory host with a scripted provider. Configure it with the `with_*` and `on*`
/// builders, run the handler against `&host`, then read [`ScriptedHost::requests`].
pub struct ScriptedHost {
    config: BTreeMap<String, String>,
    secrets: BTreeMap<String, Vec<u8>>,
    routes: RefCell<Vec<(Matcher, Responder)>>,
    batches: RefCell<Vec<Vec<Request>>>,
    logs: RefCell<Vec<(Level, String)>>,
    now_ms: Option<u64>,
    signing_error: Option<String>,
    queued: RefCell<Vec<(String, Option<u32>)>>,
}

impl Default for ScriptedHost {
    fn default() -> Self {
        ScriptedHost::new()
    }
}

impl ScriptedHost {
    /// No configuration, no secrets, no routes (every request gets a transport error), the
    /// wall clock at [`DEFAULT_NOW_MS`].
    pub fn new() -> ScriptedHost {
        ScriptedHost {
            config: BTreeMap::new(),
            secrets: BTreeMap::new(),
            routes: RefCell::new(Vec::new()),
            batches: RefCell::new(Vec::new()),
            logs: RefCell::new(Vec::new()),
            now_ms: Some(DEFAULT_NOW_MS),
            signing_error: None,
            queued: RefCell::new(Vec::new()),
        }
    }

    /// A non-secret setting (`config.get`).
    pub fn with_config(mut self, key: &str, value: &str) -> ScriptedHost {
        self.config.insert(key.into(), value.into());
        self
    }

    /// A secret usable for signing and credentials, never readable through `config`.
    pub fn with_secret(mut self, name: &str, value: impl Into<Vec<u8>>) -> ScriptedHost {
        self.secrets.insert(name.into(), value.into());
        self
    }

    /// The guest's wall clock (`None`: unavailable).
    pub fn with_now_ms(mut self, now_ms: Option<u64>) -> ScriptedHost {
        self.now_ms = now_ms;
        self
    }

    /// Every signing call fails with this message (a secret the host cannot use).
    pub fn with_signing_error(mut self, message: &str) -> ScriptedHost {
        self.signing_error = Some(message.into());
        self
    }

    /// Answer requests the matcher accepts with `respond` (called once per request, so it may
    /// count or change its answers). Routes are tried in the order added.
    pub fn on(
        self,
        matches: impl Fn(&Request) -> bool + 'static,
        respond: impl FnMut(&Request) -> Answer + 'static,
    ) -> ScriptedHost {
        self.routes
            .borrow_mut()
            .push((Box::new(matches), Box::new(respond)));
        self
    }

    /// Answer requests with this method whose URL contains `url_part`.
    pub fn on_request(
        self,
        method: &str,
        url_part: &str,
        respond: impl FnMut(&Request) -> Answer + 'static,
    ) -> ScriptedHost {
        let (method, url_part) = (method.to_string(), url_part.to_string());
        self.on(
            move |r| r.method.eq_ignore_ascii_case(&method) && r.url.contains(&url_part),
            respond,
        )
    }

    /// Answer every request not matched by an earlier route.
    pub fn on_any(self, respond: impl FnMut(&Request) -> Answer + 'static) -> ScriptedHost {
        self.on(|_| true, respond)
    }

    /// Every request sent, in order (credential headers inserted).
    pub fn requests(&self) -> Vec<Request> {
        self.batches.borrow().iter().flatten().cloned().collect()
    }

    /// The requests by round: one entry per `send`, `send-batch` or `send-authorized`.
    pub fn batches(&self) -> Vec<Vec<Request>> {
        self.batches.borrow().clone()
    }

    /// Everything logged, in order.
    pub fn logs(&self) -> Vec<(Level, String)> {
        self.logs.borrow().clone()
    }

    /// Every `observe.queued` said, in order: (unit id, position).
    pub fn queued_said(&self) -> Vec<(String, Option<u32>)> {
        self.queued.borrow().clone()
    }

    fn answer(&self, request: &Request) -> Answer {
        let mut routes = self.routes.borrow_mut();
        match routes.iter_mut().find(|(matches, _)| matches(request)) {
            Some((_, respond)) => respond(request),
            None => Err(HttpError::Transport(format!(
                "no scripted answer for {} {}",
                request.method, request.url
            ))),
        }
    }

    /// The request as the provider sees it: credentials inserted, or the host's refusal.
    fn authorize(&self, authorized: AuthorizedRequest) -> Result<Request, HttpError> {
        let mut request = authorized.request;
        for credential in authorized.credentials {
            let Some(secret) = self.secrets.get(&credential.secret) else {
                return Err(HttpError::Invalid(format!(
                    "{NO_SECRET}{:?} is configured for this handler",
                    credential.secret
                )));
            };
            let value = format!("{}{}", credential.prefix, String::from_utf8_lossy(secret));
            request
                .headers
                .retain(|(k, _)| !k.eq_ignore_ascii_case(&credential.header));
            request.headers.push((credential.header, value));
        }
        Ok(request)
    }
}

impl Host for ScriptedHost {
    fn send_batch(&self, requests: Vec<Request>) -> Vec<Answer> {
        let answers = requests.iter().map(|r| self.answer(r)).collect();
        self.batches.borrow_mut().push(requests);
        answers
    }

    fn send_authorized(&self, requests: Vec<AuthorizedRequest>) -> Vec<Answer> {
        let mut sent = Vec::new();
        let answers = requests
            .into_iter()
            .map(|r| {
                let request = self.authorize(r)?;
                let answer = self.answer(&request);
                sent.push(request);
                answer
            })
            .collect();
        self.batches.borrow_mut().push(sent);
        answers
    }

    fn hmac_sha256(&self, secret: &str, data: &[u8]) -> Result<Vec<u8>, String> {
        if let Some(e) = &self.signing_error {
            return Err(e.clone());
        }
        // The host's wording for a missing secret, which handlers may rely on.
        match self.secrets.get(secret) {
            Some(key) => Ok(hmac_sha256(key, data)),
            None => Err(format!("{NO_SECRET}{secret:?} is configured")),
        }
    }

    /// Reads the keys with a `GET keys_url` through the scripted routes (recorded like any
    /// request, every call: no cache) and verifies as the host does.
    fn verify_ed25519(
        &self,
        keys_url: &str,
        message: &[u8],
        signature: &[u8],
    ) -> Result<bool, String> {
        let signature: [u8; 64] = signature.try_into().map_err(|_| {
            format!(
                "the signature is {} bytes; an Ed25519 signature is 64",
                signature.len()
            )
        })?;
        let request = Request::new("GET", keys_url);
        let answer = self.answer(&request);
        self.batches.borrow_mut().push(vec![request]);
        let answer = answer.map_err(|e| format!("reading the signing keys at {keys_url}: {e}"))?;
        let keys = crate::testing_keys::ed25519_keys(keys_url, &answer)?;
        let signature = ed25519_dalek::Signature::from_bytes(&signature);
        Ok(keys
            .iter()
            .any(|k| k.verify_strict(message, &signature).is_ok()))
    }

    fn queued(&self, unit_id: &str, position: Option<u32>) {
        self.queued
            .borrow_mut()
            .push((unit_id.to_string(), position));
    }

    fn config(&self, key: &str) -> Option<String> {
        self.config.get(key).cloned()
    }

    fn log(&self, level: Level, message: &str) {
        self.logs.borrow_mut().push((level, message.to_string()));
    }

    fn wall_clock_ms(&self) -> Option<u64> {
        self.now_ms
    }
}

/// A JSON answer with a status.
pub fn json_answer(status: u16, body: &serde_json::Value) -> Answer {
    Ok(Response::new(status, body.to_string()).with_header("content-type", "application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::Credential;

    #[test]
    fn routes_match_in_order_and_everything_is_recorded() {
        let mut polls = 0;
        let host = ScriptedHost::new()
            .on_request("POST", "/jobs", |_| Ok(Response::new(201, "{}")))
            .on_request("GET", "/jobs/", move |_| {
                polls += 1;
                Ok(Response::new(200, format!("{polls}")))
            });
        let get = Request::new("GET", "http://p.test/jobs/1");
        let answers = host.send_batch(vec![
            Request::new("POST", "http://p.test/jobs"),
            get.clone(),
        ]);
        assert_eq!(answers[0].as_ref().map(|r| r.status), Ok(201));
        assert_eq!(host.send(get.clone()).map(|r| r.body), Ok(b"2".to_vec()));
        assert!(matches!(
            host.send(Request::new("DELETE", "http://p.test/jobs/1")),
            Err(HttpError::Transport(m)) if m.contains("no scripted answer")
        ));
        assert_eq!(host.batches().len(), 3);
        assert_eq!(host.requests()[1], get);
    }

    #[test]
    fn credentials_are_inserted_and_unknown_secrets_refused_like_the_host() {
        let host = ScriptedHost::new()
            .with_secret("api_key", "k-1")
            .on_any(|r| Ok(Response::new(200, r.header("authorization").unwrap_or("-"))));
        let request = |secret: &str| AuthorizedRequest {
            request: Request::new("GET", "http://p.test/"),
            credentials: vec![Credential::bearer(secret)],
        };
        let answers = host.send_authorized(vec![request("api_key"), request("other")]);
        assert_eq!(
            answers[0].as_ref().map(|r| r.body.clone()),
            Ok(b"Bearer k-1".to_vec())
        );
        assert!(matches!(&answers[1], Err(HttpError::Invalid(m)) if m.starts_with(NO_SECRET)));
        assert_eq!(host.requests().len(), 1, "the refused request never left");
    }

    #[test]
    fn signing_config_clock_and_logs() {
        let host = ScriptedHost::new()
            .with_secret("s", "key")
            .with_config("base_url", "http://p.test")
            .with_now_ms(Some(5));
        assert_eq!(host.hmac_sha256("s", b"x"), Ok(hmac_sha256(b"key", b"x")));
        assert!(
            host.hmac_sha256("t", b"x")
                .is_err_and(|e| e.starts_with(NO_SECRET))
        );
        assert_eq!(host.config("base_url").as_deref(), Some("http://p.test"));
        assert_eq!(host.config("s"), None, "secrets are not settings");
        assert_eq!(host.wall_clock_ms(), Some(5));
        host.warn("careful");
        assert_eq!(host.logs(), [(Level::Warn, "careful".to_string())]);
        let broken = ScriptedHost::new()
            .with_secret("s", "key")
            .with_signing_error("bad");
        assert_eq!(broken.hmac_sha256("s", b"x"), Err("bad".to_string()));
    }
}
