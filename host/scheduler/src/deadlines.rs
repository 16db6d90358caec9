//! Deadlines [beyond anchors]: a task may ask that its units complete by `deadline` and be
//! submitted by `start_by`. Before each fill, the pool's pending units that carry either are
//! projected (README "Deadlines"):
//!
//! - units ahead of it in fill order: every pending unit of a higher priority; in its own
//!   group (priority, tenant), those before it (earlier deadline, then older task); and of
//!   each other tenant at its priority as many as its own rank, since fill takes the tenants
//!   of a priority in turn (at most one more per tenant, at equal turns, is not counted);
//! - projected start: now, if fewer units than the free slots are ahead of it; otherwise
//!   after as many waves of the pool's slots as the units ahead of it need, each wave the mean
//!   duration the pool's ended jobs took;
//! - projected completion: the projected start plus the p95 duration of its class of job
//!   (model and mode; the pool's p95 until its class has ended jobs).
//!
//! A unit whose projected start is after `start_by`, or whose projected completion is after
//! `deadline`, cannot make it: it fails with `deadline_unreachable` before any provider
//! request, with the numbers in its error and its event, unless its task said
//! `deadline_policy: best_effort`, whose units only get the decision in their events (once)
//! and go on. Before any job of the pool has ended there are no durations: only the start is
//! projected, so only a start (or deadline) already missed fails.

use std::collections::{HashMap, HashSet};

use serde_json::json;

use slotd_core::model::{Unit, UnitStatus};
use slotd_store::{Fence, Field, PendingGroup, UnitUpdate};

use super::Scheduler;
use super::error::SchedulerError;
use super::group_counts::GroupCounts;
use slotd_pools::pool_state::PoolLimit;
use slotd_pools::pool_state::durations::class_of;
use slotd_units::lifecycle::{Origin, apply_changes};

/// The error code of a unit failed for a deadline it cannot meet.
pub const DEADLINE_CODE: &str = "deadline_unreachable";
/// Most units projected per tick.
const SWEEP_LIMIT: u32 = 500;
/// Units ahead in its own group counted at most: past this many a unit waits far longer than
/// any deadline worth projecting (a day of waves on the slowest pools), and the count is a
/// range scan as long as it.
const RANK_CAP: u32 = 100_000;
/// How long the per-group pending counts serve before they are counted again (ms): they cost
/// a scan of the pool's backlog, and move by at most a few units per tick.
const GROUPS_TTL_MS: i64 = 1_000;
/// Best-effort units remembered as noted before the memory starts afresh.
const NOTED_MAX: usize = 100_000;

/// The inputs of one unit's projection.
#[derive(Clone, Copy, Debug)]
pub struct Projection {
    pub start: i64,
    /// The p95 duration used, if the pool has ended jobs.
    pub p95: Option<i64>,
}

impl Projection {
    pub fn completion(&self) -> i64 {
        self.start.saturating_add(self.p95.unwrap_or(0))
    }
}

/// The units ahead in fill order of a unit of `priority` and `tenant` with `rank` units of
/// its own group before it, given the pool's pending `groups`.
pub fn units_ahead(priority: i32, tenant: &str, rank: u64, groups: &[PendingGroup]) -> u64 {
    groups.iter().fold(rank, |ahead, g| {
        let more = if g.priority > priority {
            g.pending
        } else if g.priority == priority && g.tenant != tenant {
            g.pending.min(rank)
        } else {
            0
        };
        ahead.saturating_add(more)
    })
}

/// The projected start of the unit with `ahead` units before it in fill order, with `free`
/// slots free now of `slots`, and waves of `wave` ms (`None`: no duration known, so no wait
/// can be projected).
pub fn projected_start(now: i64, ahead: u64, free: u32, slots: u32, wave: Option<i64>) -> i64 {
    let free = u64::from(free);
    if ahead < free {
        return now;
    }
    let Some(wave) = wave else { return now };
    let waves = i64::try_from((ahead - free) / u64::from(slots.max(1)) + 1).unwrap_or(i64::MAX);
    now.saturating_add(waves.saturating_mul(wave))
}

