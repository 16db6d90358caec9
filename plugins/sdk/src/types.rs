//! The records a handler reads and produces, as plain Rust: units in, changes out. They mirror
//! the contract's `types` interface field for field, carry no bindings, and so build and compare
//! on any target; `convert` turns them into the generated types at the component's edge.

/// Where a unit is in the host's state machine (WIT `unit-status`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnitStatus {
    /// Waiting for a slot.
    #[default]
    Pending,
    /// Holding a slot: being submitted, or running at the provider.
    Submitted,
    /// Done at the provider; waiting for `finalize`.
    Succeeded,
    /// Its artifacts are being stored.
    Finalizing,
    /// Stored; final.
    Completed,
    /// Failed for good; final.
    Failed,
    /// Its task was cancelled; final.
    Cancelled,
}

/// A unit as a handler sees it in `tick`, `finalize` and `cancel` (WIT `unit`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unit {
    /// Stable unit id (host generated); changes address units by it.
    pub id: String,
    /// The task the unit belongs to.
    pub task_id: String,
    /// Position within its task, from 0.
    pub index: u32,
    /// The task type (`POST /v1/tasks/{type}`).
    pub task_type: String,
    /// The tenant that created the task.
    pub tenant: String,
    /// Current stage name.
    pub stage: String,
    /// Current status.
    pub status: UnitStatus,
    /// The `spec` the handler's `plan` produced.
    pub spec: String,
    /// Handler-private JSON state, as last returned by the handler.
    pub state: String,
    /// The provider's id of the current stage's job, once recorded.
    pub provider_job_id: Option<String>,
    /// Idempotency key of the current submission (unit, stage and submit attempt): send it as
    /// the provider's client-side id so a repeated submit is recognised.
    pub idempotency_key: String,
    /// Marked submitted earlier without a recorded job id: the job may exist. Look it up by
    /// `idempotency_key` before submitting again.
    pub in_doubt: bool,
    /// Polls in the current stage so far.
    pub polls: u32,
    /// Unix milliseconds when the current submission was marked, if submitted.
    pub submitted_at_ms: Option<u64>,
    /// Result JSON recorded when the unit succeeded (for `finalize`).
    pub result: Option<String>,
}

/// Per-call context of `tick`, `finalize` and `cancel` (WIT `tick-context`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TickContext {
    /// The pool being ticked.
    pub pool: String,
    /// Host clock, Unix milliseconds: use it instead of the guest's clock.
    pub now_ms: u64,
    /// Where the provider can reach this handler's callbacks (token included), when slotd has
    /// a public URL. Pass it on as given.
    pub callback_url: Option<String>,
}

/// An error reported by the provider or on the way to it (WIT `provider-error`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderError {
    /// The provider's error code, if it gave one. The code `timeout` tells the host the
    /// provider was slow, not failing: it spends no retry budget.
    pub code: Option<String>,
    /// What went wrong, for the operator and the API caller.
    pub message: String,
}

impl ProviderError {
    /// An error with an optional code.
    pub fn new(code: Option<&str>, message: impl Into<String>) -> ProviderError {
        ProviderError {
            code: code.map(String::from),
            message: message.into(),
        }
    }
}

/// What happened to one unit (WIT `outcome`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The provider accepted the job: record its id; the unit stays `submitted`.
    Accepted(String),
    /// Still running: poll again, after the given milliseconds if set.
    Running(Option<u64>),
    /// Done: the JSON result is recorded and the unit goes to `succeeded`.
    Succeeded(String),
    /// The current stage is done: the unit moves to the named stage, `pending`.
    NextStage(String),
    /// No capacity at the provider: back to `pending`, no retry budget spent.
    CapacityRejected(Option<u64>),
    /// A transient error: retried after the given milliseconds (or the host's backoff) until
    /// the retry budget is spent.
    RetryAfter {
        /// Wait at least this long, if the provider said.
        after_ms: Option<u64>,
        /// What went wrong.
        error: ProviderError,
    },
    /// Failed for good, with the error recorded.
    Fail(ProviderError),
}

impl Outcome {
    /// A retry with the host's own backoff.
    pub fn retry(error: ProviderError) -> Outcome {
        Outcome::RetryAfter {
            after_ms: None,
            error,
        }
    }
}

/// A state change for one unit of the batch (WIT `change`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The unit it applies to.
    pub unit_id: String,
    /// What happened.
    pub outcome: Outcome,
    /// Replacement handler-private state, if it changed.
    pub state: Option<String>,
    /// Provider-reported cost of the job, if known.
    pub cost: Option<String>,
}

impl Change {
    /// A change of `unit` with no new state and no cost.
    pub fn of(unit: &Unit, outcome: Outcome) -> Change {
        Change {
            unit_id: unit.id.clone(),
            outcome,
            state: None,
            cost: None,
        }
    }

    /// Fail a unit whose spec or state cannot be turned into a request (code `bad_spec`).
    pub fn unusable(unit: &Unit, why: impl Into<String>) -> Change {
        Change::of(
            unit,
            Outcome::Fail(ProviderError::new(Some("bad_spec"), why)),
        )
    }
}

/// A change addressed by the provider's ids, as a webhook knows them (WIT `callback-change`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallbackChange {
    /// The provider job id, if the webhook carries it.
    pub provider_job_id: Option<String>,
    /// The idempotency key the job was submitted with, if the webhook carries it.
    pub idempotency_key: Option<String>,
    /// What happened.
    pub outcome: Outcome,
    /// Replacement handler-private state, if it changed.
    pub state: Option<String>,
    /// Provider-reported cost of the job, if known.
    pub cost: Option<String>,
}

/// One unit produced by `plan` (WIT `planned-unit`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedUnit {
    /// Handler-defined JSON describing the work; given back on every call.
    pub spec: String,
    /// Initial handler-private JSON state.
    pub state: String,
}

impl PlannedUnit {
    /// A unit with the given spec and the empty state `{}`.
    pub fn new(spec: impl Into<String>) -> PlannedUnit {
        PlannedUnit {
            spec: spec.into(),
            state: "{}".into(),
        }
    }
}

/// Why `plan` refused a payload; the API caller sees it as 422 (WIT `plan-error`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanError {
    /// JSON path of the offending field (e.g. `shots[2].prompt`), if there is one.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl PlanError {
    /// An error about one field.
    pub fn at(field: impl Into<String>, message: impl Into<String>) -> PlanError {
        PlanError {
            field: Some(field.into()),
            message: message.into(),
        }
    }

    /// An error about the payload as a whole.
    pub fn whole(message: impl Into<String>) -> PlanError {
        PlanError {
            field: None,
            message: message.into(),
        }
    }
}

/// Something `finalize` wants stored (WIT `artifact`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    /// Name within the unit (e.g. `video.mp4`); part of the object key.
    pub name: String,
    /// Where the host downloads it from.
    pub url: String,
    /// Its media type, if known.
    pub content_type: Option<String>,
}

/// What `finalize` returns (WIT `finalized`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Finalized {
    /// Files to store.
    pub artifacts: Vec<Artifact>,
    /// JSON merged into the unit's result.
    pub result: Option<String>,
}
