//! Reading the limits providers publish (contract 1.3 `provider.limits`) into
//! [`slotd_pools::pool_state::Discovered`]: when the scheduler starts, every `[scheduler]
//! limits_refresh`, and soon after a capacity or quota refusal (at most every `min_rest`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Scheduler;
use slotd_pools::pool_state::discovered::found_of;
use slotd_pools::pool_state::slot_key;

impl Scheduler {
    /// Read every `provider`-exporting handler's published limits, per account.
    pub async fn discover_limits(&self) {
        let s = &self.services;
        for h in s.registry.all() {
            if !h.has_provider() {
                continue;
            }
            let accounts: Vec<Option<String>> = match s.config.handlers.get(&h.info.name) {
                Some(c) if !c.accounts.is_empty() => {
                    c.accounts.iter().map(|a| Some(a.name.clone())).collect()
                }
                _ => vec![None],
            };
            let mut pools: HashSet<&str> = h.info.pools.iter().map(|p| p.name.as_str()).collect();
            for t in &h.info.task_types {
                for st in &t.stages {
                    pools.insert(st.pool.as_str());
                    pools.extend(st.alt_pools.iter().map(String::as_str));
                }
            }
            for account in accounts {
                let now = s.clock.now_ms();
                let answer = h
                    .limits(account.as_deref(), u64::try_from(now).unwrap_or(0))
                    .await;
                let list = match answer {
                    Ok(Some(list)) => list,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(handler = %h.info.name, account = ?account, error = %e, "reading the provider's limits failed; keeping what was known");
                        continue;
                    }
                };
                for l in list {
                    if !pools.contains(l.pool.as_str()) {
                        tracing::warn!(handler = %h.info.name, pool = %l.pool, "provider.limits named a pool the handler does not declare; ignored");
                        continue;
                    }
                    let key = slot_key(&l.pool, account.as_deref());
                    let mut own: HashMap<u64, u32> = HashMap::new();
                    for q in &l.quotas {
                        let since =
                            now.saturating_sub(i64::try_from(q.window_ms).unwrap_or(i64::MAX));
                        match s.slots.log_count(&key, since).await {
                            Ok(n) => {
                                own.insert(q.window_ms, n.count);
                            }
                            Err(e) => {
                                tracing::warn!(slots = %key, error = %e, "reading the create log failed; counting every create the provider reports as another client's");
                            }
                        }
                    }
                    // The provider counts fewer of our creates in a window than the log
                    // does: its window is shorter than documented, or a calendar day where a
                    // rolling one was assumed. Believe it: the oldest go from the log, so the
                    // pool opens when the provider's window does.
                    for q in &l.quotas {
                        let Some(used) = q.used else { continue };
                        if let Some(n) = own.get_mut(&q.window_ms) {
                            *n -= self.believe_fewer(&key, q.window_ms, *n, used, now).await;
                        }
                    }
                    let found = found_of(&l, now, |w| own.get(&w).copied().unwrap_or(0));
                    tracing::info!(
                        handler = %h.info.name,
                        pool = %l.pool,
                        account = ?account,
                        max_slots = ?found.max_slots,
                        quotas = ?found.quotas,
                        "provider published its limits"
                    );
                    if let Some(keys) = &s.keyspace {
                        let keep = u64::try_from(s.config.scheduler.limits_refresh.as_millis())
                            .unwrap_or(u64::MAX)
                            .saturating_mul(3);
                        let shared = slotd_pools::pool_state::discovered_shared::publish(
                            keys,
                            &l.pool,
                            account.as_deref(),
                            &found,
                            keep,
                        );
                        if let Err(e) = shared.await {
                            tracing::warn!(pool = %l.pool, error = %e, "sharing the provider's limits through Redis failed");
                        }
                    }
                    s.discovered.record(&l.pool, account.as_deref(), found);
                }
            }
        }
    }

    /// Take out of `key`'s create log the oldest of the `own` creates it holds in a window of
    /// `window_ms` beyond the `used` the provider counts there; returns how many. Creates too
    /// recent for the provider's count to hold yet (a call's deadline and a second) are never
    /// held against it.
    async fn believe_fewer(&self, key: &str, window_ms: u64, own: u32, used: u32, now: i64) -> u32 {
        let s = &self.services;
        let since = now.saturating_sub(i64::try_from(window_ms).unwrap_or(i64::MAX));
        let in_flight_ms = i64::try_from(s.config.limits.call_deadline.as_millis())
            .unwrap_or(i64::MAX)
            .saturating_add(1_000);
        let recent = match s
            .slots
            .log_count(key, now.saturating_sub(in_flight_ms))
            .await
        {
            Ok(n) => n.count,
            Err(_) => return 0,
        };
        let settled = own.saturating_sub(recent);
        if settled <= used {
            return 0;
        }
        match s.slots.log_trim_oldest(key, since, settled - used).await {
            Ok(n) => {
                tracing::info!(slots = %key, window_ms, own, provider_counts = used, forgotten = n, "the provider counts fewer creates in its window than slotd's log; the oldest are forgotten");
                n.min(own)
            }
            Err(e) => {
                tracing::warn!(slots = %key, error = %e, "forgetting creates the provider no longer counts failed");
                0
            }
        }
    }

    /// The handlers that can publish limits, by name and file (a hot-loaded or replaced one
    /// changes it).
    fn providers(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .services
            .registry
            .all()
            .iter()
            .filter(|h| h.has_provider())
            .map(|h| (h.info.name.clone(), h.sha256.clone()))
            .collect();
        v.sort();
        v
    }

    /// The discovery loop: read at start, then every `limits_refresh`, soon after a refusal,
    /// and at once when a handler that can publish limits is loaded or replaced (looked at
    /// every tick interval).
    pub(super) async fn discovery_loop(self: Arc<Self>, shutdown: CancellationToken) {
        let cfg = self.services.config.scheduler.clone();
        let look = cfg.tick_interval.min(cfg.limits_refresh);
        loop {
            let read = self.providers();
            if !read.is_empty() {
                self.discover_limits().await;
            }
            let due = tokio::time::Instant::now() + cfg.limits_refresh;
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep_until(due.min(tokio::time::Instant::now() + look)) => {}
                    _ = self.services.discovered.notify.notified() => {
                        // A burst of refusals is one read.
                        tokio::select! {
                            _ = shutdown.cancelled() => return,
                            _ = tokio::time::sleep(cfg.min_rest) => {}
                        }
                        break;
                    }
                }
                if tokio::time::Instant::now() >= due || self.providers() != read {
                    break;
                }
            }
        }
    }
}
