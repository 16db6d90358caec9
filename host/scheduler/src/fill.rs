//! Step 1 of a tick: grant free slots to pending units in fill order and write their submit
//! marker, on the pool's provider accounts.
//!
//! Each account has its own slot set (`pool@account`; the implicit account keeps the pool's
//! own), its own adaptive limit and its own health; the pool's capacity is the sum of its
//! accounts' (capped by `[pools."NAME"] max_slots` when set). Units in fill order go one by
//! one to the account with the most free slots (ties: the first configured), so accounts fill
//! evenly and a drained account gets nothing but its probe. The marker records the account on
//! the unit, reserves budgets and refuses what a tenant's budget cannot cover, in one
//! transaction; a tenant refused for budget is left out of the next round of the same tick, so
//! its backlog does not keep others' units from free slots.
//!
//! Tenants' shares (`shares.rs`): a tenant's `min_slots` of the pool is filled first from its
//! own pending units while it has any (slots are reserved only as they free: nothing running
//! is cancelled), and its `max_slots` leaves its units waiting once it holds that many.
//!
//! Quotas (`pool_state/quotas.rs`): a pool with `rate` or `daily` grants no more than its
//! fullest window has room for, each grant counted in its create log in the slot store's
//! atomic step; a slot set closed by the provider takes nothing until its probe is due.

use std::collections::{HashMap, HashSet};

use slotd_core::model::Unit;
use slotd_store::{Bind, Fence, Grant};

use super::Scheduler;
use super::error::SchedulerError;
use slotd_coord::slots::{CreateLog, holder, log_entry};
use slotd_pools::pool_state::quotas::{self, create_log, full_until};
use slotd_pools::pool_state::{Availability, Gate, PoolAccount, PoolLimit, spend};

/// Rounds of one fill: the first, and one more per batch of tenants found over budget.
const FILL_ROUNDS: usize = 4;

/// Step 1's answer.
#[derive(Default)]
pub(crate) struct Filled {
    /// Units granted a slot and marked submitted.
    pub fresh: Vec<Unit>,
    /// Grants not used (released again).
    pub unused: usize,
    /// Pending units are left waiting for a slot.
    pub backlog: bool,
    /// Quotas hold every new submit back until then (Unix ms).
    pub quota_wait_until: Option<i64>,
    /// The shared provider account leaves the pool no slot now.
    pub account_full: bool,
}

/// What every grant of one fill shares.
struct Step<'a> {
    pool: &'a str,
    log: Option<&'a CreateLog>,
    now: i64,
    /// When a marked unit is due again if its call never answers.
    hold: i64,
    fence: Option<&'a Fence>,
}

/// Routed units taken in a round (docs/routes.md): what binds each to its target, by unit id,
/// and the (route, target) it names for metrics.
#[derive(Default)]
struct Binds {
    binds: HashMap<String, Bind>,
    labels: HashMap<String, (String, String)>,
}

/// One account's room in this fill.
struct Room {
    account: PoolAccount,
    key: String,
    /// Its effective limit.
    max: u32,
    used: u32,
    free: u32,
    /// A drained account (or a closed slot set) whose probe is due: it takes the first unit,
    /// so the probe is made even while other accounts have room for everything.
    probe: bool,
    /// Closed by the provider's quota refusal (or its own quota window is full) and not yet
    /// due for its probe: until then.
    closed_until: Option<i64>,
    /// The account's own create log in this pool, when it has quotas of its own.
    log: Option<CreateLog>,
    /// Its slots are held back by the shared provider account it is on (borrowed by other
    /// pools, or kept for their waiting minimums).
    held_by_account: bool,
    /// What its grants may spend (the pool's and the account's limits), checked by the marker.
    spend: Option<std::sync::Arc<slotd_store::SpendTerms>>,
}

/// Place a unit (in fill order) on a drained account due for its probe, else on the room with
/// the most free slots; `None` when none has one.
fn place(rooms: &mut [Room]) -> Option<usize> {
    let best = rooms
        .iter()
        .enumerate()
        .filter(|(_, r)| r.free > 0)
        .max_by(|(ia, a), (ib, b)| (a.probe, a.free).cmp(&(b.probe, b.free)).then(ib.cmp(ia)))
        .map(|(i, _)| i)?;
    rooms[best].free -= 1;
    rooms[best].probe = false;
    Some(best)
}

