//! Provider webhooks: a handler's `on-callback` turns the body into changes addressed by
//! provider job id or idempotency key; they are validated and applied exactly like a tick's,
//! then the pool is woken so a freed slot is refilled at once. Polling stays the safety net,
//! so a lost or repeated callback costs nothing but a little latency.
//!
//! A callback arrives through a token (see [`slotd_units::provider_callback_token`]) and changes only the
//! units its [`Scope`] covers: `submitted` units of the token's pool whose current submit
//! attempt it names. A change for any other unit is ignored, and each applied update is
//! guarded by the attempt's `submitted_at`, so a resubmission racing the callback is safe.

use std::collections::BTreeSet;

use slotd_core::model::{Change, UnitStatus};
use slotd_runtime::{CallbackChange, Handler};
use slotd_store::Field;
use slotd_units::provider_callback_token::Scope;
use slotd_units::services::Services;

use super::decide::decide_updates;
use super::error::SchedulerError;
use slotd_units::lifecycle::{Origin, apply_callback_changes};

/// The shortest time between two reads of the callbacks' job lookups, and between two of
/// their writes (or `tick_interval`, if shorter): the callbacks that arrive meanwhile are
/// looked up together (`JobLookups`), and written together (`CallbackWrites`).
const LOOKUP_PASS_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// [`LOOKUP_PASS_EVERY`], or `tick_interval` if shorter.
fn pass_pause(services: &Services) -> std::time::Duration {
    LOOKUP_PASS_EVERY.min(services.config.scheduler.tick_interval)
}

/// What a callback did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProviderCallbackReport {
    pub applied: usize,
    /// Changes for units not found, no longer submitted (late or repeated webhooks), or not
    /// named by the callback's token.
    pub ignored: usize,
    pub refused: usize,
}

/// The callback's changes matched to the units they may change.
#[derive(Default)]
struct Matched {
    /// The units named, submitted and within the token's scope (once each).
    units: Vec<slotd_core::model::Unit>,
    /// Their changes, as a tick's.
    mapped: Vec<Change>,
    /// Job ids a callback names for units that have none recorded yet (an in-doubt unit whose
    /// job ends before a poll found it): recorded with whatever the change does, so no unit
    /// ends without the provider task id it ran as.
    jobs: std::collections::BTreeMap<String, String>,
}

/// Find the unit each change names; count (in `report`) and skip the ones it may not change:
/// outside the token's scope, not submitted, named twice, or naming no known job.
async fn match_units(
    services: &Services,
    handler: &Handler,
    scope: &Scope,
    changes: Vec<CallbackChange>,
    report: &mut ProviderCallbackReport,
) -> Result<Matched, SchedulerError> {
    let types: Vec<String> = handler
        .info
        .task_types
        .iter()
        .map(|t| t.name.clone())
        .collect();
    // The job ids and idempotency keys, read with the other callbacks' (`JobLookups`): a
    // change is matched by its job, else by its key (a job whose id is not recorded yet: its
    // callback came before the answer of the create was written).
    let jobs: Vec<String> = changes
        .iter()
        .filter_map(|c| c.provider_job_id.clone())
        .filter(|j| !j.is_empty())
        .collect();
    let keys: Vec<String> = changes
        .iter()
        .filter_map(|c| c.idempotency_key.clone())
        .collect();
    let by_ref = services
        .job_lookups
        .find(&services.store, &types, jobs, keys, pass_pause(services))
        .await?;
    let mut out = Matched::default();
    let mut seen = BTreeSet::new();
    for c in changes {
        let by_job = c.provider_job_id.as_deref().and_then(|j| {
            by_ref
                .iter()
                .find(|u| u.provider_job_id.as_deref() == Some(j))
        });
        let by_key = || {
            c.idempotency_key
                .as_deref()
                .and_then(|k| by_ref.iter().find(|u| u.idempotency_key() == k))
        };
        let found = by_job.or_else(by_key).cloned();
        match found {
            Some(u) if u.status == UnitStatus::Submitted && !scope.covers(&u) => {
                // Submitted, but not through this token: another batch's token, or an attempt
                // the token predates. Worth a warning: it is a misdirected or forged callback.
                tracing::warn!(handler = %handler.info.name, unit = %u.id, pool = %scope.pool,
                    "callback change for a unit its token does not name; ignored");
                services.metrics.record(|| metrics::counter!("slotd_provider_callbacks_changes_out_of_scope_total", "handler" => handler.info.name.clone()).increment(1));
                report.ignored += 1;
            }
            Some(u) if u.status == UnitStatus::Submitted && seen.insert(u.id.clone()) => {
                if u.provider_job_id.is_none()
                    && let Some(job) = &c.provider_job_id
                {
                    out.jobs.insert(u.id.clone(), job.clone());
                }
                out.mapped.push(Change {
                    provider_queue: None,
                    unit_id: u.id.clone(),
                    outcome: c.outcome,
                    state: c.state,
                    cost: c.cost,
                });
                out.units.push(u);
            }
            Some(_) => report.ignored += 1,
            None => {
                // No unit has this job: a forged, replayed or very late callback. Nothing to
                // change; counted so a stream of them shows.
                tracing::info!(handler = %handler.info.name, job = ?c.provider_job_id,
                    key = ?c.idempotency_key, "callback change for no known unit; ignored");
                services.metrics.record(|| metrics::counter!("slotd_provider_callbacks_changes_unknown_total", "handler" => handler.info.name.clone()).increment(1));
                report.ignored += 1;
            }
        }
    }
    Ok(out)
}

