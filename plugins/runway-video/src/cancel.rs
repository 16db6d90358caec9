//! `cancel` (contract 1.1): end the Runway tasks of cancelled slotd tasks.
//!
//! `DELETE /v1/tasks/{id}` cancels a task that has not ended (and deletes one that has).
//! 404 means Runway no longer has it: ended. After a 204 the task is read back, so the slot
//! is freed only when Runway no longer runs it: 404 or a terminal status → ended; still
//! `THROTTLED`/`PENDING`/`RUNNING` (or unreadable) → running, asked again. A DELETE that
//! could not be made (5xx, 429, timeout, …) → retry-after. Two rounds of requests at most.
//!
//! A unit without a task id has nothing to `DELETE`. If it is in doubt and its create's
//! outcome is unknown, a task may run at Runway that slotd cannot find: it keeps its slot
//! (`running`) until the outcome-unknown hold has passed, as it would have uncancelled (see
//! [`crate::unknown`]), then ends. Any other (its create was answered "not created", or it was
//! never sent) ends at once. No request is made for it.

use slotd_sdk::client::{Call, transport_error};
use slotd_sdk::jobs;
use slotd_sdk::polling::Round;
use slotd_sdk::retry_after::retry_after_ms;
use slotd_sdk::{CancelChange, CancelOutcome, Host, HttpError, Response, TickContext, Unit};

use crate::answers;
use crate::poll::MIN_POLL_SECS;
use crate::settings::Config;
use crate::spec::Spec;
use crate::tick::task_path;
use crate::unknown;

/// Ask Runway to cancel the tasks of `units`.
pub fn run(
    host: &dyn Host,
    ctx: &TickContext,
    units: &[Unit],
) -> Result<Vec<CancelChange>, String> {
    let cfg = Config::read(host)?;
    let client = cfg.client(host);
    let again_ms = cfg.scaled_ms(MIN_POLL_SECS).max(1);
    let mut changes = Vec::with_capacity(units.len());
    let mut deletes = Round::new();
    for unit in units {
        match &unit.provider_job_id {
            Some(id) => deletes.push(unit, Call::Delete(task_path(id))),
            None => changes.push(change(unit, without_task(unit, &cfg, ctx.now_ms), None)),
        }
    }
    let mut reads = Round::new();
    for (unit, answer) in deletes.send(|calls| client.send(calls)) {
        match answer {
            Ok(r) if (200..300).contains(&r.status) => {
                let id = unit.provider_job_id.as_deref().unwrap_or_default();
                reads.push(unit, Call::Get(task_path(id)));
            }
            Ok(r) if r.status == 404 => changes.push(change(unit, CancelOutcome::Ended, None)),
            answer => changes.push(change(unit, not_asked(&answer, ctx.now_ms), None)),
        }
    }
    for (unit, answer) in reads.send(|calls| client.send(calls)) {
        changes.push(after_delete(unit, &answer, again_ms));
    }
    Ok(changes)
}

/// A unit with no task id to `DELETE`: held while a task of its may still run (its create's
/// outcome is unknown and the hold has not passed), else ended.
fn without_task(unit: &Unit, cfg: &Config, now_ms: u64) -> CancelOutcome {
    if !unit.in_doubt {
        return CancelOutcome::Ended;
    }
    let (Some((since, _)), Ok(spec)) = (
        unknown::in_doubt_since(unit, now_ms),
        Spec::read(&unit.spec),
    ) else {
        // Answered "not created", or a spec no create was ever made of.
        return CancelOutcome::Ended;
    };
    jobs::cancel_hold(now_ms, unknown::hold_until(spec.model, cfg, since))
}

/// What the task's state after a 204 means: ended, or asked again after `again_ms`.
fn after_delete(unit: &Unit, answer: &Result<Response, HttpError>, again_ms: u64) -> CancelChange {
    let still_running = change(unit, CancelOutcome::Running(Some(again_ms)), None);
    let Ok(r) = answer else {
        return still_running;
    };
    if r.status == 404 {
        return change(unit, CancelOutcome::Ended, None);
    }
    if !(200..300).contains(&r.status) {
        return still_running;
    }
    match answers::task(r) {
        Ok(task) if task.status.is_terminal() => change(
            unit,
            CancelOutcome::Ended,
            task.credits.as_ref().map(ToString::to_string),
        ),
        _ => still_running,
    }
}

/// A DELETE that did not reach a decision: try again (after `Retry-After` when sent).
fn not_asked(answer: &Result<Response, HttpError>, now_ms: u64) -> CancelOutcome {
    match answer {
        Ok(r) => CancelOutcome::RetryAfter {
            after_ms: retry_after_ms(&r.headers, now_ms),
            error: answers::error(r),
        },
        Err(e) => CancelOutcome::RetryAfter {
            after_ms: None,
            error: transport_error(e),
        },
    }
}

fn change(unit: &Unit, outcome: CancelOutcome, cost: Option<String>) -> CancelChange {
    CancelChange {
        unit_id: unit.id.clone(),
        outcome,
        state: None,
        cost,
    }
}
