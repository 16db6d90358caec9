//! fal's webhook signatures (FAL_API.md "Webhooks"): the simulator signs each delivery with its
//! own Ed25519 key and publishes the public key in a JWKS (a decoy key listed first, so a
//! verifier must try every key); [`verify`] is the published recipe, for tests and for anyone
//! checking what the simulator sends.
//!
//! Message: `request_id + "\n" + user_id + "\n" + timestamp + "\n" + hex(sha256(raw body))`;
//! headers `X-Fal-Webhook-Request-Id`, `-User-Id`, `-Timestamp` (Unix seconds), `-Signature`
//! (hex of the 64-byte signature); a timestamp more than 300 s from the verifier's clock is
//! refused.

use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub const HEADER_REQUEST_ID: &str = "x-fal-webhook-request-id";
pub const HEADER_USER_ID: &str = "x-fal-webhook-user-id";
pub const HEADER_TIMESTAMP: &str = "x-fal-webhook-timestamp";
pub const HEADER_SIGNATURE: &str = "x-fal-webhook-signature";
/// How far a delivery's timestamp may be from the verifier's clock.
pub const TOLERANCE_S: i64 = 300;

/// The message a delivery's signature covers.
pub fn message(request_id: &str, user_id: &str, timestamp_s: i64, body: &[u8]) -> String {
    format!(
        "{request_id}\n{user_id}\n{timestamp_s}\n{}",
        hex::encode(Sha256::digest(body))
    )
}

/// The simulator's signing key and the decoy published before it.
pub struct Signer {
    key: SigningKey,
    decoy: VerifyingKey,
}

impl Signer {
    /// Keys derived from `seed` (a simulator run is reproducible; the keys are not secrets).
    pub fn from_seed(seed: u64) -> Signer {
        let derive = |label: &str| {
            let mut h = Sha256::new();
            h.update(label.as_bytes());
            h.update(seed.to_le_bytes());
            let bytes: [u8; 32] = h.finalize().into();
            SigningKey::from_bytes(&bytes)
        };
        Signer {
            key: derive("slotd-sim fal webhook key"),
            decoy: derive("slotd-sim fal decoy key").verifying_key(),
        }
    }

    /// `/.well-known/jwks.json`: the decoy first, then the signing key.
    pub fn jwks(&self) -> Value {
        let jwk = |k: &VerifyingKey| {
            json!({
                "kty": "OKP",
                "crv": "Ed25519",
                "x": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(k.as_bytes()),
            })
        };
        json!({ "keys": [jwk(&self.decoy), jwk(&self.key.verifying_key())] })
    }

    /// The four signature headers of a delivery of `body`.
    pub fn headers(
        &self,
        request_id: &str,
        user_id: &str,
        timestamp_s: i64,
        body: &[u8],
    ) -> Vec<(&'static str, String)> {
        let sig = self
            .key
            .sign(message(request_id, user_id, timestamp_s, body).as_bytes());
        vec![
            (HEADER_REQUEST_ID, request_id.to_string()),
            (HEADER_USER_ID, user_id.to_string()),
            (HEADER_TIMESTAMP, timestamp_s.to_string()),
            (HEADER_SIGNATURE, hex::encode(sig.to_bytes())),
        ]
    }
}

/// Why a delivery is not authentic.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("header {0} is missing")]
    Missing(&'static str),
    #[error("timestamp {0:?} is not Unix seconds")]
    BadTimestamp(String),
    #[error("timestamp {at} is {skew} s from now (at most {TOLERANCE_S})")]
    Stale { at: i64, skew: i64 },
    #[error("the signature is not 64 bytes of hex")]
    BadSignature,
    #[error("no published key verifies the signature")]
    NoKeyMatches,
}

