//! Kling's task object (query answers, list entries, callbacks) and what its status means for
//! a unit: `submitted|processing` → accepted (no job id recorded yet) or running with a hint;
//! `succeed` → the handler's success outcome; `failed` → `fail(task_failed, task_status_msg)`.

use serde_json::Value;

use slotd_sdk::{Change, Outcome, ProviderError, Unit};

/// While a job is past its shortest expected duration, query it about this often (before
/// scaling): a task's own query, `GET {collection}/{id}`, no sooner than this after the last.
pub const LATE_POLL_MS: u64 = 5_000;
/// A job read through a list page may be read again this soon (before scaling). A page is one
/// request answering for every task on it, not a query of each, so the per-task pace does not
/// apply; the host's poll rounds decide when the next page comes. A single query can only follow
/// once no other unit of the collection is due with it, and every single query keeps
/// [`LATE_POLL_MS`] to the next, so single queries of one task stay that far apart.
pub const LIST_POLL_MS: u64 = 1_000;

/// How a job was read: by its own query or on a list page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    Single,
    Listed,
}

impl Read {
    /// The least time to the next read after this one, before scaling.
    fn pace_ms(self) -> u64 {
        match self {
            Read::Single => LATE_POLL_MS,
            Read::Listed => LIST_POLL_MS,
        }
    }
}
/// The code recorded for a task Kling accepted and later ended `failed`.
pub const TASK_FAILED: &str = "task_failed";

/// Kling's status enum; note the spelling `succeed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Submitted,
    Processing,
    Succeed,
    Failed,
}

/// The fields of a task object the handlers use; `raw` keeps the rest (`task_result`).
#[derive(Clone, Debug, PartialEq)]
pub struct TaskObject {
    pub task_id: String,
    pub status: Status,
    pub status_msg: String,
    pub external_task_id: Option<String>,
    /// `final_unit_deduction`, as a string whatever type it came as.
    pub cost: Option<String>,
    /// `created_at`, Unix milliseconds.
    pub created_at_ms: Option<i64>,
    pub raw: Value,
}

/// Text of a string-or-number field (Kling ids are numeric strings, element ids numbers).
pub fn text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

impl TaskObject {
    /// Parse a task object; the error says which field is missing or wrong.
    pub fn parse(v: &Value) -> Result<TaskObject, String> {
        let task_id = text(v.get("task_id")).ok_or("task object has no task_id")?;
        let status = match v.get("task_status").and_then(Value::as_str) {
            Some("submitted") => Status::Submitted,
            Some("processing") => Status::Processing,
            Some("succeed") => Status::Succeed,
            Some("failed") => Status::Failed,
            other => {
                return Err(format!(
                    "task {task_id} has an unknown task_status {other:?}"
                ));
            }
        };
        Ok(TaskObject {
            status,
            status_msg: v
                .get("task_status_msg")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            external_task_id: text(v.pointer("/task_info/external_task_id")),
            cost: text(v.get("final_unit_deduction")),
            created_at_ms: v.get("created_at").and_then(Value::as_i64),
            raw: v.clone(),
            task_id,
        })
    }
}

/// What a handler decides for a `succeed` task: the outcome (`succeeded` or `next-stage`) and
/// an optional new state. An error means the result is unusable (retried, then failed).
pub type Success = Result<(Outcome, Option<String>), ProviderError>;

/// Expected remaining time in milliseconds: until the shortest expected duration (scaled by
/// `scales.prior`), then the pace of `read` (scaled by `scales.pace`); both 1.0 for the real
/// provider (tests against a simulator running 100× faster configure 0.01).
pub fn running_hint(
    unit: &Unit,
    now_ms: u64,
    expected_secs: (u64, u64),
    scales: Scales,
    read: Read,
) -> u64 {
    let elapsed = unit
        .submitted_at_ms
        .map(|t| now_ms.saturating_sub(t))
        .unwrap_or(0);
    let shortest = (expected_secs.0 as f64 * 1000.0 * scales.prior) as u64;
    shortest
        .saturating_sub(elapsed)
        .max(pace_hint(scales, read))
}

/// The pace alone: `read`'s ([`LATE_POLL_MS`] or [`LIST_POLL_MS`]) × `scales.pace`.
pub fn pace_hint(scales: Scales, read: Read) -> u64 {
    ((read.pace_ms() as f64 * scales.pace) as u64).max(1)
}

/// The handler's time scales from its settings; an unusable one is refused, naming it.
pub fn scales(host: &dyn slotd_sdk::Host, handler: &str) -> Result<Scales, String> {
    let settings = slotd_sdk::settings::Settings::new(host, handler);
    let pace = settings.positive("expected_duration_scale")?.unwrap_or(1.0);
    let prior = settings.positive("stated_duration_scale")?.unwrap_or(pace);
    Ok(Scales { pace, prior })
}

