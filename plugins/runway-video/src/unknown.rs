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
//! The record, the rule and how the hold is said to the host (a `retry-after` with error code
//! `timeout` and the remaining time as its delay) are the SDK's ([`slotd_sdk::jobs`]); this
//! file says how long a Runway create is held and in Runway's words.

use slotd_sdk::jobs::{self, SUBMISSION_UNKNOWN};
use slotd_sdk::{Change, Host, Unit};

use crate::models::Model;
use crate::settings::Config;
use crate::state::State;

/// For a unit the host gives back `in-doubt` (submitted, no task id): since when, and why,
/// its current submission's create has had an unknown outcome; `None` when Runway answered
/// that create "not created" (nothing exists, creating again is safe). The SDK's rule
/// ([`slotd_sdk::jobs::Record::doubt`]).
pub fn in_doubt_since(unit: &Unit, now_ms: u64) -> Option<(u64, String)> {
    let lost = jobs::lost_by_slotd("create", "task id");
    State::of(unit)
        .record
        .doubt(unit, now_ms, &lost)
        .map(|d| (d.since, d.reason))
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
    if State::of(unit).record.first_seen(since) {
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
    if now_ms >= until {
        return jobs::give_up(
            unit,
            state,
            format!(
                "{lost}. The slot was held for {} s, the longest a {model} task is expected to \
                 run. A retry of this task resubmits the unit on purpose, possibly generating \
                 (and paying for) the video twice.",
                hold_ms.div_ceil(1000)
            ),
        );
    }
    let remaining = until - now_ms;
    jobs::hold(
        unit,
        state,
        remaining,
        format!(
            "{lost}; it is never created again automatically. The slot stays held {} s more, \
             then the unit fails with {SUBMISSION_UNKNOWN}.",
            remaining.div_ceil(1000)
        ),
    )
}
