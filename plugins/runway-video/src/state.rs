//! A unit's handler-private state (JSON), the only memory between calls.
//!
//! Once Runway accepted the create: when (`created_at_ms`), its price ceiling
//! (`estimated_credits`) and the last status seen (`status`, `progress`).
//!
//! Before that, what became of the current submission's create, as the SDK's submission record
//! ([`slotd_sdk::jobs::Record`]): `submission` names the submission and either
//! `refused_at_ms` (Runway answered "not created", e.g. 429 or 503: creating again is safe) or
//! `unknown_since` with `unknown_reason` (the answer was lost: a task may exist; see
//! [`crate::unknown`]).

use serde::{Deserialize, Serialize};
use slotd_sdk::Unit;
use slotd_sdk::jobs::Record;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct State {
    /// slotd's clock when Runway accepted the create (poll hints count from it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at_ms: Option<u64>,
    /// `estimatedCost.credits` of the create answer, when Runway sent it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_credits: Option<f64>,
    /// The last non-terminal status seen (`THROTTLED`, `PENDING`, `RUNNING`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The last `progress` (0–1) of a `RUNNING` task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<f64>,
    /// slotd's clock when a read saw the task `SUCCEEDED` (its output link is fresh then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub succeeded_at_ms: Option<u64>,
    /// What became of the current submission's create (the SDK's record, its fields written
    /// in place: `submission`, `refused_at_ms`, `unknown_since`, `unknown_reason`).
    #[serde(flatten)]
    pub record: Record,
}

impl State {
    /// The unit's state; unreadable state reads as empty (which never leads to a second create:
    /// an in-doubt unit with no record is treated as outcome-unknown).
    pub fn of(unit: &Unit) -> State {
        serde_json::from_str(&unit.state).unwrap_or_default()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }

    /// State after a create answered "not created" at `now_ms`.
    pub fn refused(unit: &Unit, now_ms: u64) -> State {
        State {
            record: Record::refused(unit, now_ms),
            ..State::default()
        }
    }

    /// State of a submission whose create outcome is unknown since `since`.
    pub fn unknown(unit: &Unit, since: u64, reason: &str) -> State {
        State {
            record: Record::unknown(unit, since, reason),
            ..State::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slotd_sdk::jobs::Said;

    fn unit(state: &str, submitted_at_ms: u64) -> Unit {
        Unit {
            idempotency_key: "u1-main-0".into(),
            submitted_at_ms: Some(submitted_at_ms),
            state: state.into(),
            ..Unit::default()
        }
    }

    #[test]
    fn records_belong_to_one_submission() {
        let u = unit("{}", 1_000);
        let refused = State::refused(&u, 2_000);
        assert_eq!(refused.record.said(&u), Said::Refused);
        let unknown = State::unknown(&u, 1_000, "HTTP 504");
        let again = unit(&unknown.to_json(), 1_000);
        assert_eq!(
            State::of(&again).record.said(&again),
            Said::Unknown {
                since: 1_000,
                reason: "HTTP 504".into()
            }
        );
        let remarked = unit(&unknown.to_json(), 9_000);
        assert_eq!(State::of(&remarked).record.said(&remarked), Said::Nothing);
    }

    #[test]
    fn unreadable_state_reads_as_empty_and_empty_fields_are_left_out() {
        assert_eq!(State::of(&unit("not json", 1)), State::default());
        assert_eq!(State::default().to_json(), "{}");
        let s = State {
            created_at_ms: Some(5),
            ..State::default()
        };
        assert_eq!(s.to_json(), r#"{"created_at_ms":5}"#);
    }
}