impl Scheduler {
    /// `[scheduler] poll_max` in ms: when units held by a budget or a spend limit look again.
    fn poll_max_ms(&self) -> i64 {
        i64::try_from(self.services.config.scheduler.poll_max.as_millis()).unwrap_or(i64::MAX)
    }

    /// Grant free slots to pending units in fill order and write their submit marker. Returns
    /// the units marked, how many grants went unused (released again: units another writer
    /// moved meanwhile, or over their tenant's budget), and whether pending units are left
    /// waiting.
    pub(super) async fn fill(
        &self,
        pool: &str,
        limit: &PoolLimit,
        now: i64,
        fence: Option<&Fence>,
    ) -> Result<Filled, SchedulerError> {
        let s = &self.services;
        let mut filled = Filled::default();
        if limit.task_types.is_empty() {
            return Ok(filled);
        }
        let mut rooms = self.rooms(pool, limit, now).await?;
        let used: u32 = rooms.iter().map(|r| r.used).sum();
        let mut free = rooms
            .iter()
            .map(|r| r.free)
            .sum::<u32>()
            .min(limit.max_slots.saturating_sub(used));
        if free == 0 && rooms.iter().all(|r| r.closed_until.is_some()) {
            filled.quota_wait_until = rooms.iter().filter_map(|r| r.closed_until).min();
        }
        filled.account_full = free == 0 && rooms.iter().any(|r| r.held_by_account);
        let log = create_log(pool, &limit.quotas, now);
        free = self
            .pool_quota_room(limit, log.is_some(), free, now, &mut filled)
            .await?;
        // Due again only if this tick's call never answers for them (a crash mid-call):
        // then after the call's deadline, in doubt.
        let hold = now.saturating_add(self.in_doubt_grace());
        let step = Step {
            pool,
            log: log.as_ref(),
            now,
            hold,
            fence,
        };
        let mut shares = self.shares(pool).await?;
        let mut except: Vec<String> = shares.as_ref().map(|s| s.capped()).unwrap_or_default();
        // Tenants' guarantees first: each one's reservation from its own pending units.
        let reserved = shares.as_ref().map(|s| s.reserved()).unwrap_or_default();
        for (tenant, want) in reserved {
            if free == 0 {
                break;
            }
            let others = shares
                .as_ref()
                .map(|sh| sh.others(&tenant))
                .unwrap_or_default();
            let pending = s
                .store
                .unit_list_fill(pool, &limit.task_types, now, want.min(free), &others)
                .await?;
            let (_, marked) = self
                .grant_and_mark(
                    &step,
                    &mut rooms,
                    pending,
                    &mut filled,
                    &mut except,
                    Binds::default(),
                )
                .await?;
            free = free.saturating_sub(marked);
            // What it was given counts against its cap in the rounds below.
            if let Some(sh) = &mut shares {
                sh.took(&tenant, marked);
            }
        }
        let mut routes = self.route_fill(limit, now).await;
        for _ in 0..FILL_ROUNDS {
            // One more than fits tells whether a backlog is left.
            let own = s
                .store
                .unit_list_fill(
                    pool,
                    &limit.task_types,
                    now,
                    free.saturating_add(1),
                    &except,
                )
                .await?;
            let routed = if routes.is_empty() {
                Vec::new()
            } else {
                self.routed_pending(pool, &mut routes, free, now, &except)
                    .await?
            };
            let (mut pending, binds) = merge(own, routed);
            filled.backlog = pending.len() > free as usize;
            pending.truncate(free as usize);
            // Tenants' caps: what would take a tenant past its `max_slots` waits.
            let mut capped = false;
            if let Some(sh) = &mut shares {
                let before = pending.len();
                pending.retain(|u| sh.take(&u.tenant));
                capped = pending.len() < before;
                for t in sh.capped() {
                    if !except.contains(&t) {
                        except.push(t);
                    }
                }
            }
            if pending.is_empty() && !capped {
                break;
            }
            let over_before = except.len();
            let (granted, marked) = self
                .grant_and_mark(&step, &mut rooms, pending, &mut filled, &mut except, binds)
                .await?;
            if granted == 0 && !capped {
                filled.backlog = true;
                break;
            }
            free = free.saturating_sub(marked);
            if (except.len() == over_before && !capped) || free == 0 {
                break;
            }
        }
        // Pools left routed units this fill take them at once.
        slotd_units::lifecycle::routed_units_left(s, &routes.wake).await;
        // The other pools of a shared account keep this one's minimum free while it waits.
        self.note_waiting(
            limit,
            filled.backlog && filled.quota_wait_until.is_none(),
            now,
        )
        .await;
        Ok(filled)
    }

