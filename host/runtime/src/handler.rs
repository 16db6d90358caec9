//! [`Handler`]: a loaded handler component with typed async calls.
//!
//! Every call gets a fresh store (no guest state survives between calls), instantiates the
//! pre-instantiated component, runs under the wall deadline, and turns traps, deadlines and
//! guest `err`s into a [`HandlerFault`]. Calls record `slotd_handler_call_seconds` and
//! `slotd_handler_faults_total`; captured guest stdout/stderr is logged under the handler name.
//!
//! A call runs on the instance pool (`pool.rs`) with one of its permits; a call of a pooled
//! handler that finds none free runs on the on-demand engine instead, from the component's
//! code mapped there the first time it is needed ([`Handler::overflow`]), counted and logged.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use tokio::sync::OwnedSemaphorePermit;
use wasmtime::Store;

use super::bindings::{SlotdHandlerPre, costs, extensions, provider, routes};
use super::checks::{checked_durations, checked_estimates, checked_limits};
use super::convert;
use super::engine::{CallState, CpuBudgetHit, DeadlineHit, Shared};
use super::limiter::cap_message;
use super::linked::{Export, Linked};
use super::quarantine::{Health, Tripped};
use super::tape::{self, CallRecord, Exchange, Redactor};
use super::tape_json;
use super::{
    BatchUnit, CallbackChange, CancelChange, DiscoveredLimits, Expected, Features, Finalized,
    HandlerFault, HandlerInfo, PlanError, PlannedUnit, RoutedShot, StagePool, TickContext,
};
use slotd_core::config::{HandlerConfig, RuntimeLimits};
use slotd_core::model::{Change, Unit};

/// Characters of guest stderr appended to a trap message (where a panic message lands).
const TRAP_STDERR_TAIL: usize = 600;

/// Least time between two warnings that calls of one handler found the pool full (each such
/// call is counted; the warning says how many since the last one).
const POOL_FULL_WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// The instance allocator a loaded handler's calls run on (docs/handlers.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocator {
    /// The instance pool; a call that finds it full runs on demand.
    Pooling,
    /// wasmtime's on-demand allocator: the component does not fit a pool slot.
    OnDemand,
}

/// Where one call runs: on the handler's own engine (holding a pool permit when that is the
/// pooling one), or on its on-demand copy. Dropped after the call's store, which gives the
/// permit back once the store's instances are back in the pool.
struct Lane<'a> {
    /// The on-demand copy; `None`: the handler's own `pre` and indices.
    alt: Option<&'a Linked>,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Lane<'_> {
    fn pre<'p>(&'p self, own: &'p SlotdHandlerPre<CallState>) -> &'p SlotdHandlerPre<CallState> {
        self.alt.map_or(own, |l| &l.pre)
    }

    /// The lane's indices of the export whose own indices are `own`.
    fn export<'p, E: Export>(&'p self, own: &'p E) -> wasmtime::Result<&'p E> {
        match self.alt {
            None => Ok(own),
            Some(linked) => E::of(linked).ok_or_else(|| {
                wasmtime::Error::msg("the on-demand copy of the component lacks an export")
            }),
        }
    }
}

/// One loaded version of a handler.
pub struct Handler {
    /// What `describe` declared at load time.
    pub info: HandlerInfo,
    /// sha256 of the component file, hex.
    pub sha256: String,
    /// Where it was loaded from.
    pub path: PathBuf,
    /// When this version was loaded (Unix ms).
    pub loaded_at_ms: i64,
    /// The contract version the component was built against (e.g. "1.0.0").
    pub contract: String,
    /// The optional parts of the contract it uses (none before 1.1).
    pub features: Features,
    /// Name used in logs and metrics, and the key of its config section.
    name: Arc<str>,
    /// This handler's `[handlers.<name>]` section (empty when none is configured).
    config: Arc<HandlerConfig>,
    pre: SlotdHandlerPre<CallState>,
    /// Where the `extensions` export lives, for 1.1 components.
    ext: Option<extensions::GuestIndices>,
    /// Where the `costs` export lives, for 1.2 components.
    cost: Option<costs::GuestIndices>,
    /// Where the `provider` export lives, for 1.3 components.
    prov: Option<provider::GuestIndices>,
    /// Where the `routes` export lives, for 1.5 components.
    route: Option<routes::GuestIndices>,
    /// The models it serves in routes (`routes.models`, read at load; empty before 1.5).
    pub route_models: Vec<String>,
    shared: Arc<Shared>,
    /// Consecutive crashing calls of this version (quarantine).
    health: Health,
    /// The allocator `pre` instantiates with: the pool when it was placed on the pooling engine.
    allocator: Allocator,
    /// The component linked for the on-demand engine, made the first time a call of this
    /// pooled handler finds the pool full.
    overflow: tokio::sync::OnceCell<Linked>,
    /// Calls that found the pool full since the last warning, and when that was.
    pool_full: parking_lot::Mutex<(u64, Option<Instant>)>,
}

