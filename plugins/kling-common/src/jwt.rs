//! Kling's bearer token: an HS256 JWT with exactly `iss` (access key), `exp` (now + 1800 s)
//! and `nbf` (now − 5 s). The guest assembles header and claims; the host signs them with the
//! `secret_key` secret, so the SecretKey never enters the component.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::types::Host;

/// The secret the token is signed with (`[handlers.<name>] secret_key = { env = … }`).
pub const SECRET_NAME: &str = "secret_key";
/// Token lifetime Kling clients use.
pub const LIFETIME_SECS: u64 = 1800;
/// `nbf` lies this far in the past so that a provider clock slightly behind still accepts it.
pub const NOT_BEFORE_SKEW_SECS: u64 = 5;

/// `base64url(header).base64url(claims)`, the part that is signed.
pub fn signing_input(access_key: &str, now_secs: u64) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let claims = serde_json::json!({
        "iss": access_key,
        "exp": now_secs.saturating_add(LIFETIME_SECS),
        "nbf": now_secs.saturating_sub(NOT_BEFORE_SKEW_SECS),
    });
    let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
    format!("{header}.{claims}")
}

/// The complete token from the signing input and its HMAC-SHA256.
pub fn assemble(signing_input: &str, signature: &[u8]) -> String {
    format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// A token valid from `now_secs`, signed by the host.
pub fn token(host: &dyn Host, access_key: &str, now_secs: u64) -> Result<String, String> {
    let input = signing_input(access_key, now_secs);
    let signature = host
        .hmac_sha256(SECRET_NAME, input.as_bytes())
        .map_err(|e| format!("signing the Kling JWT failed: {e}"))?;
    Ok(assemble(&input, &signature))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::hmac;

    #[test]
    fn claims_are_exactly_iss_exp_nbf() {
        let input = signing_input("AK", 1_700_000_000);
        let (header, claims) = input.split_once('.').unwrap_or_default();
        let header = URL_SAFE_NO_PAD.decode(header).unwrap_or_default();
        assert_eq!(header, br#"{"alg":"HS256","typ":"JWT"}"#);
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).unwrap_or_default())
                .unwrap_or_default();
        assert_eq!(
            claims,
            serde_json::json!({"iss": "AK", "exp": 1_700_001_800u64, "nbf": 1_699_999_995u64})
        );
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_the_input_base64url() {
        let input = signing_input("AK", 1_700_000_000);
        let sig = hmac(b"SK", input.as_bytes());
        let token = assemble(&input, &sig);
        let (signed, tail) = token.rsplit_once('.').unwrap_or_default();
        assert_eq!(signed, input);
        assert_eq!(URL_SAFE_NO_PAD.decode(tail).unwrap_or_default(), sig);
        assert!(!tail.contains('=') && !tail.contains('+') && !tail.contains('/'));
    }
}
