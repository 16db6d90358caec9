//! The scheduler's side of pool leases (docs/operations.md): with Redis, a pool loop ticks only
//! while this instance holds the pool's lease. A coordinator loop renews held leases every
//! third of a lease period, drops those it lost, and takes or gives up pools so they spread
//! across live instances ([`slotd_coord::lease::place`]). Without Redis (embedded, one process)
//! every pool is always "held".
//!
//! A tick runs under the pool's tick lock; giving a lease up voluntarily takes that lock
//! first, so an instance never hands a pool over in the middle of its own tick. A lease lost
//! involuntarily (paused past it, Redis unreachable) is not waited for: the database's fencing
//! refuses the ex-holder's writes.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::Scheduler;
use slotd_coord::lease::{Acquire, Leases};
use slotd_coord::wake::WakeKey;
use slotd_store::Fence;

/// The shortest pause between two coordinator rounds (a burst of wakes is one round).
const ROUND_REST_MIN: Duration = Duration::from_millis(5);

/// A lease this instance holds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Held {
    /// The fencing token drawn when the lease was won.
    pub token: i64,
    /// When the lease was last won or renewed: past the safe part of a lease period without a
    /// renewal, the pool stops ticking even before Redis says the lease is gone.
    pub renewed: Instant,
}

/// Per-pool lease state of one scheduler instance.
#[derive(Default)]
pub(crate) struct LeaseState {
    pub held: parking_lot::Mutex<HashMap<String, Held>>,
    /// Serializes a pool's tick with a voluntary hand-over.
    tick_locks: parking_lot::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl LeaseState {
    /// The pool's tick lock.
    pub fn tick_lock(&self, pool: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.tick_locks
            .lock()
            .entry(pool.to_string())
            .or_default()
            .clone()
    }
}

impl Scheduler {
    /// Whether this instance may tick `pool` now: always without leases; with leases, while
    /// it holds the pool's lease and renewed it within the safe part of a lease period.
    pub(crate) fn may_tick(&self, pool: &str) -> bool {
        let Some(leases) = &self.leases else {
            return true;
        };
        let safe = leases.ttl().mul_f64(0.75);
        self.lease_state
            .held
            .lock()
            .get(pool)
            .is_some_and(|h| h.renewed.elapsed() < safe)
    }

    /// Pools this instance holds (tests, `/v1/pools`).
    pub fn held_pools(&self) -> BTreeSet<String> {
        self.lease_state.held.lock().keys().cloned().collect()
    }

    /// The fencing token of `pool`'s lease, if this instance holds it.
    pub fn lease_token(&self, pool: &str) -> Option<i64> {
        self.lease_state.held.lock().get(pool).map(|h| h.token)
    }

    /// Try to take `pool`'s lease now, as the coordinator does when the pool is free: on a win
    /// the database is fenced at the new token and this instance ticks the pool. The token
    /// when won; `None` when another instance holds the lease, this one has no Redis, or the
    /// database refused the token. (The coordinator loop does this by itself; tests and
    /// tools call it to make a hand-over happen at a chosen moment.)
    pub async fn take_lease(
        &self,
        pool: &str,
    ) -> Result<Option<i64>, slotd_coord::keyspace::KeyspaceError> {
        let Some(leases) = &self.leases else {
            return Ok(None);
        };
        let now = self.services.clock.now_ms();
        let Acquire::Won { token, unheld } = leases.acquire(pool, now).await? else {
            return Ok(None);
        };
        self.won_lease(leases, pool, token, unheld).await;
        Ok(self.lease_token(pool))
    }

    /// Forget a lease (lost or given up).
    pub(crate) fn drop_lease(&self, pool: &str, why: &str) {
        self.clear_fence(pool);
        if self.lease_state.held.lock().remove(pool).is_some() {
            tracing::info!(pool, owner = %self.owner, why, "pool lease dropped");
            self.services.metrics.record(|| metrics::counter!("slotd_pool_lease_changes_total", "pool" => pool.to_string(), "change" => "dropped").increment(1));
        }
    }

    /// The coordinator: renew, drop lost, take or give up pools, every third of a lease
    /// period, and sooner when a lease it may take runs out or another instance announces
    /// pools given up; at shutdown, leave the live set and give every lease up, announcing it,
    /// so others take over at once.
    pub(crate) async fn lease_loop(
        self: Arc<Self>,
        leases: Arc<Leases>,
        shutdown: CancellationToken,
    ) {
        let every = leases.ttl() / 3;
        let announced = self.services.wake.listener(WakeKey::Leases);
        // Who this process is, for operators matching `lease:{pool}` values to processes.
        self.services.metrics.record(|| {
            metrics::gauge!("slotd_scheduler_info", "owner" => self.owner.clone()).set(1.0)
        });
        loop {
            let next = self.lease_round(&leases).await;
            // A dead instance's pools free up when its lease runs out: be there just after.
            let rest = next
                .map(|d| d + ROUND_REST_MIN)
                .unwrap_or(every)
                .min(every)
                .max(ROUND_REST_MIN.min(every));
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(rest) => {}
                _ = announced.notified() => {}
            }
        }
        // Leave first: the others then count one instance less and take this one's share.
        if let Err(e) = leases.leave().await {
            tracing::debug!(error = %e, "leaving the scheduler set failed");
        }
        let held: Vec<String> = self.held_pools().into_iter().collect();
        for pool in &held {
            let lock = self.lease_state.tick_lock(pool);
            let _tick = lock.lock().await;
            self.drop_lease(pool, "shutdown");
            if let Err(e) = leases.release(pool).await {
                tracing::warn!(pool = %pool, error = %e, "releasing the pool lease at shutdown failed");
            }
        }
        if !held.is_empty()
            && let Err(e) = leases.announce_free().await
        {
            tracing::debug!(error = %e, "announcing the released leases failed");
        }
    }

