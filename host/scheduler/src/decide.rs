//! Turning a handler's changes into guarded store updates.
//!
//! Shared by the tick (`run_once`) and provider callbacks: validate each change against the unit
//! it names ([`slotd_core::model::validate`]), refuse and count illegal ones, and map the legal ones
//! to [`UnitUpdate`]s that the store applies in one transaction. Handler faults are mapped here
//! too: the units keep their status; a single-unit call's own fault spends one retry and fails
//! the unit when the budget is spent; a slow provider spends nothing. Units past their
//! `stage_deadline` fail here too.

use std::collections::{HashMap, HashSet};

use slotd_core::config::SchedulerConfig;
use slotd_core::model::{Change, Outcome, ProviderError, Unit, UnitStatus, UnitView, validate};
use slotd_runtime::{HandlerFault, HandlerInfo};
use slotd_store::{Field, UnitUpdate};

use super::policy::{
    capacity_delay_ms, poll_delay_ms, retry_delay_ms, slow_provider_delay_ms, stage_expired,
};

/// A change the host refused.
#[derive(Clone, Debug)]
pub struct Refused {
    pub unit_id: String,
    pub reason: String,
}

/// The updates to write and what was refused.
#[derive(Debug, Default)]
pub struct Decided {
    pub updates: Vec<UnitUpdate>,
    pub refused: Vec<Refused>,
    /// How many legal changes were capacity rejections (drives adaptive capacity).
    pub capacity_rejected: usize,
    /// The longest back-off the provider asked for with those rejections (ms).
    pub capacity_hint_ms: Option<u64>,
    /// Units sent back to their route's next option, as (route, target, reason): the caller
    /// counts them (`slotd_route_refusals_total`); deciding records nothing.
    pub route_refusals: Vec<(String, String, String)>,
    /// How many legal changes were accepted submits (the other half of adaptive capacity).
    pub accepted: usize,
    /// Indexes into `updates` of units that stay `submitted` with an ordinary poll scheduled
    /// (a new job, or "still running"): the ones a poll round may reschedule.
    pub polling: Vec<usize>,
    /// The units that may not be read again before a time (by index into `updates`): those of
    /// `polling` with a handler's poll hint or a new job's first poll (`poll_initial`), and a
    /// unit whose read the provider answered with an error when the handler paced the retry
    /// (`retry-after` with a delay, [`paced_retry`]). A provider's pace ("no more than one read
    /// per task every 5 s") is a floor that a poll round never brings forward, and it counts
    /// from the provider's answer ([`super::rounds::floors_from_answer`]).
    pub not_before: HashMap<usize, i64>,
    /// The first error that named the account rather than the job (`account_refused`,
    /// `account_exhausted`): (code, message). See `accounts.rs`.
    pub account_error: Option<(String, String)>,
    /// The first fresh submit the provider refused for a quota (`quota_exhausted`): its
    /// message and the provider's "not before" (ms from now), if it gave one. See
    /// `pool_state/quotas.rs`.
    pub quota_refused: Option<(String, Option<u64>)>,
    /// Legal changes in which the provider answered normally (anything but an account error
    /// or a transient error): the account works.
    pub answered: usize,
    /// Units the provider holds in its own queue long enough to say it runs fewer of ours than
    /// we hold slots for (contract 1.4 `observe.queued`; see [`provider_queue_update`]).
    pub provider_queued: usize,
}

/// Map validated changes to updates. `units` are the units the handler was given.
/// The error code of a `retry-after` that means "the provider did not answer in time" (WIT
/// `outcome.retry-after`): it spends no retry budget.
pub const TIMEOUT_CODE: &str = "timeout";

pub fn decide_updates(
    cfg: &SchedulerConfig,
    handler: &HandlerInfo,
    units: &[&Unit],
    changes: Vec<Change>,
    now: i64,
) -> Decided {
    decide_updates_in(cfg, handler, units, &HashSet::new(), changes, now)
}