    /// Grant `pending` slots, write their submit marker, and account for what happened:
    /// unused grants go back to their rooms, tenants found over budget join `except`, the
    /// marked units join `filled`. Returns how many were granted and how many marked.
    async fn grant_and_mark(
        &self,
        step: &Step<'_>,
        rooms: &mut [Room],
        mut pending: Vec<Unit>,
        filled: &mut Filled,
        except: &mut Vec<String>,
        mut binds: Binds,
    ) -> Result<(usize, u32), SchedulerError> {
        if pending.is_empty() {
            return Ok((0, 0));
        }
        let s = &self.services;
        // The grant's own instant, not the tick's: a create log entry (and the marker's record
        // of it) dated at the tick's start would look older than the create really is by the
        // time the tick took to get here, and a window would free that much too early.
        let now = s.clock.now_ms().max(step.now);
        self.refuse_unreachable_at_grant(step.pool, &mut pending, now, step.fence)
            .await?;
        if pending.is_empty() {
            return Ok((0, 0));
        }
        let grants = self
            .grant(step.pool, rooms, pending, step.log, now, &mut binds.binds)
            .await?;
        if grants.is_empty() {
            return Ok((0, 0));
        }
        let submitted = slotd_units::lifecycle::mark_submitted(
            s, step.pool, &grants, now, step.hold, step.fence,
        )
        .await?;
        let marked = submitted.marked;
        if let Some(log) = step.log {
            let all: Vec<&Grant> = grants.iter().collect();
            self.forget_unused(log, &all, &marked.units, now).await;
        }
        // Each account's own log counted its grants too.
        for room in rooms.iter() {
            if let Some(log) = &room.log {
                let its: Vec<&Grant> = grants
                    .iter()
                    .filter(|g| g.account == room.account.name)
                    .collect();
                self.forget_unused(log, &its, &marked.units, now).await;
            }
        }
        for room in rooms.iter_mut() {
            if let Some(&n) = submitted.unused.get(&room.account.name) {
                room.free += n;
                filled.unused += n as usize;
            }
        }
        let over: HashSet<&str> = marked.over_budget.iter().map(String::as_str).collect();
        for g in grants.iter().filter(|g| over.contains(g.unit_id.as_str())) {
            if !except.contains(&g.tenant) {
                except.push(g.tenant.clone());
            }
        }
        for u in &marked.units {
            if let Some((route, target)) = binds.labels.remove(&u.id) {
                s.metrics.record(|| metrics::counter!("slotd_route_grants_total", "route" => route, "target" => target)
                    .increment(1));
            }
        }
        let n = u32::try_from(marked.units.len()).unwrap_or(u32::MAX);
        filled.fresh.extend(marked.units);
        Ok((grants.len(), n))
    }

    /// `free` cut to what the pool's own quotas allow now (its windows when it has a create
    /// log, its spend), with until when they hold it closed in `filled`.
    async fn pool_quota_room(
        &self,
        limit: &PoolLimit,
        has_log: bool,
        mut free: u32,
        now: i64,
        filled: &mut Filled,
    ) -> Result<u32, SchedulerError> {
        let s = &self.services;
        if has_log {
            let views = quotas::views(&s.metrics, &s.slots, &limit.name, &limit.quotas, now)
                .await
                .map_err(SchedulerError::from)?;
            let room = views.iter().map(|v| v.remaining).min().unwrap_or(u32::MAX);
            if room == 0 {
                filled.quota_wait_until = full_until(&views).map(|(_, t)| t);
            }
            free = free.min(room);
        }
        if free > 0
            && let Some(v) = spend::pool_view(&s.metrics, &s.store, limit, now).await
            && v.exhausted()
        {
            free = 0;
            filled.quota_wait_until = Some(v.resets_at.min(now.saturating_add(self.poll_max_ms())));
        }
        Ok(free)
    }

