//! Provider-side cancel (contract 1.1): units of cancelled tasks that are `submitted` with a
//! provider job id go to the handler's `cancel` instead of `tick`, when it claims the feature.
//! A unit's slot is freed only when the handler reports the job ended; until then the unit
//! keeps its slot and is asked again. A handler without the feature keeps the 1.0 rule (poll
//! until the job ends by itself, see [`super::apply::honour_cancel`]).

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::SchedulerConfig;
use crate::model::{ProviderError, Unit, UnitStatus};
use crate::runtime::{BatchUnit, CancelChange, CancelOutcome, Handler, HandlerFault, TickContext};
use crate::store::UnitUpdate;

use super::Scheduler;
use super::policy::{poll_delay_ms, retry_delay_ms};

/// Split `units` into those the handler's `cancel` handles and the rest (for `tick`).
pub(super) fn split_cancelling(
    h: &Handler,
    units: Vec<BatchUnit>,
) -> (Vec<BatchUnit>, Vec<BatchUnit>) {
    if !h.features.cancel {
        return (Vec::new(), units);
    }
    units.into_iter().partition(|b| {
        b.unit.cancel_requested_at.is_some()
            && b.unit.status == UnitStatus::Submitted
            && b.unit.provider_job_id.is_some()
    })
}

/// What a `cancel` call produced.
pub(super) struct CancelResult {
    pub updates: Vec<UnitUpdate>,
    pub faults: usize,
}

impl Scheduler {
    /// Call the handler's `cancel` for `units` and plan their updates.
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

fn error_json(e: &ProviderError) -> String {
    serde_json::json!({ "code": e.code, "message": e.message }).to_string()
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
                CancelOutcome::Ended => {
                    u.to = Some(UnitStatus::Cancelled);
                    u.submitted_at = Some(None);
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
                    u.error = Some(Some(error_json(&error)));
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