/// [`decide_updates`] knowing which units of the batch were handed over `in-doubt` (their
/// submit may have created a job): an account error leaves those `submitted`, to be looked
/// up again on the same account, where a fresh submit goes back to `pending`.
pub fn decide_updates_in(
    cfg: &SchedulerConfig,
    handler: &HandlerInfo,
    units: &[&Unit],
    in_doubt: &HashSet<&str>,
    changes: Vec<Change>,
    now: i64,
) -> Decided {
    let by_id: HashMap<&str, &Unit> = units.iter().map(|u| (u.id.as_str(), *u)).collect();
    let mut seen: HashSet<String> = HashSet::new();
    let mut out = Decided::default();
    for change in changes {
        let Some(unit) = by_id.get(change.unit_id.as_str()).copied() else {
            out.refused.push(Refused {
                reason: format!("unit {} is not in the batch", change.unit_id),
                unit_id: change.unit_id,
            });
            continue;
        };
        if !seen.insert(change.unit_id.clone()) {
            out.refused.push(Refused {
                reason: format!(
                    "unit {} has more than one change in this batch",
                    change.unit_id
                ),
                unit_id: change.unit_id,
            });
            continue;
        }
        let stages: Vec<String> = handler
            .stages(&unit.task_type)
            .map(|s| s.iter().map(|st| st.name.clone()).collect())
            .unwrap_or_default();
        let view = UnitView {
            status: unit.status,
            stage: &unit.stage,
            provider_job_id: unit.provider_job_id.as_deref(),
            stages: &stages,
        };
        if let Err(e) = validate(&change, view) {
            out.refused.push(Refused {
                unit_id: change.unit_id,
                reason: e.to_string(),
            });
            continue;
        }
        match &change.outcome {
            Outcome::CapacityRejected { after_ms } => {
                out.capacity_rejected += 1;
                out.capacity_hint_ms = out.capacity_hint_ms.max(*after_ms);
            }
            Outcome::Accepted { .. } => out.accepted += 1,
            _ => {}
        }
        if let Some(error) = account_error(&change.outcome) {
            let fresh = unit.provider_job_id.is_none() && !in_doubt.contains(unit.id.as_str());
            if slotd_pools::pool_state::quotas::is_quota_code(error.code.as_deref()) {
                if fresh && out.quota_refused.is_none() {
                    let after = match &change.outcome {
                        Outcome::RetryAfter { after_ms, .. } => *after_ms,
                        _ => None,
                    };
                    out.quota_refused = Some((error.message.clone(), after));
                }
            } else if out.account_error.is_none() {
                out.account_error = Some((
                    error.code.clone().unwrap_or_default(),
                    error.message.clone(),
                ));
            }
            let doubt = in_doubt.contains(unit.id.as_str());
            let mut update = account_update(cfg, unit, &change, doubt, now);
            out.route_refusals
                .extend(back_to_route(cfg, unit, &change, doubt, &mut update, now));
            honour_cancel(unit, &mut update);
            if let Some(at) = paced_retry(&change.outcome, &update) {
                out.not_before.insert(out.updates.len(), at);
            }
            out.updates.push(update);
            continue;
        }
        if !matches!(change.outcome, Outcome::RetryAfter { .. }) {
            out.answered += 1;
        }
        let (polling, paced) = match &change.outcome {
            Outcome::Running { after_ms } => (true, after_ms.is_some()),
            Outcome::Accepted { job_id } => (unit.provider_job_id.as_deref() != Some(job_id), true),
            _ => (false, false),
        };
        // A running hint is the provider's pace as the handler states it: the floor of the
        // next read, even where the unit's own backoff (clamped to `poll_initial`) is later. A
        // poll round (which comes no closer than `min_rest`) may read it from then on.
        let hinted = match change.outcome {
            Outcome::Running { after_ms: Some(ms) } => {
                Some(now.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX).max(1)))
            }
            _ => None,
        };
        let queue = change.provider_queue;
        let retry_paced = matches!(
            change.outcome,
            Outcome::RetryAfter {
                after_ms: Some(_),
                ..
            }
        );
        let doubt = in_doubt.contains(unit.id.as_str());
        let routed = unit.routing.is_some().then(|| change.clone());
        let mut update = update_for(cfg, handler, unit, change, now);
        if let Some(change) = routed {
            out.route_refusals
                .extend(back_to_route(cfg, unit, &change, doubt, &mut update, now));
        }
        honour_cancel(unit, &mut update);
        if provider_queue_update(unit, queue, &mut update) {
            out.provider_queued += 1;
        }
        if polling && update.to == Some(UnitStatus::Submitted) {
            if paced && let Some(at) = update.next_at {
                let floor = hinted.map_or(at, |hint| hint.min(at));
                out.not_before.insert(out.updates.len(), floor);
            }
            out.polling.push(out.updates.len());
        } else if retry_paced
            && update.to == Some(UnitStatus::Submitted)
            && let Some(at) = update.next_at
        {
            out.not_before.insert(out.updates.len(), at);
        }
        out.updates.push(update);
    }
    out
}