/// Check a delivery by the published recipe: every header present, the timestamp within
/// [`TOLERANCE_S`] of `now_s`, and the signature verified by one of the JWKS `keys` (entries
/// that are not Ed25519 public keys are skipped).
pub fn verify(
    jwks: &Value,
    header: impl Fn(&str) -> Option<String>,
    body: &[u8],
    now_s: i64,
) -> Result<(), Refused> {
    let get = |name: &'static str| header(name).ok_or(Refused::Missing(name));
    let request_id = get(HEADER_REQUEST_ID)?;
    let user_id = get(HEADER_USER_ID)?;
    let ts_text = get(HEADER_TIMESTAMP)?;
    let sig_hex = get(HEADER_SIGNATURE)?;
    let at: i64 = ts_text
        .trim()
        .parse()
        .map_err(|_| Refused::BadTimestamp(ts_text.clone()))?;
    let skew = (now_s - at).abs();
    if skew > TOLERANCE_S {
        return Err(Refused::Stale { at, skew });
    }
    let sig_bytes: [u8; 64] = hex::decode(sig_hex.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(Refused::BadSignature)?;
    let sig = Signature::from_bytes(&sig_bytes);
    let msg = message(&request_id, &user_id, at, body);
    let keys = jwks["keys"].as_array().cloned().unwrap_or_default();
    let matches = keys
        .iter()
        .filter_map(jwk_key)
        .any(|k| k.verify(msg.as_bytes(), &sig).is_ok());
    if matches {
        Ok(())
    } else {
        Err(Refused::NoKeyMatches)
    }
}

/// An Ed25519 public key from a JWK, if it is one.
fn jwk_key(jwk: &Value) -> Option<VerifyingKey> {
    if jwk["kty"] != "OKP" || jwk["crv"] != "Ed25519" {
        return None;
    }
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(jwk["x"].as_str()?)
        .ok()?;
    VerifyingKey::from_bytes(&x.try_into().ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(headers: &'a [(&'static str, String)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            headers
                .iter()
                .find(|(h, _)| *h == name)
                .map(|(_, v)| v.clone())
        }
    }

    const BODY: &[u8] = br#"{"error": null, "payload": {"video": {"url": "x"}}, "request_id": "r1", "status": "OK"}"#;

    #[test]
    fn a_signed_delivery_verifies_against_the_published_keys() {
        let s = Signer::from_seed(7);
        let jwks = s.jwks();
        assert_eq!(
            jwks["keys"].as_array().map(Vec::len),
            Some(2),
            "decoy first"
        );
        let h = s.headers("r1", "user-1", 1_000_000, BODY);
        assert_eq!(verify(&jwks, lookup(&h), BODY, 1_000_100), Ok(()));
        // The same seed, the same keys: a verifier's cached JWKS stays good across restarts.
        assert_eq!(Signer::from_seed(7).jwks(), jwks);
    }

    #[test]
    fn forgeries_are_refused_by_name() {
        let s = Signer::from_seed(7);
        let jwks = s.jwks();
        let h = s.headers("r1", "user-1", 1_000_000, BODY);
        assert_eq!(
            verify(&jwks, lookup(&h), b"{\"status\": \"OK\"}", 1_000_000),
            Err(Refused::NoKeyMatches),
            "another body"
        );
        let mut other_id = h.clone();
        other_id[0].1 = "r2".into();
        assert_eq!(
            verify(&jwks, lookup(&other_id), BODY, 1_000_000),
            Err(Refused::NoKeyMatches)
        );
        assert_eq!(
            verify(&jwks, lookup(&h), BODY, 1_000_301),
            Err(Refused::Stale {
                at: 1_000_000,
                skew: 301
            }),
            "replayed after five minutes"
        );
        let foreign = Signer::from_seed(8).headers("r1", "user-1", 1_000_000, BODY);
        assert_eq!(
            verify(&jwks, lookup(&foreign), BODY, 1_000_000),
            Err(Refused::NoKeyMatches)
        );
        let missing: Vec<_> = h
            .iter()
            .filter(|(n, _)| *n != HEADER_SIGNATURE)
            .cloned()
            .collect();
        assert_eq!(
            verify(&jwks, lookup(&missing), BODY, 1_000_000),
            Err(Refused::Missing(HEADER_SIGNATURE))
        );
        let mut short = h.clone();
        short[3].1 = "abcd".into();
        assert_eq!(
            verify(&jwks, lookup(&short), BODY, 1_000_000),
            Err(Refused::BadSignature)
        );
        let mut words = h.clone();
        words[2].1 = "yesterday".into();
        assert!(matches!(
            verify(&jwks, lookup(&words), BODY, 1_000_000),
            Err(Refused::BadTimestamp(_))
        ));
    }
}
