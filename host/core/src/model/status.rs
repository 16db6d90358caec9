//! Unit statuses and the legal transitions between them (docs/state-machine.md).
//!
//! This is the one place that says which moves are legal; the scheduler validates every change
//! a handler returns against [`UnitStatus::can_move_to`] before anything is written.

use std::fmt;
use std::str::FromStr;

/// Where a unit is in its life. A slot is held exactly while a unit is `Submitted`.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum UnitStatus {
    /// Waiting for a slot.
    Pending,
    /// Holds a slot; the job is (about to be) at the provider.
    Submitted,
    /// The provider finished the job; waiting for finalization.
    Succeeded,
    /// A finalizer holds a lease on the unit and is storing its artifacts.
    Finalizing,
    /// Artifacts stored. Terminal.
    Completed,
    /// Gave up, error recorded. Terminal (an explicit retry moves it back to `Pending`).
    Failed,
    /// Cancelled by the client. Terminal.
    Cancelled,
}

impl UnitStatus {
    /// Every status, in state-machine order.
    pub const ALL: [UnitStatus; 7] = [
        UnitStatus::Pending,
        UnitStatus::Submitted,
        UnitStatus::Succeeded,
        UnitStatus::Finalizing,
        UnitStatus::Completed,
        UnitStatus::Failed,
        UnitStatus::Cancelled,
    ];

    /// The name stored in the database and shown in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            UnitStatus::Pending => "pending",
            UnitStatus::Submitted => "submitted",
            UnitStatus::Succeeded => "succeeded",
            UnitStatus::Finalizing => "finalizing",
            UnitStatus::Completed => "completed",
            UnitStatus::Failed => "failed",
            UnitStatus::Cancelled => "cancelled",
        }
    }

    /// `completed`, `failed` and `cancelled` end a unit's life.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            UnitStatus::Completed | UnitStatus::Failed | UnitStatus::Cancelled
        )
    }

    /// Whether the unit holds a provider slot in this status.
    pub fn holds_slot(self) -> bool {
        self == UnitStatus::Submitted
    }

    /// The legal moves of docs/state-machine.md.
    ///
    /// `Submitted -> Submitted` and `Pending -> Pending` are legal: they record a provider job
    /// id, a poll, a stage change or a retry delay without leaving the status; so are
    /// `Succeeded -> Succeeded` (a parked finalization made due again by a retry) and
    /// `Finalizing -> Finalizing` (an expired lease taken over).
    pub fn can_move_to(self, to: UnitStatus) -> bool {
        use UnitStatus::*;
        match (self, to) {
            // Any non-terminal unit can be cancelled.
            (from, Cancelled) => !from.is_terminal(),
            (Pending, Pending | Submitted) => true,
            // A deadline that cannot be met fails the unit before any submit.
            (Pending, Failed) => true,
            // Back to pending: capacity rejected, retryable submit error, next stage.
            (Submitted, Pending | Submitted | Succeeded | Failed) => true,
            // Succeeded -> succeeded: a retry makes a unit whose finalization gave up due again.
            (Succeeded, Succeeded | Finalizing | Failed) => true,
            // A lost lease returns the unit to succeeded for another finalizer; a dead
            // finalizer's expired lease is taken over by another (finalizing again).
            (Finalizing, Finalizing | Completed | Failed | Succeeded) => true,
            // Explicit retry of failed units.
            (Failed, Pending) => true,
            _ => false,
        }
    }
}

impl fmt::Display for UnitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is not one of [`UnitStatus::ALL`].
#[derive(Debug, thiserror::Error)]
#[error("unknown unit status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for UnitStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        UnitStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::UnitStatus::{self, *};

    /// The full table of docs/state-machine.md, written out so that a change to the state machine is a
    /// deliberate edit here too. Every (from, to) pair is checked.
    const LEGAL: &[(UnitStatus, UnitStatus)] = &[
        (Pending, Pending),
        (Pending, Submitted),
        (Pending, Failed),
        (Pending, Cancelled),
        (Submitted, Pending),
        (Submitted, Submitted),
        (Submitted, Succeeded),
        (Submitted, Failed),
        (Submitted, Cancelled),
        (Succeeded, Succeeded),
        (Succeeded, Finalizing),
        (Succeeded, Failed),
        (Succeeded, Cancelled),
        (Finalizing, Succeeded),
        (Finalizing, Finalizing),
        (Finalizing, Completed),
        (Finalizing, Failed),
        (Finalizing, Cancelled),
        (Failed, Pending),
    ];

    #[test]
    fn every_pair_matches_the_table() {
        for from in UnitStatus::ALL {
            for to in UnitStatus::ALL {
                let expected = LEGAL.contains(&(from, to));
                assert_eq!(from.can_move_to(to), expected, "{from} -> {to}");
            }
        }
    }

    #[test]
    fn terminal_statuses_only_leave_by_retry() {
        for from in [Completed, Cancelled] {
            for to in UnitStatus::ALL {
                assert!(!from.can_move_to(to), "{from} -> {to} must be refused");
            }
        }
        for to in UnitStatus::ALL {
            assert_eq!(Failed.can_move_to(to), to == Pending, "failed -> {to}");
        }
    }

    #[test]
    fn names_round_trip() {
        for st in UnitStatus::ALL {
            assert_eq!(st.as_str().parse::<UnitStatus>().ok(), Some(st));
            // What logs, errors and event details print is the stored name.
            assert_eq!(st.to_string(), st.as_str());
        }
        assert!("succeed".parse::<UnitStatus>().is_err());
    }

    #[test]
    fn only_submitted_holds_a_slot() {
        for st in UnitStatus::ALL {
            assert_eq!(st.holds_slot(), st == Submitted);
        }
    }
}