    /// One coordinator round; returns how soon a lease this instance may take could free up
    /// (another instance's announcement or lease running out), if sooner than never.
    async fn lease_round(&self, leases: &Leases) -> Option<Duration> {
        let live = match leases.heartbeat().await {
            Ok(live) => live,
            Err(e) => {
                tracing::warn!(error = %e, "Redis unavailable; pool leases cannot be renewed");
                return None;
            }
        };
        let mut next = live.next_expiry;
        // Renew what is held; drop what was lost.
        for pool in self.held_pools() {
            match leases.renew(&pool).await {
                Ok(true) => {
                    if let Some(h) = self.lease_state.held.lock().get_mut(&pool) {
                        h.renewed = Instant::now();
                    }
                }
                Ok(false) => self.drop_lease(&pool, "lease lost"),
                Err(e) => tracing::warn!(pool = %pool, error = %e, "lease renewal failed"),
            }
        }
        let pools: Vec<String> = slotd_units::pools_now::pool_limits_now(&self.services)
            .into_keys()
            .collect();
        let held = self.held_pools();
        let placement = slotd_coord::lease::place(&self.owner, &pools, &held, live.count);
        if let Some(pool) = placement.give_up {
            let lock = self.lease_state.tick_lock(&pool);
            let _tick = lock.lock().await;
            self.drop_lease(&pool, "rebalancing: above this instance's share");
            if let Err(e) = leases.release(&pool).await {
                tracing::warn!(pool = %pool, error = %e, "giving the pool lease up failed");
            }
        }
        let share = slotd_coord::lease::share(pools.len(), live.count);
        for pool in placement.try_take {
            if self.lease_state.held.lock().len() >= share {
                break;
            }
            let now = self.services.clock.now_ms();
            match leases.acquire(&pool, now).await {
                Ok(Acquire::Won { token, unheld }) => {
                    self.won_lease(leases, &pool, token, unheld).await
                }
                Ok(Acquire::Held { expires_in }) => {
                    next = Some(next.map_or(expires_in, |n| n.min(expires_in)));
                }
                Err(e) => {
                    tracing::warn!(pool = %pool, error = %e, "taking a pool lease failed");
                    break;
                }
            }
        }
        next
    }

    /// A lease was won: fence the database at its token, reconcile slots before the first
    /// grant (the previous holder may have died mid-tick), and start ticking at once.
    async fn won_lease(&self, leases: &Leases, pool: &str, token: i64, unheld: Option<Duration>) {
        if let Some(gap) = unheld {
            // The time the pool's slots could not be filled by anyone (docs/operations.md).
            self.services.metrics.record(|| {
                metrics::histogram!("slotd_pool_unheld_seconds", "pool" => pool.to_string())
                    .record(gap.as_secs_f64())
            });
            tracing::info!(
                pool,
                gap_ms = gap.as_millis() as u64,
                "pool had no lease holder"
            );
        }
        match self.services.store.pool_fence_advance(pool, token).await {
            Ok(true) => {}
            outcome => {
                // The database knows a newer token (or cannot be reached): this lease cannot
                // write. Give it back rather than sit on a pool nobody drives.
                match outcome {
                    Ok(_) => tracing::warn!(
                        pool,
                        token,
                        "lease token older than the database's; giving the lease back"
                    ),
                    Err(e) => {
                        tracing::warn!(pool, error = %e, "cannot fence the database; giving the lease back")
                    }
                }
                if let Err(e) = leases.release(pool).await {
                    tracing::warn!(pool, error = %e, "giving the pool lease back failed");
                }
                return;
            }
        }
        self.set_fence(Fence {
            pool: pool.to_string(),
            token,
        });
        self.last_reconcile.lock().remove(pool);
        self.lease_state.held.lock().insert(
            pool.to_string(),
            Held {
                token,
                renewed: Instant::now(),
            },
        );
        tracing::info!(pool, owner = %self.owner, token, "pool lease taken");
        self.services.metrics.record(|| metrics::counter!("slotd_pool_lease_changes_total", "pool" => pool.to_string(), "change" => "taken").increment(1));
        // Only this process drives the pool: tick it here at once.
        self.services.wake.local(WakeKey::Pool(pool));
    }
}

/// How long a pool loop waits before looking again at a lease it does not hold.
pub(crate) fn unheld_wait(leases: &Leases) -> Duration {
    leases.ttl() / 3
}
