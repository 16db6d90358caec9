//! How a task looks to a client: the seed frontend's polling contract
//! (`{task_id, type, status, completed, total, message, results, error}`, docs/api.md
//! and 15), built from the stored task header and its units. Pure: no I/O.

use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use slotd_core::model::{TaskStatus, Unit, UnitStatus};
use slotd_store::{Attempt, Delivery, TaskRecord, UnitEvent};

/// `GET /v1/tasks/{id}` and the answer to a cancel.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TaskView {
    #[serde(flatten)]
    pub summary: TaskSummary,
    /// One entry per unit, by index.
    pub results: Vec<Value>,
    /// For a failed task: the error (`{code?, message}`) of the first unit that failed or
    /// whose finalization gave up (code `finalize`; retrying the task finalizes it again).
    pub error: Option<Value>,
    /// Sum of the provider-reported costs, when any unit reported one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Sum of the handler's cost estimates, when it gave any (contract 1.2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_estimate: Option<f64>,
    /// The full unit records, when asked for with `?units=true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub units: Option<Vec<Unit>>,
    /// Units of its pool filled before the task's next waiting unit (0: it is next); absent
    /// when none of its units waits for a slot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<u64>,
    /// When the task's jobs in its pool are expected to end (Unix ms), from the pool's free
    /// slots, the fill order and the provider's observed durations (see `eta.rs`); absent for
    /// a finished task, and until the pool has seen enough jobs end to say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_completion_at: Option<i64>,
}

/// A task without its per-unit detail: what `GET /v1/tasks` lists.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TaskSummary {
    pub task_id: String,
    #[serde(rename = "type")]
    pub task_type: String,
    pub status: TaskStatus,
    /// Units completed.
    pub completed: u32,
    /// Units in the task.
    pub total: u32,
    /// Human progress line ("3/12 completed, 2 running, 7 waiting"); after a cancel, it
    /// starts with how many units wait for their provider jobs to end.
    pub message: String,
    /// The client asked to cancel the task. Its status stays `running` while units wait for
    /// their provider jobs to end (they keep their slots), then becomes `cancelled`.
    pub cancel_requested: bool,
    pub priority: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Unix milliseconds.
    pub updated_at: i64,
    /// The tenant that owns the task (an admin's lists mix tenants).
    pub tenant: String,
    /// Complete by this time (Unix ms), if the task asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<i64>,
    /// Be submitted by this time (Unix ms), if the task asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_by: Option<i64>,
    /// `refuse` or `best_effort`, when the task has a deadline or start-by time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline_policy: Option<&'static str>,
}

/// `GET /v1/tasks`: a page of the tenant's tasks.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskList {
    /// Newest first.
    pub tasks: Vec<TaskSummary>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// What `POST /v1/tasks/{id}/retry` did.
#[derive(Debug, Serialize, ToSchema)]
pub struct Retried {
    pub task_id: String,
    /// Units moved back to `pending` (failed) or made due for finalization again.
    pub retried: u32,
}

/// `GET /v1/tasks/{id}/events` as JSON.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskEvents {
    pub task_id: String,
    /// Oldest first.
    pub events: Vec<UnitEvent>,
}

/// `GET /v1/tasks/{id}/webhooks`.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskWebhooks {
    pub task_id: String,
    /// Where the task's completion is delivered, if anywhere.
    pub callback_url: Option<String>,
    /// Oldest first.
    pub deliveries: Vec<DeliveryView>,
}

/// One webhook delivery with its attempts.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryView {
    #[serde(flatten)]
    pub delivery: Delivery,
    /// Every attempt so far, oldest first.
    pub attempts: Vec<Attempt>,
}

impl TaskSummary {
    pub fn new(task: &TaskRecord) -> Self {
        TaskSummary {
            task_id: task.id.clone(),
            task_type: task.task_type.clone(),
            status: task.counts.task_status(),
            completed: task.counts.completed,
            total: task.counts.total(),
            message: task.counts.message_for(task.cancel_requested_at.is_some()),
            cancel_requested: task.cancel_requested_at.is_some(),
            priority: task.priority,
            idempotency_key: task.idempotency_key.clone(),
            created_at: task.created_at,
            updated_at: task.updated_at,
            tenant: task.tenant.clone(),
            deadline_at: task.terms.deadline_at,
            start_by: task.terms.start_by,
            deadline_policy: (!task.terms.is_empty()).then_some(if task.terms.best_effort {
                "best_effort"
            } else {
                "refuse"
            }),
        }
    }
}

