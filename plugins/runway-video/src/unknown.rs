//! The outcome-unknown rule. Runway has no idempotency key and no endpoint listing tasks, so a
//! create whose answer was lost (a timeout, a transport error, a 504 — RUNWAY_API.md counts
//! Runway's gateway timeout among the lost answers —, an unreadable success, or a call slotd
//! lost track of: an `in-doubt` unit with nothing recorded) may have made a task that can
//! never be found again. Such a unit is **never
//! created again automatically**. Instead:
//!
//! 1. it keeps its slot for the model's longest expected run ([`Model::longest_secs`] ×
//!    `expected_duration_scale`), counted from `unknown_since`, so a phantom task at Runway
//!    does not push real work into `THROTTLED`;
//! 2. then it fails with code [`SUBMISSION_UNKNOWN`]; the message says that a retry of the
//!    task resubmits it on purpose (possibly paying twice).
//!
//! A cancel does not shorten the hold: an in-doubt unit of a cancelled task has no task id to
//! `DELETE`, so [`crate::cancel`] answers `running` until the hold has passed (the slot stays
//! held while the phantom may run), then `ended`.
//!
//! How the hold is said to the host: a unit without a provider job id cannot be `running`
//! (the host refuses that change), so the hold is a `retry-after` with error code `timeout`
//! and the remaining time as its delay. The contract defines that code as the provider's
//! slowness: the unit stays `submitted` (keeping its slot), no retry budget is spent, the new
//! state (with `unknown_since`) is stored, and `stage_deadline` still bounds it.

use slotd_sdk::{Change, Host, Outcome, ProviderError, Unit};

use crate::models::Model;
use crate::settings::Config;
use crate::state::{CreateRecord, State};

/// The error code of a unit whose create outcome stayed unknown.
pub const SUBMISSION_UNKNOWN: &str = "submission_unknown";
/// The contract's code for "the provider did not answer in time" (no retry budget spent).
const TIMEOUT: &str = "timeout";
/// Why an in-doubt unit with nothing recorded has an unknown outcome.
const LOST_BY_SLOTD: &str = "slotd lost track of the create call (a crash, trap or timeout \
                             between sending it and recording the task id)";

/// For a unit the host gives back `in-doubt` (submitted, no task id): since when, and why,
/// its current submission's create has had an unknown outcome; `None` when Runway answered
/// that create "not created" (nothing exists, creating again is safe).
pub fn in_doubt_since(unit: &Unit, now_ms: u64) -> Option<(u64, String)> {
    match State::of(unit).record_for(unit) {
        CreateRecord::Refused => None,
        CreateRecord::Unknown { since, reason } => Some((since, reason)),
        // The host marked it submitted in an earlier call that never reported back.
        CreateRecord::None => Some((
            unit.submitted_at_ms.unwrap_or(now_ms),
            LOST_BY_SLOTD.to_string(),
        )),
    }
}

/// When the hold of a `model` create whose outcome has been unknown since `since` ends.
pub fn hold_until(model: Model, cfg: &Config, since: u64) -> u64 {
    since.saturating_add(cfg.scaled_ms(model.longest_secs()))
}

/// The change for a unit whose create outcome has been unknown since `since` (slotd's
/// clock): hold its slot until the model's longest run has passed, then fail it. The first
/// time an unknown outcome is seen (its state does not record it yet) it is logged for the
/// operator, who can count orphans with Runway's usage figures.
pub fn hold(
    host: &dyn Host,
    unit: &Unit,
    model: Model,
    cfg: &Config,
    now_ms: u64,
    since: u64,
    reason: &str,
) -> Change {
    let hold_ms = cfg.scaled_ms(model.longest_secs());
    let until = hold_until(model, cfg, since);
    let state = State::unknown(unit, since, reason).to_json();
    let lost = format!(
        "the outcome of Runway's create is unknown ({reason}): Runway has no idempotency key \
         and no task list, so a {model} task may exist (and be charged) that slotd cannot find"
    );
    let outcome = if now_ms >= until {
        Outcome::Fail(ProviderError::new(
            Some(SUBMISSION_UNKNOWN),
            format!(
                "{lost}. The slot was held for {} s, the longest a {model} task is expected to \
                 run. A retry of this task resubmits the unit on purpose, possibly generating \
                 (and paying for) the video twice.",
                hold_ms.div_ceil(1000)
            ),
        ))
    } else {
        let remaining = until - now_ms;
        Outcome::RetryAfter {
            after_ms: Some(remaining),
            error: ProviderError::new(
                Some(TIMEOUT),
                format!(
                    "{lost}; it is never created again automatically. The slot stays held \
                     {} s more, then the unit fails with {SUBMISSION_UNKNOWN}.",
                    remaining.div_ceil(1000)
                ),
            ),
        }
    };
    if first_seen(unit, since) {
        host.warn(&format!(
            "unit {} (task {}): {lost}; holding its slot in pool {} for {} s. Compare \
             GET /v1/organization usage.models[\"{model}\"].dailyGenerations with slotd's \
             creates to count orphans.",
            unit.id,
            unit.task_id,
            model.pool(),
            hold_ms.div_ceil(1000)
        ));
    }
    Change {
        unit_id: unit.id.clone(),
        outcome,
        state: Some(state),
        cost: None,
    }
}

/// Whether the unit's state does not record this unknown outcome yet.
fn first_seen(unit: &Unit, since: u64) -> bool {
    State::of(unit).unknown_since != Some(since)
}
