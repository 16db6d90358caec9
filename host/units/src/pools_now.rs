//! The pools as they stand now, read through the [`Services`]: the limits in force (the
//! configured ones with what providers published applied), the cluster's discovered limits
//! pulled into an API-only process, and until when quotas hold a pool's submits back. The
//! pieces live in [`slotd_pools::pool_state`]; these join them with the live handles.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use slotd_pools::pool_state::{
    PoolLimit, SpendView, discovered_shared, pool_limits, quotas, spend,
};

use crate::services::Services;

/// [`pool_limits`] with what providers published applied (the lower of each limit is in
/// force): what the scheduler fills to and the API shows.
pub fn pool_limits_now(services: &Services) -> BTreeMap<String, PoolLimit> {
    let mut limits = pool_limits(&services.config, &services.registry);
    services.discovered.apply(&mut limits);
    limits
}

/// In a process that runs no scheduler and has Redis: read the cluster's discovered limits
/// into its own, at most once a second (a failed read keeps what was known).
pub async fn refresh_discovered(services: &Services) {
    let Some(keys) = &services.keyspace else {
        return;
    };
    if services.config.role.runs_scheduler() {
        return;
    }
    let now = services.clock.now_ms();
    let last = services.discovered.pulled_at.load(Ordering::Relaxed);
    if now.saturating_sub(last) < discovered_shared::PULL_EVERY_MS && last <= now {
        return;
    }
    services.discovered.pulled_at.store(now, Ordering::Relaxed);
    if let Err(e) = discovered_shared::pull(keys, &services.discovered).await {
        tracing::warn!(error = %e, "reading the cluster's discovered limits failed");
    }
}

/// Until when quotas hold every new submit of `limit`'s pool back at `now`, and which: the
/// latest of a full window's reset (named by its dimension, `daily` or `rate`), the end of
/// the provider's closure of every slot set (`quota_exhausted`) and the end of a spent
/// period (`spend`). `None` when a unit could be
/// granted now, quotas permitting.
pub async fn closed_until(
    services: &Services,
    limit: &PoolLimit,
    now: i64,
) -> Option<(String, i64)> {
    let mut closed: Option<i64> = Some(i64::MAX);
    for a in &limit.accounts {
        let key = a.slot_key(&limit.name);
        let c = match services.closures.closure_of(&key) {
            Some(c) => Some(c),
            None => match &services.keyspace {
                Some(keys) => quotas::shared(keys, &key).await.ok().flatten(),
                None => None,
            },
        };
        closed = closed.zip(c.map(|c| c.until)).map(|(x, y)| x.min(y));
    }
    let closed = closed
        .filter(|t| *t > now && !limit.accounts.is_empty())
        .map(|t| (quotas::QUOTA_CODE.to_string(), t));
    let full = if limit.quotas.is_empty() {
        None
    } else {
        quotas::views(
            &services.metrics,
            &services.slots,
            &limit.name,
            &limit.quotas,
            now,
        )
        .await
        .ok()
        .and_then(|v| quotas::full_until(&v))
    };
    let spent = spend::pool_view(&services.metrics, &services.store, limit, now)
        .await
        .filter(SpendView::exhausted)
        .map(|v| ("spend".to_string(), v.resets_at));
    // The latest; on a tie the first named (the provider's closure).
    [closed, full, spent]
        .into_iter()
        .flatten()
        .reduce(|a, b| if b.1 > a.1 { b } else { a })
}