/// Whether `change` tells nothing `unit`'s row does not already hold: the job it records is
/// still running (or accepted again: Kling's callback for a job it has started), with no
/// state, cost, pace or provider queue of its own, and the unit waits in no provider queue
/// that the change would end. Such a callback is not written: the write would change no
/// field a reader uses (a repeat acceptance keeps the poll schedule; a bare "running" would
/// only count a poll that did not happen), at the price of a row version and its index
/// entries. Polling stays on the schedule the acceptance set.
fn says_nothing_new(unit: &slotd_core::model::Unit, change: &Change) -> bool {
    let repeat = match &change.outcome {
        slotd_core::model::Outcome::Running { after_ms: None } => true,
        slotd_core::model::Outcome::Accepted { job_id } => {
            unit.provider_job_id.as_deref() == Some(job_id.as_str())
        }
        _ => false,
    };
    repeat
        && change.state.is_none()
        && change.cost.is_none()
        && change.provider_queue.is_none()
        && unit.provider_job_id.is_some()
        && !unit
            .terms
            .wait_reason
            .as_deref()
            .is_some_and(slotd_store::is_provider_queue)
}

/// Apply the changes a handler derived from a webhook that came through a token of `scope`.
pub async fn apply_provider_callback(
    services: &Services,
    handler: &Handler,
    scope: &Scope,
    changes: Vec<CallbackChange>,
    now: i64,
) -> Result<ProviderCallbackReport, SchedulerError> {
    let mut report = ProviderCallbackReport::default();
    let Matched {
        units,
        mapped,
        jobs,
    } = match_units(services, handler, scope, changes, &mut report).await?;
    let before = mapped.len();
    let mapped: Vec<Change> = mapped
        .into_iter()
        .filter(|c| {
            !units
                .iter()
                .any(|u| u.id == c.unit_id && says_nothing_new(u, c))
        })
        .collect();
    // Accepted, and already what the unit's row says: applied without a write.
    report.applied = before - mapped.len();
    if mapped.is_empty() {
        return Ok(report);
    }
    // "Read it now" (a `running(0)` hint: fal's webhook, a hint rather than the outcome): the
    // unit is due at once and its pool woken, past the safety net's spacing of polls.
    let read_now: std::collections::HashSet<String> = mapped
        .iter()
        .filter(|c| {
            matches!(
                c.outcome,
                slotd_core::model::Outcome::Running { after_ms: Some(0) }
            )
        })
        .map(|c| c.unit_id.clone())
        .collect();
    let refs: Vec<&slotd_core::model::Unit> = units.iter().collect();
    let mut decided = decide_updates(
        &services.config.scheduler,
        &handler.info,
        &refs,
        mapped,
        now,
    );
    // A job a callback reports ended teaches the durations as much as one a poll found.
    slotd_pools::pool_state::durations::learn_from_callback(
        &services.durations,
        &refs,
        &decided.updates,
        now,
    );
    for u in &mut decided.updates {
        let unit = units.iter().find(|x| x.id == u.unit_id);
        u.from_submitted_at = unit.and_then(|x| x.submitted_at);
        if u.provider_job_id.is_keep()
            && let Some(job) = jobs.get(&u.unit_id)
        {
            u.provider_job_id = Field::Set(job.clone());
        }
        // The event log says which transitions a callback made (a poll's look the same).
        if u.detail.is_some() || u.to != u.from {
            u.detail = Some(match u.detail.take() {
                Some(d) => format!("{d} (callback)"),
                None => "by callback".to_string(),
            });
        }
    }
    report.refused = decided.refused.len();
    for r in &decided.refused {
        tracing::warn!(handler = %handler.info.name, unit = %r.unit_id, reason = %r.reason, "illegal callback change refused");
    }
    decided.count(&services.metrics, &handler.info.name);
    // Unfenced: webhooks arrive at any API instance, which holds no pool lease; the guards
    // (`from` status and stage, the attempt's `submitted_at`) keep a callback from
    // overwriting a newer transition.
    let origins = units
        .iter()
        .map(|u| (u.id.as_str(), Origin::from(u)))
        .collect();
    // Due now: the lifecycle's follow-ups wake its pool.
    for u in decided
        .updates
        .iter_mut()
        .filter(|u| read_now.contains(&u.unit_id))
    {
        if u.to == Some(slotd_core::model::UnitStatus::Submitted) {
            u.next_at = Some(now);
        }
    }
    // Written with the other callbacks' that come meanwhile (`CallbackWrites`).
    let pause = pass_pause(services);
    let committed =
        apply_callback_changes(services, &decided.updates, &origins, now, pause).await?;
    report.applied += committed.applied;
    Ok(report)
}
