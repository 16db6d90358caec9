//! Webhook deliveries (FAL_API.md "Webhooks"): when a request with `fal_webhook` ends (not
//! after a cancel), one JSON body is POSTed to the URL — keys sorted, Python's `", "` / `": "`
//! separators, as captured — signed with the simulator's key ([`Signer`](super::webhook::Signer)).
//! An attempt without a 2xx answer is retried after 10, 20, 40… simulated seconds, up to
//! `--webhook-attempts`; a delivery drawn as a duplicate is made twice; one drawn with a bad
//! signature is signed by a key no JWKS lists. Outcomes only move counters.

use axum::http::header::CONTENT_TYPE;
use serde_json::Value;

use super::state::Sim;
use crate::clock::unix_ms_now;

/// One webhook owed.
pub(crate) struct Delivery {
    pub request_id: String,
    pub user_id: String,
    pub url: String,
    /// The exact bytes sent (and signed).
    pub body: Vec<u8>,
    pub bad_signature: bool,
    pub duplicate: bool,
}

/// First retry delay, simulated seconds (doubling after each failed attempt).
const BACKOFF_FIRST_S: f64 = 10.0;

/// `value` as Python's `json.dumps(value, sort_keys=True)` writes it.
pub(crate) fn python_json(value: &Value) -> String {
    let mut out = String::new();
    write(value, &mut out);
    out
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push_str(": ");
                write(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

impl Sim {
    /// Sends `d` in the background (twice when drawn as a duplicate).
    pub(crate) fn spawn_delivery(&self, d: Delivery) {
        let sim = self.clone();
        self.base.tracker.spawn(async move {
            let copies = if d.duplicate { 2 } else { 1 };
            if d.duplicate {
                sim.count(|s| s.webhooks_duplicated += 1);
            }
            for _ in 0..copies {
                if !sim.deliver(&d).await {
                    return;
                }
            }
        });
    }

    /// Attempts until a 2xx, the last attempt, or shutdown; whether it was delivered.
    async fn deliver(&self, d: &Delivery) -> bool {
        for attempt in 0..self.opts.webhook_attempts {
            if attempt > 0 {
                let backoff =
                    (self.base.clock).scaled(BACKOFF_FIRST_S * 2f64.powi(attempt as i32 - 1));
                tokio::select! {
                    _ = self.base.cancel.cancelled() => return false,
                    _ = tokio::time::sleep(backoff) => {}
                }
            }
            match self.attempt(d).await {
                Some(true) => return true,
                Some(false) => {}
                None => return false,
            }
        }
        self.count(|s| s.webhooks_given_up += 1);
        false
    }

    /// One POST: `Some(answered 2xx)`, `None` at shutdown.
    async fn attempt(&self, d: &Delivery) -> Option<bool> {
        let ts = unix_ms_now() / 1000;
        let signer = if d.bad_signature {
            &self.forger
        } else {
            &self.signer
        };
        let mut req = self
            .http
            .post(&d.url)
            .header(CONTENT_TYPE, "application/json");
        for (name, value) in signer.headers(&d.request_id, &d.user_id, ts, &d.body) {
            req = req.header(name, value);
        }
        self.note(d, |s, job| {
            s.webhook_attempts += 1;
            if d.bad_signature {
                s.webhooks_bad_signature += 1;
            }
            if let Some(job) = job {
                job.webhook_attempts += 1;
            }
        });
        let sent = tokio::select! {
            _ = self.base.cancel.cancelled() => return None,
            r = req.body(d.body.clone()).send() => r,
        };
        let ok = match sent {
            Ok(resp) => resp.status().is_success(),
            Err(e) => {
                tracing::debug!(url = %d.url, error = %e, "sim fal: webhook not delivered");
                false
            }
        };
        self.note(d, |s, job| {
            if ok {
                s.webhooks_sent += 1;
                if let Some(job) = job {
                    job.webhook_deliveries += 1;
                }
            } else {
                s.webhooks_failed += 1;
            }
        });
        Some(ok)
    }

    fn note(
        &self,
        d: &Delivery,
        f: impl FnOnce(&mut super::stats::FalStats, Option<&mut super::job::Job>),
    ) {
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        f(&mut inner.stats, inner.jobs.get_mut(&d.request_id));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn bodies_are_written_as_python_would() {
        let body = json!({"status": "OK", "request_id": "r", "error": null,
                          "payload": {"video": {"url": "u", "file_size": 3}, "list": [1, "a"]}});
        assert_eq!(
            python_json(&body),
            r#"{"error": null, "payload": {"list": [1, "a"], "video": {"file_size": 3, "url": "u"}}, "request_id": "r", "status": "OK"}"#
        );
        assert_eq!(python_json(&json!("a\"b")), r#""a\"b""#);
    }
}