/// Why `unit` cannot meet its terms under `p`, if it cannot.
pub fn verdict(unit: &Unit, p: Projection, now: i64) -> Option<String> {
    let at = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms).map_or_else(
            || ms.to_string(),
            |t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        )
    };
    if let Some(start_by) = unit.terms.start_by
        && p.start.max(now) > start_by
    {
        return Some(format!(
            "projected start {} is after start_by {}",
            at(p.start.max(now)),
            at(start_by)
        ));
    }
    let deadline = unit.terms.deadline_at?;
    let completion = p.completion();
    (completion > deadline).then(|| match p.p95 {
        Some(d) => format!(
            "projected completion {} (start {} + p95 duration {} ms) is after the deadline {}",
            at(completion),
            at(p.start),
            d,
            at(deadline)
        ),
        None => format!(
            "the deadline {} has passed before the unit could start",
            at(deadline)
        ),
    })
}

impl Scheduler {
    /// Step 0 of a tick: fail the pending units that cannot meet their deadline or start-by
    /// time (or note it, for best effort).
    pub(super) async fn sweep_deadlines(
        &self,
        pool: &str,
        limit: &PoolLimit,
        now: i64,
        fence: Option<&Fence>,
    ) -> Result<(), SchedulerError> {
        self.sweep_routes(pool, limit, now, fence).await?;
        let s = &self.services;
        let units = s.store.unit_list_deadlined(pool, SWEEP_LIMIT).await?;
        if units.is_empty() {
            return Ok(());
        }
        let kinds: Vec<_> = units.iter().map(Into::into).collect();
        slotd_pools::pool_state::durations::ask_unknown(&s.durations, &s.registry, &kinds).await;
        let slots = self.effective_max(pool, limit).max(1);
        let keys: Vec<String> = limit.accounts.iter().map(|a| a.slot_key(pool)).collect();
        let used_each = self.slots_used_many(&super::pool_sets(pool, &keys)).await?;
        let used: u32 = used_each.iter().sum();
        let mut free = slots.saturating_sub(used);
        // A slot set on a shared provider account has what the account leaves it, no more.
        if limit.accounts.iter().any(|a| a.share.is_some()) {
            let mut room = 0u32;
            for (a, u) in limit.accounts.iter().zip(&used_each) {
                room = room.saturating_add(match &a.share {
                    Some(share) => self.shared_room(share, now).await?,
                    None => a.max_slots.saturating_sub(*u),
                });
            }
            free = free.min(room);
        }
        let pool_durations = s.durations.pool_distribution(pool);
        self.sweep_units(pool, units, (slots, free), pool_durations, now, fence)
            .await
    }

    /// The p95 duration of `unit`'s class of job in `pool`, else the pool's (`pool_p95`).
    fn p95_of(&self, pool: &str, unit: &Unit, pool_p95: Option<i64>) -> Option<i64> {
        self.services
            .durations
            .distribution(pool, &class_of(unit))
            .map(|d| d.quantile(0.95))
            .or(pool_p95)
    }

