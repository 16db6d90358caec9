//! What a handler declares about itself: `describe`'s handler, task types, stages and pools,
//! and the 1.1 extensions' records (features, cancel answers, routed pools).

use crate::types::ProviderError;

/// What `describe` returns (WIT `handler-info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HandlerInfo {
    /// Handler name; also the key of its configuration section `[handlers.<name>]`.
    pub name: String,
    /// The handler's own version (semver).
    pub version: String,
    /// Task types served.
    pub task_types: Vec<TaskTypeInfo>,
    /// Pools wanted, with proposed sizes.
    pub pools: Vec<PoolInfo>,
}

/// A task type the handler serves (WIT `task-type-info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskTypeInfo {
    /// The `{type}` of `POST /v1/tasks/{type}`.
    pub name: String,
    /// Stages in order; a unit starts in the first.
    pub stages: Vec<StageInfo>,
}

/// A stage and the pool whose slot its units hold while `submitted` (WIT `stage-info`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageInfo {
    /// Stage name, unique within the task type.
    pub name: String,
    /// The stage's (default) pool.
    pub pool: String,
}

impl StageInfo {
    /// A stage on a pool.
    pub fn new(name: impl Into<String>, pool: impl Into<String>) -> StageInfo {
        StageInfo {
            name: name.into(),
            pool: pool.into(),
        }
    }
}

/// A pool and the slot count the handler proposes; the operator's setting wins (WIT
/// `pool-info`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolInfo {
    /// Pool name, e.g. `kling:video`.
    pub name: String,
    /// Proposed `max_slots`.
    pub default_max_slots: u32,
}

impl PoolInfo {
    /// A pool with a proposed size.
    pub fn new(name: impl Into<String>, default_max_slots: u32) -> PoolInfo {
        PoolInfo {
            name: name.into(),
            default_max_slots,
        }
    }
}

/// The optional parts of contract 1.1 a handler uses (WIT `extensions.feature-set`). The
/// export glue derives it from [`crate::Handler::CANCEL`] and [`crate::Handler::ROUTING`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    /// The host may call `cancel` for units of cancelled tasks.
    pub cancel: bool,
    /// The host calls `stage-pools` and `plan-routed` (instead of `plan`).
    pub routing: bool,
}

/// What the provider said about a cancelled job (WIT `cancel-outcome`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The job has ended: the unit ends `cancelled` and its slot is freed.
    Ended,
    /// Cancel asked, the job may still run: ask again after the given milliseconds.
    Running(Option<u64>),
    /// The cancel could not be asked: try again after the given milliseconds.
    RetryAfter {
        /// Wait at least this long, if known.
        after_ms: Option<u64>,
        /// What went wrong.
        error: ProviderError,
    },
}

/// One unit's answer to `cancel` (WIT `cancel-change`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CancelChange {
    /// The unit it applies to.
    pub unit_id: String,
    /// What the provider said.
    pub outcome: CancelOutcome,
    /// Replacement handler-private state, if it changed.
    pub state: Option<String>,
    /// Provider-reported cost of the job, if known.
    pub cost: Option<String>,
}

/// A pool units of one stage may be routed to (WIT `stage-pool`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagePool {
    /// The task type of the stage.
    pub task_type: String,
    /// The stage.
    pub stage: String,
    /// The extra pool and its proposed size.
    pub pool: PoolInfo,
}

/// A planned unit with the pools it uses in some stages (WIT `routed-unit`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutedUnit {
    /// As in [`crate::PlannedUnit`].
    pub spec: String,
    /// As in [`crate::PlannedUnit`].
    pub state: String,
    /// `(stage, pool)` pairs; stages not named use their default pool.
    pub pools: Vec<(String, String)>,
}

/// How long a unit's provider job is expected to take (WIT `provider.expected-duration`),
/// milliseconds from its create to its end at the provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpectedDuration {
    /// The median.
    pub p50_ms: u64,
    /// The 95th percentile (at least the median).
    pub p95_ms: u64,
}

/// One create quota the provider states (WIT `provider.quota`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatedQuota {
    /// `rate` or `daily`.
    pub dimension: String,
    /// Creates allowed per window.
    pub limit: u32,
    /// The rolling window's length, milliseconds.
    pub window_ms: u64,
    /// The creates the provider counts in the window now, if it says.
    pub used: Option<u32>,
}

/// An account's limits in one pool as the provider publishes them (WIT `provider.pool-limits`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolLimits {
    /// One of the handler's pools.
    pub pool: String,
    /// Jobs the provider runs at once for the account in this pool.
    pub max_slots: Option<u32>,
    /// Its create quotas.
    pub quotas: Vec<StatedQuota>,
}

/// What [`crate::Handler::limits`] is asked about (WIT `provider.limits-context`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitsContext {
    /// Host clock, Unix milliseconds.
    pub now_ms: u64,
    /// The account asked about; `None` for the handler's own settings. The call's
    /// configuration and secrets are that account's.
    pub account: Option<String>,
}
