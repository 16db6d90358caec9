//! `signing.hmac-sha256`: sign with a named secret of this handler without ever handing the
//! secret to the guest (SPEC section 6: a handler never holds a raw secret).

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
        let mut mac = Hmac::<Sha256>::new_from_slice(key.expose())
            .map_err(|e| format!("secret {secret:?} cannot key HMAC-SHA256: {e}"))?;
        mac.update(&data);
        Ok(mac.finalize().into_bytes().to_vec())
    }
}
