//! Conversions between the generated WIT types and the host's Rust types, so nothing outside
//! the runtime ever sees a generated type.

use super::bindings::{extensions, wit};
use super::{
    Artifact, BatchUnit, CallbackChange, CancelChange, CancelOutcome, Features, Finalized,
    HandlerInfo, PlanError, PlannedUnit, PoolInfo, StageInfo, StagePool, TaskTypeInfo, TickContext,
};
use slotd_core::model::{Change, Outcome, ProviderError, ProviderQueue, Unit, UnitStatus};

pub(crate) fn status(s: UnitStatus) -> wit::UnitStatus {
    match s {
        UnitStatus::Pending => wit::UnitStatus::Pending,
        UnitStatus::Submitted => wit::UnitStatus::Submitted,
        UnitStatus::Succeeded => wit::UnitStatus::Succeeded,
        UnitStatus::Finalizing => wit::UnitStatus::Finalizing,
        UnitStatus::Completed => wit::UnitStatus::Completed,
        UnitStatus::Failed => wit::UnitStatus::Failed,
        UnitStatus::Cancelled => wit::UnitStatus::Cancelled,
    }
}

pub(crate) fn unit(u: &Unit, in_doubt: bool) -> wit::Unit {
    wit::Unit {
        id: u.id.clone(),
        task_id: u.task_id.clone(),
        index: u.index,
        task_type: u.task_type.clone(),
        tenant: u.tenant.clone(),
        stage: u.stage.clone(),
        status: status(u.status),
        spec: u.spec.clone(),
        state: u.state.clone(),
        provider_job_id: u.provider_job_id.clone(),
        idempotency_key: u.idempotency_key(),
        in_doubt,
        polls: u.polls,
        submitted_at_ms: u.submitted_at.and_then(|t| u64::try_from(t).ok()),
        result: u.result.clone(),
    }
}

pub(crate) fn batch(units: &[BatchUnit]) -> Vec<wit::Unit> {
    units.iter().map(|b| unit(&b.unit, b.in_doubt)).collect()
}

pub(crate) fn context(ctx: &TickContext) -> wit::TickContext {
    wit::TickContext {
        pool: ctx.pool.clone(),
        now_ms: ctx.now_ms,
        callback_url: ctx.provider_callback_url.clone(),
    }
}

fn provider_error(e: wit::ProviderError) -> ProviderError {
    ProviderError {
        code: e.code,
        message: e.message,
    }
}

pub(crate) fn outcome(o: wit::Outcome) -> Outcome {
    match o {
        wit::Outcome::Accepted(job_id) => Outcome::Accepted { job_id },
        wit::Outcome::Running(after_ms) => Outcome::Running { after_ms },
        wit::Outcome::Succeeded(result) => Outcome::Succeeded { result },
        wit::Outcome::NextStage(stage) => Outcome::NextStage { stage },
        wit::Outcome::CapacityRejected(after_ms) => Outcome::CapacityRejected { after_ms },
        wit::Outcome::RetryAfter(r) => Outcome::RetryAfter {
            after_ms: r.after_ms,
            error: provider_error(r.error),
        },
        wit::Outcome::Fail(e) => Outcome::Fail {
            error: provider_error(e),
        },
    }
}

/// A tick's change, with what the handler said of its queueing at the provider (contract 1.4
/// `observe.queued`, collected during the call): kept only beside a `running` outcome.
pub(crate) fn change(
    c: wit::Change,
    queued: &std::collections::HashMap<String, Option<u32>>,
) -> Change {
    let outcome = outcome(c.outcome);
    let provider_queue = match outcome {
        Outcome::Running { .. } => queued
            .get(&c.unit_id)
            .map(|&position| ProviderQueue { position }),
        _ => None,
    };
    Change {
        unit_id: c.unit_id,
        outcome,
        state: c.state,
        cost: c.cost,
        provider_queue,
    }
}

pub(crate) fn callback_change(c: wit::CallbackChange) -> CallbackChange {
    CallbackChange {
        provider_job_id: c.provider_job_id,
        idempotency_key: c.idempotency_key,
        outcome: outcome(c.outcome),
        state: c.state,
        cost: c.cost,
    }
}

pub(crate) fn finalized(f: wit::Finalized) -> Finalized {
    Finalized {
        artifacts: f
            .artifacts
            .into_iter()
            .map(|a| Artifact {
                name: a.name,
                url: a.url,
                content_type: a.content_type,
            })
            .collect(),
        result: f.result,
    }
}

pub(crate) fn planned(p: wit::PlannedUnit) -> PlannedUnit {
    PlannedUnit {
        spec: p.spec,
        state: p.state,
        pools: Vec::new(),
        cost: None,
    }
}

pub(crate) fn routed(p: extensions::RoutedUnit) -> PlannedUnit {
    PlannedUnit {
        spec: p.spec,
        state: p.state,
        pools: p.pools,
        cost: None,
    }
}

pub(crate) fn features(f: extensions::FeatureSet) -> Features {
    Features {
        cancel: f.contains(extensions::FeatureSet::CANCEL),
        routing: f.contains(extensions::FeatureSet::ROUTING),
        costs: false,
        provider: false,
        routes: false,
    }
}

pub(crate) fn stage_pool(p: extensions::StagePool) -> StagePool {
    StagePool {
        task_type: p.task_type,
        stage: p.stage,
        pool: PoolInfo {
            name: p.pool.name,
            default_max_slots: p.pool.default_max_slots,
        },
    }
}

pub(crate) fn cancel_change(c: extensions::CancelChange) -> CancelChange {
    let outcome = match c.outcome {
        extensions::CancelOutcome::Ended => CancelOutcome::Ended,
        extensions::CancelOutcome::Running(after_ms) => CancelOutcome::Running { after_ms },
        extensions::CancelOutcome::RetryAfter(r) => CancelOutcome::RetryAfter {
            after_ms: r.after_ms,
            error: provider_error(r.error),
        },
    };
    CancelChange {
        unit_id: c.unit_id,
        outcome,
        state: c.state,
        cost: c.cost,
    }
}

pub(crate) fn plan_error(e: wit::PlanError) -> PlanError {
    PlanError {
        field: e.field,
        message: e.message,
    }
}

pub(crate) fn info(i: wit::HandlerInfo) -> HandlerInfo {
    HandlerInfo {
        name: i.name,
        version: i.version,
        task_types: i
            .task_types
            .into_iter()
            .map(|t| TaskTypeInfo {
                name: t.name,
                stages: t
                    .stages
                    .into_iter()
                    .map(|s| StageInfo {
                        name: s.name,
                        pool: s.pool,
                        alt_pools: Vec::new(),
                    })
                    .collect(),
            })
            .collect(),
        pools: i
            .pools
            .into_iter()
            .map(|p| PoolInfo {
                name: p.name,
                default_max_slots: p.default_max_slots,
            })
            .collect(),
    }
}