impl TaskView {
    /// Build the view; `with_units` adds the full unit records.
    pub fn new(task: &TaskRecord, units: Vec<Unit>, with_units: bool) -> Self {
        let summary = TaskSummary::new(task);
        let results = units.iter().map(result_entry).collect();
        let error = if summary.status == TaskStatus::Failed {
            units
                .iter()
                .filter(|u| u.status == UnitStatus::Failed || u.finalize_parked())
                .min_by_key(|u| u.index)
                .map(|u| error_value(u.error.as_deref()))
        } else {
            None
        };
        let costs: Vec<f64> = units
            .iter()
            .filter_map(|u| u.cost.as_deref())
            .filter_map(|c| c.trim().parse::<f64>().ok())
            .collect();
        let cost = (!costs.is_empty()).then(|| costs.iter().sum());
        let estimates: Vec<f64> = units.iter().filter_map(|u| u.terms.cost_estimate).collect();
        let cost_estimate = (!estimates.is_empty()).then(|| estimates.iter().sum());
        TaskView {
            summary,
            results,
            error,
            cost,
            cost_estimate,
            units: with_units.then_some(units),
            queue_position: None,
            estimated_completion_at: None,
        }
    }
}

/// A routed unit's route (docs/routes.md): the route, the target that serves it (handler,
/// model, pool) once bound, and the targets that refused it, with why.
fn route_entry(unit: &Unit) -> Option<Value> {
    let routing = unit.routing()?;
    let mut out = Map::new();
    out.insert("route".into(), routing.route.clone().into());
    if let Some(o) = routing.bound_option() {
        out.insert("handler".into(), o.handler.clone().into());
        out.insert("model".into(), o.model.clone().into());
        if let Some(p) = &o.plan {
            out.insert("pool".into(), p.pool.clone().into());
        }
    }
    let refused: Vec<Value> = routing
        .options
        .iter()
        .filter_map(|o| {
            let r = o.refused.as_ref()?;
            Some(serde_json::json!({
                "handler": o.handler, "model": o.model, "reason": r.reason,
                "message": r.message, "at": r.at,
            }))
        })
        .collect();
    if !refused.is_empty() {
        out.insert("refused".into(), Value::Array(refused));
    }
    Some(Value::Object(out))
}

/// A reported cost as a number when it reads as one, else as the provider's text.
fn cost_value(cost: &str) -> Value {
    match cost.trim().parse::<f64>() {
        Ok(n) if n.is_finite() => Value::from(n),
        _ => Value::from(cost),
    }
}

/// One entry of `results`: `{index, status, stage, provider_task_id, error?}` plus, when the
/// unit's result is a JSON object, its keys (`object_key`, `bytes`, `sha256`, `voice_id`, …).
/// The fixed keys win over result keys of the same name, so a handler cannot disguise a unit's
/// status.
fn result_entry(unit: &Unit) -> Value {
    let mut entry = Map::new();
    if let Some(Value::Object(fields)) = unit
        .result
        .as_deref()
        .and_then(|r| serde_json::from_str::<Value>(r).ok())
    {
        entry.extend(fields);
    }
    entry.insert("index".into(), unit.index.into());
    entry.insert("status".into(), unit.status.as_str().into());
    entry.insert("stage".into(), unit.stage.clone().into());
    entry.insert(
        "provider_task_id".into(),
        unit.provider_job_id
            .clone()
            .map_or(Value::Null, Value::from),
    );
    // A pending unit waits for slotd (budget, spend, quota); a submitted one may wait in the
    // provider's own queue (contract 1.4), shown with its position there.
    let (wait_reason, provider_queue_position) = match unit.terms.wait_reason.as_deref() {
        Some(r) if unit.status == UnitStatus::Pending => (Some(Value::from(r)), None),
        Some(r) if unit.status == UnitStatus::Submitted && slotd_store::is_provider_queue(r) => {
            let position = r
                .strip_prefix(slotd_store::PROVIDER_QUEUE)
                .and_then(|rest| rest.trim().parse::<u32>().ok());
            (
                Some(Value::from(slotd_store::PROVIDER_QUEUE)),
                position.map(Value::from),
            )
        }
        _ => (None, None),
    };
    for (key, value) in [
        ("route", route_entry(unit)),
        ("cost", unit.cost.clone().map(|c| cost_value(&c))),
        ("account", unit.terms.account.clone().map(Value::from)),
        ("cost_estimate", unit.terms.cost_estimate.map(Value::from)),
        ("wait_reason", wait_reason),
        ("provider_queue_position", provider_queue_position),
    ] {
        match value {
            Some(v) => entry.insert(key.into(), v),
            None => entry.remove(key),
        };
    }
    match &unit.error {
        Some(e) if unit.status == UnitStatus::Failed || !unit.status.is_terminal() => {
            entry.insert("error".into(), error_value(Some(e)));
        }
        _ => {
            entry.remove("error");
        }
    }
    Value::Object(entry)
}

