//! A unit's handler-private state (JSON), the only memory between calls. It never holds the
//! key (the guest never sees it).
//!
//! Once fal accepted the submit: when (`accepted_at_ms`), the request's queue URLs when fal
//! gave them on the base URL's host, whether a webhook was asked for, and the last status and
//! queue position seen.
//!
//! Before that, what became of the current submission's submit, as the SDK's submission record
//! ([`slotd_sdk::jobs::Record`]): `submission` names it and either
//! `refused_at_ms` (fal answered "not created": submitting again is safe) or `unknown_since`
//! with `unknown_reason` and `checked_at_ms` (the answer was lost: a request may exist; see
//! [`crate::unknown`]). `found_request_id`: a request the history showed for such a unit
//! while its task was being cancelled (cancel PUTs it).

use serde::{Deserialize, Serialize};
use slotd_sdk::Unit;
use slotd_sdk::jobs::Record;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct State {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted_at_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancel_url: Option<String>,
    /// Submitted with `fal_webhook`: polls are only a safety net.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub webhook: bool,
    /// The last non-final status seen (`IN_QUEUE`, `IN_PROGRESS`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<u32>,
    /// What became of the current submission's submit (the SDK's record, its fields written
    /// in place: `submission`, `refused_at_ms`, `unknown_since`, `unknown_reason`).
    #[serde(flatten)]
    pub record: Record,
    /// When the request history was last read for the unknown outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checked_at_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub found_request_id: Option<String>,
}

impl State {
    /// The unit's state; unreadable state reads as empty (which never leads to a second
    /// submit: an in-doubt unit with no record is treated as outcome-unknown).
    pub fn of(unit: &Unit) -> State {
        serde_json::from_str(&unit.state).unwrap_or_default()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }

    /// State after a submit answered "not created" at `now_ms`.
    pub fn refused(unit: &Unit, now_ms: u64) -> State {
        State {
            record: Record::refused(unit, now_ms),
            ..State::default()
        }
    }

    /// State of a submission whose outcome is unknown since `since`, the history last read
    /// at `checked_at_ms`.
    pub fn unknown(unit: &Unit, since: u64, reason: &str, checked_at_ms: Option<u64>) -> State {
        State {
            record: Record::unknown(unit, since, reason),
            checked_at_ms,
            found_request_id: State::of(unit).found_request_id,
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
        assert_eq!(State::refused(&u, 2_000).record.said(&u), Said::Refused);
        let unknown = State::unknown(&u, 1_000, "HTTP 504", None).to_json();
        let again = unit(&unknown, 1_000);
        assert_eq!(
            State::of(&again).record.said(&again),
            Said::Unknown {
                since: 1_000,
                reason: "HTTP 504".into()
            }
        );
        let remarked = unit(&unknown, 9_000);
        assert_eq!(State::of(&remarked).record.said(&remarked), Said::Nothing);
        assert_eq!(State::of(&unit("not json", 1)), State::default());
        assert_eq!(State::default().to_json(), "{}");
    }
}
