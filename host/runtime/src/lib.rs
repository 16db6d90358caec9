//! The wasm runtime: the engines, handler components loaded from the plugins directory, and the
//! host side of the WIT imports (`http`, `log`, `config`, `signing`).
//!
//! Each call runs in a fresh `Store` with a memory cap and a deadline (docs/handlers.md), its
//! instances taken from a pool shaped by `[limits]`; a trap, a deadline or an `err` comes back
//! as a [`HandlerFault`] and never takes the host down.
//!
//! # Layout
//! - `bindings.rs`: the only `bindgen!`, fenced in its own module.
//! - `engine.rs`: the engines (pooling, and on demand), their epoch ticker and the per-call store
//!   setup.
//! - `pool.rs`: the instance pool's shape, derived from `[limits]`, and its call permits.
//! - `host_impl/`: the imports a guest sees.
//! - `linked.rs`: a component linked for one engine, with its optional exports found.
//! - `handler.rs`: [`Handler`], a loaded component with typed async calls.
//! - `registry/`: [`Registry`], the current set of handlers behind an `ArcSwap`, and the
//!   versions kept draining for their jobs; `registry/releases.rs`: the plugins directory's
//!   files published as releases, and a release served.
//! - `follow.rs`: [`Follower`], this process in step with the published releases.
//! - `ownership.rs`: which file may serve a handler name (first come, or pinned by config).
//! - `limiter.rs`: the per-call memory cap over the whole store.

// NOTE: the types below are the runtime's public face; the scheduler and the API use only these.

use slotd_core::model::{Outcome, Unit};

/// A stage of a task type and the pool its jobs occupy.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct StageInfo {
    pub name: String,
    /// The stage's default pool.
    pub pool: String,
    /// Other pools `plan` may route this stage's units to (contract 1.1 `routing`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub alt_pools: Vec<String>,
}

impl StageInfo {
    /// Whether a unit of this stage may wait in `pool`.
    pub fn allows(&self, pool: &str) -> bool {
        self.pool == pool || self.alt_pools.iter().any(|p| p == pool)
    }
}

/// A task type a handler serves.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct TaskTypeInfo {
    pub name: String,
    pub stages: Vec<StageInfo>,
}

/// A pool a handler proposes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct PoolInfo {
    pub name: String,
    pub default_max_slots: u32,
}

/// What a handler's `describe` declared.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HandlerInfo {
    pub name: String,
    pub version: String,
    pub task_types: Vec<TaskTypeInfo>,
    pub pools: Vec<PoolInfo>,
}

impl HandlerInfo {
    /// The stages of one of this handler's task types.
    pub fn stages(&self, task_type: &str) -> Option<&[StageInfo]> {
        self.task_types
            .iter()
            .find(|t| t.name == task_type)
            .map(|t| t.stages.as_slice())
    }
}

/// A unit produced by `plan`.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedUnit {
    pub spec: String,
    pub state: String,
    /// (stage, pool) pairs chosen by `plan-routed` (contract 1.1); empty: default pools.
    pub pools: Vec<(String, String)>,
    /// The expected provider cost (contract 1.2 `costs.estimate`, in the provider's unit:
    /// Kling resource-pack units, Runway credits), finite and non-negative; `None` when
    /// unknown or the component has no `costs` export.
    pub cost: Option<f64>,
}

/// A unit's expected duration at the provider, as its handler states it (contract 1.3):
/// milliseconds from the create to the job's end. Checked: `p50_ms > 0`, `p95_ms >= p50_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Expected {
    pub p50_ms: u64,
    pub p95_ms: u64,
}

/// One create quota a provider publishes (contract 1.3 `provider.quota`), checked: a known
/// dimension, a limit and a window of at most a day.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveredQuota {
    /// `rate` or `daily`.
    pub dimension: &'static str,
    pub limit: u32,
    pub window_ms: u64,
    /// The creates the provider counts in the window (every client of the account), if said.
    pub used: Option<u32>,
}

/// An account's limits in one pool, as its provider publishes them (contract 1.3
/// `provider.limits`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveredLimits {
    pub pool: String,
    pub max_slots: Option<u32>,
    pub quotas: Vec<DiscoveredQuota>,
}

