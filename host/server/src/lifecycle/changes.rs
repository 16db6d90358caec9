//! The commit step, one function for ticks and callbacks: write the planned updates in one
//! transaction (each under its guard), then act on what was written and only on that:
//! invalidate the hot snapshots of the tasks changed, count the transitions, release the slot
//! of every unit that left `submitted`, wake its pool so the slot is refilled at once, and wake
//! the finalizer when units succeeded.
//!
//! An update whose guard no longer held frees nothing: it met a unit someone else moved out of
//! `submitted` (who released it), or a cancel that landed during the call, whose unit keeps its
//! slot while its job runs.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::model::{Unit, UnitStatus};
use crate::services::Services;
use crate::store::{Fence, UnitUpdate};

use super::callback::FINALIZE_WAKE;
use super::tick::TickError;

/// What a commit wrote and freed.
#[derive(Clone, Debug, Default)]
pub(crate) struct Committed {
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
pub(crate) struct Origin<'a> {
    pub task_id: &'a str,
    pub pool: &'a str,
    /// The account whose slot it holds (`None`: the pool's implicit account).
    pub account: Option<&'a str>,
}

impl<'a> From<&'a Unit> for Origin<'a> {
    fn from(u: &'a Unit) -> Self {
        Origin {
            task_id: &u.task_id,
            pool: &u.pool,
            account: u.terms.account.as_deref(),
        }
    }
}

/// Commit `updates` for the units `origins` describes (keyed by unit id), fenced by `fence`
/// when given (a scheduler's lease), unfenced otherwise (a callback at any instance).
pub(crate) async fn commit(
    services: &Services,
    updates: &[UnitUpdate],
    origins: &HashMap<&str, Origin<'_>>,
    now: i64,
    fence: Option<&Fence>,
) -> Result<Committed, TickError> {
    let mut done = Committed::default();
    if updates.is_empty() {
        return Ok(done);
    }
    let written = services.store.unit_apply(updates, now, fence).await?;
    done.applied = written.applied.len();
    if written.applied.is_empty() {
        return Ok(done);
    }
    let applied: HashSet<&str> = written.applied.iter().map(String::as_str).collect();
    let mut tasks: HashSet<&str> = HashSet::new();
    let mut leaving: BTreeMap<(&str, Option<&str>), Vec<String>> = BTreeMap::new();
    for u in updates
        .iter()
        .filter(|u| applied.contains(u.unit_id.as_str()))
    {
        let origin = origins.get(u.unit_id.as_str());
        if let Some(o) = origin {
            tasks.insert(o.task_id);
        }
        let Some(to) = u.to else { continue };
        if let Some(o) = origin {
            metrics::counter!("slotd_unit_transitions_total", "pool" => o.pool.to_string(), "to" => to.as_str())
                .increment(1);
        }
        done.succeeded += usize::from(to == UnitStatus::Succeeded);
        if u.from == Some(UnitStatus::Submitted)
            && to != UnitStatus::Submitted
            && let Some(o) = origin
        {
            leaving
                .entry((o.pool, o.account))
                .or_default()
                .push(u.unit_id.clone());
        }
    }
    services.hot.invalidate(tasks).await;
    for ((pool, account), ids) in leaving {
        done.released += ids.len();
        services
            .slots
            .release(&super::slot_key(pool, account), &ids)
            .await?;
        // Freed slots: the pool's next tick can fill them at once.
        services.wake.pool(pool);
    }
    if done.succeeded > 0 {
        services.wake.pool(FINALIZE_WAKE);
    }
    Ok(done)
}
