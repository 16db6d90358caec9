//! `run_once`: one tick of one pool (docs/unit-journey.md).
//!
//! 1. claim: load pending units in fill order (as many as there are free slots), grant them
//!    slots atomically and write the submit marker (`pending -> submitted`, no job id) before
//!    anything is sent;
//! 2. collect the submitted units whose poll is due;
//! 3. call each handler's `tick` with its batch, under the runtime's deadline, and decide the
//!    updates its changes ask for (validated against the state machine);
//! 4. write them in one transaction through the lifecycle, which acts on what was written
//!    (`lifecycle::apply_changes`, shared with provider callbacks and the deadline sweep):
//!    release the slots of units that left `submitted`, wake the pool, the finalizer and the
//!    completion webhooks;
//! 5. tell adaptive capacity what the provider said.
//!
//! Finalization and publishing run elsewhere; this function does no waiting of its own.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use slotd_core::model::{Change, Unit, UnitStatus};
use slotd_runtime::{BatchUnit, Handler, HandlerFault, TickContext};
use slotd_store::UnitUpdate;

use super::Scheduler;
use super::cancel::split_cancelling;
use super::decide::{cancel_unsent, decide_updates_in, expire_stage_deadline, fault_updates};
use super::error::SchedulerError;
use super::rounds::{floors_from_answer, planned_round, schedule_round, waits_for_round};
pub use super::tick_report::{TickReport, TickSteps};
use slotd_pools::pool_state::durations::learn;
use slotd_units::lifecycle::{Origin, apply_changes};

/// Beyond a handler call's deadline, how long an untouched in-doubt unit waits before it is
/// resolved: room for the marking instance's last write.
const IN_DOUBT_MARGIN_MS: i64 = 1_000;

/// The result of calling one handler for part of a batch, and (summed with [`CallResult::add`])
/// step 3's answer for the whole tick: the updates decided and the counts of what happened.
#[derive(Default)]
struct CallResult {
    updates: Vec<UnitUpdate>,
    refused: usize,
    faults: usize,
    /// Units of the calls that faulted (a rollout's judgement compares them per unit given).
    faulted_units: usize,
    capacity_rejected: usize,
    accepted: usize,
    /// What each account's calls said (by account name; `None` the implicit account).
    accounts: BTreeMap<Option<String>, AccountSeen>,
}

/// What one account's calls of a tick said, for adaptive capacity and account health.
#[derive(Clone, Debug, Default)]
struct AccountSeen {
    handler: String,
    capacity_rejected: u32,
    /// The provider's back-off for those refusals (ms), the longest given.
    capacity_hint_ms: Option<u64>,
    accepted: u32,
    answered: usize,
    error: Option<(String, String)>,
    /// A create refused for a quota: the provider's words and its "not before" (ms).
    quota: Option<(String, Option<u64>)>,
    /// Jobs the provider said it holds in its own queue for lack of room (contract 1.4).
    provider_queued: u32,
}

impl AccountSeen {
    fn add(&mut self, o: AccountSeen) {
        if self.handler.is_empty() {
            self.handler = o.handler;
        }
        self.capacity_rejected += o.capacity_rejected;
        self.capacity_hint_ms = self.capacity_hint_ms.max(o.capacity_hint_ms);
        self.accepted += o.accepted;
        self.answered += o.answered;
        self.provider_queued += o.provider_queued;
        if self.error.is_none() {
            self.error = o.error;
        }
        if self.quota.is_none() {
            self.quota = o.quota;
        }
    }
}

impl CallResult {
    fn add(&mut self, r: CallResult) {
        self.updates.extend(r.updates);
        self.refused += r.refused;
        self.faults += r.faults;
        self.faulted_units += r.faulted_units;
        self.capacity_rejected += r.capacity_rejected;
        self.accepted += r.accepted;
        for (account, seen) in r.accounts {
            self.accounts.entry(account).or_default().add(seen);
        }
    }
}

