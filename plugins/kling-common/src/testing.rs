//! Test doubles: an in-memory [`Host`] whose HTTP answers come from a closure, and HMAC as the
//! host computes it.

use std::cell::RefCell;
use std::collections::BTreeMap;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::types::{Host, HttpError, Request, Response};

pub fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mut mac) => {
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
        Err(_) => Vec::new(),
    }
}

type Responder = Box<dyn Fn(&Request) -> Result<Response, HttpError>>;

/// A host with config, secrets and a scripted provider; it records every request and batch.
pub struct FakeHost {
    pub config: BTreeMap<String, String>,
    pub secrets: BTreeMap<String, Vec<u8>>,
    pub responder: Responder,
    pub batches: RefCell<Vec<Vec<Request>>>,
    pub now_ms: u64,
    /// When set, every signing call fails with this message (a broken secret).
    pub signing_error: Option<String>,
}

impl Default for FakeHost {
    fn default() -> Self {
        FakeHost {
            config: BTreeMap::new(),
            secrets: BTreeMap::new(),
            responder: Box::new(|_| Err(HttpError::Transport("no responder".into()))),
            batches: RefCell::new(Vec::new()),
            now_ms: 1_781_080_794_000,
            signing_error: None,
        }
    }
}

impl FakeHost {
    /// A host configured for Kling (`base_url`, `access_key`, `secret_key`) answering with `f`.
    pub fn kling(f: impl Fn(&Request) -> Result<Response, HttpError> + 'static) -> FakeHost {
        let mut host = FakeHost {
            responder: Box::new(f),
            ..FakeHost::default()
        };
        host.config
            .insert("base_url".into(), "http://kling.test/".into());
        host.config.insert("access_key".into(), "AK".into());
        host.secrets.insert("secret_key".into(), b"SK".to_vec());
        host
    }

    pub fn requests(&self) -> Vec<Request> {
        self.batches.borrow().iter().flatten().cloned().collect()
    }
}

impl Host for FakeHost {
    fn send_batch(&self, requests: Vec<Request>) -> Vec<Result<Response, HttpError>> {
        let answers = requests.iter().map(|r| (self.responder)(r)).collect();
        self.batches.borrow_mut().push(requests);
        answers
    }

    fn hmac_sha256(&self, secret: &str, data: &[u8]) -> Result<Vec<u8>, String> {
        if let Some(e) = &self.signing_error {
            return Err(e.clone());
        }
        // The host's wording for a missing secret (what handlers may rely on).
        match self.secrets.get(secret) {
            Some(key) => Ok(hmac(key, data)),
            None => Err(format!("no secret {secret:?} is configured")),
        }
    }

    fn config(&self, key: &str) -> Option<String> {
        self.config.get(key).cloned()
    }

    fn wall_clock_ms(&self) -> Option<u64> {
        Some(self.now_ms)
    }

    fn warn(&self, _message: &str) {}
}

/// A Kling envelope answer.
pub fn kling(
    status: u16,
    code: i64,
    message: &str,
    data: serde_json::Value,
) -> Result<Response, HttpError> {
    let body =
        serde_json::json!({"code": code, "message": message, "request_id": "r", "data": data});
    Ok(Response {
        status,
        body: body.to_string().into_bytes(),
    })
}
