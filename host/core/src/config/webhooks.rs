//! `[webhooks]`: completion webhooks to a task's `callback_url` (see `slotd_server::completion_webhooks`):
//! the Standard Webhooks signing secret, whether private addresses may be targets, and how long
//! a delivery is retried.

use std::time::Duration;

use anyhow::bail;
use serde::Deserialize;

use super::handler::Secret;
use super::values;

/// First retry delay of a failed delivery; it doubles per attempt up to [`RETRY_MAX_DEFAULT`].
pub const RETRY_BASE_DEFAULT: Duration = Duration::from_secs(5);
/// Longest delay between two attempts.
pub const RETRY_MAX_DEFAULT: Duration = Duration::from_secs(3600);
/// How long after the task's end a delivery is still tried before it is given up.
pub const GIVE_UP_AFTER_DEFAULT: Duration = Duration::from_secs(24 * 3600);
/// One attempt's whole deadline (connect, send, answer).
pub const TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// Completion webhooks (`[webhooks]`). The file's keys are these fields' names.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhooksConfig {
    /// `whsec_<base64>` (Standard Webhooks); may be `{ env = "VAR" }`. Unset: deliveries carry
    /// `webhook-id` and `webhook-timestamp` but no signature (a warning at start-up says so).
    pub secret: Option<Secret>,
    /// Allow targets on loopback, private and link-local addresses (SSRF rule off: tests, a
    /// private network you trust).
    pub allow_private: bool,
    #[serde(deserialize_with = "values::duration")]
    pub retry_base: Duration,
    #[serde(deserialize_with = "values::duration")]
    pub retry_max: Duration,
    #[serde(deserialize_with = "values::duration")]
    pub give_up_after: Duration,
    #[serde(deserialize_with = "values::duration")]
    pub timeout: Duration,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        WebhooksConfig {
            secret: None,
            allow_private: false,
            retry_base: RETRY_BASE_DEFAULT,
            retry_max: RETRY_MAX_DEFAULT,
            give_up_after: GIVE_UP_AFTER_DEFAULT,
            timeout: TIMEOUT_DEFAULT,
        }
    }
}

impl WebhooksConfig {
    /// Values that parse but make no sense, naming the key; a malformed secret is refused here.
    pub fn validate(&self) -> anyhow::Result<()> {
        if let Some(secret) = &self.secret {
            let text = String::from_utf8_lossy(secret.expose()).to_string();
            if let Err(e) = crate::standard_webhooks::webhook_key(&text) {
                bail!("webhooks.secret: {e:#}");
            }
        }
        if self.retry_base.is_zero() || self.retry_max < self.retry_base {
            bail!("webhooks.retry_base must be above zero and at most webhooks.retry_max");
        }
        if self.timeout.is_zero() {
            bail!("webhooks.timeout must be above zero");
        }
        Ok(())
    }
}