    /// Each account's limit, use and free slots now (a drained account: none, or one for its
    /// probe when that is due).
    async fn rooms(
        &self,
        pool: &str,
        limit: &PoolLimit,
        now: i64,
    ) -> Result<Vec<Room>, SchedulerError> {
        let s = &self.services;
        let mut rooms = Vec::with_capacity(limit.accounts.len());
        let keys: Vec<String> = limit.accounts.iter().map(|a| a.slot_key(pool)).collect();
        let used_now = self.slots_used_many(&super::pool_sets(pool, &keys)).await?;
        for ((account, key), used) in limit.accounts.iter().zip(keys).zip(used_now) {
            let max = s.capacity.limit_at(&key, account.max_slots, now);
            let mut free = max.saturating_sub(used);
            let mut probe = false;
            let mut closed_until = None;
            match s.closures.gate(&key, now) {
                Gate::Open => {}
                Gate::Closed(true) => {
                    probe = free > 0;
                    free = free.min(1);
                }
                Gate::Closed(false) => {
                    free = 0;
                    closed_until = s.closures.closure_of(&key).map(|c| c.until);
                }
            }
            if let Some(handler) = &account.handler {
                free = match s.accounts.availability(handler, account.health_name(), now) {
                    Availability::Open => free,
                    Availability::Drained(true) => {
                        probe = probe || free > 0;
                        free.min(1)
                    }
                    Availability::Drained(false) => 0,
                };
            }
            let log = create_log(&key, &account.quotas, now);
            if log.is_some() {
                let views = quotas::views(&s.metrics, &s.slots, &key, &account.quotas, now)
                    .await
                    .map_err(SchedulerError::from)?;
                let room = views.iter().map(|v| v.remaining).min().unwrap_or(u32::MAX);
                if room == 0 && free > 0 {
                    closed_until = full_until(&views).map(|(_, t)| t);
                }
                free = free.min(room);
            }
            // A shared provider account: what the other pools on it leave this slot set.
            let mut held_by_account = false;
            if free > 0
                && let Some(share) = &account.share
            {
                let room = self.shared_room(share, now).await?;
                held_by_account = room == 0;
                free = free.min(room);
            }
            // An account whose period's spend is gone takes no grant: the marker would refuse
            // them all (settled submissions may free room before the period ends).
            if free > 0
                && let Some(v) = spend::account_view(&s.metrics, &s.store, account, now).await
                && v.exhausted()
            {
                free = 0;
                closed_until = Some(v.resets_at.min(now.saturating_add(self.poll_max_ms())));
            }
            rooms.push(Room {
                spend: spend::terms(pool, limit, account),
                account: account.clone(),
                key,
                max,
                used,
                free,
                probe,
                closed_until,
                log,
                held_by_account,
            });
        }
        Ok(rooms)
    }

    /// Take the grants that were not marked (units another writer moved, over budget or over
    /// spend) out of a create log again (the pool's, an account's): they made no create. Best
    /// effort: a rebuild from the database's record (a start, a lost slot store) drops them too.
    async fn forget_unused(&self, log: &CreateLog, grants: &[&Grant], marked: &[Unit], now: i64) {
        let marked: HashSet<&str> = marked.iter().map(|u| u.id.as_str()).collect();
        let unused: Vec<String> = grants
            .iter()
            .filter(|g| !marked.contains(g.unit_id.as_str()))
            .map(|g| log_entry(&g.unit_id, now))
            .collect();
        if unused.is_empty() {
            return;
        }
        if let Err(e) = self.services.slots.log_forget(&log.key, &unused).await {
            tracing::debug!(error = %e, "forgetting unused grants in the create log failed");
        }
    }

