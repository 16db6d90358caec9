//! Submit → poll → result handlers: one provider job per unit, created by a submit, then
//! polled until it ends. What such handlers share when the provider takes **no idempotency
//! key** (Runway, fal):
//!
//! - [`Record`]: what became of a unit's current submission, kept in the unit's state (flatten
//!   it into the handler's own state with `#[serde(flatten)]`). A submission is named
//!   `<idempotency key>@<submitted-at ms>` ([`submission`]), new for every submit marker, so a
//!   record left by an earlier submission is never mistaken for this one's.
//! - The **outcome-unknown rule** ([`Record::doubt`], [`hold`], [`give_up`],
//!   [`cancel_hold`]). A submit whose answer was lost (a timeout, a transport error, a gateway
//!   page, an unreadable success, or a call slotd lost track of: a unit handed back `in-doubt`
//!   with nothing recorded) may have made a job that runs and is billed. Such a unit is
//!   **never submitted again automatically**: it keeps its slot while a phantom job may run
//!   (the handler says how long, and may look for the job meanwhile), then fails with
//!   [`SUBMISSION_UNKNOWN`]; a retry of the task resubmits it on purpose. A unit without a
//!   provider job id cannot be `running` (the host refuses that change), so the hold is said as
//!   `retry-after` with the error code [`TIMEOUT`], which the contract defines as the provider's
//!   slowness: the unit stays `submitted` with its slot, spends no retry budget, and its state
//!   (recording the unknown outcome) is stored; `stage_deadline` still bounds it.
//! - Plans whose units each run on their model's pool ([`plan_default_pool`], [`routed`],
//!   [`one_stage`], [`stage_pools`]).
//!
//! A provider that takes an idempotency key needs no hold: a unit in doubt is looked up by its
//! key instead ([`Record::doubt`] still says which units are in doubt).

use std::fmt::Display;

use serde::{Deserialize, Serialize};

use crate::info::{
    CancelOutcome, HandlerInfo, PoolInfo, RoutedUnit, StageInfo, StagePool, TaskTypeInfo,
};
use crate::types::{Change, Outcome, PlanError, PlannedUnit, ProviderError, Unit};

/// The error code of a unit whose submit outcome stayed unknown.
pub const SUBMISSION_UNKNOWN: &str = "submission_unknown";
/// The contract's code for "the provider did not answer in time" (no retry budget spent).
pub const TIMEOUT: &str = "timeout";

/// What became of a unit's current submission, as its state records it. Flatten it into the
/// handler's state: its fields are written only when set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Record {
    /// The submission the other fields are about ([`submission`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub submission: Option<String>,
    /// That submission's last submit was answered "not created" at this time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused_at_ms: Option<u64>,
    /// That submission's submit has had an unknown outcome since this time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_since: Option<u64>,
    /// Why its outcome is unknown (e.g. `HTTP 504`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_reason: Option<String>,
}

/// What a [`Record`] says about a unit's current submission.
#[derive(Clone, Debug, PartialEq)]
pub enum Said {
    /// Nothing recorded for this submission.
    Nothing,
    /// Answered "not created": submitting again is safe.
    Refused,
    /// The answer was lost at `since` (slotd's clock), for `reason`.
    Unknown {
        /// slotd's clock when the outcome became unknown.
        since: u64,
        /// Why it is unknown.
        reason: String,
    },
}

/// A submission whose outcome is unknown: a job of it may exist.
#[derive(Clone, Debug, PartialEq)]
pub struct Doubt {
    /// slotd's clock when the outcome became unknown.
    pub since: u64,
    /// Why it is unknown.
    pub reason: String,
    /// The state recorded it (`false`: the unit came back in doubt with nothing recorded).
    pub recorded: bool,
}

impl Record {
    /// What the record says about `unit`'s current submission.
    pub fn said(&self, unit: &Unit) -> Said {
        if self.submission.as_deref() != Some(submission(unit).as_str()) {
            return Said::Nothing;
        }
        match (self.unknown_since, self.refused_at_ms) {
            (Some(since), _) => Said::Unknown {
                since,
                reason: self.unknown_reason.clone().unwrap_or_default(),
            },
            (None, Some(_)) => Said::Refused,
            (None, None) => Said::Nothing,
        }
    }

    /// The record of a submit answered "not created" at `now_ms`.
    pub fn refused(unit: &Unit, now_ms: u64) -> Record {
        Record {
            submission: Some(submission(unit)),
            refused_at_ms: Some(now_ms),
            ..Record::default()
        }
    }

    /// The record of a submission whose outcome has been unknown since `since`.
    pub fn unknown(unit: &Unit, since: u64, reason: &str) -> Record {
        Record {
            submission: Some(submission(unit)),
            unknown_since: Some(since),
            unknown_reason: Some(reason.to_string()),
            ..Record::default()
        }
    }

    /// Whether this unknown outcome (since `since`) is new: the record does not hold it yet
    /// (log it once, for the operator).
    pub fn first_seen(&self, since: u64) -> bool {
        self.unknown_since != Some(since)
    }

