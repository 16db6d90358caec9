//! Completion webhooks: when a task with a `callback_url` ends, slotd POSTs its view
//! there, signed by the Standard Webhooks scheme (`webhook-id`, `webhook-timestamp`,
//! `webhook-signature` with `[webhooks] secret`), from a durable outbox.
//!
//! - Queueing: a sweep finds tasks with a `callback_url` whose end is not queued yet (the
//!   `webhook_done` flag) and whose units have all settled (one statement; a running task
//!   costs it one index probe, so the sweep's cost follows the tasks that ended, not the open
//!   ones), and queues a delivery for each that has ended, setting the flag in
//!   the same transaction. A crash anywhere leaves either the flag unset (the next sweep queues
//!   it) or the delivery queued. A retry that moves units clears the flag and counts one more
//!   end: the task's next end is queued too, under an id of its own ([`delivery_id`]), and
//!   a sweep that read an earlier end does not set the flag again.
//! - Delivering: deliveries are claimed under a lease, attempted, and recorded with what comes
//!   next: delivered (any 2xx), retried with doubling delays (`retry_base` to `retry_max`), or
//!   given up `give_up_after` the task's end. The `webhook-id` is the delivery's, the same on
//!   every attempt: delivery is at least once, and receivers deduplicate on it. A delivery is
//!   sent after a 2xx only when its sender stopped between the answer and the record (the
//!   delivery is claimed again once that lease lapses); once a 2xx is recorded it is never
//!   claimed again. An attempt (the lookup included) is bounded by `timeout` and starts only
//!   with room on its lease for it and its record, so two instances never send one delivery
//!   at once.
//! - SSRF rule ([`slotd_core::address`]): the target's every address must be public (not loopback, private, link-local,
//!   shared, multicast or unspecified) unless `[webhooks] allow_private = true`; the request
//!   connects to the addresses checked (no second lookup, no proxy) and follows no redirect.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;

use slotd_core::address::{Resolve, SystemResolver, check_target_with};
use slotd_core::config::WebhooksConfig;
use slotd_core::model::TaskStatus;
use slotd_store::{AttemptNext, AttemptOutcome, Delivery, NewDelivery, StoreError};
use slotd_units::services::Services;

/// Open tasks read per page of a sweep.
const SWEEP_PAGE: u32 = 200;
/// Deliveries claimed per round.
const CLAIM_LIMIT: u32 = 32;
/// Of those, attempted at once.
const AT_ONCE: u32 = 8;

