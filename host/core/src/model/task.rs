//! Tasks and units as records, and the task status derived from its units.

use serde::{Deserialize, Serialize};

use super::UnitStatus;

/// A task's status, derived from its units' statuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// No unit has started yet.
    Pending,
    /// Some unit has started and not all are terminal. A cancelled task stays here while its
    /// `submitted` units wait for their provider jobs to end (they hold slots until then).
    Running,
    /// Every unit completed.
    Completed,
    /// Every unit is settled (terminal, or `succeeded` with its finalization given up) and at
    /// least one failed or gave up finalization (partial results are kept).
    Failed,
    /// Every unit is terminal, none failed, at least one cancelled.
    Cancelled,
}

impl TaskStatus {
    /// `completed`, `failed` and `cancelled`: nothing more will happen without a retry.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::Running => "running",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }
}

/// Unit counts by status for one task, from which status and progress are derived.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnitCounts {
    pub pending: u32,
    pub submitted: u32,
    pub succeeded: u32,
    pub finalizing: u32,
    pub completed: u32,
    pub failed: u32,
    pub cancelled: u32,
    /// Of `succeeded`, the units whose finalization gave up ([`Unit::finalize_parked`]): not
    /// terminal (a retry finalizes them again) but no longer moving on their own.
    ///
    /// [`Unit::finalize_parked`]: super::Unit::finalize_parked
    pub parked: u32,
}

impl UnitCounts {
    /// Count one more unit in `status`.
    pub fn add(&mut self, status: UnitStatus, n: u32) {
        let slot = match status {
            UnitStatus::Pending => &mut self.pending,
            UnitStatus::Submitted => &mut self.submitted,
            UnitStatus::Succeeded => &mut self.succeeded,
            UnitStatus::Finalizing => &mut self.finalizing,
            UnitStatus::Completed => &mut self.completed,
            UnitStatus::Failed => &mut self.failed,
            UnitStatus::Cancelled => &mut self.cancelled,
        };
        *slot += n;
    }

    pub fn total(&self) -> u32 {
        self.pending
            + self.submitted
            + self.succeeded
            + self.finalizing
            + self.completed
            + self.failed
            + self.cancelled
    }

    /// Count more `succeeded` units whose finalization gave up.
    pub fn add_parked(&mut self, n: u32) {
        self.succeeded += n;
        self.parked += n;
    }

    /// Units whose life has ended.
    pub fn terminal(&self) -> u32 {
        self.completed + self.failed + self.cancelled
    }

    /// Units that will not move without the client: terminal ones and parked ones.
    pub fn settled(&self) -> u32 {
        self.terminal() + self.parked
    }

    /// The derived task status.
    pub fn task_status(&self) -> TaskStatus {
        let total = self.total();
        if total == 0 {
            return TaskStatus::Pending;
        }
        // A unit whose finalization gave up ends the task like a failed one (its error is the
        // task's, its provider result is kept), so a task never shows `running` forever.
        if self.settled() == total {
            return if self.completed == total {
                TaskStatus::Completed
            } else if self.failed > 0 || self.parked > 0 {
                TaskStatus::Failed
            } else {
                TaskStatus::Cancelled
            };
        }
        if self.pending == total {
            TaskStatus::Pending
        } else {
            TaskStatus::Running
        }
    }

    /// Human progress line for the seed frontend's `message` field.
    pub fn message(&self) -> String {
        self.message_for(false)
    }

