//! Changes to units a handler's call produced (a tick, a provider callback) or the scheduler
//! decided (the deadline sweep), one function for all: write the updates in one transaction
//! (each under its guard), then act on what was written and only on that: count the
//! transitions and run the [`FollowUps`] (the hot snapshots of the tasks changed, the slot of
//! every unit that left `submitted` and a wake of its pool, a wake of the pool of a unit made
//! due now, the finalizer when units succeeded, the completion-webhook loop when units
//! ended).
//!
//! An update whose guard no longer held frees nothing: it met a unit someone else moved out of
//! `submitted` (who released it), or a cancel that landed during the call, whose unit keeps its
//! slot while its job runs.

use std::collections::{HashMap, HashSet};

use slotd_core::model::{Unit, UnitStatus};
use slotd_store::{Fence, UnitUpdate};

use super::LifecycleError;
use super::follow_up::FollowUps;
use crate::services::Services;
use slotd_coord::slots::holder;
use slotd_pools::pool_state::slot_key;

/// What [`apply_changes`] wrote and freed.
#[derive(Clone, Debug, Default)]
pub struct Committed {
    /// Updates written.
    pub applied: usize,
    /// Units moved to `succeeded` (ready for finalization).
    pub succeeded: usize,
    /// Slots released (units that left `submitted`).
    pub released: usize,
}

/// Where a unit of the batch lives: its task (for the snapshot) and the pool whose slot it
/// holds while `submitted`.
#[derive(Clone, Copy, Debug)]
pub struct Origin<'a> {
    pub task_id: &'a str,
    pub pool: &'a str,
    /// The account whose slot it holds (`None`: the pool's implicit account).
    pub account: Option<&'a str>,
    /// The instant of its submit marker while `submitted`: with the unit id it names the
    /// submission that holds the slot ([`slotd_coord::slots::holder`]), so the release frees
    /// that submission's slot and never a later one's.
    pub submitted_at: Option<i64>,
}

impl<'a> From<&'a Unit> for Origin<'a> {
    fn from(u: &'a Unit) -> Self {
        Origin {
            task_id: &u.task_id,
            pool: &u.pool,
            account: u.terms.account.as_deref(),
            submitted_at: u.submitted_at,
        }
    }
}

/// Write `updates` for the units `origins` describes (keyed by unit id), fenced by `fence`
/// when given (a scheduler's lease), unfenced otherwise (a provider callback at any instance),
/// then run their follow-ups.
pub async fn apply_changes(
    services: &Services,
    updates: &[UnitUpdate],
    origins: &HashMap<&str, Origin<'_>>,
    now: i64,
    fence: Option<&Fence>,
) -> Result<Committed, LifecycleError> {
    if updates.is_empty() {
        return Ok(Committed::default());
    }
    let written = services.units.store.unit_apply(updates, now, fence).await;
    after_write(services, updates, origins, now, written).await
}

/// [`apply_changes`] for a provider callback's updates (unfenced): written with the other
/// callbacks' that wait ([`super::CallbackWrites`]; `pause` is the shortest time between two
/// such writes), then their follow-ups.
pub async fn apply_callback_changes(
    services: &Services,
    updates: &[UnitUpdate],
    origins: &HashMap<&str, Origin<'_>>,
    now: i64,
    pause: std::time::Duration,
) -> Result<Committed, LifecycleError> {
    if updates.is_empty() {
        return Ok(Committed::default());
    }
    let writer = &services.units;
    let written = match writer
        .callbacks
        .apply(&writer.store, updates, now, pause)
        .await
    {
        Ok(a) if a.redone && !a.report.skipped.is_empty() => {
            Ok(read_back(services, updates, origins, a.report).await)
        }
        Ok(a) => Ok(a.report),
        Err(e) => Err(e),
    };
    after_write(services, updates, origins, now, written).await
}

