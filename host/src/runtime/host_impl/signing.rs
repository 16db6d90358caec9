//! `signing.hmac-sha256`: sign with a named secret of this handler without ever handing the
//! secret to the guest (SPEC section 6: a handler never holds a raw secret).
//!
//! A secret written `whsec_<base64>` is a Standard Webhooks signing key: the key is the
//! base64-decoded bytes after the prefix, not the text (what the Kling handler's webhook
//! verification expects, see `plugins/kling-common/src/webhook.rs`).

use std::borrow::Cow;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::runtime::bindings::signing::Host;
use crate::runtime::engine::CallState;

impl Host for CallState {
    async fn hmac_sha256(&mut self, secret: String, data: Vec<u8>) -> Result<Vec<u8>, String> {
        let handler = &*self.handler;
        let Some(key) = self.config.secrets.get(&secret) else {
            return Err(format!(
                "no secret {secret:?} is configured for handler {handler:?} \
                 (set handlers.{handler}.{secret})"
            ));
        };
        let key = signing_key(key.expose())
            .map_err(|e| format!("secret {secret:?} of handler {handler:?}: {e}"))?;
        let mut mac = Hmac::<Sha256>::new_from_slice(&key)
            .map_err(|e| format!("secret {secret:?} cannot key HMAC-SHA256: {e}"))?;
        mac.update(&data);
        Ok(mac.finalize().into_bytes().to_vec())
    }
}

/// The HMAC key a configured secret stands for: the decoded bytes of a `whsec_` key, else the
/// secret's bytes as written.
fn signing_key(raw: &[u8]) -> Result<Cow<'_, [u8]>, String> {
    match raw.strip_prefix(b"whsec_") {
        Some(encoded) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map(Cow::Owned)
            .map_err(|e| format!("a whsec_ key must be base64 after the prefix: {e}")),
        None => Ok(Cow::Borrowed(raw)),
    }
}

#[cfg(test)]
mod tests {
    use super::signing_key;

    #[test]
    fn whsec_keys_are_decoded_and_others_used_as_written() {
        // base64("hello") = "aGVsbG8="
        assert_eq!(
            signing_key(b"whsec_aGVsbG8=").expect("decodes").as_ref(),
            b"hello"
        );
        assert_eq!(signing_key(b"SK").expect("plain").as_ref(), b"SK");
        assert!(
            signing_key(b"whsec_not base64!")
                .expect_err("refused")
                .contains("base64")
        );
    }
}