/// Whether `h`'s handler has a rollout running here (a candidate loaded as its canary).
fn rolls_out(s: &slotd_units::services::Services, h: &Handler) -> bool {
    s.registry.canary(&h.info.name).is_some()
}

/// What one release's call did, as a rollout counts it (docs/handlers.md, "Staged rollout"):
/// the units given, the creates sent and refused for capacity, the faults, the changes the
/// state machine refused, and the jobs (of `jobs_started`: unit → submitted at) seen ending.
fn call_signals(
    r: &CallResult,
    given: usize,
    creates: usize,
    jobs_started: &HashMap<String, i64>,
    now: i64,
) -> slotd_store::ReleaseSignals {
    let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
    let mut signals = slotd_store::ReleaseSignals {
        units: n(given),
        creates: n(creates),
        create_refused: n(r.capacity_rejected),
        faults: n(r.faulted_units),
        refused_changes: n(r.refused),
        ..Default::default()
    };
    for u in &r.updates {
        let ended = matches!(u.to, Some(UnitStatus::Succeeded | UnitStatus::Failed));
        if let (true, Some(at)) = (ended, jobs_started.get(&u.unit_id)) {
            signals.job(now - at);
        }
    }
    signals
}

/// Step 2's answer: what goes to the handlers, and what ends without them.
#[derive(Default)]
struct Due {
    /// Fresh units (to create) and due ones (to poll or resolve), in that order.
    batch: Vec<BatchUnit>,
    /// In-doubt units held back because the call that marked them may still be running.
    waiting_in_doubt: usize,
    /// Ordinary polls due before the pool's next round, left for it.
    held_for_round: usize,
}

pub(super) use super::fill::Filled;

impl Scheduler {
    /// One tick of `pool` at time `now` (Unix ms, the injected clock).
    ///
    /// Refused by fencing (a newer lease holder's token is in the database, or was drawn
    /// before this tick's rebuild of a slot set): nothing of this tick was written, and this instance drops the pool's lease and fence, so it neither
    /// ticks the pool again nor writes for it until it wins the lease anew.
    #[tracing::instrument(name = "slotd.tick", skip(self), fields(pool = %pool))]
    pub async fn run_once(&self, pool: &str, now: i64) -> Result<TickReport, SchedulerError> {
        let ticked = self.tick(pool, now).await;
        if ticked.as_ref().is_err_and(SchedulerError::is_fenced) {
            self.drop_lease(pool, "fenced");
        }
        ticked
    }