    /// The progress line of a task whose cancel was requested or not. Once cancelled, the
    /// `submitted` units are the ones waiting for their provider jobs to end, and the line
    /// says so first.
    pub fn message_for(&self, cancel_requested: bool) -> String {
        let progress = format!("{}/{} completed", self.completed, self.total());
        let mut parts = Vec::new();
        let mut running = self.submitted;
        if cancel_requested && self.submitted > 0 {
            parts.push(match self.submitted {
                1 => "cancelling: 1 unit waiting for its provider job to end".to_string(),
                n => format!("cancelling: {n} units waiting for their provider jobs to end"),
            });
            running = 0;
        }
        parts.push(progress);
        for (n, what) in [
            (running, "running"),
            (
                self.succeeded.saturating_sub(self.parked) + self.finalizing,
                "storing",
            ),
            (self.pending, "waiting"),
            (self.failed, "failed"),
            (self.parked, "not stored (retry to store)"),
            (self.cancelled, "cancelled"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        parts.join(", ")
    }
}

/// A task's deadline terms (request body `deadline`, `start_by`, `deadline_policy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskTerms {
    pub deadline_at: Option<i64>,
    pub start_by: Option<i64>,
    /// `deadline_policy: best_effort`.
    pub best_effort: bool,
}

impl TaskTerms {
    /// Neither a deadline nor a start-by time.
    pub fn is_empty(&self) -> bool {
        self.deadline_at.is_none() && self.start_by.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(list: &[(UnitStatus, u32)]) -> UnitCounts {
        let mut c = UnitCounts::default();
        for &(s, n) in list {
            c.add(s, n);
        }
        c
    }

    /// Units whose job succeeded and units being finalized are both "storing".
    #[test]
    fn storing_counts_succeeded_and_finalizing() {
        use UnitStatus::*;
        let c = counts(&[(Succeeded, 2), (Finalizing, 3), (Completed, 1)]);
        assert_eq!(c.message(), "1/6 completed, 5 storing");
    }

    #[test]
    fn derived_status() {
        use UnitStatus::*;
        assert_eq!(counts(&[(Pending, 3)]).task_status(), TaskStatus::Pending);
        assert_eq!(
            counts(&[(Pending, 2), (Submitted, 1)]).task_status(),
            TaskStatus::Running
        );
        assert_eq!(
            counts(&[(Pending, 2), (Completed, 1)]).task_status(),
            TaskStatus::Running
        );
        assert_eq!(
            counts(&[(Completed, 3)]).task_status(),
            TaskStatus::Completed
        );
        assert_eq!(
            counts(&[(Completed, 2), (Failed, 1)]).task_status(),
            TaskStatus::Failed
        );
        assert_eq!(
            counts(&[(Completed, 2), (Failed, 1), (Cancelled, 1)]).task_status(),
            TaskStatus::Failed
        );
        assert_eq!(
            counts(&[(Completed, 2), (Cancelled, 1)]).task_status(),
            TaskStatus::Cancelled
        );
        assert_eq!(
            counts(&[(Failed, 1), (Finalizing, 1)]).task_status(),
            TaskStatus::Running
        );
    }

    #[test]
    fn parked_finalization_ends_the_task_failed() {
        use UnitStatus::*;
        let mut c = counts(&[(Completed, 2)]);
        c.add_parked(1);
        assert_eq!(c.task_status(), TaskStatus::Failed);
        assert_eq!(c.message(), "2/3 completed, 1 not stored (retry to store)");
        // While another unit still moves, the task runs.
        c.add(Succeeded, 1);
        assert_eq!(c.task_status(), TaskStatus::Running);
        assert_eq!(
            c.message(),
            "2/4 completed, 1 storing, 1 not stored (retry to store)"
        );
    }

    #[test]
    fn message_mentions_what_is_happening() {
        use UnitStatus::*;
        let m = counts(&[(Completed, 3), (Submitted, 2), (Pending, 7), (Failed, 1)]).message();
        assert_eq!(m, "3/13 completed, 2 running, 7 waiting, 1 failed");
    }

    /// A cancelled task whose submitted units wait for their jobs: still running (slots are
    /// held), and the line says what it waits for; once they end, it is cancelled.
    #[test]
    fn cancelling_task_says_what_it_waits_for() {
        use UnitStatus::*;
        let waiting = counts(&[(Submitted, 3), (Cancelled, 2), (Failed, 1)]);
        assert_eq!(waiting.task_status(), TaskStatus::Running);
        assert_eq!(
            waiting.message_for(true),
            "cancelling: 3 units waiting for their provider jobs to end, 0/6 completed, \
             1 failed, 2 cancelled"
        );
        assert_eq!(
            counts(&[(Submitted, 1)]).message_for(true),
            "cancelling: 1 unit waiting for its provider job to end, 0/1 completed"
        );
        let done = counts(&[(Completed, 1), (Cancelled, 5)]);
        assert_eq!(done.task_status(), TaskStatus::Cancelled);
        assert_eq!(done.message_for(true), done.message());
    }
}
