//! Finalization lease renewal (docs/unit-journey.md): a live finalizer keeps its lease while it works,
//! so a download slower than `finalize_lease` is never taken over and done twice, while a dead
//! finalizer's lease still expires on time.
//!
//! The renewer runs as its own task and is stopped between renewals, never cancelled in the
//! middle of one: a store call dropped half-way could leave SQLite's single writer connection
//! mid-transaction.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Scheduler;
use slotd_core::clock::DynClock;

/// How a renewer ended.
enum Renewal {
    /// Another finalizer holds the lease now: the work must stop.
    Lost(String),
    /// The work finished and stopped the renewer.
    Stopped,
}

/// What the renewer task needs (owned: it outlives no borrow).
struct Renewer {
    units: slotd_units::lifecycle::UnitWriter,
    clock: DynClock,
    owner: String,
    unit_id: String,
    lease: Duration,
    renewals: watch::Sender<u64>,
}

impl Renewer {
    /// Renew every third of the lease until stopped or the lease is lost.
    async fn run(self, stop: CancellationToken) -> Renewal {
        let every = (self.lease / 3).max(Duration::from_millis(1));
        let lease_ms = i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX);
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return Renewal::Stopped,
                _ = ticks.tick() => {}
            }
            let until = self.clock.now_ms().saturating_add(lease_ms);
            match slotd_units::lifecycle::renew_finalize(
                &self.units,
                &self.unit_id,
                &self.owner,
                until,
            )
            .await
            {
                Ok(true) => {
                    self.renewals.send_modify(|n| *n += 1);
                }
                Ok(false) => {
                    return Renewal::Lost(format!(
                        "finalization lease of unit {} lost to another finalizer; work abandoned",
                        self.unit_id
                    ));
                }
                // The lease may well still hold; the next renewal tries again, and a lost lease
                // is caught when the result is recorded.
                Err(e) => tracing::warn!(error = %e, "renewing the finalization lease failed"),
            }
        }
    }
}

impl Scheduler {
    /// Run `work` (the handler's finalize and the downloads) while renewing the unit's lease
    /// every third of `finalize_lease`. If a renewal finds the lease gone (another finalizer
    /// took the unit), `work` is dropped, aborting its download, and the answer says so.
    pub(super) async fn under_lease<T>(
        &self,
        unit_id: &str,
        work: impl Future<Output = Result<T, String>>,
    ) -> Result<T, String> {
        let s = &self.services;
        let renewer = Renewer {
            units: s.units.clone(),
            clock: s.clock.clone(),
            owner: self.owner.clone(),
            unit_id: unit_id.to_string(),
            lease: s.config.scheduler.finalize_lease,
            renewals: self.finalize_renewals.clone(),
        };
        let stop = CancellationToken::new();
        let mut renewing = tokio::spawn(renewer.run(stop.clone()));
        let mut work = std::pin::pin!(work);
        let out = tokio::select! {
            biased;
            done = &mut work => Some(done),
            ended = &mut renewing => match ended {
                Ok(Renewal::Lost(why)) => return Err(why),
                // Stopped by nobody or panicked: finish the work without renewals.
                Ok(Renewal::Stopped) | Err(_) => None,
            },
        };
        let out = match out {
            Some(done) => done,
            None => return work.await,
        };
        // Stop between renewals and wait for one in flight to finish.
        stop.cancel();
        let _ = renewing.await;
        out
    }
}
