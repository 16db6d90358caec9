//! What a tick reports: counts, the time each step took, and the errors that stop it.

use std::time::Duration;

/// What one tick did: the test signal for the scheduler (no sleeping to find out).
#[derive(Clone, Debug, Default)]
pub struct TickReport {
    pub pool: String,
    /// The pool's effective maximum this tick.
    pub max_slots: u32,
    /// Pending units granted a slot and marked submitted.
    pub claimed: usize,
    /// Submitted units handed to a handler for a poll (or in-doubt resolution).
    pub polled: usize,
    /// In-doubt units held back because the call that marked them may still be running.
    pub waiting_in_doubt: usize,
    /// Ordinary polls that came due before the pool's next round and wait for it.
    pub held_for_round: usize,
    /// The round they wait for (Unix ms), when any did.
    pub round_at: Option<i64>,
    /// Updates written.
    pub applied: usize,
    /// Changes refused as illegal.
    pub refused: usize,
    /// Handler calls that faulted (after isolation retries).
    pub faults: usize,
    /// Slots released (units that left `submitted`, unused grants).
    pub released: usize,
    /// Slots in use after the tick.
    pub used_after: u32,
    /// Units moved to `succeeded` (ready for finalization).
    pub succeeded: usize,
    /// Submits the provider refused for lack of capacity (back to pending, no failure).
    pub capacity_rejected: usize,
    /// Submits the provider accepted.
    pub accepted: usize,
    /// Where the tick's time went, step by step.
    pub steps: TickSteps,
    /// When the pool next has something due (Unix ms): its earliest poll, or with free slots
    /// its earliest pending unit. The pool's loop sleeps until then (within its interval).
    pub next_due: Option<i64>,
    /// While quotas hold every new submit of the pool back (a full window, or every slot set
    /// closed by the provider): until when (Unix ms). Pending units are not due before then.
    pub quota_wait_until: Option<i64>,
    /// The pool's shared provider account had no room for its waiting units (its scheduler
    /// sleeps until a member frees a slot and wakes it, or its tick interval).
    pub account_full: bool,
    pub duration: Duration,
}

/// Time spent in each step of a tick (also the histogram `slotd_tick_step_seconds`).
#[derive(Clone, Debug, Default)]
pub struct TickSteps {
    /// Reconciliation (when due), the fill query, slot grants and the submit marker.
    pub claim: Duration,
    /// The due-poll query.
    pub collect: Duration,
    /// Handler calls and deciding their updates.
    pub call: Duration,
    /// The batch write and what follows it (slots released, snapshots, wake-ups).
    pub commit: Duration,
    /// Slots in use, the next due time, adaptive capacity.
    pub finish: Duration,
}

impl TickSteps {
    pub(super) fn publish(&self, metrics: &slotd_core::telemetry::Metrics, pool: &str) {
        for (step, d) in [
            ("claim", self.claim),
            ("collect", self.collect),
            ("call", self.call),
            ("commit", self.commit),
            ("finish", self.finish),
        ] {
            metrics.record(|| metrics::histogram!("slotd_tick_step_seconds", "pool" => pool.to_string(), "step" => step)
                .record(d.as_secs_f64()));
        }
    }
}