    /// The rule for a unit without a provider job id: `None` when submitting is safe (nothing
    /// recorded and not in doubt, or the last submit was answered "not created"); else the
    /// unknown outcome, recorded, or the unit's submit marker (`submitted_at_ms`, else
    /// `now_ms`) with `lost` as the reason when it came back `in-doubt` with nothing recorded
    /// (see [`lost_by_slotd`]).
    pub fn doubt(&self, unit: &Unit, now_ms: u64, lost: &str) -> Option<Doubt> {
        match self.said(unit) {
            Said::Refused => None,
            Said::Unknown { since, reason } => Some(Doubt {
                since,
                reason,
                recorded: true,
            }),
            Said::Nothing if unit.in_doubt => Some(Doubt {
                since: unit.submitted_at_ms.unwrap_or(now_ms),
                reason: lost.to_string(),
                recorded: false,
            }),
            Said::Nothing => None,
        }
    }
}

/// The current submission of a unit: its idempotency key (unit, stage and submit attempt) and
/// the time the host marked it submitted.
pub fn submission(unit: &Unit) -> String {
    format!(
        "{}@{}",
        unit.idempotency_key,
        unit.submitted_at_ms.unwrap_or_default()
    )
}

/// Why a unit in doubt with nothing recorded has an unknown outcome, in the provider's words:
/// `call` the submit (`create`), `id` what it returns (`task id`).
pub fn lost_by_slotd(call: &str, id: &str) -> String {
    format!(
        "slotd lost track of the {call} call (a crash, trap or timeout between sending it and \
         recording the {id})"
    )
}

/// A unit held for an unknown outcome: `retry-after` with [`TIMEOUT`] after `after_ms`,
/// storing `state` (which records the outcome).
pub fn hold(unit: &Unit, state: String, after_ms: u64, message: String) -> Change {
    let outcome = Outcome::RetryAfter {
        after_ms: Some(after_ms),
        error: ProviderError::new(Some(TIMEOUT), message),
    };
    Change {
        state: Some(state),
        ..Change::of(unit, outcome)
    }
}

/// A unit whose outcome stayed unknown: failed with [`SUBMISSION_UNKNOWN`], storing `state`.
pub fn give_up(unit: &Unit, state: String, message: String) -> Change {
    let outcome = Outcome::Fail(ProviderError::new(Some(SUBMISSION_UNKNOWN), message));
    Change {
        state: Some(state),
        ..Change::of(unit, outcome)
    }
}

/// A cancelled unit whose phantom job may run until `until`: `running` (its slot held) until
/// then, ended after.
pub fn cancel_hold(now_ms: u64, until: u64) -> CancelOutcome {
    if now_ms >= until {
        CancelOutcome::Ended
    } else {
        CancelOutcome::Running(Some(until - now_ms))
    }
}

/// `describe` for a handler of one task type with one stage whose units each run on their
/// model's pool: the stage's default pool named, no pool proposed (the pools and their sizes
/// come from [`stage_pools`]; the host refuses a pool proposed twice with different sizes).
pub fn one_stage(
    handler: &str,
    version: &str,
    task_type: &str,
    stage: &str,
    default_pool: &str,
) -> HandlerInfo {
    HandlerInfo {
        name: handler.into(),
        version: version.into(),
        task_types: vec![TaskTypeInfo {
            name: task_type.into(),
            stages: vec![StageInfo::new(stage, default_pool)],
        }],
        pools: Vec::new(),
    }
}

/// `stage-pools`: every pool of `pools` for the stage, each proposing `slots`.
pub fn stage_pools(
    task_type: &str,
    stage: &str,
    pools: impl IntoIterator<Item = String>,
    slots: u32,
) -> Vec<StagePool> {
    pools
        .into_iter()
        .map(|pool| StagePool {
            task_type: task_type.into(),
            stage: stage.into(),
            pool: PoolInfo::new(pool, slots),
        })
        .collect()
}

/// `plan` for a host that does not route (a handler claiming `routing` is asked
/// `plan-routed`): every unit would land on the stage's default pool, so only payloads of the
/// `default` model are taken. `shots` are `(model, spec)`.
pub fn plan_default_pool<M: Display + PartialEq>(
    shots: Vec<(M, String)>,
    default: M,
) -> Result<Vec<PlannedUnit>, PlanError> {
    if let Some((other, _)) = shots.iter().find(|(m, _)| *m != default) {
        return Err(PlanError::at(
            "model",
            format!(
                "model {other} needs its own pool, which this host cannot route units to (it \
                 called plan, not plan-routed); only {default} is served here"
            ),
        ));
    }
    Ok(shots
        .into_iter()
        .map(|(_, spec)| PlannedUnit::new(spec))
        .collect())
}

/// `plan-routed` for units of one `stage`, each on its own pool: `shots` are `(pool, spec)`;
/// every unit starts with an empty state.
pub fn routed(stage: &str, shots: impl IntoIterator<Item = (String, String)>) -> Vec<RoutedUnit> {
    shots
        .into_iter()
        .map(|(pool, spec)| RoutedUnit {
            spec,
            state: "{}".into(),
            pools: vec![(stage.into(), pool)],
        })
        .collect()
}

#[cfg(test)]
#[path = "jobs_tests.rs"]
mod tests;