    /// The steps of a tick: claim free slots, collect what is due, call the handlers, commit,
    /// and let adaptive capacity see what the provider said.
    async fn tick(&self, pool: &str, now: i64) -> Result<TickReport, SchedulerError> {
        let started = Instant::now();
        let s = &self.services;
        let mut report = TickReport {
            pool: pool.to_string(),
            ..TickReport::default()
        };
        let Some(limit) = slotd_units::pools_now::pool_limits_now(s).remove(pool) else {
            return Ok(report);
        };
        // Read once: the whole tick writes under the fence it checked here.
        let fence = self.driving_fence(pool)?;
        report.max_slots = self.effective_max(pool, &limit);
        self.maybe_reconcile(pool, now).await?;

        // 0: pending units whose deadline can no longer be met fail before any submit.
        self.sweep_deadlines(pool, &limit, now, fence.as_ref())
            .await?;

        // 1: fill free slots in fill order, with the write-ahead submit marker.
        let Filled {
            fresh,
            unused,
            backlog,
            quota_wait_until,
            account_full,
        } = self.fill(pool, &limit, now, fence.as_ref()).await?;
        report.quota_wait_until = quota_wait_until;
        report.account_full = account_full;
        report.released += unused;
        report.claimed = fresh.len();

        report.steps.claim = started.elapsed();

        // 2: the due polls (and in-doubt units from earlier ticks).
        let step = Instant::now();
        let round = self.round_ahead(pool, backlog, now);
        let due = self
            .collect_due(pool, &limit.task_types, fresh, now, round)
            .await?;
        report.steps.collect = step.elapsed();
        report.waiting_in_doubt = due.waiting_in_doubt;
        report.held_for_round = due.held_for_round;
        report.round_at = round.filter(|_| due.held_for_round > 0);
        report.polled = due.batch.len() - report.claimed;
        if due.batch.is_empty() {
            return self.finish(report, &limit, BTreeMap::new(), started).await;
        }
        // Where each unit lives, for the commit (the batch itself goes to the handlers).
        type Owned = (String, String, String, Option<String>, Option<i64>);
        let owned: Vec<Owned> = due
            .batch
            .iter()
            .map(|b| {
                let u = &b.unit;
                let account = u.terms.account.clone();
                (
                    u.id.clone(),
                    u.task_id.clone(),
                    u.pool.clone(),
                    account,
                    u.submitted_at,
                )
            })
            .collect();
        let origins: HashMap<&str, Origin<'_>> = owned
            .iter()
            .map(|(id, task_id, pool, account, submitted_at)| {
                let account = account.as_deref();
                (
                    id.as_str(),
                    Origin {
                        task_id,
                        pool,
                        account,
                        submitted_at: *submitted_at,
                    },
                )
            })
            .collect();

        // 3: one call per handler (task types of one pool may belong to different handlers).
        let step = Instant::now();
        let decided = self.call_handlers(pool, due.batch, now, backlog).await;
        report.steps.call = step.elapsed();
        report.refused = decided.refused;
        report.faults = decided.faults;
        report.capacity_rejected = decided.capacity_rejected;
        report.accepted = decided.accepted;

        // 4: apply everything in one transaction; free and wake for what was written.
        let step = Instant::now();
        let committed = apply_changes(s, &decided.updates, &origins, now, fence.as_ref()).await?;
        report.steps.commit = step.elapsed();
        report.applied = committed.applied;
        report.succeeded = committed.succeeded;
        report.released += committed.released;
        self.finish(report, &limit, decided.accounts, started).await
    }

    /// Step 5: the slots in use, what adaptive capacity and account health make of this tick's
    /// answers, the pool's gauges.
    async fn finish(
        &self,
        mut report: TickReport,
        limit: &slotd_pools::pool_state::PoolLimit,
        seen: BTreeMap<Option<String>, AccountSeen>,
        started: Instant,
    ) -> Result<TickReport, SchedulerError> {
        let s = &self.services;
        let step = Instant::now();
        let pool = report.pool.clone();
        let now = s.clock.now_ms();
        let mut used_total = 0;
        let keys: Vec<String> = limit.accounts.iter().map(|a| a.slot_key(&pool)).collect();
        let used_now = self
            .slots_used_many(&super::pool_sets(&pool, &keys))
            .await?;
        for ((account, key), used) in limit.accounts.iter().zip(keys).zip(used_now) {
            used_total += used;
            let seen = seen.get(&account.name).cloned().unwrap_or_default();
            if seen.capacity_rejected > 0 || seen.quota.is_some() {
                // The provider has less room than slotd thought: read what it publishes.
                s.discovered.ask_again();
            }
            self.account_health(account, &seen, now);
            self.quota_gate(&pool, limit, account, &seen, now).await;
            // The provider queues jobs of ours: how many it holds now (read after the commit).
            let queued = if seen.provider_queued > 0 {
                s.store
                    .unit_count_provider_queued(&pool, account.name.as_deref())
                    .await?
            } else {
                0
            };
            let news = s.capacity.observe(
                &key,
                account.max_slots,
                slotd_pools::pool_state::Observed {
                    rejected: seen.capacity_rejected,
                    accepted: seen.accepted,
                    in_flight: used,
                    queued,
                    retry_after_ms: seen.capacity_hint_ms,
                },
                now,
            );
            if let Some(news) = news {
                slotd_pools::pool_state::capacity::share(s.keyspace.as_ref(), &key, news);
            }
        }
        report.used_after = used_total;
        let effective = self.effective_max(&pool, limit);
        let fill_to = self.fill_limit(&pool, limit, now);
        let quota_wait = report.quota_wait_until.filter(|t| *t > now);
        // Pending units matter only with room to fill and no quota to wait for.
        let room = quota_wait.is_none() && report.used_after < fill_to && !report.account_full;
        // A refusal's back-off ending or a capacity probe opening may make room.
        let capacity_change = if room {
            None
        } else {
            let keys: Vec<(String, u32)> = limit
                .accounts
                .iter()
                .map(|a| (a.slot_key(&pool), a.max_slots))
                .collect();
            s.capacity.next_change(&keys, now)
        };
        let (polls, pending) = if room {
            s.store
                .unit_next_due_of_both(&pool, UnitStatus::Submitted, UnitStatus::Pending)
                .await?
        } else {
            (
                s.store.unit_next_due(&pool, UnitStatus::Submitted).await?,
                None,
            )
        };
        // Polls held for the pool's round are due at the round, not before.
        let polls = polls.map(|at| report.round_at.map_or(at, |round| at.max(round)));
        // Nothing pending can go before the quota lets it.
        let fills = quota_wait.or(pending);
        // Room this pool left on a shared account goes to the waiting pools on it at once.
        self.wake_waiting_members(limit, now).await;
        report.next_due = polls.into_iter().chain(fills).chain(capacity_change).min();
        self.services.metrics.record(|| {
            metrics::gauge!("slotd_pool_effective_max", "pool" => pool.clone())
                .set(f64::from(effective))
        });
        if report.capacity_rejected > 0 {
            self.services.metrics.record(|| {
                metrics::counter!("slotd_capacity_rejections_total", "pool" => pool.clone())
                    .increment(report.capacity_rejected as u64)
            });
        }
        report.steps.finish = step.elapsed();
        report.duration = started.elapsed();
        self.publish_tick(&report);
        report.steps.publish(&self.services.metrics, &pool);
        Ok(report)
    }