    /// The last look before a grant: of `pending` (about to be granted a slot now), the units
    /// whose deadline or start-by time a start now cannot meet. The sweep at the tick's start
    /// only saw the units stored by then; a task stored between the sweep and the fill would
    /// otherwise reach the provider unchecked. Refused units (policy `refuse`) are failed here
    /// and taken out of `pending`; best-effort ones go on (the sweep notes them next tick).
    pub(super) async fn refuse_unreachable_at_grant(
        &self,
        pool: &str,
        pending: &mut Vec<Unit>,
        now: i64,
        fence: Option<&Fence>,
    ) -> Result<(), SchedulerError> {
        let s = &self.services;
        let pool_p95 = s
            .durations
            .pool_distribution(pool)
            .map(|d| d.quantile(0.95));
        let mut updates = Vec::new();
        for unit in pending.iter() {
            if unit.terms.best_effort
                || (unit.terms.deadline_at.is_none() && unit.terms.start_by.is_none())
            {
                continue;
            }
            let p95 = self.p95_of(pool, unit, pool_p95);
            if let Some(why) = verdict(unit, Projection { start: now, p95 }, now) {
                updates.push(refuse(unit, &why));
            }
        }
        if updates.is_empty() {
            return Ok(());
        }
        let refused: HashSet<String> = updates.iter().map(|u| u.unit_id.clone()).collect();
        let origins: HashMap<&str, Origin<'_>> = pending
            .iter()
            .filter(|u| refused.contains(&u.id))
            .map(|u| (u.id.as_str(), Origin::from(u)))
            .collect();
        let written = apply_changes(s, &updates, &origins, now, fence).await?;
        tracing::info!(
            pool,
            units = written.applied,
            "deadline check at grant: units failed before submission"
        );
        // Whether written or moved by another writer meanwhile, none of them is granted now.
        pending.retain(|u| !refused.contains(&u.id));
        Ok(())
    }

    /// The sweep of the routes whose first target pool (by name) is `pool` (docs/routes.md):
    /// their waiting units drain into every target pool at once, so they are projected over
    /// the target pools' slots and durations together.
    async fn sweep_routes(
        &self,
        pool: &str,
        limit: &PoolLimit,
        now: i64,
        fence: Option<&Fence>,
    ) -> Result<(), SchedulerError> {
        let s = &self.services;
        let routes = slotd_pools::routing::routes_for_pool(&s.config, &limit.handlers);
        if routes.is_empty() {
            return Ok(());
        }
        let limits = slotd_units::pools_now::pool_limits_now(s);
        for name in routes {
            let Some(route) = s.config.routes.get(name) else {
                continue;
            };
            let pools: Vec<String> = slotd_pools::routing::target_pools(&s.registry, route)
                .into_iter()
                .filter(|p| limits.contains_key(p))
                .collect();
            if pools.first().map(String::as_str) != Some(pool) {
                continue;
            }
            let route_pool = slotd_core::model::route_pool(name);
            let units = s
                .store
                .unit_list_deadlined(&route_pool, SWEEP_LIMIT)
                .await?;
            if units.is_empty() {
                continue;
            }
            // The pools its waiting units may go to.
            let used_by: std::collections::BTreeSet<String> = units
                .iter()
                .filter_map(Unit::routing)
                .flat_map(|r| r.options.into_iter().filter_map(|o| o.plan.map(|p| p.pool)))
                .collect();
            let (mut slots, mut free) = (0u32, 0u32);
            let mut samples = Vec::new();
            for p in pools.iter().filter(|p| used_by.contains(*p)) {
                let Some(l) = limits.get(p) else { continue };
                let max = self.effective_max(p, l);
                let mut used = 0;
                for a in &l.accounts {
                    used += s.slots.used(&a.slot_key(p)).await.unwrap_or(0);
                }
                slots += max;
                free += max.saturating_sub(used);
                if let Some(d) = s.durations.pool_distribution(p) {
                    samples.extend_from_slice(d.samples());
                }
            }
            let durations = slotd_pools::pool_state::durations::Distribution::new(samples);
            self.sweep_units(
                &route_pool,
                units,
                (slots.max(1), free),
                durations,
                now,
                fence,
            )
            .await?;
        }
        Ok(())
    }