/// The optional parts of the contract a handler uses (contract 1.1 `extensions.features`, and
/// whether it exports the 1.2 `costs`; none for a 1.0 component).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Features {
    /// Provider-side cancel of cancelled tasks' jobs.
    pub cancel: bool,
    /// Units choose their pool in `plan-routed`.
    pub routing: bool,
    /// The component exports `costs` (contract 1.2): planned units carry cost estimates
    /// (each may still be unknown).
    pub costs: bool,
    /// The component exports `provider` (contract 1.3): planned units carry expected
    /// durations, and the provider's published limits are read.
    pub provider: bool,
    /// The component exports `routes` (contract 1.5): route targets may name its models.
    pub routes: bool,
}

/// A canonical shot as one unit of a route target's handler (contract 1.5 `plan-shot`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutedShot {
    /// The handler's own task type whose stages the unit follows.
    pub task_type: String,
    /// The pool of its first stage.
    pub pool: String,
    pub spec: String,
    pub state: String,
}

/// What the provider said about a cancelled unit's job (contract 1.1 `cancel`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The job has ended: the unit ends `cancelled` and its slot is freed.
    Ended,
    /// The job may still run: the slot stays held; ask again later.
    Running { after_ms: Option<u64> },
    /// The cancel could not be asked: the slot stays held; ask again later.
    RetryAfter {
        after_ms: Option<u64>,
        error: slotd_core::model::ProviderError,
    },
}

/// One unit's answer to `cancel`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CancelChange {
    pub unit_id: String,
    pub outcome: CancelOutcome,
    pub state: Option<String>,
    pub cost: Option<String>,
}

/// A pool a stage may route units to (contract 1.1 `stage-pools`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagePool {
    pub task_type: String,
    pub stage: String,
    pub pool: PoolInfo,
}

/// A payload refused by `plan` (shown as 422).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PlanError {
    pub field: Option<String>,
    pub message: String,
}

/// Per-call context handed to `tick`, `finalize`.
#[derive(Clone, Debug)]
pub struct TickContext {
    pub pool: String,
    pub now_ms: u64,
    /// Where the provider calls back for this batch (the WIT's `callback-url`), when the
    /// handler's provider calls back.
    pub provider_callback_url: Option<String>,
    /// The provider account the batch's units are submitted on (`None`: the implicit one):
    /// the call's `config` and `signing` read that account's settings and secrets.
    pub account: Option<String>,
}

/// A unit in a tick batch.
#[derive(Clone, Debug)]
pub struct BatchUnit {
    pub unit: Unit,
    /// Marked submitted in an earlier tick but no job id was recorded.
    pub in_doubt: bool,
}

/// A webhook change addressed by provider ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallbackChange {
    pub provider_job_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub outcome: Outcome,
    pub state: Option<String>,
    pub cost: Option<String>,
}

/// An artifact `finalize` asks the host to store.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Artifact {
    pub name: String,
    pub url: String,
    pub content_type: Option<String>,
}

/// What `finalize` returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finalized {
    pub artifacts: Vec<Artifact>,
    pub result: Option<String>,
}

/// Why a handler call produced nothing usable. The units involved stay unchanged.
///
/// Only the guest's own misbehaviour is a *crash* ([`HandlerFault::is_crash`]): a trap
/// (malformed output the canonical ABI cannot lift is a trap too), the CPU budget, the memory
/// cap, a deadline hit while guest code ran. A deadline hit while the guest awaited host HTTP
/// is the provider's slowness ([`HandlerFault::ProviderDeadline`]) and never counts against
/// the handler or the units.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandlerFault {
    /// The guest trapped (panic, unreachable, out of bounds, a value it cannot return, …).
    #[error("trap: {0}")]
    Trap(String),
    /// The call ran past its wall-clock deadline with no host HTTP request in flight: the
    /// guest's own code (or its instantiation) took the time.
    #[error("deadline of {0:?} exceeded")]
    Deadline(std::time::Duration),
    /// The call ran past its wall-clock deadline while the guest awaited a host HTTP request:
    /// the provider was slow. Not the guest's fault.
    #[error("deadline of {0:?} exceeded while awaiting the provider over HTTP")]
    ProviderDeadline(std::time::Duration),
    /// The guest's own code ran past its CPU budget (awaited host I/O is not counted).
    #[error("guest CPU budget of {0:?} exceeded")]
    CpuBudget(std::time::Duration),
    /// The call would have passed the store's memory cap (all memories and tables together)
    /// or its instance, memory or table count.
    #[error("resource cap: {0}")]
    ResourceCap(String),
    /// The call returned an `err`.
    #[error("handler error: {0}")]
    Error(String),
    /// The component could not be instantiated.
    #[error("instantiation failed: {0}")]
    Instantiate(String),
}

