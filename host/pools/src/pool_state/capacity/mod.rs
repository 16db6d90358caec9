//! Adaptive capacity [beyond seed]: a slot set's effective limit follows what the provider
//! really has room for, when other clients share the account or the pool is configured above
//! it. Each slot set has an [`Estimator`] (`estimator.rs`: noise, ceilings, probes, holds);
//! this module keeps them, shares the lowered limits with the API processes of a cluster, and
//! reports the decisions (`slotd_capacity_decisions_total`, `GET /v1/pools`).
//!
//! The state lives in memory with the pool's scheduler (its lease holder); a restart begins at
//! the configured limit again.

mod estimator;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

pub use estimator::{EstimateView, Estimator, Hold, Observed, Policy, STRIKES, Verdict};

/// The estimates of every slot set that met the provider's capacity.
#[derive(Debug, Default)]
pub struct Capacity {
    policy: Policy,
    pools: Mutex<HashMap<String, Estimator>>,
}

/// In a cluster, tell every process `key`'s estimate (`capacity:{key}` in Redis, for an hour
/// after its last news), so `GET /v1/pools` on an API process shows what the scheduler fills
/// to and why. Fire and forget: a lost update only shows a stale figure.
pub fn share(keyspace: Option<&Arc<slotd_coord::keyspace::Keyspace>>, key: &str, shared: Shared) {
    let Some(keys) = keyspace.cloned() else {
        return;
    };
    let Ok(text) = serde_json::to_string(&shared) else {
        return;
    };
    let redis_key = shared_key(&keys, key);
    tokio::spawn(async move {
        let Ok(mut conn) = keys.conn().await else {
            return;
        };
        let set = redis::cmd("SET")
            .arg(&redis_key)
            .arg(text)
            .arg("EX")
            .arg(SHARED_TTL_S)
            .query_async::<()>(&mut conn)
            .await;
        if let Err(e) = set {
            tracing::debug!(error = %e, "sharing the capacity estimate failed");
        }
    });
}

/// How long a shared estimate outlives its last news.
const SHARED_TTL_S: u64 = 3_600;

/// A slot set's estimate as its scheduler shares it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shared {
    /// The limit it fills to (the estimate, capped by the configured maximum).
    pub effective: u32,
    pub estimate: EstimateView,
}

fn shared_key(keys: &slotd_coord::keyspace::Keyspace, key: &str) -> String {
    keys.key(&format!("capacity:{key}"))
}

/// The estimate of `key` as its scheduler last shared it, if it had news within the hour. A
/// value that does not parse (written by another version) reads as none.
pub async fn shared(
    keys: &slotd_coord::keyspace::Keyspace,
    key: &str,
) -> Result<Option<Shared>, slotd_coord::keyspace::KeyspaceError> {
    let mut conn = keys.conn().await?;
    let text: Option<String> = redis::cmd("GET")
        .arg(shared_key(keys, key))
        .query_async(&mut conn)
        .await?;
    Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
}

impl Capacity {
    pub fn new(policy: Policy) -> Self {
        Capacity {
            policy,
            pools: Mutex::default(),
        }
    }

    /// The slot set's learned limit, capped by the configured maximum (what the API shows and
    /// the ETAs count on).
    pub fn effective(&self, key: &str, configured: u32) -> u32 {
        self.pools
            .lock()
            .get(key)
            .map_or(configured, |e| e.estimate(configured))
    }

    /// The limit the fill grants to at `now`: the learned one, one above it while a probe is
    /// open, held down while a refusal's back-off lasts.
    pub fn limit_at(&self, key: &str, configured: u32, now: i64) -> u32 {
        self.pools
            .lock()
            .get(key)
            .map_or(configured, |e| e.limit(configured, now))
    }

    /// When some slot set's limit changes on its own next (a hold ends, a probe opens).
    /// `keys`: the slot sets, each with its configured limit.
    pub fn next_change(&self, keys: &[(String, u32)], now: i64) -> Option<i64> {
        let pools = self.pools.lock();
        keys.iter()
            .filter_map(|(key, configured)| pools.get(key)?.next_change(*configured, now))
            .min()
    }

    /// The estimate of a slot set as shown; `None` when nothing was learned about it.
    pub fn view(&self, key: &str, configured: u32, now: i64) -> Option<EstimateView> {
        self.pools.lock().get(key).map(|e| e.view(configured, now))
    }

    /// Take a tick's answers for `key` in; the estimate after them when they were news (a
    /// decision was made), to share.
    pub fn observe(&self, key: &str, configured: u32, seen: Observed, now: i64) -> Option<Shared> {
        if seen.rejected == 0 && seen.accepted == 0 && seen.queued == 0 {
            return None;
        }
        let mut pools = self.pools.lock();
        let estimator = pools.entry(key.to_string()).or_default();
        let before = estimator.estimate(configured);
        let verdict = estimator.observe(configured, seen, now, &self.policy);
        let after = estimator.estimate(configured);
        let view = estimator.view(configured, now);
        drop(pools);
        if let Some(v) = verdict {
            metrics::counter!("slotd_capacity_decisions_total", "pool" => key.to_string(), "verdict" => v.as_str())
                .increment(1);
        }
        if after != before {
            tracing::info!(
                slots = key,
                configured,
                from = before,
                to = after,
                verdict = verdict.map(Verdict::as_str),
                "the provider's room for this slot set changed"
            );
        }
        verdict.map(|_| Shared {
            effective: after,
            estimate: view,
        })
    }
}

impl Policy {
    /// The estimate's policy from `[scheduler]`.
    pub fn from_config(cfg: &slotd_core::config::SchedulerConfig) -> Policy {
        let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1);
        Policy {
            floor: cfg.capacity_floor.max(1),
            probe_ms: ms(cfg.capacity_probe),
            probe_max_ms: ms(cfg.capacity_probe_max),
        }
    }
}