    /// Project `units` (pending, with terms, of `pool`) over `(slots, free)` and the pool's
    /// durations, and fail (or note) those that cannot make it.
    async fn sweep_units(
        &self,
        pool: &str,
        units: Vec<Unit>,
        (slots, free): (u32, u32),
        pool_durations: Option<slotd_pools::pool_state::durations::Distribution>,
        now: i64,
        fence: Option<&Fence>,
    ) -> Result<(), SchedulerError> {
        let s = &self.services;
        let wave = pool_durations.as_ref().map(|d| d.mean());
        let pool_p95 = pool_durations.as_ref().map(|d| d.quantile(0.95));
        let ahead = match wave {
            // No duration known: no wait can be projected, so nothing ahead needs counting.
            None => vec![0; units.len()],
            Some(_) => self.ahead_in_fill_order(pool, &units, now).await?,
        };
        let mut updates = Vec::new();
        let mut tasks: HashSet<String> = HashSet::new();
        for (unit, &ahead) in units.iter().zip(&ahead) {
            let p95 = self.p95_of(pool, unit, pool_p95);
            let p = Projection {
                start: projected_start(now, ahead, free, slots, wave),
                p95,
            };
            let Some(why) = verdict(unit, p, now) else {
                continue;
            };
            if unit.terms.best_effort {
                let mut noted = self.deadline_noted.lock();
                if noted.len() >= NOTED_MAX {
                    noted.clear();
                }
                if noted.insert(unit.id.clone()) {
                    updates.push(note(unit, &why));
                }
                continue;
            }
            tasks.insert(unit.task_id.clone());
            updates.push(refuse(unit, &why));
        }
        if updates.is_empty() {
            return Ok(());
        }
        let origins: HashMap<&str, Origin<'_>> = units
            .iter()
            .map(|u| (u.id.as_str(), Origin::from(u)))
            .collect();
        let written = apply_changes(s, &updates, &origins, now, fence).await?;
        if written.applied > 0 {
            tracing::info!(
                pool,
                units = written.applied,
                "deadline sweep: units failed or noted"
            );
            self.services.metrics.record(|| {
                metrics::counter!("slotd_deadline_unreachable_total", "pool" => pool.to_string())
                    .increment(tasks.len() as u64)
            });
        }
        Ok(())
    }

    /// For each of `units` (the sweep's, in its order: deadline, task, index), the pending
    /// units ahead of it in fill order. One rank is counted per run of a task's units (the
    /// rest of the run follows it one by one).
    async fn ahead_in_fill_order(
        &self,
        pool: &str,
        units: &[Unit],
        now: i64,
    ) -> Result<Vec<u64>, SchedulerError> {
        let Some(min_priority) = units.iter().map(|u| u.priority).min() else {
            return Ok(Vec::new());
        };
        let groups = self.pending_groups(pool, min_priority, now).await?;
        let mut out = Vec::with_capacity(units.len());
        let mut run: Option<(&str, u64)> = None;
        for u in units {
            let rank = match run {
                Some((task, rank)) if task == u.task_id => rank.saturating_add(1),
                _ => {
                    self.services
                        .store
                        .unit_rank_in_group(&u.id, RANK_CAP)
                        .await?
                }
            };
            run = Some((&u.task_id, rank));
            out.push(units_ahead(u.priority, &u.tenant, rank, &groups));
        }
        Ok(out)
    }

    /// The pool's pending counts per (priority, tenant) at or above `min_priority`, counted
    /// at most once per [`GROUPS_TTL_MS`].
    async fn pending_groups(
        &self,
        pool: &str,
        min_priority: i32,
        now: i64,
    ) -> Result<Vec<PendingGroup>, SchedulerError> {
        if let Some(c) = self.deadline_groups.lock().get(pool)
            && c.min_priority <= min_priority
            && (0..GROUPS_TTL_MS).contains(&(now - c.at))
        {
            return Ok(c.groups.clone());
        }
        let groups = self
            .services
            .store
            .unit_pending_groups(pool, min_priority)
            .await?;
        let counted = GroupCounts {
            at: now,
            min_priority,
            groups: groups.clone(),
        };
        self.deadline_groups
            .lock()
            .insert(pool.to_string(), counted);
        Ok(groups)
    }
}