/// A stored error as JSON: the stored `{code?, message}` object, or the raw text wrapped as
/// `{message}` if it is not JSON.
fn error_value(stored: Option<&str>) -> Value {
    match stored {
        None => serde_json::json!({ "message": "failed without an error message" }),
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => v,
            _ => serde_json::json!({ "message": text }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slotd_core::model::UnitCounts;

    fn unit(index: u32, status: UnitStatus) -> Unit {
        Unit {
            id: format!("u{index}"),
            task_id: "t".into(),
            index,
            tenant: "a".into(),
            task_type: "video".into(),
            pool: "p".into(),
            stage: "main".into(),
            status,
            priority: 0,
            spec: "{}".into(),
            state: "{}".into(),
            provider_job_id: None,
            submit_attempt: 0,
            attempts: 0,
            polls: 0,
            next_at: 0,
            submitted_at: None,
            error: None,
            result: None,
            cost: None,
            cancel_requested_at: None,
            routes: None,
            routing: None,
            terms: Default::default(),
            releases: Default::default(),
            created_at: 1,
            updated_at: 2,
        }
    }

    fn record(units: &[Unit]) -> TaskRecord {
        let mut counts = UnitCounts::default();
        for u in units {
            if u.finalize_parked() {
                counts.add_parked(1);
            } else {
                counts.add(u.status, 1);
            }
        }
        TaskRecord {
            id: "t".into(),
            tenant: "a".into(),
            task_type: "video".into(),
            payload: "{}".into(),
            idempotency_key: None,
            priority: 0,
            completion_webhook_url: None,
            cancel_requested_at: None,
            created_at: 1,
            updated_at: 2,
            counts,
            terms: Default::default(),
        }
    }

    #[test]
    fn results_merge_unit_results_and_errors() {
        let mut done = unit(0, UnitStatus::Completed);
        done.provider_job_id = Some("job-0".into());
        done.result = Some(r#"{"object_key":"k","bytes":3,"status":"forged"}"#.into());
        done.cost = Some("1.5".into());
        let mut failed = unit(1, UnitStatus::Failed);
        failed.error = Some(r#"{"code":"1201","message":"bad prompt"}"#.into());
        failed.cost = Some("0.5".into());
        let units = vec![done, failed];
        let view = TaskView::new(&record(&units), units, false);
        let json = serde_json::to_value(&view).expect("serializes");
        assert_eq!(json["status"], "failed");
        assert_eq!(json["completed"], 1);
        assert_eq!(json["total"], 2);
        assert_eq!(json["results"][0]["object_key"], "k");
        assert_eq!(json["results"][0]["status"], "completed");
        assert_eq!(json["results"][0]["provider_task_id"], "job-0");
        assert_eq!(json["results"][1]["error"]["code"], "1201");
        assert_eq!(json["error"]["message"], "bad prompt");
        assert_eq!(json["cost"], 2.0);
        assert!(json.get("units").is_none());
    }

    #[test]
    fn parked_finalization_fails_the_task_with_its_reason() {
        let done = unit(0, UnitStatus::Completed);
        let mut parked = unit(1, UnitStatus::Succeeded);
        parked.next_at = slotd_core::model::FINALIZE_PARKED_AT;
        parked.provider_job_id = Some("job-1".into());
        parked.result = Some(r#"{"url":"http://p/f"}"#.into());
        parked.error = Some(r#"{"code":"finalize","message":"object store: disk"}"#.into());
        let units = vec![done, parked];
        let view = TaskView::new(&record(&units), units, false);
        let json = serde_json::to_value(&view).expect("serializes");
        assert_eq!(json["status"], "failed");
        assert_eq!(json["error"]["code"], "finalize");
        assert_eq!(json["results"][1]["status"], "succeeded");
        assert_eq!(json["results"][1]["url"], "http://p/f");
        assert_eq!(json["results"][1]["error"]["code"], "finalize");
    }

    #[test]
    fn running_task_has_no_task_error() {
        let units = vec![unit(0, UnitStatus::Pending), unit(1, UnitStatus::Submitted)];
        let view = TaskView::new(&record(&units), units, true);
        let json = serde_json::to_value(&view).expect("serializes");
        assert_eq!(json["status"], "running");
        assert_eq!(json["error"], Value::Null);
        assert_eq!(json["units"].as_array().map(Vec::len), Some(2));
    }
}