    /// Drain an account the provider refused; restore one it answered.
    fn account_health(
        &self,
        account: &slotd_pools::pool_state::PoolAccount,
        seen: &AccountSeen,
        now: i64,
    ) {
        let Some(handler) = &account.handler else {
            return;
        };
        let name = account.health_name();
        let health = &self.services.accounts;
        if let Some((code, reason)) = &seen.error {
            let rest = i64::try_from(self.services.config.scheduler.account_probe.as_millis())
                .unwrap_or(i64::MAX);
            health.drain(handler, name, code, reason, now, rest);
        } else if seen.answered > 0 {
            // An exhausted balance comes back only when a create is accepted again: the polls
            // of jobs accepted before it ran out answer normally all along.
            let exhausted = health
                .drain_of(handler, name)
                .is_some_and(|d| d.code == slotd_pools::pool_state::accounts::EXHAUSTED_CODE);
            if !exhausted || seen.accepted > 0 {
                health.restore(handler, name);
            }
        }
    }

    /// Close a slot set whose create the provider refused for a quota, until the provider's
    /// time, else until the pool's full windows free a create, else for the probe's rest;
    /// open it again on an accepted create.
    async fn quota_gate(
        &self,
        pool: &str,
        limit: &slotd_pools::pool_state::PoolLimit,
        account: &slotd_pools::pool_state::PoolAccount,
        seen: &AccountSeen,
        now: i64,
    ) {
        use slotd_pools::pool_state::quotas::Until;
        let s = &self.services;
        let closures = &s.closures;
        let key = &account.slot_key(pool);
        // The account's own windows when it has any, else the pool's.
        let (log_key, quotas) = if account.quotas.is_empty() {
            (pool, &limit.quotas)
        } else {
            (key.as_str(), &account.quotas)
        };
        if let Some((reason, after)) = &seen.quota {
            let until = match after {
                Some(ms) => Until::Provider(i64::try_from(*ms).unwrap_or(i64::MAX)),
                None => match self.window_frees_at(log_key, quotas, now).await {
                    Some(at) => Until::Window(at),
                    None => Until::Probe(
                        i64::try_from(s.config.scheduler.account_probe.as_millis())
                            .unwrap_or(i64::MAX),
                    ),
                },
            };
            closures.close(key, reason, now, until);
            slotd_pools::pool_state::quotas::share(
                s.keyspace.as_ref(),
                key,
                closures.closure_of(key).as_ref(),
            );
        } else if seen.accepted > 0 && closures.closure_of(key).is_some() {
            closures.open(key);
            slotd_pools::pool_state::quotas::share(s.keyspace.as_ref(), key, None);
        }
    }

