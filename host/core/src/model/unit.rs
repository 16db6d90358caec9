//! The durable per-unit record (docs/state-machine.md).

use serde::Serialize;

use super::UnitStatus;

/// One unit as stored. Times are Unix milliseconds (the scheduler's injected clock).
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Unit {
    pub id: String,
    pub task_id: String,
    /// Position within the task, from 0.
    pub index: u32,
    pub tenant: String,
    pub task_type: String,
    /// The pool the current stage occupies.
    pub pool: String,
    pub stage: String,
    pub status: UnitStatus,
    /// Task priority, copied so that fill order is one indexed query.
    pub priority: i32,
    /// Handler-defined description of the work (JSON from `plan`).
    pub spec: String,
    /// Handler-private state (JSON).
    pub state: String,
    pub provider_job_id: Option<String>,
    /// Submit attempt of the current stage; part of the idempotency key. Incremented only by a
    /// deliberate resubmission (explicit retry of a failed unit), since the provider keeps
    /// failed jobs' client ids.
    pub submit_attempt: u32,
    /// Transient errors and handler faults spent from the retry budget in this stage.
    pub attempts: u32,
    /// Polls in the current stage (drives the backoff).
    pub polls: u32,
    /// When the unit may next be polled (submitted) or submitted (pending).
    pub next_at: i64,
    pub submitted_at: Option<i64>,
    /// Error JSON (`{"code":…, "message":…}`) of the last failure or transient error.
    pub error: Option<String>,
    /// Result JSON, once succeeded (and, after finalization, with the stored artifacts).
    pub result: Option<String>,
    pub cost: Option<String>,
    /// When the client cancelled the unit while it was `submitted` (its job at the provider):
    /// it keeps its slot and is polled until the job ends, then becomes `cancelled`; it is
    /// never finalized and never submitted again.
    pub cancel_requested_at: Option<i64>,
    /// Pools chosen by the handler's `plan-routed` (contract 1.1), as a JSON object
    /// `{"stage": "pool"}`; stages not named use their default pool.
    pub routes: Option<String>,
    /// A routed unit's options and binding (docs/routes.md), as JSON [`super::UnitRouting`];
    /// `None` for a unit of a handler's own task type.
    pub routing: Option<String>,
    /// Accounts, deadlines, cost and why it waits.
    #[serde(flatten)]
    pub terms: UnitTerms,
    /// The handler releases that planned it and created its provider job.
    #[serde(flatten)]
    pub releases: UnitReleases,
    pub created_at: i64,
    pub updated_at: i64,
}

/// The handler releases behind a unit (docs/handlers.md, "Releases"), by sha256: the one whose
/// `plan` made it and the one whose `tick` last submitted it (and created its current provider
/// job, if it has one). The job's polls, provider callbacks, cancel and finalization go through
/// the latter while it stays loaded; a rollout is judged on what each release's submissions
/// came to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct UnitReleases {
    pub planned_release: Option<String>,
    pub job_release: Option<String>,
}

/// What a unit carries beyond its status: the provider account it was marked submitted on, its task's
/// deadline terms (copied so the fill order stays one indexed query), the handler's estimate of
/// its cost, and why it is waiting when it is due but not filled.
#[derive(Clone, Debug, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct UnitTerms {
    /// The account of the unit's latest submit marker (`None`: the handler's implicit
    /// account, or never submitted).
    pub account: Option<String>,
    /// Complete by this time (Unix ms), if the task asked for it.
    pub deadline_at: Option<i64>,
    /// Be submitted by this time (Unix ms), if the task asked for it.
    pub start_by: Option<i64>,
    /// `deadline_policy: best_effort`: an unreachable deadline is recorded, not enforced.
    pub best_effort: bool,
    /// The handler's estimate of the unit's cost, in the provider's unit (contract 1.2).
    pub cost_estimate: Option<f64>,
    /// Why a due `pending` unit is not being filled (`budget`), if it is held back.
    pub wait_reason: Option<String>,
}

/// `units.deadline_at` for "no deadline": the largest BIGINT, so one ascending index orders
/// deadlines on both databases.
pub const NO_DEADLINE: i64 = i64::MAX;

/// `next_at` of a `succeeded` unit whose finalization gave up (its attempts spent): never due,
/// so no finalizer claims it until an explicit retry makes it due again. It keeps its provider
/// result and the reason in `error`. The largest integer a JSON reader (JavaScript) holds
/// exactly: far enough (about 285,000 years) and shown faithfully with `?units=true`.
pub const FINALIZE_PARKED_AT: i64 = 9_007_199_254_740_991;

impl Unit {
    /// The pool the handler routed `stage` to in `plan`, if it did.
    pub fn route_for(&self, stage: &str) -> Option<String> {
        let routes = self.routes.as_deref()?;
        let map: std::collections::BTreeMap<String, String> = serde_json::from_str(routes).ok()?;
        map.get(stage).cloned()
    }

    /// A routed unit's options and binding, when it is one (and its record reads).
    pub fn routing(&self) -> Option<super::UnitRouting> {
        self.routing.as_deref().and_then(super::UnitRouting::parse)
    }

    /// Whether the provider job succeeded but finalization gave up: the unit waits, `succeeded`
    /// with the reason in `error`, for `POST /v1/tasks/{id}/retry` to finalize it again.
    pub fn finalize_parked(&self) -> bool {
        self.status == UnitStatus::Succeeded && self.next_at >= FINALIZE_PARKED_AT
    }

    /// The key sent to the provider as its client-side job id (Kling `external_task_id`).
    pub fn idempotency_key(&self) -> String {
        idempotency_key(&self.id, &self.stage, self.submit_attempt)
    }
}

/// Derived from the unit id, its stage and its submit attempt: a repeat of the same submission
/// carries the same key, a deliberate resubmission a new one.
pub fn idempotency_key(unit_id: &str, stage: &str, submit_attempt: u32) -> String {
    format!("{unit_id}-{stage}-{submit_attempt}")
}
