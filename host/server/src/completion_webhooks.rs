//! Completion webhooks (issue 13): when a task with a `callback_url` ends, slotd POSTs its view
//! there, signed by the Standard Webhooks scheme (`webhook-id`, `webhook-timestamp`,
//! `webhook-signature` with `[webhooks] secret`), from a durable outbox.
//!
//! - Queueing: a sweep finds tasks with a `callback_url` whose end is not queued yet (the
//!   `webhook_done` flag), and queues a delivery for each that has ended, setting the flag in
//!   the same transaction. A crash anywhere leaves either the flag unset (the next sweep queues
//!   it) or the delivery queued.
//! - Delivering: deliveries are claimed under a lease, attempted, and recorded with what comes
//!   next: delivered (any 2xx), retried with doubling delays (`retry_base` to `retry_max`), or
//!   given up `give_up_after` the task's end. The `webhook-id` is the delivery's, the same on
//!   every attempt: delivery is at least once, and receivers deduplicate on it.
//! - SSRF rule: the target's every address must be public (not loopback, private, link-local,
//!   shared, multicast or unspecified) unless `[webhooks] allow_private = true`; the request
//!   connects to the addresses checked (no second lookup) and follows no redirect.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;

use crate::config::WebhooksConfig;
use crate::model::TaskStatus;
use crate::services::Services;
use crate::store::{AttemptNext, AttemptOutcome, Delivery, NewDelivery, StoreError};

/// Open tasks read per page of a sweep.
const SWEEP_PAGE: u32 = 200;
/// Deliveries attempted per round.
const CLAIM_LIMIT: u32 = 32;

/// Whether `ip` may be a webhook target under the SSRF rule.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                // Shared address space (carrier-grade NAT), 100.64.0.0/10.
                || (a == 100 && (64..128).contains(&b))
                // "This network", 0.0.0.0/8.
                || a == 0)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // Unique local fc00::/7, link-local fe80::/10.
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80)
        }
    }
}

/// The addresses `url` may be reached at under the rule, or why not.
pub async fn check_target(url: &url::Url, allow_private: bool) -> Result<Vec<SocketAddr>, String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("scheme {:?} is not http or https", url.scheme()));
    }
    let host = url.host_str().ok_or("the URL has no host")?;
    let port = url.port_or_known_default().ok_or("the URL has no port")?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| format!("resolving {host}: {e}"))?
            .collect(),
    };
    if addrs.is_empty() {
        return Err(format!("{host} resolves to no address"));
    }
    if !allow_private && let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
        return Err(format!(
            "{host} resolves to {}, a loopback, private or link-local address \
             (set [webhooks] allow_private = true to allow it)",
            bad.ip()
        ));
    }
    Ok(addrs)
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
    // Every open task, page by page: tasks still running must not hide newer ones that ended.
    let mut after = 0;
    loop {
        let page = store.webhook_open_tasks(after, SWEEP_PAGE).await?;
        let Some((last, _, _)) = page.last() else {
            return Ok(queued);
        };
        after = *last;
        for (_, tenant, id) in page {
            queued += queue_if_ended(services, tenant, id, now).await?;
        }
    }
}

/// Queue task `id`'s delivery if it has ended; 1 if it was queued.
async fn queue_if_ended(
    services: &Services,
    tenant: String,
    id: String,
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
    let Some(url) = task.callback_url.clone() else {
        return Ok(0);
    };
    let units = store.task_units(&task.id).await?;
    let view = crate::api::TaskView::new(&task, units, false);
    let payload = json!({
        "type": event,
        "timestamp": now,
        "data": view,
    });
    store
        .webhook_enqueue(&NewDelivery {
            id: format!("msg_{}_{}", task.id, event.trim_start_matches("task.")),
            task_id: task.id.clone(),
            tenant,
            url,
            event: event.into(),
            payload: payload.to_string(),
            now,
        })
        .await?;
    Ok(1)
}

/// Attempt the deliveries due at `now`, as `owner`; how many were attempted.
pub async fn deliver_due(services: &Services, owner: &str, now: i64) -> Result<usize, StoreError> {
    let cfg = &services.config.webhooks;
    let lease = i64::try_from((cfg.timeout * 3).as_millis()).unwrap_or(i64::MAX);
    let due = services
        .store
        .webhook_claim(owner, now.saturating_add(lease), now, CLAIM_LIMIT)
        .await?;
    let n = due.len();
    // A few at once: one slow receiver does not hold up the others.
    let results: Vec<Result<bool, StoreError>> = futures::stream::iter(due)
        .map(|d| deliver_one(services, cfg, owner, d))
        .buffer_unordered(8)
        .collect()
        .await;
    for r in results {
        r?;
    }
    Ok(n)
}

/// Attempt one claimed delivery and record the outcome.
async fn deliver_one(
    services: &Services,
    cfg: &WebhooksConfig,
    owner: &str,
    d: Delivery,
) -> Result<bool, StoreError> {
    let started = Instant::now();
    let answer = attempt(cfg, &d, services.clock.now_ms()).await;
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
    metrics::counter!("slotd_webhook_attempts_total", "outcome" => outcome).increment(1);
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
async fn attempt(cfg: &WebhooksConfig, d: &Delivery, now_ms: i64) -> Result<u16, String> {
    let url = url::Url::parse(&d.url).map_err(|e| format!("callback_url is not a URL: {e}"))?;
    let addrs = check_target(&url, cfg.allow_private).await?;
    let host = url.host_str().unwrap_or_default().to_string();
    let client = reqwest::Client::builder()
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
        let signature = crate::webhooks::sign(&secret, &d.id, timestamp, d.payload.as_bytes())
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
    fn the_ssrf_rule_refuses_internal_addresses() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::",
        ] {
            let ip: IpAddr = internal.parse().expect("ip");
            assert!(!is_public(ip), "{internal} passed as public");
        }
        for public in ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "100.128.0.1"] {
            let ip: IpAddr = public.parse().expect("ip");
            assert!(is_public(ip), "{public} refused");
        }
    }

    #[tokio::test]
    async fn targets_are_checked_by_address_and_scheme() {
        let url = |s: &str| url::Url::parse(s).expect("url");
        let e = check_target(&url("http://127.0.0.1:9/x"), false)
            .await
            .expect_err("loopback");
        assert!(e.contains("allow_private"), "{e}");
        let e = check_target(&url("http://localhost:9/x"), false)
            .await
            .expect_err("localhost resolves to loopback");
        assert!(e.contains("loopback"), "{e}");
        assert!(
            check_target(&url("http://127.0.0.1:9/x"), true)
                .await
                .is_ok()
        );
        let e = check_target(&url("ftp://example.com/x"), true)
            .await
            .expect_err("scheme");
        assert!(e.contains("scheme"), "{e}");
    }

    #[test]
    fn retries_double_up_to_the_maximum() {
        let cfg = WebhooksConfig::default();
        assert_eq!(retry_delay(&cfg, 0), Duration::from_secs(5));
        assert_eq!(retry_delay(&cfg, 1), Duration::from_secs(10));
        assert_eq!(retry_delay(&cfg, 3), Duration::from_secs(40));
        assert_eq!(retry_delay(&cfg, 40), Duration::from_secs(3600));
    }
}
