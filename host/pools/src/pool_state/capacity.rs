//! Adaptive capacity [beyond seed]: a pool's effective limit follows what the provider really
//! accepts. When submits come back "over capacity" (Kling 1303) the provider has less room
//! than configured (another client shares the account, or the pool is misconfigured): the
//! effective limit drops multiplicatively, to three quarters of what the provider held at that
//! moment; it then climbs back one slot per window of accepted submits (a window is the
//! current limit, as in TCP's congestion avoidance), never above the configured maximum, where
//! the adaptation ends. The step onto the level that was refused last is taken only after
//! [`PROBE_WINDOWS`] windows: the provider's room is probed again now and then (it may have
//! grown) instead of being hit once per sawtooth, so refusals become rare.
//!
//! The state lives in memory with the pool's scheduler (its lease holder); a restart begins at
//! the configured limit again.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// Windows of accepted submits before the limit steps onto the level refused last.
pub const PROBE_WINDOWS: u32 = 8;

/// The adapted limits of the pools that met the provider's real capacity.
#[derive(Debug, Default)]
pub struct Capacity {
    pools: Mutex<HashMap<String, Window>>,
}

#[derive(Clone, Copy, Debug)]
struct Window {
    /// The effective limit now.
    limit: u32,
    /// Accepted submits since the limit last grew.
    credit: u32,
    /// The level the provider last refused: one more than it held then.
    refused_at: u32,
}

impl Window {
    /// Accepted submits that earn the next slot.
    fn step(&self) -> u32 {
        let window = self.limit.max(1);
        if self.limit + 1 >= self.refused_at {
            window.saturating_mul(PROBE_WINDOWS)
        } else {
            window
        }
    }
}

/// What one tick saw of the provider's capacity.
#[derive(Clone, Copy, Debug, Default)]
pub struct Observed {
    /// Submits the provider refused for capacity.
    pub rejected: u32,
    /// Submits it accepted.
    pub accepted: u32,
    /// Units holding a slot after the tick (the jobs the provider runs or queues for us).
    pub in_flight: u32,
    /// Of those, the jobs the provider holds in its own queue for lack of room (contract 1.4
    /// `observe.queued`), when this tick saw such a job; 0 otherwise.
    pub queued: u32,
}

/// In a cluster, tell every process `pool`'s effective limit (`capacity:{pool}` in Redis,
/// removed when it is back at `configured`), so `GET /v1/pools` on an API process shows what
/// the scheduler fills to. Fire and forget: a lost update only shows a stale figure.
pub fn share(
    keyspace: Option<&Arc<slotd_coord::keyspace::Keyspace>>,
    pool: &str,
    effective: u32,
    configured: u32,
) {
    let Some(keys) = keyspace.cloned() else {
        return;
    };
    let key = shared_key(&keys, pool);
    tokio::spawn(async move {
        let Ok(mut conn) = keys.conn().await else {
            return;
        };
        let mut cmd = if effective >= configured {
            redis::cmd("DEL")
        } else {
            redis::cmd("SET")
        };
        cmd.arg(&key);
        if effective < configured {
            cmd.arg(effective);
        }
        if let Err(e) = cmd.query_async::<()>(&mut conn).await {
            tracing::debug!(error = %e, "sharing the effective limit failed");
        }
    });
}

fn shared_key(keys: &slotd_coord::keyspace::Keyspace, pool: &str) -> String {
    keys.key(&format!("capacity:{pool}"))
}

/// The effective limit of `pool` as its scheduler last shared it, if lowered.
pub async fn shared(
    keys: &slotd_coord::keyspace::Keyspace,
    pool: &str,
) -> Result<Option<u32>, slotd_coord::keyspace::KeyspaceError> {
    let mut conn = keys.conn().await?;
    Ok(redis::cmd("GET")
        .arg(shared_key(keys, pool))
        .query_async::<Option<u32>>(&mut conn)
        .await?)
}

impl Capacity {
    /// The pool's effective limit: the adapted one, capped by the configured maximum.
    pub fn effective(&self, pool: &str, configured: u32) -> u32 {
        self.pools
            .lock()
            .get(pool)
            .map_or(configured, |w| w.limit.min(configured))
    }