/// When a unit that stays `submitted` may be read again, for a `retry-after` the handler gave
/// a delay (a read the provider answered 429 or 5xx, paced by the handler): that read was a
/// read all the same, so the delay is a floor that counts from the answer, as a poll hint's
/// does. `None` for anything else.
fn paced_retry(outcome: &Outcome, update: &UnitUpdate) -> Option<i64> {
    match outcome {
        Outcome::RetryAfter {
            after_ms: Some(_), ..
        } if update.to == Some(UnitStatus::Submitted) => update.next_at,
        _ => None,
    }
}

impl Decided {
    /// Count what deciding found that the metrics show: illegal changes of `handler` and
    /// units sent back to their route.
    pub fn count(&self, metrics: &slotd_core::telemetry::Metrics, handler: &str) {
        metrics.record(|| {
            if !self.refused.is_empty() {
                metrics::counter!("slotd_handler_illegal_changes_total", "handler" => handler.to_string())
                    .increment(self.refused.len() as u64);
            }
            for (route, target, reason) in &self.route_refusals {
                metrics::counter!("slotd_route_refusals_total", "route" => route.clone(), "target" => target.clone(), "reason" => reason.clone())
                    .increment(1);
            }
        });
    }
}

/// [`super::route_back::route_back`]: the (route, target, reason) of a unit it sent back.
fn back_to_route(
    cfg: &SchedulerConfig,
    unit: &Unit,
    change: &Change,
    in_doubt: bool,
    update: &mut UnitUpdate,
    now: i64,
) -> Option<(String, String, String)> {
    super::route_back::route_back(cfg, unit, change, in_doubt, update, now)
}

/// Show (or stop showing) that the provider holds `unit`'s job in its own queue: its
/// `wait_reason` becomes `provider_queue` (`provider_queue <n>` with a position) beside a
/// `running` change that says so, and is cleared by any other change. Returns whether the
/// queueing says the provider runs fewer of the pool's jobs than slotd holds slots for: the
/// job waits behind others (a position above 0), or was already queued at the last read (a
/// provider's short dispatch delay after a create is not a lack of room).
fn provider_queue_update(
    unit: &Unit,
    queue: Option<slotd_core::model::ProviderQueue>,
    update: &mut UnitUpdate,
) -> bool {
    let current = unit.terms.wait_reason.as_deref();
    let was_queued = current.is_some_and(slotd_store::is_provider_queue);
    let Some(queue) = queue.filter(|_| update.to == Some(UnitStatus::Submitted)) else {
        if was_queued {
            update.wait_reason = Field::Clear;
        }
        return false;
    };
    let reason = match queue.position {
        Some(n) => format!("{} {n}", slotd_store::PROVIDER_QUEUE),
        None => slotd_store::PROVIDER_QUEUE.to_string(),
    };
    if current != Some(reason.as_str()) {
        update.wait_reason = Field::Set(reason);
    }
    was_queued || queue.position.is_some_and(|n| n > 0)
}

/// The error of an outcome that names the account or one of its quotas, not the job (see
/// `accounts.rs` and `quotas.rs`).
fn account_error(outcome: &Outcome) -> Option<&ProviderError> {
    match outcome {
        Outcome::RetryAfter { error, .. } | Outcome::Fail { error }
            if slotd_pools::pool_state::accounts::is_account_code(error.code.as_deref())
                || slotd_pools::pool_state::quotas::is_quota_code(error.code.as_deref()) =>
        {
            Some(error)
        }
        _ => None,
    }
}