    /// When the full windows of `quotas` (those whose count in the log `key` has reached
    /// their limit) have all freed a create: the latest of their oldest counted creates'
    /// leaving. `None` when no window is full: a window with room says nothing about when the
    /// provider's quota frees (the provider counts creates slotd does not see), so it never
    /// dates a closure; the probe's rest does (else a pool 4 of 1,000,000 into its discovered
    /// day would be closed until that day's oldest create left it, 12 h; see
    /// docs/accounts-deadlines-budgets.md, "Quotas").
    async fn window_frees_at(
        &self,
        key: &str,
        quotas: &[slotd_pools::pool_state::PoolQuota],
        now: i64,
    ) -> Option<i64> {
        let mut frees_at = None;
        for q in quotas {
            let window = q.quota.window;
            let Ok(n) = self.services.slots.log_count(key, window.since(now)).await else {
                continue;
            };
            if n.count >= q.quota.limit
                && let Some(oldest) = n.oldest
            {
                frees_at = frees_at.max(Some(window.frees_at(now, Some(oldest))));
            }
        }
        frees_at
    }

    /// The pool's effective limit: the sum of its accounts' adapted limits, capped by the
    /// pool's own maximum.
    pub(crate) fn effective_max(
        &self,
        pool: &str,
        limit: &slotd_pools::pool_state::PoolLimit,
    ) -> u32 {
        let sum: u32 = limit
            .accounts
            .iter()
            .map(|a| {
                self.services
                    .capacity
                    .effective(&a.slot_key(pool), a.max_slots)
            })
            .sum();
        sum.min(limit.max_slots)
    }

    /// What the fill grants to at `now`: the accounts' limits with their capacity holds and
    /// probes, capped by the pool's maximum.
    pub(crate) fn fill_limit(
        &self,
        pool: &str,
        limit: &slotd_pools::pool_state::PoolLimit,
        now: i64,
    ) -> u32 {
        let sum: u32 = limit
            .accounts
            .iter()
            .map(|a| {
                self.services
                    .capacity
                    .limit_at(&a.slot_key(pool), a.max_slots, now)
            })
            .sum();
        sum.min(limit.max_slots)
    }

    /// Step 2: the fresh units, then the submitted units whose poll is due. A unit marked
    /// submitted but never touched since may still be in a handler call of the instance that
    /// marked it (a scheduler that just lost this pool's lease, or one that died mid-call):
    /// resolving it now could race that call's create. It waits until any such call is past
    /// its deadline; then it is in doubt and resolved by key.
    async fn collect_due(
        &self,
        pool: &str,
        types: &[String],
        fresh: Vec<Unit>,
        now: i64,
        round: Option<i64>,
    ) -> Result<Due, SchedulerError> {
        let s = &self.services;
        let listed = if types.is_empty() {
            Vec::new()
        } else {
            s.store
                .unit_list_due(pool, types, now, s.config.scheduler.max_batch)
                .await?
        };
        let fresh_ids: HashSet<String> = fresh.iter().map(|u| u.id.clone()).collect();
        let mut due = Due {
            batch: fresh
                .into_iter()
                .map(|unit| BatchUnit {
                    unit,
                    in_doubt: false,
                })
                .collect(),
            waiting_in_doubt: 0,
            held_for_round: 0,
        };
        let grace = self.in_doubt_grace();
        for unit in listed {
            if fresh_ids.contains(&unit.id) {
                continue;
            }
            if round.is_some() && waits_for_round(&unit) {
                due.held_for_round += 1;
                continue;
            }
            let in_doubt = unit.provider_job_id.is_none();
            let untouched = unit.submitted_at == Some(unit.updated_at);
            if in_doubt
                && untouched
                && unit
                    .submitted_at
                    .is_some_and(|t| now.saturating_sub(t) < grace)
            {
                due.waiting_in_doubt += 1;
                continue;
            }
            due.batch.push(BatchUnit { unit, in_doubt });
        }
        Ok(due)
    }

