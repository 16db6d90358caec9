//! The loops: one per pool around `run_once`, one for finalization, one supervisor that starts
//! loops for pools that appear (a handler loaded) and publishes unit counts.
//!
//! A loop waits `tick_interval` at most, `min_rest` at least, and wakes early on events
//! ([`slotd_coord::wake::Wake`]). A failing store pauses the loop with backoff; it resumes by itself.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Scheduler;
use slotd_coord::wake::WakeKey;
use slotd_core::model::UnitStatus;

/// Longest pause after repeated store errors.
const ERROR_BACKOFF_MAX: Duration = Duration::from_secs(10);
/// How often the `slotd_units` gauges are counted. The count reads every unit the store holds
/// (finished ones included); at the pool loop's pace (the tick interval, at most a second) it
/// was, in the saturated scale run, a sixth of a statement and 0.7 ms of PostgreSQL's CPU per
/// unit. A scrape every 15 s or so needs no fresher figure.
const COUNTS_EVERY: Duration = Duration::from_secs(5);
/// The shortest time between two passes of the completion webhooks (or `tick_interval`, if
/// shorter): the wakes of the units that end meanwhile are taken together.
const WEBHOOK_PASS_EVERY: Duration = Duration::from_millis(100);
/// The shortest time between the end of a pool's tick and a tick that a wake starts (or a
/// tenth of `tick_interval`, if shorter): the events of a burst (callbacks freeing slots, tasks
/// created) are taken by one tick. A tick per freed slot paid its fixed reads (the pending
/// query, the due times) once per unit: in the steady scale run this pause took a unit from
/// 4.5–4.8 statements to 3.4 and PostgreSQL's CPU from 5.1–6.0 ms to 3.0, for at most 50 ms
/// before a freed slot is filled again (utilization while work waits 0.996).
const POOL_PASS_EVERY: Duration = Duration::from_millis(50);
/// The shortest time between two finalization claims (or `tick_interval`, if shorter) while
/// the last claim took everything it found: the units that succeed meanwhile are claimed
/// together. In the steady scale run a claim per succeeding unit was most of a statement per
/// unit. With a backlog (the last claim filled every free worker) a worker that frees up
/// claims at once, so the pause never caps how fast finalization drains.
const FINALIZE_PASS_EVERY: Duration = Duration::from_millis(100);

/// A loop's rest after a pass: `pause` first (a wake meanwhile is held by `notified` and
/// taken after it), then until `interval` has passed since the pass or a wake comes. False
/// on shutdown.
async fn rest_between_passes(
    shutdown: &CancellationToken,
    wake: &tokio::sync::Notify,
    pause: Duration,
    interval: Duration,
) -> bool {
    if !pause.is_zero() {
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = tokio::time::sleep(pause) => {}
        }
    }
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(interval.saturating_sub(pause)) => true,
        _ = wake.notified() => true,
    }
}

/// How long a pool's loop sleeps after a tick that took `elapsed`, when its next unit is due
/// in `until_due`: until then, but at least `min_rest` and at most what is left of
/// `tick_interval`.
fn rest_for(
    cfg: &slotd_core::config::SchedulerConfig,
    elapsed: Duration,
    until_due: Option<Duration>,
) -> Duration {
    let interval = cfg.tick_interval.saturating_sub(elapsed);
    match until_due {
        Some(due) => due.max(cfg.min_rest).min(interval.max(cfg.min_rest)),
        None => interval.max(cfg.min_rest),
    }
}