/// After a write that failed and was redone, the updates the redo skipped: each whose unit
/// now stands where the update moves it (its status, and its stage when the update names one)
/// committed in the failed write, its answer lost, and counts as applied, so its follow-ups (a
/// slot release, the finalizer's or a pool's wake) still run. The release names the submission
/// the update was decided for, so it cannot free a later one. A read that fails leaves them
/// skipped: the slot reconciliation frees what is left.
async fn read_back(
    services: &Services,
    updates: &[UnitUpdate],
    origins: &HashMap<&str, Origin<'_>>,
    mut report: slotd_store::ApplyReport,
) -> slotd_store::ApplyReport {
    let skipped: HashSet<&str> = report.skipped.iter().map(String::as_str).collect();
    let tasks: std::collections::BTreeSet<&str> = updates
        .iter()
        .filter(|u| skipped.contains(u.unit_id.as_str()))
        .filter_map(|u| origins.get(u.unit_id.as_str()).map(|o| o.task_id))
        .collect();
    let mut now_at: HashMap<String, Unit> = HashMap::new();
    for task in tasks {
        match services.store.task_units(task).await {
            Ok(units) => now_at.extend(units.into_iter().map(|u| (u.id.clone(), u))),
            Err(e) => {
                tracing::warn!(task, error = %e, "reading back a redone callback write failed");
                return report;
            }
        }
    }
    let committed: Vec<String> = updates
        .iter()
        .filter(|u| skipped.contains(u.unit_id.as_str()))
        .filter(|u| {
            let Some(unit) = now_at.get(&u.unit_id) else {
                return false;
            };
            u.to.is_some_and(|to| Some(to) != u.from && unit.status == to)
                && u.stage.as_ref().is_none_or(|s| *s == unit.stage)
        })
        .map(|u| u.unit_id.clone())
        .collect();
    if !committed.is_empty() {
        tracing::info!(
            units = committed.len(),
            "a lost write's moves had committed; their follow-ups run now"
        );
        report.skipped.retain(|id| !committed.contains(id));
        report.applied.extend(committed);
    }
    report
}

/// What follows the write of `updates`: the count of refusals, then the follow-ups of what
/// was written.
async fn after_write(
    services: &Services,
    updates: &[UnitUpdate],
    origins: &HashMap<&str, Origin<'_>>,
    now: i64,
    written: slotd_store::StoreResult<slotd_store::ApplyReport>,
) -> Result<Committed, LifecycleError> {
    let mut done = Committed::default();
    let written = match written {
        Ok(w) => w,
        Err(e) => {
            if matches!(e, slotd_store::StoreError::IllegalTransition(_)) {
                // The database's trigger refused what got past the store's own check.
                count_illegal_writes(services, 1);
            }
            return Err(e.into());
        }
    };
    count_illegal_writes(services, written.refused.len());
    done.applied = written.applied.len();
    if written.applied.is_empty() {
        return Ok(done);
    }
    let applied: HashSet<&str> = written.applied.iter().map(String::as_str).collect();
    let mut follow = FollowUps::default();
    for u in updates
        .iter()
        .filter(|u| applied.contains(u.unit_id.as_str()))
    {
        let origin = origins.get(u.unit_id.as_str());
        if let Some(o) = origin {
            follow.task(o.task_id);
        }
        let Some(to) = u.to else { continue };
        if let Some(o) = origin {
            services.metrics.record(|| metrics::counter!("slotd_unit_transitions_total", "pool" => o.pool.to_string(), "to" => to.as_str())
                .increment(1));
        }
        if to == UnitStatus::Succeeded {
            done.succeeded += 1;
            follow.wake_finalizer();
        }
        if to.is_terminal() {
            follow.task_ended();
        }
        // Made due now while its job runs (a provider callback's "read it now"): its pool
        // reads it at once rather than at its next tick.
        if to == UnitStatus::Submitted
            && u.next_at.is_some_and(|at| at <= now)
            && let Some(o) = origin
        {
            follow.wake_pool(o.pool);
        }
        if u.from == Some(UnitStatus::Submitted)
            && to != UnitStatus::Submitted
            && let Some(o) = origin
        {
            // The submission the update was decided for (its `from_submitted_at` guard,
            // when it has one, made the store check that it is still the unit's).
            let at = u.from_submitted_at.or(o.submitted_at).unwrap_or(0);
            follow.release(slot_key(o.pool, o.account), o.pool, holder(&u.unit_id, at));
        }
    }
    done.released = follow.run(services).await?;
    Ok(done)
}

/// Unit writes the state machine refused (`slotd_illegal_writes_total`), whoever built them.
fn count_illegal_writes(services: &Services, n: usize) {
    if n > 0 {
        services
            .metrics
            .record(|| metrics::counter!("slotd_illegal_writes_total").increment(n as u64));
    }
}