impl HandlerFault {
    /// Label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            HandlerFault::Trap(_) => "trap",
            HandlerFault::Deadline(_) => "deadline",
            HandlerFault::ProviderDeadline(_) => "provider_deadline",
            HandlerFault::CpuBudget(_) => "cpu",
            HandlerFault::ResourceCap(_) => "memory",
            HandlerFault::Error(_) => "error",
            HandlerFault::Instantiate(_) => "instantiate",
        }
    }

    /// The provider's slowness, not the guest's: counts neither towards quarantine nor
    /// against the units' retry budget.
    pub fn is_provider_slowness(&self) -> bool {
        matches!(self, HandlerFault::ProviderDeadline(_))
    }

    /// A fault of the handler's code itself (trap, CPU budget, memory cap, a deadline spent in
    /// guest code, instantiation), as opposed to an `err` it returned on purpose or a provider
    /// that kept it waiting: what counts towards quarantine.
    pub fn is_crash(&self) -> bool {
        !matches!(
            self,
            HandlerFault::Error(_) | HandlerFault::ProviderDeadline(_)
        )
    }
}

mod bindings;
pub mod cache;
mod checks;
mod convert;
#[cfg(test)]
mod cost_tests;
mod engine;
#[cfg(test)]
mod fal_tests;
pub mod follow;
pub mod handler;
mod host_impl;
#[cfg(test)]
mod kling_tests;
mod limiter;
mod linked;
mod load;
mod output;
mod ownership;
#[cfg(test)]
mod pinning_tests;
mod pool;
#[cfg(test)]
mod pooling_tests;
pub mod quarantine;
pub mod registry;
pub mod replay;
#[cfg(test)]
mod replay_tests;
#[cfg(test)]
mod runway_tests;
#[cfg(test)]
mod sandbox_tests;
pub mod tape;
mod tape_json;
#[cfg(test)]
mod tests;
pub mod versions;
pub mod watcher;

pub use cache::DiskCache;
pub use engine::EPOCH_TICK;
pub use follow::{Follower, ProcessId};
pub use handler::{Allocator, Handler};
pub use load::{CheckReport, check_file, sha256_hex};
pub use quarantine::Tripped;
pub use registry::{LoadSummary, Registry, Snapshot};
pub use versions::{VersionRecord, VersionState};
pub use watcher::{Watcher, WatcherOptions};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;

use engine::Shared;
use slotd_core::config::{HandlerConfig, RuntimeLimits};

/// The engine and everything a handler call needs from the host: one per process, shared by
/// every loaded handler (each keeps an `Arc` of the pieces it needs, so a handler outlives a
/// reload of its file).
pub struct Runtime {
    /// The sandbox limits every call runs under.
    pub limits: RuntimeLimits,
    /// Each handler's `[handlers.<name>]` section.
    pub handlers: BTreeMap<String, HandlerConfig>,
    shared: Arc<Shared>,
    /// Compiled components by sha256 of the file, placed on their engine: reloading an
    /// unchanged file skips compiling.
    compiled: Mutex<HashMap<String, engine::Placed>>,
    /// Compiled components on disk by sha256, so a restart skips compiling too.
    disk: Option<DiskCache>,
    /// Versions that crossed their quarantine threshold; taken once by the watcher.
    tripped: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Tripped>>>,
}

impl Runtime {
    /// Build the engine (async, epoch interruption) and start its epoch ticker; compiled code
    /// is cached in memory only.
    pub fn new(
        limits: RuntimeLimits,
        handlers: BTreeMap<String, HandlerConfig>,
    ) -> anyhow::Result<Arc<Runtime>> {
        Runtime::with_cache_dir(limits, handlers, None)
    }

