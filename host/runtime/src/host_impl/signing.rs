//! `signing.hmac-sha256`: sign with a named secret of this handler without ever handing the
//! secret to the guest (docs/handlers.md: a handler never holds a raw secret).
//!
//! A secret written `whsec_<base64>` is a Standard Webhooks signing key: the key is the
//! base64-decoded bytes after the prefix, not the text (what the Kling handler's webhook
//! verification expects, see `plugins/kling-common/src/webhook.rs`); see
//! [`slotd_core::config::Secret::signing_key`].
//!
//! The error for an unconfigured secret starts with `no secret ` (the WIT documents it): a
//! handler may treat that one as "not configured" and must treat every other as a failure.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::bindings::signing::Host;
use crate::engine::CallState;

impl Host for CallState {
    async fn hmac_sha256(&mut self, secret: String, data: Vec<u8>) -> Result<Vec<u8>, String> {
        if matches!(self.tape.as_deref(), Some(crate::tape::Tape::Replay(_))) {
            // A replay has no secrets: every secret signs with the same stand-in key (what it
            // signed is redacted in the recording, so nothing compares it).
            let mut mac = Hmac::<Sha256>::new_from_slice(b"slotd-replay")
                .map_err(|e| format!("replay signing key: {e}"))?;
            mac.update(&data);
            return Ok(mac.finalize().into_bytes().to_vec());
        }
        let handler = &*self.handler;
        let Some(key) = self.config.secrets.get(&secret) else {
            return Err(format!(
                "no secret {secret:?} is configured for handler {handler:?} \
                 (set handlers.{handler}.{secret})"
            ));
        };
        // Malformed `whsec_` secrets are refused at start-up; this stays an error, not a panic.
        let key = key
            .signing_key()
            .map_err(|e| format!("secret {secret:?} of handler {handler:?}: {e}"))?;
        let mut mac = Hmac::<Sha256>::new_from_slice(&key)
            .map_err(|e| format!("secret {secret:?} cannot key HMAC-SHA256: {e}"))?;
        mac.update(&data);
        Ok(mac.finalize().into_bytes().to_vec())
    }

    async fn verify_ed25519(
        &mut self,
        keys_url: String,
        message: Vec<u8>,
        signature: Vec<u8>,
    ) -> Result<bool, String> {
        CallState::verify_ed25519(self, keys_url, message, signature).await
    }
}