/// The handler's time scales: `pace` (`expected_duration_scale`) multiplies its poll pace,
/// `prior` (`stated_duration_scale`, `pace` unless set) the durations it expects of jobs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scales {
    pub pace: f64,
    pub prior: f64,
}

impl Scales {
    /// Both the same (the usual case).
    pub fn same(scale: f64) -> Scales {
        Scales {
            pace: scale,
            prior: scale,
        }
    }
}

/// The change a task object means for `unit`.
pub fn change_for(
    unit: &Unit,
    task: &TaskObject,
    hint_ms: u64,
    success: &dyn Fn(&Unit, &TaskObject) -> Success,
) -> Change {
    // A unit whose job id is not recorded yet (found by external id after a crash or an
    // unreadable create answer) records it first, whatever the task's status: a change carries
    // one outcome, and a unit that went straight to `succeeded` or `failed` would end without
    // the provider task id its results name. The next poll reports the end. (Callbacks carry
    // the job id beside the outcome, so the host records it there.)
    if unit.provider_job_id.is_none() {
        return Change::of(unit, Outcome::Accepted(task.task_id.clone()));
    }
    let (outcome, state) = outcome_for(true, task, Some(hint_ms), |t| success(unit, t));
    Change {
        unit_id: unit.id.clone(),
        outcome,
        state,
        cost: task.cost.clone().filter(|_| task.status == Status::Succeed),
    }
}

/// The outcome of a task object, shared by ticks and callbacks. A running task whose job id
/// is not recorded yet is reported `accepted` (recording it), otherwise `running(hint)`.
pub fn outcome_for(
    job_id_known: bool,
    task: &TaskObject,
    hint_ms: Option<u64>,
    success: impl FnOnce(&TaskObject) -> Success,
) -> (Outcome, Option<String>) {
    match task.status {
        Status::Submitted | Status::Processing if !job_id_known => {
            (Outcome::Accepted(task.task_id.clone()), None)
        }
        Status::Submitted | Status::Processing => (Outcome::Running(hint_ms), None),
        Status::Succeed => match success(task) {
            Ok(done) => done,
            Err(error) => (Outcome::retry(error), None),
        },
        Status::Failed => {
            let message = if task.status_msg.is_empty() {
                format!("Kling task {} ended failed", task.task_id)
            } else {
                task.status_msg.clone()
            };
            (
                Outcome::Fail(ProviderError::new(Some(TASK_FAILED), message)),
                None,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_the_documented_object() {
        let t = TaskObject::parse(&json!({
            "task_id": "842250903629086785", "task_status": "succeed", "task_status_msg": "",
            "task_info": {"external_task_id": "u-1"}, "final_unit_deduction": "1",
            "created_at": 1722769557708i64,
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.status, Status::Succeed);
        assert_eq!(t.external_task_id.as_deref(), Some("u-1"));
        assert_eq!(t.cost.as_deref(), Some("1"));
        assert!(TaskObject::parse(&json!({"task_id": "1", "task_status": "succeeded"})).is_err());
        assert!(TaskObject::parse(&json!({"task_status": "succeed"})).is_err());
    }

    #[test]
    fn hints_count_down_to_the_shortest_duration() {
        let unit = Unit {
            submitted_at_ms: Some(1_000),
            ..Unit::default()
        };
        let same = Scales::same;
        let hint = |now, scales| running_hint(&unit, now, (30, 120), scales, Read::Single);
        assert_eq!(hint(11_000, same(1.0)), 20_000);
        assert_eq!(hint(100_000, same(1.0)), LATE_POLL_MS);
        assert_eq!(hint(1_000, same(0.01)), 300);
        // A prior ten times too long counts down ten times as far; the pace stays.
        let long = Scales {
            pace: 0.01,
            prior: 0.1,
        };
        assert_eq!(hint(1_000, long), 3_000);
        assert_eq!(hint(100_000, long), 50);
        // Read on a list page, a late job may be read again sooner: its next page is the
        // host's round; a task's own query keeps the pace.
        let listed = running_hint(&unit, 100_000, (30, 120), same(1.0), Read::Listed);
        assert_eq!(listed, LIST_POLL_MS);
        const { assert!(LIST_POLL_MS < LATE_POLL_MS) };
        assert_eq!(pace_hint(long, Read::Listed), 10);
        assert_eq!(pace_hint(long, Read::Single), 50);
    }

    #[test]
    fn running_without_job_id_is_accepted() {
        let t = TaskObject::parse(&json!({"task_id": "7", "task_status": "processing"}))
            .unwrap_or_else(|e| panic!("{e}"));
        let never = |_: &TaskObject| -> Success { Err(ProviderError::new(None, "no")) };
        assert_eq!(
            outcome_for(false, &t, Some(5), never).0,
            Outcome::Accepted("7".into())
        );
        assert_eq!(
            outcome_for(true, &t, Some(5), never).0,
            Outcome::Running(Some(5))
        );
    }
}
