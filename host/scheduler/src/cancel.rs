//! Provider-side cancel (contract 1.1): units of cancelled tasks that are `submitted` with a
//! provider job id, or in doubt (no job id recorded), go to the handler's `cancel` instead of
//! `tick`, when it claims the feature. A unit's slot is freed only when the handler reports the
//! job ended (for one in doubt: that no job of it can still run); until then the unit keeps its
//! slot and is asked again. A handler without the feature keeps the 1.0 rule (poll until the
//! job ends by itself, see [`super::decide::honour_cancel`]; a unit in doubt ends at once,
//! [`super::decide::cancel_unsent`]).

use std::collections::HashMap;
use std::sync::Arc;

use slotd_core::config::SchedulerConfig;
use slotd_core::model::{Unit, UnitStatus};
use slotd_runtime::{BatchUnit, CancelChange, CancelOutcome, Handler, HandlerFault, TickContext};
use slotd_store::{Field, UnitUpdate};

use super::Scheduler;
use super::decide::stage_deadline_error;
use super::policy::{poll_delay_ms, retry_delay_ms, stage_expired};

/// Split `units` into those the handler's `cancel` handles and the rest (for `tick`): units
/// of cancelled tasks, and units past their `stage_deadline` whose job the provider holds
/// (given up: cancelled at the provider, the slot held until it confirms). A unit freshly
/// marked submitted in this tick is not in doubt: it goes to `tick`, to be created.
pub(super) fn split_cancelling(
    cfg: &SchedulerConfig,
    h: &Handler,
    units: Vec<BatchUnit>,
    now: i64,
) -> (Vec<BatchUnit>, Vec<BatchUnit>) {
    if !h.features.cancel {
        return (Vec::new(), units);
    }
    units.into_iter().partition(|b| {
        let asked = b.unit.cancel_requested_at.is_some()
            && b.unit.status == UnitStatus::Submitted
            && (b.unit.provider_job_id.is_some() || b.in_doubt);
        asked || (b.unit.provider_job_id.is_some() && stage_expired(cfg, &b.unit, now))
    })
}

/// What a `cancel` call produced.
pub(super) struct CancelResult {
    pub updates: Vec<UnitUpdate>,
    pub faults: usize,
}

impl Scheduler {
    /// Call the handler's `cancel` for `units` and decide their updates.
    pub(super) async fn call_cancel(
        &self,
        h: Arc<Handler>,
        ctx: &TickContext,
        units: Vec<BatchUnit>,
        now: i64,
    ) -> CancelResult {
        let cfg = &self.services.config.scheduler;
        let refs: Vec<&Unit> = units.iter().map(|b| &b.unit).collect();
        match h.cancel(ctx, &units).await {
            None => CancelResult {
                updates: Vec::new(),
                faults: 0,
            },
            Some(Ok(changes)) => CancelResult {
                updates: cancel_updates(cfg, &refs, changes, now),
                faults: 0,
            },
            Some(Err(fault)) => {
                tracing::warn!(handler = %h.info.name, units = units.len(), %fault, "cancel faulted; units keep their slots");
                CancelResult {
                    updates: cancel_fault_updates(cfg, &refs, &fault, now),
                    faults: 1,
                }
            }
        }
    }
}

fn held(unit: &Unit) -> UnitUpdate {
    UnitUpdate {
        unit_id: unit.id.clone(),
        from: Some(UnitStatus::Submitted),
        from_stage: Some(unit.stage.clone()),
        to: Some(UnitStatus::Submitted),
        ..UnitUpdate::default()
    }
}

/// The updates for a `cancel` answer. `ended` ends the unit `cancelled` (its slot is freed by
/// the tick); `running` and `retry-after` keep the slot and ask again later; a unit without an
/// answer is asked again after the poll interval. Answers for units not in the call are
/// ignored (logged by the caller's count), as are repeated ones.
pub(crate) fn cancel_updates(
    cfg: &SchedulerConfig,
    units: &[&Unit],
    changes: Vec<CancelChange>,
    now: i64,
) -> Vec<UnitUpdate> {
    let mut by_id: HashMap<String, CancelChange> = HashMap::new();
    for c in changes {
        by_id.entry(c.unit_id.clone()).or_insert(c);
    }
    units
        .iter()
        .map(|unit| {
            let mut u = held(unit);
            let polls = unit.polls.saturating_add(1);
            let Some(change) = by_id.remove(&unit.id) else {
                u.polls = Some(polls);
                u.next_at = Some(now + poll_delay_ms(cfg, polls, None));
                u.detail = Some("cancel: the handler gave no answer; asked again later".into());
                return u;
            };
            u.state = change.state;
            u.cost = change.cost;
            match change.outcome {
                // Given up at the stage deadline (no client cancel): failed with that reason,
                // the slot freed now that the job has ended.
                CancelOutcome::Ended if unit.cancel_requested_at.is_none() => {
                    let error = stage_deadline_error(cfg, unit);
                    u.to = Some(UnitStatus::Failed);
                    u.submitted_at = Field::Clear;
                    u.detail = Some(format!(
                        "{}; the provider job was cancelled; slot released",
                        error.message
                    ));
                    u.error = Field::Set(error.to_json());
                    // A client's cancel landing meanwhile ends it cancelled at the next ask.
                    u.unless_cancel_requested = true;
                }
                CancelOutcome::Ended => {
                    u.to = Some(UnitStatus::Cancelled);
                    u.submitted_at = Field::Clear;
                    u.detail = Some(
                        "cancelled by client: the provider job was cancelled; slot released".into(),
                    );
                }
                CancelOutcome::Running { after_ms } => {
                    u.polls = Some(polls);
                    u.next_at = Some(now + poll_delay_ms(cfg, polls, after_ms));
                    u.detail =
                        Some("cancel asked; the provider job has not ended yet, slot held".into());
                }
                CancelOutcome::RetryAfter { after_ms, error } => {
                    u.polls = Some(polls);
                    u.next_at = Some(now + retry_delay_ms(cfg, polls, after_ms));
                    u.error = Field::Set(error.to_json());
                    u.detail = Some("cancel could not be asked; retried, slot held".into());
                }
            }
            u
        })
        .collect()
}

