//! Guarded unit updates: what a batch write says about each unit, and the checks every store
//! applies before writing it.

use slotd_core::model::UnitStatus;

/// The `wait_reason` of a submitted unit whose job the provider holds in its own queue; with
/// the position, `provider_queue <n>`.
pub const PROVIDER_QUEUE: &str = "provider_queue";

/// Whether a `wait_reason` is [`PROVIDER_QUEUE`]'s, with or without a position.
pub fn is_provider_queue(reason: &str) -> bool {
    reason == PROVIDER_QUEUE
        || reason
            .strip_prefix(PROVIDER_QUEUE)
            .is_some_and(|rest| rest.starts_with(' '))
}

/// A column an update leaves alone, sets, or clears.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Field<T> {
    /// Leave the column as it is.
    #[default]
    Keep,
    /// Write this value.
    Set(T),
    /// Write NULL.
    Clear,
}

impl<T> Field<T> {
    /// Whether the update leaves the column alone.
    pub fn is_keep(&self) -> bool {
        matches!(self, Field::Keep)
    }

    /// The value written, if the update sets one (`None` for both `Keep` and `Clear`).
    pub fn value(&self) -> Option<&T> {
        match self {
            Field::Set(v) => Some(v),
            Field::Keep | Field::Clear => None,
        }
    }
}

/// A guarded update of one unit: applied only if the unit is still in `from` (and, when given,
/// still in stage `from_stage`). A plain `Option` field means "`None` leaves the column alone,
/// `Some` sets it"; a [`Field`] can also clear its column.
#[derive(Clone, Debug, Default)]
pub struct UnitUpdate {
    pub unit_id: String,
    pub from: Option<UnitStatus>,
    pub to: Option<UnitStatus>,
    pub from_stage: Option<String>,
    /// Guard: applied only if the unit's `submitted_at` is still this (a callback may change
    /// only the submit attempt its token names, not a resubmission that raced it).
    pub from_submitted_at: Option<i64>,
    pub stage: Option<String>,
    pub pool: Option<String>,
    /// A routed unit going back to its route takes the route's name again (docs/routes.md).
    pub task_type: Option<String>,
    /// A routed unit's options and binding, rewritten (JSON `UnitRouting`).
    pub routing: Option<String>,
    /// `Clear` drops the job id (a new stage).
    pub provider_job_id: Field<String>,
    pub state: Option<String>,
    pub result: Option<String>,
    pub error: Field<String>,
    pub cost: Option<String>,
    pub next_at: Option<i64>,
    pub attempts: Option<u32>,
    pub polls: Option<u32>,
    pub submit_attempt: Option<u32>,
    /// `Clear` drops it (leaving `submitted`).
    pub submitted_at: Field<i64>,
    /// Text for the event log row written with this update.
    pub detail: Option<String>,
    /// Why the unit waits (`provider_queue` while the provider holds a submitted unit's job
    /// in its own queue); `Clear` when it no longer does.
    pub wait_reason: Field<String>,
    /// The handler release (sha256) that created the job this update records: set with a
    /// new provider job id.
    pub job_release: Option<String>,
    /// Applied only if no cancel has been requested for the unit: an update planned before a
    /// cancel landed must not finalize, fail or requeue a unit the client cancelled (the next
    /// poll plans it again, cancel in view). See `scheduler::decide::honour_cancel`.
    pub unless_cancel_requested: bool,
}

impl UnitUpdate {
    /// Whether this update is worth an event row. A poll that changes nothing but timing
    /// ("still running") is not: the log records transitions and things worth reading, not
    /// every tick.
    pub fn eventful(&self) -> bool {
        self.detail.is_some()
            || self.from.is_none()
            || self.to.is_some_and(|t| Some(t) != self.from)
            || self.stage.is_some()
            || matches!(self.error, Field::Set(_))
    }
}

impl UnitUpdate {
    /// Whether this is a pure poll: a `submitted` unit stays `submitted` in its stage and only
    /// its poll schedule, poll count and handler state change ("still running", "accepted"
    /// repeats). Both stores write a batch of these with one narrow statement that touches no
    /// indexed column but `next_at` and writes no event row.
    pub fn is_pure_poll(&self) -> bool {
        self.from == Some(UnitStatus::Submitted)
            && matches!(self.to, None | Some(UnitStatus::Submitted))
            && self.stage.is_none()
            && self.pool.is_none()
            && self.task_type.is_none()
            && self.routing.is_none()
            && self.provider_job_id.is_keep()
            && self.result.is_none()
            && self.error.is_keep()
            && self.cost.is_none()
            && self.attempts.is_none()
            && self.submit_attempt.is_none()
            && self.submitted_at.is_keep()
            && self.detail.is_none()
            && self.wait_reason.is_keep()
            && self.job_release.is_none()
    }
}

/// Whether some unit appears twice in `updates`: then a backend applies them one by one, in
/// order, so that each guard sees the previous update.
pub(crate) fn has_repeats(updates: &[UnitUpdate]) -> bool {
    let mut seen = std::collections::HashSet::with_capacity(updates.len());
    !updates.iter().all(|u| seen.insert(u.unit_id.as_str()))
}

/// What [`UnitWrite::unit_apply`] did.
#[derive(Clone, Debug, Default)]
pub struct ApplyReport {
    /// Ids of the units updated.
    pub applied: Vec<String>,
    /// Ids whose guard no longer held (moved by someone else, e.g. cancelled); not written.
    pub skipped: Vec<String>,
    /// Updates refused because their status move is not legal (docs/state-machine.md); not written.
    pub refused: Vec<RefusedWrite>,
}

/// An update [`UnitWrite::unit_apply`] refused before writing it, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedWrite {
    pub unit_id: String,
    pub reason: String,
}

/// The updates of a batch whose status move is legal (docs/state-machine.md), and the refusals of the rest:
/// a move needs a `from` guard and `from.can_move_to(to)`. Every backend's `unit_apply`
/// writes only the first part, whoever built the batch, and reports the second (the unit
/// writer counts them in `slotd_illegal_writes_total`; the database's own trigger refuses what
/// gets past this).
pub fn split_illegal(
    updates: &[UnitUpdate],
) -> (std::borrow::Cow<'_, [UnitUpdate]>, Vec<RefusedWrite>) {
    let reason = |u: &UnitUpdate| -> Option<String> {
        let to = u.to?;
        match u.from {
            None => Some(format!("a move to {to} without a `from` guard")),
            Some(from) if from.can_move_to(to) => None,
            Some(from) => Some(format!(
                "{from} -> {to} is not a legal move of the unit state machine"
            )),
        }
    };
    if updates.iter().all(|u| reason(u).is_none()) {
        return (std::borrow::Cow::Borrowed(updates), Vec::new());
    }
    let mut legal = Vec::with_capacity(updates.len());
    let mut refused = Vec::new();
    for u in updates {
        match reason(u) {
            None => legal.push(u.clone()),
            Some(reason) => {
                tracing::error!(unit = %u.unit_id, %reason, "illegal unit write refused");
                refused.push(RefusedWrite {
                    unit_id: u.unit_id.clone(),
                    reason,
                });
            }
        }
    }
    (std::borrow::Cow::Owned(legal), refused)
}