/// How long a claim holds its deliveries: the attempts of a full claim one after the other
/// (`CLAIM_LIMIT / AT_ONCE` rounds of at most `timeout` each), then one more `timeout` for the
/// last one and one for the records.
fn lease(cfg: &WebhooksConfig) -> Duration {
    cfg.timeout
        .saturating_mul(CLAIM_LIMIT.div_ceil(AT_ONCE) + 2)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The delay before attempt `attempts + 1` (after `attempts` failures).
pub fn retry_delay(cfg: &WebhooksConfig, attempts: i64) -> Duration {
    let exp = u32::try_from(attempts.clamp(0, 30)).unwrap_or(30);
    cfg.retry_base
        .saturating_mul(2u32.saturating_pow(exp))
        .min(cfg.retry_max)
}

/// Queue the deliveries of tasks that have ended; how many were queued.
pub async fn sweep(services: &Services, now: i64) -> Result<usize, StoreError> {
    let store = &services.store;
    let mut queued = 0;
    // Every ended task, page by page.
    let mut after = 0;
    loop {
        let page = store.webhook_open_tasks(after, SWEEP_PAGE).await?;
        let Some((last, ..)) = page.last() else {
            return Ok(queued);
        };
        after = *last;
        for (_, tenant, id, ends) in page {
            queued += queue_if_ended(services, tenant, id, ends, now).await?;
        }
    }
}

/// The `webhook-id` of a task's end after `ends` retries reopened its webhook: the first
/// end's is `msg_<task>_<event>`, the n-th's `msg_<task>_<event>_<n>` (n = 2, 3, …), the
/// same for every sweep of that end.
pub fn delivery_id(task_id: &str, event: &str, ends: i64) -> String {
    let event = event.trim_start_matches("task.");
    match ends.saturating_add(1) {
        n if n <= 1 => format!("msg_{task_id}_{event}"),
        n => format!("msg_{task_id}_{event}_{n}"),
    }
}

/// Queue task `id`'s delivery if it has ended (its end after `ends` reopenings, as the sweep
/// read it); 1 if it was queued.
async fn queue_if_ended(
    services: &Services,
    tenant: String,
    id: String,
    ends: i64,
    now: i64,
) -> Result<usize, StoreError> {
    let store = &services.store;
    let Some(task) = store.task_get(&tenant, &id).await? else {
        return Ok(0);
    };
    let event = match task.counts.task_status() {
        TaskStatus::Completed => "task.completed",
        TaskStatus::Failed => "task.failed",
        TaskStatus::Cancelled => "task.cancelled",
        TaskStatus::Pending | TaskStatus::Running => return Ok(0),
    };
    let Some(url) = task.completion_webhook_url.clone() else {
        return Ok(0);
    };
    let units = store.task_units(&task.id).await?;
    let view = crate::task_view::TaskView::new(&task, units, false);
    let payload = json!({
        "type": event,
        "timestamp": now,
        "data": view,
    });
    // Queued under the end the sweep read: if a retry reopened the task since, this leaves
    // it open for its next end.
    store
        .webhook_enqueue_end(
            &NewDelivery {
                id: delivery_id(&task.id, event, ends),
                task_id: task.id.clone(),
                tenant,
                url,
                event: event.into(),
                payload: payload.to_string(),
                now,
            },
            ends,
        )
        .await?;
    Ok(1)
}

/// Attempt the deliveries due at `now`, as `owner`; how many were attempted.
pub async fn deliver_due(services: &Services, owner: &str, now: i64) -> Result<usize, StoreError> {
    deliver_due_with(services, &SystemResolver, owner, now).await
}

/// [`deliver_due`] with callback hosts resolved by `resolver` (tests say what a name resolves
/// to at delivery time; the SSRF rule is applied to its answer all the same).
pub async fn deliver_due_with(
    services: &Services,
    resolver: &dyn Resolve,
    owner: &str,
    now: i64,
) -> Result<usize, StoreError> {
    let cfg = &services.config.webhooks;
    // From the clock, not `now`: `now` was read before this round's sweep, however long that
    // took.
    let lease_until = services
        .clock
        .now_ms()
        .max(now)
        .saturating_add(millis(lease(cfg)));
    let due = services
        .store
        .webhook_claim(owner, lease_until, now, CLAIM_LIMIT)
        .await?;
    let n = due.len();
    // A few at once: one slow receiver does not hold up the others.
    let results: Vec<Result<bool, StoreError>> = futures::stream::iter(due)
        .map(|d| deliver_one(services, cfg, resolver, owner, lease_until, d))
        .buffer_unordered(AT_ONCE as usize)
        .collect()
        .await;
    for r in results {
        r?;
    }
    Ok(n)
}

/// Attempt one delivery claimed until `lease_until` and record the outcome.
///
/// The attempt starts only while the lease has room for it (`timeout`, the lookup included)
/// and for its record (another `timeout`). Once the lease lapses another instance may claim
/// the delivery: a request still under way then would be a second one at once, possibly
/// arriving after the other's 2xx was recorded. A delivery left for lack of time is claimed
/// again when its lease lapses.
async fn deliver_one(
    services: &Services,
    cfg: &WebhooksConfig,
    resolver: &dyn Resolve,
    owner: &str,
    lease_until: i64,
    d: Delivery,
) -> Result<bool, StoreError> {
    let needs = millis(cfg.timeout.saturating_mul(2));
    if services.clock.now_ms().saturating_add(needs) > lease_until {
        tracing::info!(delivery = %d.id, task = %d.task_id, "webhook delivery left to the next claim: no time left on its lease");
        return Ok(false);
    }
    let started = Instant::now();
    let answer = tokio::time::timeout(
        cfg.timeout,
        attempt(cfg, resolver, &d, services.clock.now_ms()),
    )
    .await
    .unwrap_or_else(|_| {
        Err(format!(
            "no answer within {} (resolving the host included)",
            humantime::format_duration(cfg.timeout)
        ))
    });
    let at = services.clock.now_ms();
    let (status, error) = match &answer {
        Ok(code) if (200..300).contains(code) => (Some(i64::from(*code)), None),
        Ok(code) => (
            Some(i64::from(*code)),
            Some(format!("the receiver answered {code}")),
        ),
        Err(e) => (None, Some(e.clone())),
    };
    let give_up_at = d
        .created_at
        .saturating_add(i64::try_from(cfg.give_up_after.as_millis()).unwrap_or(i64::MAX));
    let next = if error.is_none() {
        AttemptNext::Delivered
    } else {
        let retry = at.saturating_add(
            i64::try_from(retry_delay(cfg, d.attempts).as_millis()).unwrap_or(i64::MAX),
        );
        if retry > give_up_at {
            AttemptNext::GiveUp
        } else {
            AttemptNext::RetryAt(retry)
        }
    };
    let outcome = match next {
        AttemptNext::Delivered => "delivered",
        AttemptNext::RetryAt(_) => "retry",
        AttemptNext::GiveUp => "gave_up",
    };
    services.metrics.record(|| {
        metrics::counter!("slotd_completion_webhook_attempts_total", "outcome" => outcome)
            .increment(1)
    });
    if let Some(e) = &error {
        tracing::info!(delivery = %d.id, task = %d.task_id, attempt = d.attempts + 1, error = %e, ?next, "webhook delivery failed");
    }
    services
        .store
        .webhook_attempt(&AttemptOutcome {
            delivery_id: &d.id,
            owner,
            at,
            status,
            error,
            duration_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
            next,
        })
        .await
}

/// One POST of `d`: the receiver's status, or why there was none.
async fn attempt(
    cfg: &WebhooksConfig,
    resolver: &dyn Resolve,
    d: &Delivery,
    now_ms: i64,
) -> Result<u16, String> {
    let url = url::Url::parse(&d.url).map_err(|e| format!("callback_url is not a URL: {e}"))?;
    let addrs = check_target_with(&url, cfg.allow_private, resolver).await?;
    let host = url.host_str().unwrap_or_default().to_string();
    // No proxy (whatever `HTTP_PROXY` and the like say): a proxy would connect wherever its
    // own lookup of the host leads, not to the addresses checked.
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(cfg.timeout)
        .resolve_to_addrs(&host, &addrs)
        .build()
        .map_err(|e| format!("building the HTTP client: {e}"))?;
    let timestamp = now_ms.div_euclid(1000);
    let mut req = client
        .post(url)
        .header("content-type", "application/json")
        .header("user-agent", "slotd-webhooks")
        .header("webhook-id", &d.id)
        .header("webhook-timestamp", timestamp.to_string());
    if let Some(secret) = &cfg.secret {
        let secret = String::from_utf8_lossy(secret.expose()).to_string();
        let signature =
            slotd_core::standard_webhooks::sign(&secret, &d.id, timestamp, d.payload.as_bytes())
                .map_err(|e| format!("signing: {e:#}"))?;
        req = req.header("webhook-signature", signature);
    }
    let resp = req
        .body(d.payload.clone())
        .send()
        .await
        .map_err(|e| format!("sending: {e}"))?;
    Ok(resp.status().as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_double_up_to_the_maximum() {
        let cfg = WebhooksConfig::default();
        assert_eq!(retry_delay(&cfg, 0), Duration::from_secs(5));
        assert_eq!(retry_delay(&cfg, 1), Duration::from_secs(10));
        assert_eq!(retry_delay(&cfg, 3), Duration::from_secs(40));
        assert_eq!(retry_delay(&cfg, 40), Duration::from_secs(3600));
    }

    #[test]
    fn each_end_of_a_retried_task_has_its_own_id() {
        // The first end keeps the id it always had.
        assert_eq!(delivery_id("t1", "task.failed", 0), "msg_t1_failed");
        // Later ends: numbered from 2, the same on every sweep of that end.
        assert_eq!(delivery_id("t1", "task.failed", 1), "msg_t1_failed_2");
        assert_eq!(delivery_id("t1", "task.completed", 2), "msg_t1_completed_3");
        assert_eq!(
            delivery_id("t1", "task.completed", 2),
            delivery_id("t1", "task.completed", 2)
        );
        let ids: std::collections::BTreeSet<String> = (0..5)
            .map(|ends| delivery_id("t1", "task.failed", ends))
            .collect();
        assert_eq!(ids.len(), 5, "no two ends share an id");
    }
}