impl Scheduler {
    /// Run every loop until `shutdown` is cancelled, then drain in-flight finalizations.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let tracker = TaskTracker::new();
        let mut running: HashSet<String> = HashSet::new();
        tracker.spawn(self.clone().finalize_loop(shutdown.clone()));
        tracker.spawn(self.clone().webhook_loop(shutdown.clone()));
        tracker.spawn(self.clone().discovery_loop(shutdown.clone()));
        tracker.spawn(self.clone().rollout_loop(shutdown.clone()));
        if let Some(leases) = self.leases.clone() {
            tracker.spawn(self.clone().lease_loop(leases, shutdown.clone()));
        }
        // In a cluster, wakes published by other processes (a task created on the API, a
        // callback applied there) reach this process's loops through the relay.
        if let Some(keys) = self.services.keyspace.clone() {
            tracker.spawn(self.services.wake.clone().relay(keys, shutdown.clone()));
        }
        let every = self
            .services
            .config
            .scheduler
            .tick_interval
            .min(Duration::from_secs(1));
        let mut counted: Option<Instant> = None;
        loop {
            let pools = slotd_units::pools_now::pool_limits_now(&self.services);
            for name in pools.keys() {
                if running.insert(name.clone()) {
                    tracing::info!(pool = %name, "starting pool loop");
                    tracker.spawn(self.clone().pool_loop(name.clone(), shutdown.clone()));
                }
            }
            if counted.is_none_or(|at| at.elapsed() >= COUNTS_EVERY) {
                counted = Some(Instant::now());
                self.publish_counts().await;
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(every) => {}
            }
        }
        tracker.close();
        tracker.wait().await;
        self.finalize_tasks.close();
        self.finalize_tasks.wait().await;
        let now = self.services.clock.now_ms();
        if let Err(e) = self.write_completions(now).await {
            tracing::warn!(error = %e, "recording the last finalizations failed; their leases will expire and they are finalized again");
        }
    }

    async fn pool_loop(self: Arc<Self>, pool: String, shutdown: CancellationToken) {
        let cfg = self.services.config.scheduler.clone();
        let wake = self.services.wake.listener(WakeKey::Pool(&pool));
        let mut errors: u32 = 0;
        let tick_lock = self.lease_state.tick_lock(&pool);
        loop {
            // With leases, only the pool's lease holder ticks it; the others wait and look again.
            if let Some(leases) = &self.leases
                && !self.may_tick(&pool)
            {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(super::leasing::unheld_wait(leases)) => {}
                    _ = wake.notified() => {}
                }
                continue;
            }
            let started = Instant::now();
            let now = self.services.clock.now_ms();
            let ticked = {
                let _tick = tick_lock.lock().await;
                if self.may_tick(&pool) {
                    Some(self.run_once(&pool, now).await)
                } else {
                    None
                }
            };
            let Some(ticked) = ticked else {
                continue;
            };
            let next_due = match ticked {
                Ok(report) => {
                    if errors > 0 {
                        tracing::info!(pool = %pool, "scheduler resumed");
                    }
                    errors = 0;
                    report.next_due
                }
                Err(e) if e.is_fenced() => {
                    // A newer scheduler holds this pool: its writes win, ours stop here
                    // (`run_once` dropped the lease).
                    tracing::warn!(pool = %pool, "writes refused by fencing; this instance lost the pool");
                    continue;
                }
                Err(e) => {
                    errors = errors.saturating_add(1);
                    self.services.metrics.record(|| {
                        metrics::counter!("slotd_tick_failures_total", "pool" => pool.clone())
                            .increment(1)
                    });
                    let pause = cfg
                        .min_rest
                        .max(Duration::from_millis(100))
                        .saturating_mul(errors.min(64))
                        .min(ERROR_BACKOFF_MAX);
                    tracing::warn!(pool = %pool, error = %e, ?pause, "tick failed; pausing");
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(pause) => continue,
                    }
                }
            };
            // An event (a new task, a freed slot, a callback) ticks at once after a short
            // pause (`POOL_PASS_EVERY`) that gathers the events of a burst; otherwise the pool
            // sleeps until its next unit is due, at least `min_rest` (no poll storms), at most
            // `tick_interval` (the safety net).
            let until_due = next_due.map(|at| {
                let ms = at.saturating_sub(self.services.clock.now_ms()).max(0);
                Duration::from_millis(u64::try_from(ms).unwrap_or(0))
            });
            let rest = rest_for(&cfg, started.elapsed(), until_due);
            let pause = POOL_PASS_EVERY.min(cfg.tick_interval / 10).min(rest);
            if !rest_between_passes(&shutdown, &wake, pause, rest).await {
                return;
            }
        }
    }

    async fn finalize_loop(self: Arc<Self>, shutdown: CancellationToken) {
        let cfg = self.services.config.scheduler.clone();
        let wake = self.services.wake.listener(WakeKey::Finalizer);
        loop {
            let now = self.services.clock.now_ms();
            if let Err(e) = self.finalize_once(now).await {
                tracing::warn!(error = %e, "finalization claim failed; retrying");
            }
            let pause = if self.finalize_backlog.load(Ordering::Relaxed) {
                Duration::ZERO
            } else {
                FINALIZE_PASS_EVERY.min(cfg.tick_interval)
            };
            if !rest_between_passes(&shutdown, &wake, pause, cfg.tick_interval).await {
                return;
            }
        }
    }

    /// Completion webhooks (see `completion_webhooks.rs`): queue the ends of tasks that have
    /// ended, attempt the deliveries due; when the lifecycle says units ended (anywhere in the
    /// cluster) and every tick interval, until shutdown. Apart from finalization, so a slow receiver never holds
    /// up a download. Wakes closer together than [`WEBHOOK_PASS_EVERY`] are taken as one: at
    /// a hundred units ending a second, a pass per ending unit was two statements per unit.
    async fn webhook_loop(self: Arc<Self>, shutdown: CancellationToken) {
        let cfg = self.services.config.scheduler.clone();
        let wake = self.services.wake.listener(WakeKey::Webhooks);
        let pause = WEBHOOK_PASS_EVERY.min(cfg.tick_interval);
        loop {
            let now = self.services.clock.now_ms();
            if let Err(e) = slotd_webhooks::completion_webhooks::sweep(&self.services, now).await {
                tracing::warn!(error = %e, "queueing completion webhooks failed; retrying");
            }
            if let Err(e) =
                slotd_webhooks::completion_webhooks::deliver_due(&self.services, &self.owner, now)
                    .await
            {
                tracing::warn!(error = %e, "delivering completion webhooks failed; retrying");
            }
            if !rest_between_passes(&shutdown, &wake, pause, cfg.tick_interval).await {
                return;
            }
        }
    }

    /// Publish units by pool and status as gauges (every [`COUNTS_EVERY`]).
    async fn publish_counts(&self) {
        match self.services.store.unit_count_by_pool().await {
            Ok(rows) => {
                // Every status of every pool is set, so a count that dropped to zero shows 0.
                let mut counts: std::collections::BTreeMap<(String, UnitStatus), u64> =
                    Default::default();
                let pools: HashSet<String> = rows.iter().map(|r| r.pool.clone()).collect();
                for r in rows {
                    counts.insert((r.pool, r.status), r.count);
                }
                for pool in pools {
                    for st in UnitStatus::ALL {
                        let n = counts.get(&(pool.clone(), st)).copied().unwrap_or(0);
                        self.services.metrics.record(|| metrics::gauge!("slotd_units", "pool" => pool.clone(), "status" => st.as_str()).set(n as f64));
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "unit counts unavailable"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_sleeps_until_its_next_unit_is_due_within_bounds() {
        let mut cfg = slotd_core::config::SchedulerConfig::default();
        cfg.tick_interval = Duration::from_secs(10);
        cfg.min_rest = Duration::from_millis(200);
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        // Nothing due: the rest of the interval.
        assert_eq!(rest_for(&cfg, ms(100), None), ms(9_900));
        // Due in 3 s: then.
        assert_eq!(rest_for(&cfg, ms(100), Some(s(3))), s(3));
        // Due now or overdue: still `min_rest` (no spinning).
        assert_eq!(rest_for(&cfg, ms(100), Some(ms(0))), ms(200));
        // Due after the interval: the interval (the safety net).
        assert_eq!(rest_for(&cfg, ms(100), Some(s(60))), ms(9_900));
        // A tick that took the whole interval still rests `min_rest`.
        assert_eq!(rest_for(&cfg, s(11), None), ms(200));
    }
}
