//! Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64
//! HMAC-SHA256>` over `"{id}.{timestamp}.{body}"`): signing, used by the simulator's callbacks,
//! and verification, used by slotd's callback receiver before a handler sees a body. The
//! official test vector pins both.

use anyhow::{Context, bail};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The HMAC key of a `whsec_…` secret: the base64 decode of what follows the prefix.
pub fn webhook_key(secret: &str) -> anyhow::Result<Vec<u8>> {
    let Some(encoded) = secret.strip_prefix("whsec_") else {
        bail!("a webhook secret must start with `whsec_`");
    };
    let key = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .context("the part after `whsec_` is not valid base64")?;
    if key.is_empty() {
        bail!("the webhook secret is empty after `whsec_`");
    }
    Ok(key)
}

/// Receivers reject timestamps further than this from their clock (the scheme's advice).
pub const TOLERANCE_SECS: i64 = 5 * 60;

/// The `webhook-signature` value (`v1,<base64>`) for one message.
pub fn sign(secret: &str, msg_id: &str, timestamp: i64, body: &[u8]) -> anyhow::Result<String> {
    let key = webhook_key(secret)?;
    Ok(format!(
        "v1,{}",
        signature_b64(&key, msg_id, timestamp, body)?
    ))
}

/// Checks a `webhook-signature` header (space-separated list of `v1,<base64>`; any match
/// passes) and the timestamp against `now_secs` within [`TOLERANCE_SECS`].
pub fn verify(
    secret: &str,
    msg_id: &str,
    timestamp: i64,
    body: &[u8],
    signature_header: &str,
    now_secs: i64,
) -> anyhow::Result<()> {
    verify_with_key(
        &webhook_key(secret)?,
        msg_id,
        timestamp,
        body,
        signature_header,
        now_secs,
    )
}

/// [`verify`] with the key already decoded.
pub fn verify_with_key(
    key: &[u8],
    msg_id: &str,
    timestamp: i64,
    body: &[u8],
    signature_header: &str,
    now_secs: i64,
) -> anyhow::Result<()> {
    if (now_secs - timestamp).abs() > TOLERANCE_SECS {
        bail!(
            "webhook timestamp {timestamp} is more than {TOLERANCE_SECS} s from now ({now_secs})"
        );
    }
    let expected = signature_b64(key, msg_id, timestamp, body)?;
    let matched = signature_header
        .split_whitespace()
        .filter_map(|s| s.strip_prefix("v1,"))
        .any(|candidate| constant_time_eq(candidate.as_bytes(), expected.as_bytes()));
    if !matched {
        bail!("no webhook signature matches");
    }
    Ok(())
}

/// Verify a request's three Standard Webhooks headers (`webhook-id`, `webhook-timestamp`,
/// `webhook-signature`) over `body`, naming the first thing that is missing or wrong.
pub fn verify_headers(
    key: &[u8],
    header: impl Fn(&str) -> Option<String>,
    body: &[u8],
    now_secs: i64,
) -> anyhow::Result<()> {
    let get = |name: &str| header(name).with_context(|| format!("no {name} header"));
    let id = get("webhook-id")?;
    let timestamp: i64 = get("webhook-timestamp")?
        .trim()
        .parse()
        .context("webhook-timestamp is not a number of seconds")?;
    let signature = get("webhook-signature")?;
    verify_with_key(key, &id, timestamp, body, &signature, now_secs)
}

fn signature_b64(key: &[u8], msg_id: &str, timestamp: i64, body: &[u8]) -> anyhow::Result<String> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key)
        .map_err(|e| anyhow::anyhow!("webhook key refused by HMAC: {e}"))?;
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Ok(base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes()))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXR0ZXN0c2VjcmV0MTI=";
    const BODY: &str = r#"{"id":"1234567890","status":"succeeded","message":"","create_time":1781080778802,"update_time":1781080794151}"#;
    const EXPECTED: &str = "v1,UsKlJP00XoQyOn410NM9xv34sP+Gl0jnOO9Lcpr7NJ4=";

    #[test]
    fn official_test_vector() -> anyhow::Result<()> {
        let sig = sign(SECRET, "9876543210", 1781080794, BODY.as_bytes())?;
        assert_eq!(sig, EXPECTED);
        verify(
            SECRET,
            "9876543210",
            1781080794,
            BODY.as_bytes(),
            EXPECTED,
            1781080800,
        )?;
        Ok(())
    }

    #[test]
    fn tampered_body_and_stale_timestamp_are_refused() {
        let tampered = BODY.replace("succeeded", "failed");
        assert!(
            verify(
                SECRET,
                "9876543210",
                1781080794,
                tampered.as_bytes(),
                EXPECTED,
                1781080794
            )
            .is_err()
        );
        assert!(
            verify(
                SECRET,
                "9876543210",
                1781080794,
                BODY.as_bytes(),
                EXPECTED,
                1781080794 + 301
            )
            .is_err()
        );
        assert!(
            sign("dGVzdA==", "1", 1, b"x").is_err(),
            "a secret without whsec_ is refused"
        );
    }
}