    /// Step 3: units past their stage deadline with no provider job fail here (one with a job
    /// goes to its handler's `cancel`, or is read to its end); cancelled units in doubt whose
    /// handler has no provider cancel end here; the rest go to their handlers, one call per
    /// handler, concurrently.
    async fn call_handlers(
        &self,
        pool: &str,
        batch: Vec<BatchUnit>,
        now: i64,
        backlog: bool,
    ) -> CallResult {
        let s = &self.services;
        let (batch, expired) =
            expire_stage_deadline(&s.config.scheduler, batch, |b: &BatchUnit| &b.unit, now);
        let mut unsent: Vec<Unit> = Vec::new();
        type Call = (Arc<Handler>, Vec<BatchUnit>);
        // By release (a job goes to the version that created it while that one drains) and
        // account.
        let mut by_handler: BTreeMap<(String, Option<String>), Call> = BTreeMap::new();
        for b in batch {
            // A unit with no job yet (or in doubt) goes to the serving release, or to a
            // rollout's candidate.
            let job_release = b
                .unit
                .provider_job_id
                .as_ref()
                .and(b.unit.releases.job_release.as_deref());
            let h = match job_release {
                Some(_) => s.registry.for_job(&b.unit.task_type, job_release),
                // A rollout's candidate takes its stage's share of the new work.
                None => s.registry.for_new(&b.unit.task_type, &b.unit.id),
            };
            // A cancelled unit in doubt is never handed to `tick`, whose in-doubt resolution
            // may create it. A handler with provider cancel gets it in `cancel`, with no job
            // id: it knows whether a job of it may still run (and holds the slot meanwhile);
            // for any other handler (or none) it ends here.
            if b.in_doubt
                && b.unit.cancel_requested_at.is_some()
                && !h.as_ref().is_some_and(|h| h.features.cancel)
            {
                unsent.push(b.unit);
                continue;
            }
            // A handler unloaded between the query and now leaves its units for a later tick.
            if let Some(h) = h {
                by_handler
                    .entry((h.sha256.clone(), b.unit.terms.account.clone()))
                    .or_insert_with(|| (h, Vec::new()))
                    .1
                    .push(b);
            }
        }
        let calls = by_handler.into_iter().map(|((_, account), (h, units))| {
            let ctx = TickContext {
                pool: pool.to_string(),
                now_ms: u64::try_from(now).unwrap_or(0),
                provider_callback_url: None,
                account,
            };
            self.call_handler(h, ctx, units, now, backlog)
        });
        let mut decided = CallResult {
            updates: expired,
            ..CallResult::default()
        };
        decided.updates.extend(cancel_unsent(&unsent));
        for r in futures::future::join_all(calls).await {
            decided.add(r);
        }
        decided
    }