/// The failure of a unit that cannot meet its terms: before any submit, no retry.
fn refuse(unit: &Unit, why: &str) -> UnitUpdate {
    let error = json!({ "code": DEADLINE_CODE, "message": format!("deadline unreachable: {why}") });
    UnitUpdate {
        unit_id: unit.id.clone(),
        from: Some(UnitStatus::Pending),
        from_stage: Some(unit.stage.clone()),
        to: Some(UnitStatus::Failed),
        error: Field::Set(error.to_string()),
        detail: Some(format!(
            "deadline unreachable: {why}; failed before submission (deadline_policy refuse)"
        )),
        ..UnitUpdate::default()
    }
}

/// The decision for a best-effort unit: recorded, not enforced.
fn note(unit: &Unit, why: &str) -> UnitUpdate {
    UnitUpdate {
        unit_id: unit.id.clone(),
        from: Some(UnitStatus::Pending),
        from_stage: Some(unit.stage.clone()),
        to: Some(UnitStatus::Pending),
        detail: Some(format!(
            "deadline unreachable: {why}; kept (deadline_policy best_effort)"
        )),
        ..UnitUpdate::default()
    }
}

#[cfg(test)]
#[path = "deadlines_grant_tests.rs"]
pub(super) mod grant_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_waits_one_wave_per_slots_worth_of_units_ahead() {
        // 2 free of 10: the first two start now, the next ten one wave later, and so on.
        assert_eq!(projected_start(1_000, 0, 2, 10, Some(500)), 1_000);
        assert_eq!(projected_start(1_000, 1, 2, 10, Some(500)), 1_000);
        assert_eq!(projected_start(1_000, 2, 2, 10, Some(500)), 1_500);
        assert_eq!(projected_start(1_000, 11, 2, 10, Some(500)), 1_500);
        assert_eq!(projected_start(1_000, 12, 2, 10, Some(500)), 2_000);
        // No durations: no wait can be projected.
        assert_eq!(projected_start(1_000, 50, 0, 10, None), 1_000);
    }

    fn group(priority: i32, tenant: &str, pending: u64) -> PendingGroup {
        PendingGroup {
            priority,
            tenant: tenant.into(),
            pending,
        }
    }

    #[test]
    fn units_ahead_follow_the_fill_order() {
        let groups = [
            group(5, "b", 40),
            group(0, "a", 6),
            group(0, "b", 2),
            group(0, "c", 100),
            group(-1, "c", 1_000),
        ];
        // a's first unit at priority 0: only the higher priority is ahead of it.
        assert_eq!(units_ahead(0, "a", 0, &groups), 40);
        // a's fourth: three of its own, two of b's (all it has), three of c's turns.
        assert_eq!(units_ahead(0, "a", 3, &groups), 40 + 3 + 2 + 3);
        // At the top priority only its own group's units before it count.
        assert_eq!(units_ahead(5, "b", 7, &groups), 7);
        // The lowest priority waits for everything above it.
        assert_eq!(units_ahead(-1, "c", 0, &groups), 40 + 6 + 2 + 100);
        assert_eq!(units_ahead(0, "a", 0, &[]), 0);
    }

    #[test]
    fn verdicts_name_the_numbers() {
        let mut unit = crate::test_units::unit("u", None, "main");
        unit.status = UnitStatus::Pending;
        let p = Projection {
            start: 10_000,
            p95: Some(5_000),
        };
        assert_eq!(verdict(&unit, p, 0), None, "no terms, nothing to miss");
        unit.terms.deadline_at = Some(15_000);
        assert_eq!(
            verdict(&unit, p, 0),
            None,
            "completion exactly at the deadline"
        );
        unit.terms.deadline_at = Some(14_999);
        let why = verdict(&unit, p, 0).expect("late by 1 ms");
        assert!(why.contains("p95 duration 5000 ms"), "{why}");
        unit.terms.deadline_at = None;
        unit.terms.start_by = Some(9_000);
        let why = verdict(&unit, p, 0).expect("starts after start_by");
        assert!(why.contains("start_by"), "{why}");
    }
}