/// The update for a change that says the provider refused the unit's account: no retry budget
/// spent. A fresh submit (no job id, not in doubt) goes back to `pending` at once, for another
/// account; a unit with a job (or in doubt: its job may exist on this account) stays
/// `submitted` and is asked again after the retry backoff.
fn account_update(
    cfg: &SchedulerConfig,
    unit: &Unit,
    change: &Change,
    in_doubt: bool,
    now: i64,
) -> UnitUpdate {
    let mut u = base(unit, change);
    let (after_ms, error) = match &change.outcome {
        Outcome::RetryAfter { after_ms, error } => (*after_ms, error),
        Outcome::Fail { error } => (None, error),
        _ => return u,
    };
    let account = unit.terms.account.as_deref().unwrap_or("(implicit)");
    let who = if slotd_pools::pool_state::quotas::is_quota_code(error.code.as_deref()) {
        format!("a quota of account {account}")
    } else {
        format!("account {account}")
    };
    u.error = Field::Set(error.to_json());
    if unit.provider_job_id.is_none() && !in_doubt {
        u.to = Some(UnitStatus::Pending);
        u.submitted_at = Field::Clear;
        u.next_at = Some(now);
        u.detail = Some(format!(
            "{who} refused ({}: {}); back to pending, no retry budget spent",
            error.code.as_deref().unwrap_or(""),
            error.message
        ));
    } else {
        u.to = Some(UnitStatus::Submitted);
        u.next_at = Some(now + retry_delay_ms(cfg, 1, after_ms));
        u.detail = Some(format!(
            "{who} refused ({}: {}); asked again later, no retry budget spent",
            error.code.as_deref().unwrap_or(""),
            error.message
        ));
    }
    u
}

/// The cancel rule, shared by every path that decides a unit's update (tick, callback, fault):
/// a unit the client cancelled while it was `submitted` keeps its slot while its provider job
/// runs, and whatever would take it out of `submitted` (the job succeeded or failed, a next
/// stage, back to pending) ends it `cancelled` instead: never finalized, never requeued. The
/// provider's result and error stay on the unit for the record. An update decided without a
/// cancel in view is guarded by [`UnitUpdate::unless_cancel_requested`], so a cancel landing
/// during the handler call makes the store skip it and the next poll decides it with the cancel.
///
/// A future contract with a provider-side cancel ends the unit the same way: its "cancel
/// confirmed" answer is one more outcome that leaves `submitted`.
pub fn honour_cancel(unit: &Unit, u: &mut UnitUpdate) {
    let Some(to) = u.to.filter(|t| *t != UnitStatus::Submitted) else {
        return;
    };
    if unit.status != UnitStatus::Submitted {
        return;
    }
    if unit.cancel_requested_at.is_none() {
        u.unless_cancel_requested = true;
        return;
    }
    let ended = match to {
        UnitStatus::Pending => "the provider did not take the job".to_string(),
        other => format!("its provider job ended ({other})"),
    };
    u.to = Some(UnitStatus::Cancelled);
    u.detail = Some(format!("cancelled by client: {ended}; slot released"));
    // Stay in the stage and pool whose slot it held, with the job id for the record.
    u.stage = None;
    u.pool = None;
    u.task_type = None;
    u.routing = None;
    u.provider_job_id = Field::Keep;
    u.next_at = None;
}

/// Updates for cancel-requested units that are in doubt (marked submitted, no provider job id
/// recorded) and past the wait for the call that marked them, whose handler has no provider
/// cancel (one that has gets them in `cancel`, see [`super::cancel`]). They are not handed to
/// the handler's `tick`: the contract's in-doubt resolution submits when the lookup finds
/// nothing, and a cancelled unit must never be submitted again. If that earlier submit did
/// reach the provider, the job runs without a slot until it ends; the provider's "over
/// capacity" answer then sends a later unit back to pending, without failing it.
pub fn cancel_unsent(units: &[Unit]) -> Vec<UnitUpdate> {
    units
        .iter()
        .map(|unit| UnitUpdate {
            unit_id: unit.id.clone(),
            from: Some(UnitStatus::Submitted),
            from_stage: Some(unit.stage.clone()),
            to: Some(UnitStatus::Cancelled),
            submitted_at: Field::Clear,
            detail: Some(
                "cancelled by client: no provider job was recorded for the submission; \
                 not looked up again, since that would submit it; slot released"
                    .into(),
            ),
            ..UnitUpdate::default()
        })
        .collect()
}

