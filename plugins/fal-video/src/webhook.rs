//! `on_callback`: fal's webhook, verified before anything is read, and then only a hint.
//!
//! Verification (fal's recipe, FAL_API.md "Webhooks"): the headers `X-Fal-Webhook-Request-Id`,
//! `X-Fal-Webhook-User-Id`, `X-Fal-Webhook-Timestamp` (Unix seconds) and
//! `X-Fal-Webhook-Signature` (hex) are all present; the timestamp is within 300 s of the
//! guest's clock; the message `request_id \n user_id \n timestamp \n hex(sha256(raw body))`
//! carries an Ed25519 signature by one of the keys of the JWKS at `jwks_url`, which the host
//! fetches, caches and verifies with (`signing.verify-ed25519`); and the body's `request_id`
//! is the header's. Any failure refuses the delivery (the host answers 400, changes nothing).
//!
//! A verified webhook is a hint only: fal repeats deliveries and its payload is not trusted.
//! It becomes `running(0)` for the unit holding that request id, so the host ticks it now and
//! the tick reads status and result through the queue API.

use serde_json::Value;
use sha2::{Digest, Sha256};
use slotd_sdk::{CallbackChange, Host, Outcome, header};

use crate::settings::Config;

/// Timestamps further than this from the guest's clock are refused.
pub const TOLERANCE_SECS: i64 = 300;

/// The change a webhook means, or why it is refused.
pub fn run(
    host: &dyn Host,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<Vec<CallbackChange>, String> {
    let need = |name: &str| {
        header(headers, name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("unsigned or incomplete fal webhook: no {name} header"))
    };
    let request_id = need("X-Fal-Webhook-Request-Id")?;
    let user_id = need("X-Fal-Webhook-User-Id")?;
    let timestamp = need("X-Fal-Webhook-Timestamp")?;
    let signature = need("X-Fal-Webhook-Signature")?;

    let ts: i64 = timestamp
        .parse()
        .map_err(|_| format!("X-Fal-Webhook-Timestamp {timestamp:?} is not Unix seconds"))?;
    let now_ms = host
        .wall_clock_ms()
        .ok_or("the guest has no clock to check X-Fal-Webhook-Timestamp against")?;
    let now = i64::try_from(now_ms / 1000).unwrap_or(i64::MAX);
    if (now - ts).abs() > TOLERANCE_SECS {
        return Err(format!(
            "X-Fal-Webhook-Timestamp {ts} is more than {TOLERANCE_SECS} s from now ({now}): \
             stale or replayed"
        ));
    }
    let signature =
        hex::decode(signature).map_err(|e| format!("X-Fal-Webhook-Signature is not hex: {e}"))?;
    let digest = hex::encode(Sha256::digest(body));
    let message = format!("{request_id}\n{user_id}\n{timestamp}\n{digest}");
    let cfg = Config::read(host)?;
    match host.verify_ed25519(&cfg.jwks_url, message.as_bytes(), &signature) {
        Ok(true) => {}
        Ok(false) => {
            return Err(format!(
                "X-Fal-Webhook-Signature does not verify with any key at {} (a forged or \
                 altered webhook)",
                cfg.jwks_url
            ));
        }
        Err(e) => return Err(format!("the webhook signature could not be checked: {e}")),
    }

    let parsed: Value =
        serde_json::from_slice(body).map_err(|e| format!("the webhook body is not JSON: {e}"))?;
    let body_id = parsed.get("request_id").and_then(Value::as_str);
    if body_id != Some(request_id) {
        return Err(format!(
            "the webhook body's request_id {body_id:?} is not the signed \
             X-Fal-Webhook-Request-Id {request_id:?}"
        ));
    }
    Ok(vec![CallbackChange {
        provider_job_id: Some(request_id.to_string()),
        idempotency_key: None,
        outcome: Outcome::Running(Some(0)),
        state: None,
        cost: None,
    }])
}