    /// Adapt `pool`'s limit to a tick's outcome; returns the effective limit after it.
    pub fn observe(&self, pool: &str, configured: u32, seen: Observed) -> u32 {
        let mut pools = self.pools.lock();
        let current = pools
            .get(pool)
            .map_or(configured, |w| w.limit.min(configured));
        if seen.queued > 0 && seen.rejected == 0 {
            // Nothing was refused, but the provider runs only `running` of ours and queues the
            // rest: the limit is what it runs (a slot beyond it buys a place in its queue, not a
            // run), and grows again only through the probe windows above it.
            let running = seen.in_flight.saturating_sub(seen.queued).max(1);
            let limit = current.min(running);
            if limit != current {
                tracing::info!(
                    pool,
                    configured,
                    from = current,
                    to = limit,
                    queued = seen.queued,
                    "the provider queues jobs of ours; lowering the pool's effective limit"
                );
            }
            pools.insert(
                pool.to_string(),
                Window {
                    limit,
                    credit: 0,
                    refused_at: running + 1,
                },
            );
            return limit;
        }
        if seen.rejected > 0 {
            let held = current.min(seen.in_flight.max(1));
            let limit = (held.saturating_mul(3) / 4).max(1);
            if limit != current {
                tracing::info!(
                    pool,
                    configured,
                    from = current,
                    to = limit,
                    "provider over capacity; lowering the pool's effective limit"
                );
            }
            pools.insert(
                pool.to_string(),
                Window {
                    limit,
                    credit: 0,
                    refused_at: held + 1,
                },
            );
            return limit;
        }
        let Some(w) = pools.get_mut(pool) else {
            return configured;
        };
        w.credit = w.credit.saturating_add(seen.accepted);
        while w.credit >= w.step() && w.limit < configured {
            w.credit -= w.step();
            w.limit += 1;
        }
        if w.limit >= configured {
            pools.remove(pool);
            tracing::info!(
                pool,
                configured,
                "the provider accepts the configured limit again"
            );
            return configured;
        }
        w.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(rejected: u32, accepted: u32, in_flight: u32) -> Observed {
        Observed {
            rejected,
            accepted,
            in_flight,
            queued: 0,
        }
    }

    #[test]
    fn jobs_queued_at_the_provider_bring_the_limit_to_what_it_runs() {
        let c = Capacity::default();
        let queued = |in_flight, queued| Observed {
            rejected: 0,
            accepted: 0,
            in_flight,
            queued,
        };
        // 8 slots held, the provider queues 3 of them: it runs 5.
        assert_eq!(c.observe("p", 8, queued(8, 3)), 5);
        // Fewer queued later never raises it; growth comes from accepted submits only.
        assert_eq!(c.observe("p", 8, queued(5, 1)), 4);
        // The step onto the level that queued last (5) waits the probe windows.
        assert_eq!(c.observe("p", 8, seen(0, 4 * PROBE_WINDOWS - 1, 4)), 4);
        assert_eq!(c.observe("p", 8, seen(0, 1, 4)), 5);
        // Everything queued still leaves one slot.
        assert_eq!(c.observe("q", 4, queued(4, 4)), 1);
    }

    #[test]
    fn drops_multiplicatively_and_climbs_one_slot_per_window() {
        let c = Capacity::default();
        assert_eq!(
            c.effective("p", 20),
            20,
            "nothing learned: the configured limit"
        );
        // The provider held 8 of ours when it refused: 3/4 of 8.
        assert_eq!(c.observe("p", 20, seen(2, 6, 8)), 6);
        assert_eq!(c.effective("p", 20), 6);
        // A window of 6 accepted submits adds one slot; 5 do not.
        assert_eq!(c.observe("p", 20, seen(0, 5, 6)), 6);
        assert_eq!(c.observe("p", 20, seen(0, 1, 6)), 7);
        assert_eq!(c.observe("p", 20, seen(0, 7, 7)), 8);
        // The provider held 8 when it refused: 9 was refused. The step from 8 onto 9 waits
        // PROBE_WINDOWS windows of 8.
        assert_eq!(c.observe("p", 20, seen(0, 8 * PROBE_WINDOWS - 1, 8)), 8);
        assert_eq!(c.observe("p", 20, seen(0, 1, 8)), 9);
        // Never above the configured limit, and a lowered configuration caps it at once.
        assert_eq!(c.effective("p", 5), 5);
        assert_eq!(c.observe("p", 10, seen(0, 100, 9)), 10);
        assert_eq!(
            c.effective("p", 20),
            20,
            "back at the configured limit, adaptation ends"
        );
        // Never below one slot.
        assert_eq!(c.observe("q", 3, seen(1, 0, 0)), 1);
    }
}