fn base(unit: &Unit, change: &Change) -> UnitUpdate {
    UnitUpdate {
        unit_id: unit.id.clone(),
        from: Some(unit.status),
        from_stage: Some(unit.stage.clone()),
        state: change.state.clone(),
        cost: change.cost.clone(),
        ..UnitUpdate::default()
    }
}

/// With callbacks on, polls are the safety net: no more often than `callback_safety_poll`.
fn safety_net(cfg: &SchedulerConfig, delay: i64) -> i64 {
    match cfg.callback_safety_poll {
        Some(d) => delay.max(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        None => delay,
    }
}

/// The update for one validated change of a `submitted` unit.
fn update_for(
    cfg: &SchedulerConfig,
    handler: &HandlerInfo,
    unit: &Unit,
    change: Change,
    now: i64,
) -> UnitUpdate {
    let mut u = base(unit, &change);
    match change.outcome {
        Outcome::Accepted { job_id }
            if unit.provider_job_id.as_deref() == Some(job_id.as_str()) =>
        {
            // A repeat (a callback for a job we already know): keep the poll schedule.
            u.to = Some(UnitStatus::Submitted);
        }
        Outcome::Accepted { job_id } => {
            u.to = Some(UnitStatus::Submitted);
            u.detail = Some(format!("accepted as provider job {job_id}"));
            u.provider_job_id = Field::Set(job_id);
            u.polls = Some(0);
            u.error = Field::Clear;
            u.next_at = Some(now + safety_net(cfg, poll_delay_ms(cfg, 0, None)));
        }
        Outcome::Running { after_ms } => {
            let polls = unit.polls.saturating_add(1);
            u.to = Some(UnitStatus::Submitted);
            u.polls = Some(polls);
            u.next_at = Some(now + safety_net(cfg, poll_delay_ms(cfg, polls, after_ms)));
        }
        Outcome::Succeeded { result } => {
            u.to = Some(UnitStatus::Succeeded);
            u.result = Some(result);
            u.error = Field::Clear;
            u.attempts = Some(0);
            u.submitted_at = Field::Clear;
            u.next_at = Some(now);
            u.detail = Some("provider job succeeded".into());
        }
        Outcome::NextStage { stage } => {
            let declared = handler
                .stages(&unit.task_type)
                .and_then(|s| s.iter().find(|st| st.name == stage));
            // The pool `plan-routed` chose for this stage (if the stage still allows it), else
            // the stage's default.
            let pool = declared
                .and_then(|st| unit.route_for(&stage).filter(|p| st.allows(p)))
                .or_else(|| declared.map(|st| st.pool.clone()))
                .unwrap_or_else(|| unit.pool.clone());
            u.to = Some(UnitStatus::Pending);
            u.detail = Some(format!(
                "stage {} succeeded; next stage {stage}",
                unit.stage
            ));
            u.stage = Some(stage);
            u.pool = Some(pool);
            u.provider_job_id = Field::Clear;
            u.polls = Some(0);
            u.attempts = Some(0);
            u.error = Field::Clear;
            u.submitted_at = Field::Clear;
            u.next_at = Some(now);
        }
        Outcome::CapacityRejected { after_ms } => {
            u.to = Some(UnitStatus::Pending);
            u.submitted_at = Field::Clear;
            u.next_at = Some(now + capacity_delay_ms(cfg, after_ms, &unit.id, now));
            u.detail = Some("provider over capacity; back to pending".into());
        }
        Outcome::RetryAfter { after_ms, error } => {
            retry_after_update(cfg, unit, after_ms, &error, now, &mut u);
        }
        Outcome::Fail { error } => {
            u.to = Some(UnitStatus::Failed);
            u.detail = Some("provider job failed".into());
            u.error = Field::Set(error.to_json());
        }
    }
    u
}

/// The update for a `retry-after` answer about a `submitted` unit (see the table in
/// docs/state-machine.md): a slow provider, a create refused for its pace or made nothing, a
/// transient error reading a job the provider holds, or one on a submit (maybe in doubt).
fn retry_after_update(
    cfg: &SchedulerConfig,
    unit: &Unit,
    after_ms: Option<u64>,
    error: &ProviderError,
    now: i64,
    u: &mut UnitUpdate,
) {
    let has_job = unit.provider_job_id.is_some();
    match (error.code.as_deref(), has_job) {
        (Some(TIMEOUT_CODE), _) => {
            // Slowness, not failure (docs/trust-model.md): no retry budget spent; the stage deadline
            // bounds how long a provider may keep a unit waiting.
            u.to = Some(UnitStatus::Submitted);
            u.next_at = Some(now + retry_delay_ms(cfg, unit.attempts.saturating_add(1), after_ms));
            u.detail =
                Some("provider did not answer in time; retried, no retry budget spent".into());
            u.error = Field::Set(error.to_json());
        }
        (Some(super::route_back::RATE_LIMITED_CODE), false) => {
            // A pace signal on a create: nothing was made, nothing is spent; back to pending
            // for the provider's delay (at least the retry backoff's first step).
            u.to = Some(UnitStatus::Pending);
            u.submitted_at = Field::Clear;
            u.error = Field::Set(error.to_json());
            u.next_at = Some(now + retry_delay_ms(cfg, 1, after_ms));
            u.detail = Some(
                "provider rate-limited the create; back to pending after its delay, \
                     no retry budget spent"
                    .into(),
            );
        }
        (Some(super::route_back::NOT_CREATED_CODE), false) => {
            // The provider answered the create with an error and holds no job: back to
            // pending after the backoff (a routed unit to its route), no lookup needed.
            let attempts = unit.attempts.saturating_add(1);
            u.attempts = Some(attempts);
            u.error = Field::Set(error.to_json());
            if attempts > cfg.retry_budget {
                u.to = Some(UnitStatus::Failed);
                u.detail = Some(format!("retry budget of {} spent", cfg.retry_budget));
            } else {
                u.to = Some(UnitStatus::Pending);
                u.submitted_at = Field::Clear;
                u.next_at = Some(now + retry_delay_ms(cfg, attempts, after_ms));
                u.detail = Some(format!(
                    "provider created no job; back to pending, retry {attempts}/{}",
                    cfg.retry_budget
                ));
            }
        }
        (_, true) => {
            // A read of a job the provider holds (and bills): a transient error spends no
            // retry budget, since failing the unit would free its slot while the job runs on,
            // never fetched. The job's own terminal answer and the stage deadline bound the
            // wait; the reads back off along the poll schedule, never faster than the handler's
            // `Retry-After`.
            let polls = unit.polls.saturating_add(1);
            u.to = Some(UnitStatus::Submitted);
            u.polls = Some(polls);
            u.next_at =
                Some(now + retry_delay_ms(cfg, 1, after_ms).max(poll_delay_ms(cfg, polls, None)));
            u.detail = Some(format!(
                "transient error reading provider job {}; read again later, no retry budget spent",
                unit.provider_job_id.as_deref().unwrap_or_default()
            ));
            u.error = Field::Set(error.to_json());
        }
        _ => {
            let attempts = unit.attempts.saturating_add(1);
            u.attempts = Some(attempts);
            if attempts > cfg.retry_budget {
                u.to = Some(UnitStatus::Failed);
                u.detail = Some(format!("retry budget of {} spent", cfg.retry_budget));
                u.error = Field::Set(error.to_json());
            } else {
                // The unit keeps its slot: a transient error on submit may still have created
                // the job, so the next call sees it `in-doubt` and looks it up by key first.
                u.to = Some(UnitStatus::Submitted);
                u.next_at = Some(now + retry_delay_ms(cfg, attempts, after_ms));
                u.detail = Some(format!(
                    "transient error, retry {attempts}/{}",
                    cfg.retry_budget
                ));
                u.error = Field::Set(error.to_json());
            }
        }
    }
}

/// Updates for the units of a handler call that faulted; their status is unchanged.
///
/// Only the units of a single-unit call are charged for the guest's own fault (one retry
/// spent, backed off, failed once the budget is spent): the tick splits a faulting batch until
/// the fault is pinned on the unit that causes it, so a larger faulting call charges nobody.
/// Nor is a unit whose provider job runs: failing it would free its slot while the provider
/// runs (and bills) the job; it is read again after a wait that grows with its time in the
/// stage, until the job's end or its `stage_deadline` gives it up.
/// A call cut off while awaiting a slow provider charges nothing either: the units are tried
/// again after [`slow_provider_delay_ms`], until their `stage_deadline`.
pub fn fault_updates(
    cfg: &SchedulerConfig,
    units: &[&Unit],
    fault: &HandlerFault,
    now: i64,
) -> Vec<UnitUpdate> {
    let message = format!("handler fault: {fault}");
    let single = units.len() == 1 && !fault.is_provider_slowness();
    units
        .iter()
        .map(|unit| {
            let charged = single && unit.provider_job_id.is_none();
            let error = ProviderError {
                code: Some(format!("handler_{}", fault.kind())),
                message: message.clone(),
            };
            let mut u = UnitUpdate {
                unit_id: unit.id.clone(),
                from: Some(unit.status),
                from_stage: Some(unit.stage.clone()),
                error: Field::Set(error.to_json()),
                to: Some(unit.status),
                detail: Some(message.clone()),
                ..UnitUpdate::default()
            };
            if !charged {
                let waited = unit.submitted_at.map_or(0, |t| now.saturating_sub(t));
                u.next_at = Some(now + slow_provider_delay_ms(cfg, waited));
                return u;
            }
            let attempts = unit.attempts.saturating_add(1);
            u.attempts = Some(attempts);
            if attempts > cfg.retry_budget {
                u.to = Some(UnitStatus::Failed);
                u.detail = Some(format!(
                    "{message}; retry budget of {} spent",
                    cfg.retry_budget
                ));
            } else {
                u.next_at = Some(now + retry_delay_ms(cfg, attempts, None));
            }
            honour_cancel(unit, &mut u);
            u
        })
        .collect()
}

/// Split off the units of a batch that have been submitted in their stage longer than
/// `stage_deadline` and hold no provider job, with the updates that fail them; the rest go to
/// the handler. A unit past the deadline whose job the provider holds is not failed here: its
/// slot is released only when the job has ended at the provider, so a handler with provider
/// cancel is asked to cancel it ([`stage_deadline_error`], `cancel.rs`), and any other reads
/// it to its end (its output stored if it succeeds).
pub fn expire_stage_deadline<T>(
    cfg: &SchedulerConfig,
    batch: Vec<T>,
    unit_of: impl Fn(&T) -> &Unit,
    now: i64,
) -> (Vec<T>, Vec<UnitUpdate>) {
    let mut kept = Vec::with_capacity(batch.len());
    let mut failed = Vec::new();
    for item in batch {
        let unit = unit_of(&item);
        if !stage_expired(cfg, unit, now) || unit.provider_job_id.is_some() {
            kept.push(item);
            continue;
        }
        let error = stage_deadline_error(cfg, unit);
        let message = error.message.clone();
        let mut update = UnitUpdate {
            unit_id: unit.id.clone(),
            from: Some(unit.status),
            from_stage: Some(unit.stage.clone()),
            to: Some(UnitStatus::Failed),
            error: Field::Set(error.to_json()),
            detail: Some(message),
            ..UnitUpdate::default()
        };
        // A unit the client cancelled ends cancelled, not failed, whatever ends its wait.
        honour_cancel(unit, &mut update);
        failed.push(update);
    }
    (kept, failed)
}

/// The error of a unit given up at its stage deadline.
pub fn stage_deadline_error(cfg: &SchedulerConfig, unit: &Unit) -> ProviderError {
    ProviderError {
        code: Some("stage_deadline".into()),
        message: format!(
            "stage {} had no result within scheduler.stage_deadline of {}",
            unit.stage,
            humantime::format_duration(cfg.stage_deadline)
        ),
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
pub(crate) mod tests;

#[cfg(test)]
#[path = "decide_golden_tests.rs"]
mod golden_tests;

#[cfg(test)]
#[path = "route_back_tests.rs"]
mod route_back_tests;
