//! Status-change callbacks: the bare task object POSTed to the create's `callback_url`,
//! fire-and-forget with a short timeout (the client's polling is the safety net), signed the
//! Standard Webhooks way when the simulator has a `webhook_secret`.

use serde_json::Value;

use super::state::Sim;
use crate::clock::unix_secs_now;
use slotd_core::standard_webhooks as webhook;

impl Sim {
    /// Sends one callback in the background; the outcome only moves counters.
    pub(crate) fn send_callback(&self, url: String, task: Value) {
        let sim = self.clone();
        self.base.tracker.spawn(async move {
            let body = serde_json::to_vec(&task).unwrap_or_default();
            let mut req = sim
                .http
                .post(&url)
                .header("content-type", "application/json");
            if let Some(secret) = &sim.opts.webhook_secret {
                let task_id = task["task_id"].as_str().unwrap_or_default();
                let status = task["task_status"].as_str().unwrap_or_default();
                // Stable per (task, status): a receiver can deduplicate on it.
                let msg_id = format!("msg_{task_id}_{status}");
                let ts = unix_secs_now();
                match webhook::sign(secret, &msg_id, ts, &body) {
                    Ok(sig) => {
                        req = req
                            .header("webhook-id", msg_id)
                            .header("webhook-timestamp", ts.to_string())
                            .header("webhook-signature", sig);
                    }
                    Err(e) => tracing::warn!(error = %e, "sim: cannot sign callback"),
                }
            }
            let sent = tokio::select! {
                _ = sim.base.cancel.cancelled() => return,
                r = req.body(body).send() => r,
            };
            match sent {
                Ok(answer) => sim.count(|s| {
                    s.callbacks_sent += 1;
                    if !answer.status().is_success() {
                        s.callbacks_rejected += 1;
                    }
                }),
                Err(e) => {
                    tracing::debug!(%url, error = %e, "sim: callback not delivered");
                    sim.count(|s| s.callbacks_failed += 1);
                }
            }
        });
    }
}
