//! `signing.verify-ed25519` (contract 1.4): check a signature against the Ed25519 keys a
//! provider publishes as a JWKS (fal signs its webhooks this way). The host, not the guest,
//! verifies: the keys outlive a call (every call runs in a fresh store), so only the host can
//! keep them between webhooks, and the fetch goes through the same allowlisted, size-capped,
//! redirect-free path as the handler's own requests.
//!
//! Keys are kept per (handler, URL) for [`MAX_AGE`], or less when the answer's
//! `Cache-Control: max-age` says so (never less than [`REFETCH_GAP`]). A signature no kept key
//! matches fetches the keys again if they are older than [`REFETCH_GAP`] (keys rotate), so a
//! flood of forged webhooks costs the provider at most one read a minute. A failed fetch falls
//! back to the keys kept, if any; with none the call is an error (fail closed).
//!
//! A recording call (`[handlers.X] record`) always fetches, so the recording holds the keys
//! and a replay verifies against the same answer.

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::{Signature, VerifyingKey};

use super::key_cache::KeySet;
use crate::bindings::http::{HttpError, Request, Response};
use crate::engine::CallState;

/// The longest keys are kept (fal's recipe: cache up to 24 h).
pub(crate) const MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// The shortest time between two reads of one key set.
pub(crate) const REFETCH_GAP: Duration = Duration::from_secs(60);

impl CallState {
    /// The host side of `signing.verify-ed25519`.
    pub(crate) async fn verify_ed25519(
        &mut self,
        keys_url: String,
        message: Vec<u8>,
        signature: Vec<u8>,
    ) -> Result<bool, String> {
        let bytes: [u8; 64] = signature.as_slice().try_into().map_err(|_| {
            format!(
                "the signature is {} bytes; an Ed25519 signature is 64",
                signature.len()
            )
        })?;
        let signature = Signature::from_bytes(&bytes);
        let id = (self.handler.clone(), keys_url.clone());
        let kept = if self.tape.is_some() {
            None
        } else {
            self.shared.keys.get(&id)
        };
        if let Some(set) = &kept {
            let age = set.fetched.elapsed();
            if age < set.max_age && set.any_verifies(&message, &signature) {
                return Ok(true);
            }
            if age < REFETCH_GAP {
                return Ok(false);
            }
        }
        let fresh = match self.fetch_keys(&keys_url).await {
            Ok(set) => set,
            Err(e) => {
                let Some(set) = kept else {
                    return Err(e);
                };
                tracing::warn!(handler = %self.handler, url = %keys_url, error = %e,
                    "reading the signing keys again failed; using the ones kept");
                return Ok(set.any_verifies(&message, &signature));
            }
        };
        let verified = fresh.any_verifies(&message, &signature);
        self.shared.keys.insert(id, fresh);
        Ok(verified)
    }

    async fn fetch_keys(&mut self, url: &str) -> Result<KeySet, String> {
        let req = Request {
            method: "GET".into(),
            url: url.to_string(),
            headers: vec![("Accept".into(), "application/json".into())],
            body: None,
            timeout_ms: None,
        };
        let answer = match self.replayed_request(&req) {
            Some(answer) => answer,
            None => {
                self.http_in_flight += 1;
                let answer = self.outbound_send(req).await;
                self.http_in_flight -= 1;
                answer
            }
        };
        let resp =
            answer.map_err(|e| format!("reading the signing keys at {url}: {}", show(&e)))?;
        parse_key_set(url, &resp)
    }
}

fn show(e: &HttpError) -> String {
    match e {
        HttpError::Denied(why) => format!("denied: {why}"),
        HttpError::Timeout => "timed out".into(),
        HttpError::TooLarge(n) => format!("answer larger than {n} bytes"),
        HttpError::Invalid(why) => format!("invalid request: {why}"),
        HttpError::Transport(why) => format!("transport error: {why}"),
    }
}

/// The Ed25519 keys of a JWKS answer, and how long to keep them.
fn parse_key_set(url: &str, resp: &Response) -> Result<KeySet, String> {
    if !(200..300).contains(&resp.status) {
        return Err(format!(
            "the signing keys at {url} answered HTTP {}",
            resp.status
        ));
    }
    let doc: serde_json::Value = serde_json::from_slice(&resp.body)
        .map_err(|e| format!("the signing keys at {url} are not JSON: {e}"))?;
    let Some(entries) = doc.get("keys").and_then(|k| k.as_array()) else {
        return Err(format!(
            "the signing keys at {url} have no \"keys\" list (expected a JWKS)"
        ));
    };
    let keys: Vec<VerifyingKey> = entries
        .iter()
        .filter(|k| {
            k.get("kty").and_then(|v| v.as_str()) == Some("OKP")
                && k.get("crv").and_then(|v| v.as_str()) == Some("Ed25519")
        })
        .filter_map(|k| k.get("x").and_then(|v| v.as_str()))
        .filter_map(|x| URL_SAFE_NO_PAD.decode(x.trim_end_matches('=')).ok())
        .filter_map(|raw| <[u8; 32]>::try_from(raw.as_slice()).ok())
        .filter_map(|raw| VerifyingKey::from_bytes(&raw).ok())
        .collect();
    if keys.is_empty() {
        return Err(format!(
            "the signing keys at {url} hold no usable Ed25519 key (kty OKP, crv Ed25519, x)"
        ));
    }
    Ok(KeySet {
        keys,
        fetched: Instant::now(),
        max_age: max_age(resp),
    })
}

/// `Cache-Control: max-age`, within [`REFETCH_GAP`]..=[`MAX_AGE`]; [`MAX_AGE`] without one.
fn max_age(resp: &Response) -> Duration {
    let said = resp
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("cache-control"))
        .flat_map(|(_, v)| v.split(','))
        .filter_map(|d| d.trim().strip_prefix("max-age="))
        .find_map(|n| n.trim().parse::<u64>().ok());
    said.map_or(MAX_AGE, |s| {
        Duration::from_secs(s).clamp(REFETCH_GAP, MAX_AGE)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str, headers: &[(&str, &str)]) -> Response {
        Response {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn a_key_set_names_what_is_wrong_with_it() {
        let url = "https://keys.example/jwks";
        let err = |r: Response| parse_key_set(url, &r).err().unwrap_or_default();
        assert!(err(answer(503, "{}", &[])).contains("HTTP 503"));
        assert!(err(answer(200, "<html>", &[])).contains("not JSON"));
        assert!(err(answer(200, "{\"k\": []}", &[])).contains("no \"keys\" list"));
        let rsa = r#"{"keys": [{"kty": "RSA", "n": "x", "e": "AQAB"}]}"#;
        assert!(err(answer(200, rsa, &[])).contains("no usable Ed25519 key"));
        let short = r#"{"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "AAAA"}]}"#;
        assert!(err(answer(200, short, &[])).contains("no usable Ed25519 key"));
    }

    #[test]
    fn keys_are_kept_as_long_as_the_answer_allows_within_bounds() {
        let ok = |h: &[(&str, &str)]| max_age(&answer(200, "", h));
        assert_eq!(ok(&[]), MAX_AGE);
        assert_eq!(
            ok(&[("Cache-Control", "public, max-age=600")]),
            Duration::from_secs(600)
        );
        assert_eq!(ok(&[("cache-control", "max-age=0")]), REFETCH_GAP);
        assert_eq!(ok(&[("cache-control", "max-age=99999999")]), MAX_AGE);
    }
}
