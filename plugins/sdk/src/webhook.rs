//! Standard Webhooks verification (`webhook-id`, `webhook-timestamp`, `webhook-signature:
//! v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`), with the HMAC computed by the host
//! so the guest never holds the secret (the host keys it with the decoded bytes of a `whsec_`
//! value).
//!
//! Signatures are required exactly when the named secret is configured. Fail closed: only the
//! host's "no such secret" answer ([`crate::signing::is_unconfigured`]) means "not required";
//! any other signing error refuses the webhook.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::host::{Host, header};
use crate::signing::is_unconfigured;

/// Timestamps further than this from the guest's clock are refused (the scheme's advice).
pub const TOLERANCE_SECS: i64 = 5 * 60;

/// Check the signature of a webhook when the secret `secret` is configured; accept an
/// unsigned one only when it is not. The timestamp is checked against the guest's wall clock
/// when it has one.
pub fn verify(
    host: &dyn Host,
    secret: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<(), String> {
    let id = header(headers, "webhook-id");
    let timestamp = header(headers, "webhook-timestamp");
    let signature = header(headers, "webhook-signature");
    let (Some(id), Some(timestamp), Some(signature)) = (id, timestamp, signature) else {
        return match sign(host, secret, b"probe")? {
            None => Ok(()),
            Some(_) => Err(format!(
                "unsigned callback refused: a {secret} is configured, so webhook-id, \
                 webhook-timestamp and webhook-signature are required"
            )),
        };
    };
    let ts: i64 = timestamp
        .parse()
        .map_err(|_| format!("webhook-timestamp {timestamp:?} is not an integer"))?;
    let mut content = format!("{id}.{ts}.").into_bytes();
    content.extend_from_slice(body);
    let Some(mac) = sign(host, secret, &content)? else {
        // No secret configured: the signature cannot be checked and is not required.
        return Ok(());
    };
    if let Some(now_ms) = host.wall_clock_ms() {
        let now = i64::try_from(now_ms / 1000).unwrap_or(i64::MAX);
        if (now - ts).abs() > TOLERANCE_SECS {
            return Err(format!(
                "webhook-timestamp {ts} is more than {TOLERANCE_SECS} s from now ({now})"
            ));
        }
    }
    check_signature(&mac, signature, secret)
}

/// The HMAC, `None` when the secret is not configured, or the refusal.
fn sign(host: &dyn Host, secret: &str, data: &[u8]) -> Result<Option<Vec<u8>>, String> {
    match host.hmac_sha256(secret, data) {
        Ok(mac) => Ok(Some(mac)),
        Err(e) if is_unconfigured(&e) => Ok(None),
        Err(e) => Err(format!(
            "callback refused: the {secret} could not be used to verify it ({e})"
        )),
    }
}

/// Whether any `v1,<base64>` entry of the `webhook-signature` header matches `mac`
/// (constant time per entry). `secret` names the secret in the error.
pub fn check_signature(mac: &[u8], header: &str, secret: &str) -> Result<(), String> {
    let expected = STANDARD.encode(mac);
    let matched = header
        .split_whitespace()
        .filter_map(|s| s.strip_prefix("v1,"))
        .any(|candidate| constant_time_eq(candidate.as_bytes(), expected.as_bytes()));
    if matched {
        Ok(())
    } else {
        Err(format!(
            "webhook-signature does not match (wrong {secret}, or a forged callback)"
        ))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ScriptedHost, hmac_sha256};

    const KEY_B64: &str = "dGVzdHNlY3JldHRlc3RzZWNyZXR0ZXN0c2VjcmV0MTI=";
    const BODY: &str = r#"{"id":"1234567890","status":"succeeded","message":"","create_time":1781080778802,"update_time":1781080794151}"#;

    fn signed(id: &str, ts: i64, signature: &str) -> Vec<(String, String)> {
        vec![
            ("Webhook-Id".to_string(), id.to_string()),
            ("webhook-timestamp".to_string(), ts.to_string()),
            ("webhook-signature".to_string(), signature.to_string()),
        ]
    }

    #[test]
    fn the_official_test_vector_verifies_with_the_decoded_key() {
        let key = STANDARD.decode(KEY_B64).unwrap_or_default();
        let host = ScriptedHost::new()
            .with_secret("whs", key)
            .with_now_ms(Some(1_781_080_794_000));
        let good = "v1,UsKlJP00XoQyOn410NM9xv34sP+Gl0jnOO9Lcpr7NJ4=";
        let headers = signed("9876543210", 1_781_080_794, good);
        assert_eq!(verify(&host, "whs", &headers, BODY.as_bytes()), Ok(()));
        let mut forged = BODY.to_string();
        forged.push(' ');
        assert!(verify(&host, "whs", &headers, forged.as_bytes()).is_err());
        let other = signed("9876543210", 1_781_080_794, "v1,AAAA v2,x");
        assert!(verify(&host, "whs", &other, BODY.as_bytes()).is_err());
    }

    #[test]
    fn unsigned_only_without_a_secret_and_stale_timestamps_refused() {
        let open = ScriptedHost::new();
        assert_eq!(verify(&open, "whs", &[], b"{}"), Ok(()));
        let guarded = ScriptedHost::new().with_secret("whs", "k");
        let refused = verify(&guarded, "whs", &[], b"{}");
        assert!(refused.is_err_and(|e| e.contains("unsigned callback refused")));
        let now = (guarded.wall_clock_ms().unwrap_or(0) / 1000) as i64;
        let sign = |ts: i64| {
            let mac = hmac_sha256(b"k", format!("m1.{ts}.{{}}").as_bytes());
            signed("m1", ts, &format!("v1,{}", STANDARD.encode(mac)))
        };
        assert_eq!(verify(&guarded, "whs", &sign(now), b"{}"), Ok(()));
        assert!(verify(&guarded, "whs", &sign(now - 600), b"{}").is_err());
        assert!(verify(&guarded, "whs", &signed("m1", 0, "v1,x"), b"{}").is_err());
    }

    #[test]
    fn a_signing_failure_other_than_no_secret_refuses() {
        let broken = ScriptedHost::new().with_signing_error("a whsec_ secret must be base64");
        for headers in [vec![], signed("m1", 1_781_080_794, "v1,AAAA")] {
            let answer = verify(&broken, "whs", &headers, b"{}");
            assert!(answer.is_err_and(|e| e.contains("could not be used")));
        }
    }
}