impl Handler {
    /// The `User-Agent` its HTTP requests carry unless the guest sets one.
    fn user_agent(&self) -> Arc<str> {
        let release = self.sha256.get(..12).unwrap_or(&self.sha256);
        Arc::from(format!(
            "slotd/{} {}/{} (release {release})",
            env!("CARGO_PKG_VERSION"),
            self.info.name,
            self.info.version
        ))
    }
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handler")
            .field("name", &self.info.name)
            .field("version", &self.info.version)
            .field("sha256", &self.sha256)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Where a call failed before the guest's own answer.
enum Failure {
    Instantiate(wasmtime::Error),
    Call(wasmtime::Error),
}

/// Run one guest call: fresh store, instantiate, call, all under the wall deadline. The body
/// gets the instance bindings and the store.
macro_rules! guest_call {
    ($self:ident, $function:literal, |$bindings:ident, $store:ident| $call:expr) => {
        guest_call!(
            $self,
            $function,
            config = &$self.config,
            |$bindings, $store| $call
        )
    };
    ($self:ident, $function:literal, config = $config:expr, |$bindings:ident, $store:ident| $call:expr) => {{
        let started = Instant::now();
        let deadline = $self.shared.limits.call_deadline;
        let lane = $self.lane($function).await;
        let pre = lane.pre(&$self.pre);
        let mut store =
            $self
                .shared
                .new_store_on(pre.engine(), &$self.name, $config, started + deadline);
        store.data_mut().user_agent = Some($self.user_agent());
        let answer = tokio::time::timeout(deadline, async {
            let $bindings = pre
                .instantiate_async(&mut store)
                .await
                .map_err(Failure::Instantiate)?;
            let $store = &mut store;
            $call.await.map_err(Failure::Call)
        })
        .await;
        let settled = $self.settle($function, started, &store, answer);
        let taken = Taken::from(&store);
        // The store's instances go back to the pool before its permit does.
        drop(store);
        drop(lane);
        (settled, taken)
    }};
}

/// [`guest_call!`] for a function of the `extensions` export: the body gets the loaded
/// `extensions::Guest` and the store. Only called when `self.ext` is set.
macro_rules! ext_call {
    ($self:ident, $ext:ident, $function:literal, |$guest:ident, $store:ident| $call:expr) => {
        ext_call!(
            $self,
            $ext,
            $function,
            config = &$self.config,
            |$guest, $store| $call
        )
    };
    ($self:ident, $ext:ident, $function:literal, config = $config:expr, |$guest:ident, $store:ident| $call:expr) => {{
        let started = Instant::now();
        let deadline = $self.shared.limits.call_deadline;
        let lane = $self.lane($function).await;
        let pre = lane.pre(&$self.pre);
        let mut store =
            $self
                .shared
                .new_store_on(pre.engine(), &$self.name, $config, started + deadline);
        store.data_mut().user_agent = Some($self.user_agent());
        let answer = tokio::time::timeout(deadline, async {
            let instance = pre
                .instance_pre()
                .instantiate_async(&mut store)
                .await
                .map_err(Failure::Instantiate)?;
            let $guest = lane
                .export($ext)
                .and_then(|indices| indices.load(&mut store, &instance))
                .map_err(Failure::Instantiate)?;
            let $store = &mut store;
            $call.await.map_err(Failure::Call)
        })
        .await;
        let settled = $self.settle($function, started, &store, answer);
        let taken = Taken::from(&store);
        // The store's instances go back to the pool before its permit does.
        drop(store);
        drop(lane);
        (settled, taken)
    }};
}

/// What a call leaves behind besides its answer: the exchanges it recorded, and the units it
/// said are queued at the provider.
pub(crate) struct Taken {
    pub exchanges: Vec<Exchange>,
    pub queued: std::collections::HashMap<String, Option<u32>>,
}

impl Taken {
    fn from(store: &Store<CallState>) -> Taken {
        Taken {
            exchanges: store
                .data()
                .tape
                .as_ref()
                .map(|t| t.take())
                .unwrap_or_default(),
            queued: store.data().queued.clone(),
        }
    }
}

impl Handler {
    pub(crate) fn new(
        name: Arc<str>,
        info: HandlerInfo,
        sha256: String,
        path: PathBuf,
        pre: SlotdHandlerPre<CallState>,
        ext: Option<extensions::GuestIndices>,
        shared: Arc<Shared>,
    ) -> Handler {
        // No configuration until `with_info` has the declared name and the registry has checked
        // the file may serve it: `describe` of an unchecked file sees no settings, no secrets
        // and no hosts, whatever the file is called.
        let config = Arc::new(HandlerConfig::default());
        // A component placed on the pooling engine ([`Shared::place`]) runs on the pool.
        let allocator =
            if shared.pool.is_some() && wasmtime::Engine::same(pre.engine(), &shared.engine) {
                Allocator::Pooling
            } else {
                Allocator::OnDemand
            };
        Handler {
            info,
            sha256,
            path,
            loaded_at_ms: now_ms(),
            contract: String::new(),
            features: Features::default(),
            name,
            config,
            pre,
            ext,
            cost: None,
            prov: None,
            route: None,
            route_models: Vec::new(),
            shared,
            health: Health::default(),
            allocator,
            overflow: tokio::sync::OnceCell::new(),
            pool_full: Default::default(),
        }
    }