    /// One handler's share of a tick: cancelled units with a job go to its `cancel`
    /// (contract 1.1), the rest to `tick`.
    async fn call_handler(
        &self,
        h: Arc<Handler>,
        ctx: TickContext,
        units: Vec<BatchUnit>,
        now: i64,
        backlog: bool,
    ) -> CallResult {
        let (cancelling, units) = split_cancelling(&self.services.config.scheduler, &h, units, now);
        let cancelled = if cancelling.is_empty() {
            None
        } else {
            Some(self.call_cancel(h.clone(), &ctx, cancelling, now).await)
        };
        let mut r = if units.is_empty() {
            CallResult::default()
        } else {
            let mut c = ctx;
            c.provider_callback_url = self.provider_callback_url(&h, &c.pool, &units);
            let release = h.sha256.clone();
            // Units this call submits: whatever it decides for them (a job, a refusal, a
            // failure) is this release's doing, and a rollout is judged on it.
            let submitting: std::collections::HashSet<String> = units
                .iter()
                .filter(|b| b.unit.provider_job_id.is_none())
                .map(|b| b.unit.id.clone())
                .collect();
            // While its handler rolls out, what this call did is counted for the judgement.
            let rolling_out = rolls_out(&self.services, &h);
            let jobs_started: HashMap<String, i64> = if rolling_out {
                units
                    .iter()
                    .filter(|b| b.unit.provider_job_id.is_some())
                    .filter_map(|b| Some((b.unit.id.clone(), b.unit.submitted_at?)))
                    .collect()
            } else {
                HashMap::new()
            };
            let given = units.len();
            let mut r = self.call_isolating(h, c, units, now, backlog).await;
            // The jobs this call created are pinned to this release.
            for u in &mut r.updates {
                if u.provider_job_id.value().is_some() || submitting.contains(&u.unit_id) {
                    u.job_release = Some(release.clone());
                }
            }
            if rolling_out {
                let signals = call_signals(&r, given, submitting.len(), &jobs_started, now);
                if let Err(e) = self
                    .services
                    .store
                    .release_signals_add(&release, now, &signals)
                    .await
                {
                    tracing::warn!(error = %e, %release, "could not count a rollout's signals");
                }
            }
            r
        };
        if let Some(c) = cancelled {
            r.updates.extend(c.updates);
            r.faults += c.faults;
        }
        r
    }