    /// [`Runtime::new`] with compiled code also cached on disk in `cache_dir`.
    pub fn with_cache_dir(
        limits: RuntimeLimits,
        handlers: BTreeMap<String, HandlerConfig>,
        cache_dir: Option<&std::path::Path>,
    ) -> anyhow::Result<Arc<Runtime>> {
        Runtime::for_instance(limits, handlers, cache_dir, Default::default())
    }

    /// [`Runtime::with_cache_dir`] recording handler calls, faults and provider HTTP timings
    /// into `metrics` (a running instance's registry).
    pub fn for_instance(
        limits: RuntimeLimits,
        handlers: BTreeMap<String, HandlerConfig>,
        cache_dir: Option<&std::path::Path>,
        metrics: slotd_core::telemetry::Metrics,
    ) -> anyhow::Result<Arc<Runtime>> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let shared = Shared::new(limits.clone(), handlers.clone(), tx)?;
        Runtime::assemble(shared, rx, cache_dir, metrics)
    }

    /// [`Runtime::new`] without the instance pool: every call on wasmtime's on-demand allocator,
    /// as a handler that does not fit the pool runs (benchmarks compare the two).
    pub fn on_demand(
        limits: RuntimeLimits,
        handlers: BTreeMap<String, HandlerConfig>,
    ) -> anyhow::Result<Arc<Runtime>> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let shared = Shared::build(limits, handlers, tx, false)?;
        Runtime::assemble(shared, rx, None, Default::default())
    }

    /// [`Runtime::for_instance`] on a pool of another shape (tests squeeze it).
    #[cfg(test)]
    pub(crate) fn with_pool(
        limits: RuntimeLimits,
        handlers: BTreeMap<String, HandlerConfig>,
        cache_dir: Option<&std::path::Path>,
        metrics: slotd_core::telemetry::Metrics,
        plan: pool::PoolSizing,
    ) -> anyhow::Result<Arc<Runtime>> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let shared = Shared::with_pool(limits, handlers, tx, plan)?;
        Runtime::assemble(shared, rx, cache_dir, metrics)
    }

    fn assemble(
        mut shared: Shared,
        tripped: tokio::sync::mpsc::UnboundedReceiver<Tripped>,
        cache_dir: Option<&std::path::Path>,
        metrics: slotd_core::telemetry::Metrics,
    ) -> anyhow::Result<Arc<Runtime>> {
        shared.metrics = metrics;
        let limits = shared.limits.clone();
        let handlers = shared.handlers.clone();
        let shared = Arc::new(shared);
        let disk = match cache_dir {
            Some(dir) => Some(DiskCache::open(dir, &shared.engine)?),
            None => None,
        };
        Ok(Arc::new(Runtime {
            limits,
            handlers,
            shared,
            compiled: Mutex::new(HashMap::new()),
            disk,
            tripped: Mutex::new(Some(tripped)),
        }))
    }

    /// The disk cache, if one is configured.
    pub fn disk_cache(&self) -> Option<&DiskCache> {
        self.disk.as_ref()
    }

    /// Forget compiled code held in memory (benchmarks measure the disk cache with it).
    pub fn clear_memory_cache(&self) {
        self.compiled.lock().clear();
    }

    /// The stream of versions to quarantine; `None` once taken (one supervisor per runtime).
    pub fn take_tripped(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Tripped>> {
        self.tripped.lock().take()
    }
}

/// Where compiled handlers are cached on disk: the configured `cache_dir`, else `cache/` beside
/// a SQLite database file, else nowhere (PostgreSQL deployments name a directory explicitly:
/// native code is only ever loaded from a directory the operator chose).
pub fn cache_dir_for(config: &slotd_core::config::Config) -> Option<std::path::PathBuf> {
    if let Some(dir) = &config.cache_dir {
        return Some(dir.clone());
    }
    let rest = config.database_url.strip_prefix("sqlite:")?;
    let file = rest.trim_start_matches("//");
    let file = file.split('?').next().unwrap_or(file);
    if file.is_empty() || file.contains(":memory:") {
        return None;
    }
    let parent = std::path::Path::new(file).parent()?;
    Some(parent.join("cache"))
}