    /// The instance allocator this version's calls run on: the pool, unless the component does
    /// not fit a pool slot (a call that finds the pool full still runs, on demand).
    pub fn allocator(&self) -> Allocator {
        self.allocator
    }

    /// Where the next call runs: a pooled handler's call takes a pool permit, or, with none
    /// free, runs on the on-demand copy (counted, and logged at most once a minute).
    async fn lane(&self, function: &'static str) -> Lane<'_> {
        let own = Lane {
            alt: None,
            _permit: None,
        };
        let Some(pool) = self.shared.pool.as_ref() else {
            return own;
        };
        if self.allocator != Allocator::Pooling {
            return own;
        }
        if let Some(permit) = pool.try_enter() {
            return Lane {
                alt: None,
                _permit: Some(permit),
            };
        }
        match self.overflow().await {
            Ok(linked) => {
                self.pool_full_fallback(function);
                Lane {
                    alt: Some(linked),
                    _permit: None,
                }
            }
            Err(e) => {
                // Not seen in practice (the code was mapped on this engine's twin already);
                // a call must not fail for it: it waits for a pool slot instead.
                tracing::warn!(handler = %self.name, function, error = %format!("{e:#}"), "the instance pool is full and the on-demand engine cannot take this handler; waiting for a pool slot");
                Lane {
                    alt: None,
                    _permit: pool.enter().await,
                }
            }
        }
    }

    /// The component linked for the on-demand engine (made once, off the async runtime).
    async fn overflow(&self) -> anyhow::Result<&Linked> {
        self.overflow
            .get_or_try_init(|| async {
                let component = self.pre.instance_pre().component().clone();
                let engine = self.shared.on_demand.clone();
                let moved =
                    tokio::task::spawn_blocking(move || super::cache::rehome(&component, &engine))
                        .await
                        .context("the task mapping the component on demand did not finish")??;
                super::linked::link(&self.shared.on_demand_linker, &moved)
            })
            .await
    }

    /// Count a call that found the pool full, and warn (at most once a minute per version).
    fn pool_full_fallback(&self, function: &'static str) {
        self.shared.metrics.record(|| {
            metrics::counter!(
                "slotd_handler_fallbacks_total",
                "handler" => self.name.to_string(),
                "reason" => "pool_full",
            )
            .increment(1)
        });
        let calls = {
            let mut state = self.pool_full.lock();
            let (unwarned, warned_at) = &mut *state;
            *unwarned += 1;
            if warned_at.is_some_and(|at| at.elapsed() < POOL_FULL_WARN_EVERY) {
                return;
            }
            *warned_at = Some(Instant::now());
            std::mem::take(unwarned)
        };
        let pooled = self.shared.pool.as_ref().map_or(0, |p| p.plan.calls);
        tracing::warn!(handler = %self.name, function, calls, pooled, reason = "pool_full", "the instance pool is full: calls run on the on-demand allocator (slower; counted in slotd_handler_fallbacks_total)");
    }

    /// The component's `costs` export (contract 1.2), found at load; `None` before 1.2.
    pub(crate) fn set_costs(&mut self, cost: Option<costs::GuestIndices>) {
        self.cost = cost;
    }

    /// The component's `provider` export (contract 1.3), found at load; `None` before 1.3.
    pub(crate) fn set_provider(&mut self, prov: Option<provider::GuestIndices>) {
        self.prov = prov;
    }

    /// Switch to the identity `describe` declared: its name tags calls and selects its config.
    pub(crate) fn with_info(mut self, info: HandlerInfo) -> Handler {
        self.name = Arc::from(info.name.as_str());
        self.config = Arc::new(
            self.shared
                .handlers
                .get(&info.name)
                .cloned()
                .unwrap_or_default(),
        );
        self.info = info;
        self
    }

    /// Bind only the plain settings of handler `name`'s section (no secrets, no hosts): what
    /// `stage-pools` sees at load, before the registry has checked the file may serve `name`.
    pub(crate) fn with_settings_of(mut self, name: &str) -> Handler {
        let settings = self
            .shared
            .handlers
            .get(name)
            .map(|c| c.settings.clone())
            .unwrap_or_default();
        self.config = Arc::new(HandlerConfig {
            settings,
            ..HandlerConfig::default()
        });
        self
    }

    /// Ask the component what it serves (done once, at load).
    pub(crate) async fn describe(&self) -> Result<HandlerInfo, HandlerFault> {
        let info = guest_call!(self, "describe", |b, store| b
            .slotd_handler_handler()
            .call_describe(store))
        .0?;
        Ok(convert::info(info))
    }

    /// The optional parts of the contract the component uses (1.1; none for 1.0).
    pub(crate) async fn read_features(&self) -> Result<Features, HandlerFault> {
        let costs = self.cost.is_some();
        let provider = self.prov.is_some();
        let routes = self.route.is_some();
        let Some(ext) = &self.ext else {
            return Ok(Features {
                costs,
                provider,
                routes,
                ..Features::default()
            });
        };
        let f = ext_call!(self, ext, "features", |g, store| g.call_features(store)).0?;
        Ok(Features {
            costs,
            provider,
            routes,
            ..convert::features(f)
        })
    }

    /// The pools each stage may route to (1.1 `routing`; empty otherwise).
    pub(crate) async fn stage_pools(&self) -> Result<Vec<StagePool>, HandlerFault> {
        let Some(ext) = self.ext.as_ref().filter(|_| self.features.routing) else {
            return Ok(Vec::new());
        };
        let pools = ext_call!(self, ext, "stage_pools", |g, store| g
            .call_stage_pools(store))
        .0?;
        Ok(pools.into_iter().map(convert::stage_pool).collect())
    }

    /// Ask the provider to cancel the jobs of cancelled units (1.1 `cancel`). `None` when the
    /// handler does not cancel provider jobs.
    pub async fn cancel(
        &self,
        ctx: &TickContext,
        units: &[BatchUnit],
    ) -> Option<Result<Vec<CancelChange>, HandlerFault>> {
        let ext = self.ext.as_ref().filter(|_| self.features.cancel)?;
        let config = self.config.for_account(ctx.account.as_deref());
        let ctx = convert::context(ctx);
        let units = convert::batch(units);
        let (answer, taken) = ext_call!(self, ext, "cancel", config = &config, |g, store| g
            .call_cancel(store, &ctx, &units));
        self.record(
            "cancel",
            &taken,
            || tape_json::tick_input(&ctx, &units),
            || {
                tape_json::answer(&answer, |a| {
                    tape_json::result(a, |c| tape_json::cancel_changes(c))
                })
            },
        );
        Some(answer.and_then(|a| {
            let changes = self.guest_err("cancel", a)?;
            Ok(changes.into_iter().map(convert::cancel_change).collect())
        }))
    }

    /// Validate a payload and split it into units (with their pools, when the handler routes).
    pub async fn plan(
        &self,
        task_type: &str,
        payload: &str,
    ) -> Result<Result<Vec<PlannedUnit>, PlanError>, HandlerFault> {
        let planned: Result<Vec<PlannedUnit>, PlanError> =
            if let Some(ext) = self.ext.as_ref().filter(|_| self.features.routing) {
                let answer = ext_call!(self, ext, "plan", |g, store| g
                    .call_plan_routed(store, task_type, payload))
                .0?;
                answer
                    .map(|units| units.into_iter().map(convert::routed).collect())
                    .map_err(convert::plan_error)
            } else {
                let answer = guest_call!(self, "plan", |b, store| b
                    .slotd_handler_handler()
                    .call_plan(store, task_type, payload))
                .0?;
                answer
                    .map(|units| units.into_iter().map(convert::planned).collect())
                    .map_err(convert::plan_error)
            };
        let mut units = match planned {
            Ok(units) => units,
            Err(refused) => return Ok(Err(refused)),
        };
        let estimates = self.estimate(task_type, &units).await;
        for (unit, cost) in units.iter_mut().zip(estimates) {
            unit.cost = cost;
        }
        Ok(Ok(units))
    }

    /// The expected cost of each planned unit (contract 1.2 `costs.estimate`), in order; all
    /// unknown for a component without `costs`. The guest's answer is checked: a negative or
    /// non-finite value is unknown, an answer of the wrong length is all unknown, each with a
    /// warning; a failed call (already counted as a fault) is all unknown too, and never fails
    /// the plan. Not recorded: `plan` is not recorded either.
    async fn estimate(&self, task_type: &str, units: &[PlannedUnit]) -> Vec<Option<f64>> {
        let unknown = vec![None; units.len()];
        let Some(cost) = self.cost.as_ref().filter(|_| !units.is_empty()) else {
            return unknown;
        };
        let specs: Vec<String> = units.iter().map(|u| u.spec.clone()).collect();
        let answer = ext_call!(self, cost, "estimate", |g, store| g
            .call_estimate(store, task_type, &specs))
        .0;
        let estimates = match answer {
            Ok(estimates) => estimates,
            Err(fault) => {
                tracing::warn!(handler = %self.name, %fault, "costs.estimate failed; the units' costs are unknown");
                return unknown;
            }
        };
        checked_estimates(&self.name, estimates, units.len())
    }

    /// Whether the component exports `provider` (contract 1.3).
    pub fn has_provider(&self) -> bool {
        self.prov.is_some()
    }

    /// Each spec's expected duration (contract 1.3 `provider.durations`), in order; all unknown
    /// for a component without `provider`. Checked like cost estimates: a zero median or a p95
    /// below the median is unknown, an answer of the wrong length all unknown, each with a
    /// warning; a failed call (counted as a fault) is all unknown and fails nothing.
    pub async fn durations(&self, task_type: &str, specs: &[String]) -> Vec<Option<Expected>> {
        let unknown = vec![None; specs.len()];
        let Some(prov) = self.prov.as_ref().filter(|_| !specs.is_empty()) else {
            return unknown;
        };
        let answer = ext_call!(self, prov, "durations", |g, store| g
            .call_durations(store, task_type, specs))
        .0;
        match answer {
            Ok(answer) => checked_durations(&self.name, answer, specs.len()),
            Err(fault) => {
                tracing::warn!(handler = %self.name, %fault, "provider.durations failed; the units' durations are unknown");
                unknown
            }
        }
    }

    /// The account's limits as the provider publishes them (contract 1.3 `provider.limits`),
    /// with `account`'s settings and secrets; `Ok(None)` for a component without `provider`.
    /// Entries the host cannot use (an unknown dimension, a zero window or one over a day)
    /// are dropped with a warning; a guest `err` is an error naming the handler.
    pub async fn limits(
        &self,
        account: Option<&str>,
        now_ms: u64,
    ) -> Result<Option<Vec<DiscoveredLimits>>, String> {
        let Some(prov) = self.prov.as_ref() else {
            return Ok(None);
        };
        let config = self.config.for_account(account);
        let ctx = provider::LimitsContext {
            now_ms,
            account: account.map(str::to_string),
        };
        let answer = ext_call!(self, prov, "limits", config = &config, |g, store| g
            .call_limits(store, &ctx))
        .0
        .map_err(|fault| format!("provider.limits of {} failed: {fault}", self.name))?;
        let pools = answer.map_err(|e| format!("provider.limits of {}: {e}", self.name))?;
        Ok(Some(checked_limits(&self.name, pools)))
    }

    /// Advance a batch of units of one pool.
    pub async fn tick(
        &self,
        ctx: &TickContext,
        batch: &[BatchUnit],
    ) -> Result<Vec<Change>, HandlerFault> {
        let config = self.config.for_account(ctx.account.as_deref());
        let ctx = convert::context(ctx);
        let batch = convert::batch(batch);
        let (answer, taken) = guest_call!(self, "tick", config = &config, |b, store| b
            .slotd_handler_handler()
            .call_tick(store, &ctx, &batch));
        self.record(
            "tick",
            &taken,
            || tape_json::tick_input(&ctx, &batch),
            || tape_json::answer(&answer, |a| tape_json::result(a, |c| tape_json::changes(c))),
        );
        let changes = self.guest_err("tick", answer?)?;
        Ok(changes
            .into_iter()
            .map(|c| convert::change(c, &taken.queued))
            .collect())
    }

    /// Say what to store for a succeeded unit.
    pub async fn finalize(
        &self,
        ctx: &TickContext,
        unit: &Unit,
    ) -> Result<Finalized, HandlerFault> {
        let config = self.config.for_account(unit.terms.account.as_deref());
        let ctx = convert::context(ctx);
        let unit = convert::unit(unit, false);
        let (answer, taken) = guest_call!(self, "finalize", config = &config, |b, store| b
            .slotd_handler_handler()
            .call_finalize(store, &ctx, &unit));
        self.record(
            "finalize",
            &taken,
            || tape_json::finalize_input(&ctx, &unit),
            || tape_json::answer(&answer, |a| tape_json::result(a, tape_json::finalized)),
        );
        Ok(convert::finalized(self.guest_err("finalize", answer?)?))
    }

    /// Turn a provider webhook into changes.
    pub async fn on_callback(
        &self,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Vec<CallbackChange>, HandlerFault> {
        let answer = guest_call!(self, "on_callback", |b, store| b
            .slotd_handler_handler()
            .call_on_callback(store, headers, body))
        .0?;
        let changes = self.guest_err("on_callback", answer)?;
        Ok(changes.into_iter().map(convert::callback_change).collect())
    }

    /// With `[handlers.X] record` set, append this call to the recording (redacted).
    fn record(
        &self,
        function: &str,
        taken: &Taken,
        input: impl FnOnce() -> serde_json::Value,
        output: impl FnOnce() -> serde_json::Value,
    ) {
        let Some(dir) = &self.config.record else {
            return;
        };
        let redactor = Redactor::new(&self.config);
        let record = CallRecord {
            handler: self.info.name.clone(),
            version: self.info.version.clone(),
            function: function.to_string(),
            settings: self.config.settings.clone(),
            input: redactor.json(input()),
            exchanges: taken.exchanges.clone(),
            output: redactor.json(output()),
        };
        if let Err(e) = tape::append(dir, &record) {
            tracing::warn!(handler = %self.name, dir = %dir.display(), error = %e, "recording a call failed");
        }
    }

    /// A guest `err` is a fault too: count it and hand it back.
    fn guest_err<T>(
        &self,
        function: &'static str,
        answer: Result<T, String>,
    ) -> Result<T, HandlerFault> {
        answer.map_err(|message| self.fault(function, HandlerFault::Error(message)))
    }

    /// Consecutive crashing calls of this version so far.
    pub fn consecutive_faults(&self) -> u32 {
        self.health.consecutive()
    }

    fn fault(&self, function: &'static str, fault: HandlerFault) -> HandlerFault {
        tracing::warn!(handler = %self.name, function, %fault, "handler call faulted");
        if let Some(count) =
            self.health
                .record(function, Some(&fault), self.shared.limits.quarantine_after)
        {
            // Nobody listening (no watcher: tests, `plugin check`) means no quarantine.
            let _ = self.shared.tripped.send(Tripped {
                name: self.info.name.clone(),
                sha256: self.sha256.clone(),
                fault: fault.clone(),
                count,
            });
        }
        self.shared.metrics.record(|| {
            metrics::counter!(
                "slotd_handler_faults_total",
                "handler" => self.name.to_string(),
                "kind" => fault.kind(),
            )
            .increment(1)
        });
        fault
    }

    /// Log the guest's output, record the call, and classify how it ended.
    fn settle<T>(
        &self,
        function: &'static str,
        started: Instant,
        store: &Store<CallState>,
        answer: Result<Result<T, Failure>, tokio::time::error::Elapsed>,
    ) -> Result<T, HandlerFault> {
        self.shared.metrics.record(|| {
            metrics::histogram!(
                "slotd_handler_call_seconds",
                "handler" => self.name.to_string(),
                "version" => self.info.version.clone(),
                "function" => function,
            )
            .record(started.elapsed().as_secs_f64())
        });
        let state = store.data();
        for (stream, output) in [("stdout", &state.stdout), ("stderr", &state.stderr)] {
            let (lines, dropped) = output.lines();
            for line in lines {
                tracing::info!(target: "slotd::guest", handler = %self.name, stream, "{line}");
            }
            if dropped > 0 {
                tracing::warn!(handler = %self.name, stream, dropped, "guest output over the cap was dropped");
            }
        }
        let fault = match answer {
            Ok(Ok(value)) => {
                self.health
                    .record(function, None, self.shared.limits.quarantine_after);
                return Ok(value);
            }
            Err(_elapsed) => deadline_fault(&self.shared.limits, state),
            Ok(Err(failure)) => classify(failure, &self.shared.limits, state),
        };
        Err(self.fault(function, fault))
    }
}

/// The wall deadline passed: the provider's slowness when the guest was awaiting host HTTP at
/// that moment, else the guest's own time.
fn deadline_fault(limits: &RuntimeLimits, state: &CallState) -> HandlerFault {
    if state.http_in_flight > 0 {
        HandlerFault::ProviderDeadline(limits.call_deadline)
    } else {
        HandlerFault::Deadline(limits.call_deadline)
    }
}

/// How a call that failed inside wasmtime ended, as a fault.
fn classify(failure: Failure, limits: &RuntimeLimits, state: &CallState) -> HandlerFault {
    let (e, instantiating) = match failure {
        Failure::Instantiate(e) => (e, true),
        Failure::Call(e) => (e, false),
    };
    if e.is::<DeadlineHit>() {
        return deadline_fault(limits, state);
    }
    if e.is::<CpuBudgetHit>() {
        return HandlerFault::CpuBudget(limits.cpu_budget);
    }
    if let Some(message) = cap_message(&e) {
        return HandlerFault::ResourceCap(message);
    }
    if instantiating {
        return HandlerFault::Instantiate(format!("{e:#}"));
    }
    let mut message = format!("{e:#}");
    let tail = state.stderr.tail(TRAP_STDERR_TAIL);
    if !tail.is_empty() {
        message.push_str("; guest stderr: ");
        message.push_str(&tail);
    }
    HandlerFault::Trap(message)
}

/// [`classify`] for an instantiation the sandbox tests run by hand on odd components.
#[cfg(test)]
pub(crate) fn instantiate_fault(
    e: wasmtime::Error,
    limits: &RuntimeLimits,
    state: &CallState,
) -> HandlerFault {
    classify(Failure::Instantiate(e), limits, state)
}

/// Wall-clock Unix milliseconds (load times are shown to operators, not scheduled on).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[path = "handler_routes.rs"]
mod handler_routes;
