//! JSON forms of the WIT values a recording holds ([`super::tape::CallRecord`]): call inputs
//! (context, units) both ways, and call outputs (changes, finalized, cancel changes) one way,
//! so a replay compares what a handler returns with what it returned when recorded.

use anyhow::{Context, anyhow};
use serde_json::{Value, json};

use super::HandlerFault;
use super::bindings::{extensions, wit};

pub(crate) fn context(c: &wit::TickContext) -> Value {
    json!({ "pool": c.pool, "now_ms": c.now_ms, "callback_url": c.callback_url })
}

fn status_name(s: wit::UnitStatus) -> &'static str {
    match s {
        wit::UnitStatus::Pending => "pending",
        wit::UnitStatus::Submitted => "submitted",
        wit::UnitStatus::Succeeded => "succeeded",
        wit::UnitStatus::Finalizing => "finalizing",
        wit::UnitStatus::Completed => "completed",
        wit::UnitStatus::Failed => "failed",
        wit::UnitStatus::Cancelled => "cancelled",
    }
}

fn status_of(name: &str) -> anyhow::Result<wit::UnitStatus> {
    Ok(match name {
        "pending" => wit::UnitStatus::Pending,
        "submitted" => wit::UnitStatus::Submitted,
        "succeeded" => wit::UnitStatus::Succeeded,
        "finalizing" => wit::UnitStatus::Finalizing,
        "completed" => wit::UnitStatus::Completed,
        "failed" => wit::UnitStatus::Failed,
        "cancelled" => wit::UnitStatus::Cancelled,
        other => return Err(anyhow!("unknown unit status {other:?}")),
    })
}

pub(crate) fn unit(u: &wit::Unit) -> Value {
    json!({
        "id": u.id, "task_id": u.task_id, "index": u.index, "task_type": u.task_type,
        "tenant": u.tenant, "stage": u.stage, "status": status_name(u.status), "spec": u.spec,
        "state": u.state, "provider_job_id": u.provider_job_id,
        "idempotency_key": u.idempotency_key, "in_doubt": u.in_doubt, "polls": u.polls,
        "submitted_at_ms": u.submitted_at_ms, "result": u.result,
    })
}

pub(crate) fn tick_input(ctx: &wit::TickContext, units: &[wit::Unit]) -> Value {
    json!({ "ctx": context(ctx), "units": units.iter().map(unit).collect::<Vec<_>>() })
}

pub(crate) fn finalize_input(ctx: &wit::TickContext, u: &wit::Unit) -> Value {
    json!({ "ctx": context(ctx), "unit": unit(u) })
}

fn text(v: &Value, key: &str) -> anyhow::Result<String> {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .with_context(|| format!("{key:?} missing or not a string"))
}

fn opt_text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

fn number(v: &Value, key: &str) -> anyhow::Result<u64> {
    v.get(key)
        .and_then(Value::as_u64)
        .with_context(|| format!("{key:?} missing or not a number"))
}

fn small(v: &Value, key: &str) -> anyhow::Result<u32> {
    u32::try_from(number(v, key)?).with_context(|| format!("{key:?} out of range"))
}

pub(crate) fn context_of(v: &Value) -> anyhow::Result<wit::TickContext> {
    Ok(wit::TickContext {
        pool: text(v, "pool")?,
        now_ms: number(v, "now_ms")?,
        callback_url: opt_text(v, "callback_url"),
    })
}

pub(crate) fn unit_of(v: &Value) -> anyhow::Result<wit::Unit> {
    Ok(wit::Unit {
        id: text(v, "id")?,
        task_id: text(v, "task_id")?,
        index: small(v, "index")?,
        task_type: text(v, "task_type")?,
        tenant: text(v, "tenant")?,
        stage: text(v, "stage")?,
        status: status_of(&text(v, "status")?)?,
        spec: text(v, "spec")?,
        state: text(v, "state")?,
        provider_job_id: opt_text(v, "provider_job_id"),
        idempotency_key: text(v, "idempotency_key")?,
        in_doubt: v.get("in_doubt").and_then(Value::as_bool).unwrap_or(false),
        polls: small(v, "polls")?,
        submitted_at_ms: v.get("submitted_at_ms").and_then(Value::as_u64),
        result: opt_text(v, "result"),
    })
}

pub(crate) fn units_of(v: &Value) -> anyhow::Result<Vec<wit::Unit>> {
    v.as_array()
        .context("\"units\" is not a list")?
        .iter()
        .enumerate()
        .map(|(i, u)| unit_of(u).with_context(|| format!("units[{i}]")))
        .collect()
}

fn provider_error(e: &wit::ProviderError) -> Value {
    json!({ "code": e.code, "message": e.message })
}

fn outcome(o: &wit::Outcome) -> Value {
    match o {
        wit::Outcome::Accepted(id) => json!({ "accepted": id }),
        wit::Outcome::Running(after) => json!({ "running": after }),
        wit::Outcome::Succeeded(result) => json!({ "succeeded": result }),
        wit::Outcome::NextStage(stage) => json!({ "next_stage": stage }),
        wit::Outcome::CapacityRejected(after) => json!({ "capacity_rejected": after }),
        wit::Outcome::RetryAfter(r) => {
            json!({ "retry_after": { "after_ms": r.after_ms, "error": provider_error(&r.error) } })
        }
        wit::Outcome::Fail(e) => json!({ "fail": provider_error(e) }),
    }
}

pub(crate) fn changes(c: &[wit::Change]) -> Value {
    Value::Array(
        c.iter()
            .map(|c| {
                json!({ "unit_id": c.unit_id, "outcome": outcome(&c.outcome),
                        "state": c.state, "cost": c.cost })
            })
            .collect(),
    )
}

pub(crate) fn cancel_changes(c: &[extensions::CancelChange]) -> Value {
    Value::Array(
        c.iter()
            .map(|c| {
                let outcome = match &c.outcome {
                    extensions::CancelOutcome::Ended => json!("ended"),
                    extensions::CancelOutcome::Running(after) => json!({ "running": after }),
                    extensions::CancelOutcome::RetryAfter(r) => json!({ "retry_after": {
                        "after_ms": r.after_ms, "error": provider_error(&r.error) } }),
                };
                json!({ "unit_id": c.unit_id, "outcome": outcome, "state": c.state,
                        "cost": c.cost })
            })
            .collect(),
    )
}

pub(crate) fn finalized(f: &wit::Finalized) -> Value {
    let artifacts: Vec<Value> = f
        .artifacts
        .iter()
        .map(|a| json!({ "name": a.name, "url": a.url, "content_type": a.content_type }))
        .collect();
    json!({ "artifacts": artifacts, "result": f.result })
}

/// A guest's `result<T, string>`.
pub(crate) fn result<T>(r: &Result<T, String>, ok: impl Fn(&T) -> Value) -> Value {
    match r {
        Ok(t) => json!({ "ok": ok(t) }),
        Err(e) => json!({ "err": e }),
    }
}

/// A whole call's answer: the guest's value, or the fault that ended the call.
pub(crate) fn answer<T>(a: &Result<T, HandlerFault>, ok: impl Fn(&T) -> Value) -> Value {
    match a {
        Ok(t) => ok(t),
        Err(fault) => json!({ "fault": fault.kind() }),
    }
}
