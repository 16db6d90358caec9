//! [`WitHost`]: the [`Host`] of a running component, over the generated imports. Only
//! meaningful on `wasm32`; elsewhere it compiles but every call panics (use
//! [`crate::testing::ScriptedHost`] there).

use crate::bindings::slotd::handler::{config, http, log, observe, signing};
use crate::convert;
use crate::host::{AuthorizedRequest, Host, HttpError, Level, Request, Response};

/// The host's imports, as the component sees them. Stateless: create one wherever needed.
#[derive(Clone, Copy, Debug, Default)]
pub struct WitHost;

impl Host for WitHost {
    fn send_batch(&self, requests: Vec<Request>) -> Vec<Result<Response, HttpError>> {
        let requests: Vec<http::Request> = requests.into_iter().map(Into::into).collect();
        http::send_batch(&requests)
            .into_iter()
            .map(convert::answer)
            .collect()
    }

    fn send_authorized(
        &self,
        requests: Vec<AuthorizedRequest>,
    ) -> Vec<Result<Response, HttpError>> {
        let requests: Vec<http::AuthorizedRequest> = requests.into_iter().map(Into::into).collect();
        http::send_authorized(&requests)
            .into_iter()
            .map(convert::answer)
            .collect()
    }

    fn send(&self, request: Request) -> Result<Response, HttpError> {
        convert::answer(http::send(&request.into()))
    }

    fn hmac_sha256(&self, secret: &str, data: &[u8]) -> Result<Vec<u8>, String> {
        signing::hmac_sha256(secret, data)
    }

    fn verify_ed25519(
        &self,
        keys_url: &str,
        message: &[u8],
        signature: &[u8],
    ) -> Result<bool, String> {
        signing::verify_ed25519(keys_url, message, signature)
    }

    fn queued(&self, unit_id: &str, position: Option<u32>) {
        observe::queued(unit_id, position);
    }

    fn config(&self, key: &str) -> Option<String> {
        config::get(key)
    }

    fn log(&self, level: Level, message: &str) {
        log::log(level.into(), message);
    }

    fn wall_clock_ms(&self) -> Option<u64> {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
            .and_then(|d| u64::try_from(d.as_millis()).ok())
    }
}
