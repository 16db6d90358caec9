//! Signing with secrets the guest never holds: the host's `signing.hmac-sha256` keyed by a
//! named secret, and HS256 JSON Web Tokens (RFC 7519) built on it. The guest assembles header
//! and claims; only the host touches the key.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

use crate::host::{Host, NO_SECRET};

/// Whether a signing error only says the secret is not configured (the host's message starts
/// with [`NO_SECRET`]). Any other error is a failure and must be treated as one: fail closed.
pub fn is_unconfigured(error: &str) -> bool {
    error.starts_with(NO_SECRET)
}

/// HMAC-SHA256 of `data` keyed by the named secret (the host's `signing.hmac-sha256`).
pub fn hmac_sha256(host: &dyn Host, secret: &str, data: &[u8]) -> Result<Vec<u8>, String> {
    host.hmac_sha256(secret, data)
}

/// The JOSE header of every token built here.
pub const HS256_HEADER: &str = r#"{"alg":"HS256","typ":"JWT"}"#;

/// `base64url(header).base64url(claims)`: the part of an HS256 token that is signed. `claims`
/// is the claims' JSON text, used byte for byte.
pub fn signing_input(claims: &str) -> String {
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(HS256_HEADER),
        URL_SAFE_NO_PAD.encode(claims)
    )
}

/// The complete token from its signing input and the HMAC-SHA256 of it.
pub fn assemble(signing_input: &str, signature: &[u8]) -> String {
    format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// An HS256 token with these claims, signed by the host with the named secret.
pub fn hs256_jwt(host: &dyn Host, secret: &str, claims: &Value) -> Result<String, String> {
    let input = signing_input(&claims.to_string());
    let signature = host.hmac_sha256(secret, input.as_bytes())?;
    Ok(assemble(&input, &signature))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ScriptedHost;

    /// The HS256 example token of jwt.io (secret `your-256-bit-secret`).
    const KNOWN: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.\
        eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.\
        SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";

    #[test]
    fn a_known_token_is_reproduced_byte_for_byte() {
        let host = ScriptedHost::new().with_secret("jwt", "your-256-bit-secret");
        let input = signing_input(r#"{"sub":"1234567890","name":"John Doe","iat":1516239022}"#);
        let signature = host.hmac_sha256("jwt", input.as_bytes());
        assert_eq!(
            signature.map(|s| assemble(&input, &s)).as_deref(),
            Ok(KNOWN)
        );
    }

    #[test]
    fn tokens_are_signed_by_the_named_secret_and_fail_without_it() {
        let host = ScriptedHost::new().with_secret("k", "key");
        let claims = serde_json::json!({"iss": "me"});
        let token = hs256_jwt(&host, "k", &claims).unwrap_or_default();
        let (input, signature) = token.rsplit_once('.').unwrap_or_default();
        assert_eq!(input, signing_input(r#"{"iss":"me"}"#));
        let expected = crate::testing::hmac_sha256(b"key", input.as_bytes());
        assert_eq!(
            URL_SAFE_NO_PAD.decode(signature).unwrap_or_default(),
            expected
        );
        let missing = hs256_jwt(&host, "other", &claims);
        assert!(missing.is_err_and(|e| is_unconfigured(&e)));
    }
}