    /// Place `pending` (fill order) on accounts and take their slots; the grants, in order.
    async fn grant(
        &self,
        pool: &str,
        rooms: &mut [Room],
        pending: Vec<Unit>,
        log: Option<&CreateLog>,
        now: i64,
        binds: &mut HashMap<String, Bind>,
    ) -> Result<Vec<Grant>, SchedulerError> {
        let poll_max = self.poll_max_ms();
        let mut placed: Vec<(usize, Unit)> = Vec::with_capacity(pending.len());
        for unit in pending {
            let Some(room) = place(rooms) else { break };
            placed.push((room, unit));
        }
        let mut granted: HashSet<String> = HashSet::new();
        for (i, room) in rooms.iter_mut().enumerate() {
            // Each grant names its submission: the marker stores `now` as its `submitted_at`.
            let ids: Vec<String> = placed
                .iter()
                .filter(|(r, _)| *r == i)
                .map(|(_, u)| holder(&u.id, now))
                .collect();
            if ids.is_empty() {
                continue;
            }
            let logs: Vec<CreateLog> = log.into_iter().chain(&room.log).cloned().collect();
            let shared = room.account.share.as_ref().map(|s| s.on());
            let got = self
                .acquire_slots((pool, &room.key), &ids, room.max, &logs, now, shared)
                .await?;
            // Slots another instance took meanwhile: give the room's count back.
            room.free += u32::try_from(ids.len() - got.len().min(ids.len())).unwrap_or(0);
            granted.extend(got);
        }
        Ok(placed
            .into_iter()
            .filter(|(_, u)| granted.contains(&holder(&u.id, now)))
            .map(|(r, u)| Grant {
                bind: binds.remove(&u.id),
                submission: format!("{}-{}", u.stage, u.submit_attempt),
                estimate: u.terms.cost_estimate.unwrap_or(0.0),
                account: rooms[r].account.name.clone(),
                tenant: u.tenant,
                unit_id: u.id,
                budget_retry_at: now.saturating_add(poll_max),
                quota_pool: (log.is_some() || rooms[r].log.is_some()).then(|| pool.to_string()),
                spend: rooms[r].spend.clone(),
            })
            .collect())
    }
}

/// A round's units: the pool's own (fill order) and the routed units it takes, merged by
/// priority and then age (each list keeps its own order), with the routed units' binds.
fn merge(own: Vec<Unit>, routed: Vec<super::route_fill::Taken>) -> (Vec<Unit>, Binds) {
    if routed.is_empty() {
        return (own, Binds::default());
    }
    let mut binds = Binds::default();
    let mut theirs = Vec::with_capacity(routed.len());
    for t in routed {
        let route = slotd_core::model::route_of_pool(&t.bind.route_pool)
            .unwrap_or_default()
            .to_string();
        binds.labels.insert(t.unit.id.clone(), (route, t.label));
        binds.binds.insert(t.unit.id.clone(), t.bind);
        theirs.push(t.unit);
    }
    let key = |u: &Unit| (std::cmp::Reverse(u.priority), u.created_at);
    let mut out = Vec::with_capacity(own.len() + theirs.len());
    let (mut a, mut b) = (own.into_iter().peekable(), theirs.into_iter().peekable());
    loop {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => key(x) <= key(y),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        out.extend(if take_a { a.next() } else { b.next() });
    }
    (out, binds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn room(name: &str, free: u32) -> Room {
        Room {
            account: PoolAccount {
                name: Some(name.into()),
                handler: Some("h".into()),
                max_slots: free,
                max_slots_source: "config",
                quotas: Vec::new(),
                spend: None,
                share: None,
            },
            key: format!("p@{name}"),
            max: free,
            used: 0,
            free,
            probe: false,
            closed_until: None,
            log: None,
            spend: None,
            held_by_account: false,
        }
    }

    #[test]
    fn units_go_to_the_account_with_the_most_free_slots() {
        let mut rooms = vec![room("main", 3), room("backup", 2)];
        let order: Vec<usize> = std::iter::from_fn(|| place(&mut rooms)).collect();
        // 3-2 → main; 2-2 tie → main (first); 1-2 → backup; 1-1 → main; 0-1 → backup.
        assert_eq!(order, vec![0, 0, 1, 0, 1]);
        assert!(place(&mut rooms).is_none());
        // A drained account due for its probe takes the first unit.
        let mut rooms = vec![room("main", 20), room("backup", 1)];
        rooms[1].probe = true;
        assert_eq!(place(&mut rooms), Some(1));
        assert_eq!(place(&mut rooms), Some(0));
    }
}