    /// Call `tick` and decide the updates. When a call over several units faults through the
    /// guest's own doing (trap, CPU budget, memory cap, deadline in guest code, error), the
    /// batch is split in halves and each half retried (units without a job id go `in-doubt`,
    /// so nothing is submitted twice) until the fault is pinned on single units: one poisonous
    /// unit must not fail the pool, and only the unit that faults alone is charged. Isolating
    /// costs at most two calls per halving, each under its own budget. A provider that kept
    /// the call waiting past its deadline is not split for (smaller batches would wait on the
    /// same provider) and charges nobody.
    fn call_isolating<'a>(
        &'a self,
        h: Arc<Handler>,
        ctx: TickContext,
        units: Vec<BatchUnit>,
        now: i64,
        backlog: bool,
    ) -> BoxFuture<'a, CallResult> {
        Box::pin(async move {
            let cfg = &self.services.config.scheduler;
            let result: Result<Vec<Change>, HandlerFault> = h.tick(&ctx, &units).await;
            match result {
                Ok(changes) => {
                    let refs: Vec<&Unit> = units.iter().map(|b| &b.unit).collect();
                    let in_doubt: HashSet<&str> = units
                        .iter()
                        .filter(|b| b.in_doubt)
                        .map(|b| b.unit.id.as_str())
                        .collect();
                    let mut decided =
                        decide_updates_in(cfg, &h.info, &refs, &in_doubt, changes, now);
                    self.time_polls(&ctx.pool, &refs, &mut decided, now, backlog);
                    for r in &decided.refused {
                        tracing::warn!(handler = %h.info.name, unit = %r.unit_id, reason = %r.reason, "illegal change refused");
                    }
                    decided.count(&self.services.metrics, &h.info.name);
                    let seen = AccountSeen {
                        handler: h.info.name.clone(),
                        capacity_rejected: u32::try_from(decided.capacity_rejected)
                            .unwrap_or(u32::MAX),
                        capacity_hint_ms: decided.capacity_hint_ms,
                        accepted: u32::try_from(decided.accepted).unwrap_or(u32::MAX),
                        answered: decided.answered,
                        error: decided.account_error,
                        quota: decided.quota_refused,
                        provider_queued: u32::try_from(decided.provider_queued).unwrap_or(u32::MAX),
                    };
                    CallResult {
                        refused: decided.refused.len(),
                        capacity_rejected: decided.capacity_rejected,
                        accepted: decided.accepted,
                        updates: decided.updates,
                        faults: 0,
                        faulted_units: 0,
                        accounts: BTreeMap::from([(ctx.account.clone(), seen)]),
                    }
                }
                Err(fault) if units.len() > 1 && !fault.is_provider_slowness() => {
                    tracing::warn!(handler = %h.info.name, units = units.len(), %fault, "handler call faulted; isolating");
                    let mut units = units;
                    for b in &mut units {
                        b.in_doubt = b.unit.provider_job_id.is_none();
                    }
                    let right = units.split_off(units.len() / 2);
                    let mut both = self
                        .call_isolating(h.clone(), ctx.clone(), units, now, backlog)
                        .await;
                    both.add(self.call_isolating(h, ctx, right, now, backlog).await);
                    both
                }
                Err(fault) => {
                    tracing::warn!(handler = %h.info.name, units = units.len(), %fault, "handler call faulted; units unchanged");
                    let refs: Vec<&Unit> = units.iter().map(|b| &b.unit).collect();
                    CallResult {
                        updates: fault_updates(cfg, &refs, &fault, now),
                        faults: 1,
                        faulted_units: units.len(),
                        ..CallResult::default()
                    }
                }
            }
        })
    }

    /// The pool's next poll round, when polls go in rounds (a backlog waiting, no callbacks)
    /// and one is planned after `now`: ordinary polls that come due before it wait for it.
    fn round_ahead(&self, pool: &str, backlog: bool, now: i64) -> Option<i64> {
        self.polls_in_rounds(backlog)
            .then(|| planned_round(&self.services.durations, pool, now))
            .flatten()
    }

    /// Whether polls go in rounds: a backlog waits and no provider callbacks are configured.
    fn polls_in_rounds(&self, backlog: bool) -> bool {
        backlog
            && self
                .services
                .config
                .scheduler
                .callback_safety_poll
                .is_none()
    }

    /// How long after its submit marker an untouched unit may still be in the marking call:
    /// the call's deadline and a margin for its last write.
    pub(super) fn in_doubt_grace(&self) -> i64 {
        i64::try_from(self.services.config.limits.call_deadline.as_millis())
            .unwrap_or(i64::MAX)
            .saturating_add(IN_DOUBT_MARGIN_MS)
    }

    /// Learn the provider's durations from the jobs that ended, and time the next polls: with
    /// a backlog waiting and no callbacks, in rounds timed by those durations (see
    /// `durations.rs`); otherwise each unit keeps its backoff.
    fn time_polls(
        &self,
        pool: &str,
        units: &[&Unit],
        decided: &mut super::Decided,
        now: i64,
        backlog: bool,
    ) {
        let cfg = &self.services.config.scheduler;
        let durations = &self.services.durations;
        learn(durations, units, &decided.updates, now);
        let answered = self.services.clock.now_ms();
        floors_from_answer(decided, answered.saturating_sub(now).max(0));
        if self.polls_in_rounds(backlog) {
            let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
            let bounds = (ms(cfg.min_rest), ms(cfg.poll_initial), ms(cfg.poll_max));
            schedule_round(durations, pool, units, decided, now, bounds);
        }
    }

    fn publish_tick(&self, r: &TickReport) {
        let pool = r.pool.clone();
        self.services.metrics.record(|| {
            metrics::histogram!("slotd_tick_seconds", "pool" => pool.clone())
                .record(r.duration.as_secs_f64())
        });
        self.services.metrics.record(|| {
            metrics::gauge!("slotd_pool_slots_used", "pool" => pool.clone())
                .set(f64::from(r.used_after))
        });
        self.services.metrics.record(|| {
            metrics::gauge!("slotd_pool_slots_max", "pool" => pool.clone())
                .set(f64::from(r.max_slots))
        });
        if r.max_slots > 0 {
            self.services.metrics.record(|| {
                metrics::gauge!("slotd_pool_utilization", "pool" => pool)
                    .set(f64::from(r.used_after) / f64::from(r.max_slots))
            });
        }
    }
}