/// A faulted `cancel` changes no status: every unit keeps its slot and is asked again after
/// the backoff (its `stage_deadline` bounds how long).
pub(crate) fn cancel_fault_updates(
    cfg: &SchedulerConfig,
    units: &[&Unit],
    fault: &HandlerFault,
    now: i64,
) -> Vec<UnitUpdate> {
    units
        .iter()
        .map(|unit| {
            let mut u = held(unit);
            let polls = unit.polls.saturating_add(1);
            u.polls = Some(polls);
            u.next_at = Some(now + retry_delay_ms(cfg, polls, None));
            u.detail = Some(format!("cancel faulted ({fault}); slot held, asked again"));
            u
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_units::unit;
    use slotd_core::model::ProviderError;

    fn change(id: &str, outcome: CancelOutcome) -> CancelChange {
        CancelChange {
            unit_id: id.into(),
            outcome,
            state: None,
            cost: Some("0".into()),
        }
    }

    #[test]
    fn only_ended_frees_the_slot() {
        let cfg = SchedulerConfig::default();
        let units = ["a", "b", "c", "d"].map(|id| {
            let mut u = unit(id, Some(&format!("j-{id}")), "a");
            u.cancel_requested_at = Some(1);
            u
        });
        let refs: Vec<&Unit> = units.iter().collect();
        let error = ProviderError {
            code: Some("503".into()),
            message: "shedding load".into(),
        };
        let updates = cancel_updates(
            &cfg,
            &refs,
            vec![
                change("a", CancelOutcome::Ended),
                change(
                    "b",
                    CancelOutcome::Running {
                        after_ms: Some(7_000),
                    },
                ),
                change(
                    "c",
                    CancelOutcome::RetryAfter {
                        after_ms: None,
                        error,
                    },
                ),
                change("zz", CancelOutcome::Ended),
            ],
            1_000,
        );
        assert_eq!(updates.len(), 4, "one update per unit, none for strangers");
        assert_eq!(updates[0].to, Some(UnitStatus::Cancelled));
        assert_eq!(updates[0].submitted_at, Field::Clear);
        assert_eq!(updates[0].cost.as_deref(), Some("0"));
        for u in &updates[1..] {
            assert_eq!(u.to, Some(UnitStatus::Submitted), "{u:?}");
            assert!(
                u.next_at.is_some_and(|t| t > 1_000),
                "asked again later: {u:?}"
            );
            assert_eq!(u.from, Some(UnitStatus::Submitted));
        }
        assert!(updates[2].error.value().is_some());
        assert!(
            updates[3]
                .detail
                .as_deref()
                .is_some_and(|d| d.contains("no answer"))
        );
    }

    /// A unit given up at its stage deadline (no client cancel) whose provider job the
    /// cancel ended fails with the deadline as its reason, and only then frees its slot; while
    /// the job runs it keeps the slot and is asked again.
    #[test]
    fn a_job_given_up_at_the_stage_deadline_fails_once_cancelled() {
        let cfg = SchedulerConfig::default();
        let units = [unit("a", Some("j1"), "a"), unit("b", Some("j2"), "a")];
        let refs: Vec<&Unit> = units.iter().collect();
        let updates = cancel_updates(
            &cfg,
            &refs,
            vec![
                change("a", CancelOutcome::Ended),
                change("b", CancelOutcome::Running { after_ms: None }),
            ],
            5_000,
        );
        assert_eq!(updates[0].to, Some(UnitStatus::Failed));
        assert!(updates[0].unless_cancel_requested);
        let error = updates[0].error.value().cloned().unwrap_or_default();
        assert!(error.contains("stage_deadline"), "{error}");
        assert!(
            updates[0]
                .detail
                .as_deref()
                .is_some_and(|d| d.contains("cancelled; slot released")),
            "{:?}",
            updates[0].detail
        );
        assert_eq!(updates[1].to, Some(UnitStatus::Submitted));
    }

    #[test]
    fn a_faulted_cancel_keeps_every_slot() {
        let cfg = SchedulerConfig::default();
        let units = [unit("a", Some("j1"), "a"), unit("b", Some("j2"), "a")];
        let refs: Vec<&Unit> = units.iter().collect();
        let updates = cancel_fault_updates(&cfg, &refs, &HandlerFault::Trap("boom".into()), 5_000);
        assert!(
            updates.iter().all(
                |u| u.to == Some(UnitStatus::Submitted) && u.next_at.is_some_and(|t| t > 5_000)
            )
        );
    }
}
