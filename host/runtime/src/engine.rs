//! The engines, their epoch ticker, and the per-call store: the one place where the sandbox
//! budgets of docs/handlers.md are applied (memory cap, guest CPU via epochs, wall deadline).
//!
//! Two engines of one compile configuration: calls run on the pooling one (`pool.rs`), and on
//! the on-demand one when the component does not fit a pool slot or the pool is full. Compiled
//! code is made once and placed on either ([`Shared::place`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Engine, InstanceAllocationStrategy, Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::SlotdHandler;
use super::cache::Artifact;
use super::host_impl::key_cache::KeyCache;
use super::limiter::CallLimiter;
use super::output::GuestOutput;
use super::pool::{Pool, PoolSizing};
use super::quarantine::Tripped;
use super::tape::{Redactor, Tape};
use slotd_core::config::{HandlerConfig, RuntimeLimits};

/// How often the epoch advances. Each tick is a point where a running guest yields to tokio
/// and its deadline is checked, so this bounds how late a deadline is noticed.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Bytes of guest stdout/stderr kept per call and stream; the rest is dropped, not trapped.
const OUTPUT_CAP: usize = 16 * 1024;

/// What every handler call needs from the host, shared by the runtime and every loaded handler.
pub(crate) struct Shared {
    /// The engine handlers are compiled with, and run on when they fit: its instances come
    /// from [`Shared::pool`] (when there is one).
    pub engine: Engine,
    pub linker: Linker<CallState>,
    /// The on-demand engine, of the same compile configuration: components that do not fit a
    /// pool slot, and calls that find the pool full, run here. `engine` itself without a pool.
    pub on_demand: Engine,
    pub on_demand_linker: Linker<CallState>,
    /// The pool's shape and call permits; `None`: `engine` allocates on demand.
    pub pool: Option<Pool>,
    pub limits: RuntimeLimits,
    pub handlers: BTreeMap<String, HandlerConfig>,
    /// One HTTP client for every handler: connection pools are reused across calls.
    pub http: reqwest::Client,
    /// Where a version that crossed its quarantine threshold is reported.
    pub tripped: tokio::sync::mpsc::UnboundedSender<Tripped>,
    /// Whether stores are metered with fuel (see [`Shared::build`]).
    pub fuel: bool,
    /// Signing keys providers publish, kept between calls (`signing.verify-ed25519`).
    pub keys: KeyCache,
    /// The instance's metrics registry (calls, faults, provider HTTP timings).
    pub metrics: slotd_core::telemetry::Metrics,
    /// Lives as long as anything can still call a handler (a `Handler` keeps `Shared`, and
    /// may outlive the `Runtime` that loaded it); without it deadlines would never fire.
    _ticker: EpochTicker,
}

impl Shared {
    /// Calls on a pool shaped by `limits` ([`PoolSizing::for_limits`]), falling back on demand.
    pub fn new(
        limits: RuntimeLimits,
        handlers: BTreeMap<String, HandlerConfig>,
        tripped: tokio::sync::mpsc::UnboundedSender<Tripped>,
    ) -> anyhow::Result<Shared> {
        Shared::assemble(
            limits,
            handlers,
            tripped,
            false,
            Some(PoolSizing::for_limits),
        )
    }

    /// [`Shared::new`] on a pool of another shape (tests squeeze it).
    #[cfg(test)]
    pub fn with_pool(
        limits: RuntimeLimits,
        handlers: BTreeMap<String, HandlerConfig>,
        tripped: tokio::sync::mpsc::UnboundedSender<Tripped>,
        plan: PoolSizing,
    ) -> anyhow::Result<Shared> {
        Shared::assemble(
            limits,
            handlers,
            tripped,
            false,
            Some(move |_: &RuntimeLimits, _: u64| plan),
        )
    }

    /// One engine allocating on demand, with fuel metering when `fuel` (every store starts
    /// with `u64::MAX` fuel, so the instructions a call ran are read back): `slotd plugin
    /// replay` runs one call at a time, no pool is worth its reserved address space.
    pub fn build(
        limits: RuntimeLimits,
        handlers: BTreeMap<String, HandlerConfig>,
        tripped: tokio::sync::mpsc::UnboundedSender<Tripped>,
        fuel: bool,
    ) -> anyhow::Result<Shared> {
        Shared::assemble(
            limits,
            handlers,
            tripped,
            fuel,
            None::<fn(&RuntimeLimits, u64) -> PoolSizing>,
        )
    }

    /// The engines (the pooling one shaped by `plan` from the limits and the engine's memory
    /// reservation, when given), their linkers and ticker, and the HTTP client.
    fn assemble(
        limits: RuntimeLimits,
        handlers: BTreeMap<String, HandlerConfig>,
        tripped: tokio::sync::mpsc::UnboundedSender<Tripped>,
        fuel: bool,
        plan: Option<impl FnOnce(&RuntimeLimits, u64) -> PoolSizing>,
    ) -> anyhow::Result<Shared> {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        config.consume_fuel(fuel);
        config.wasm_component_model(true);
        let on_demand = Engine::new(&config)
            .map_err(anyhow::Error::from)
            .context("creating the wasm engine")?;
        let on_demand_linker = linker(&on_demand)?;
        let (engine, linker, pool) = match plan {
            Some(plan) => {
                let plan = plan(&limits, on_demand.get_memory_reservation());
                // The same compile configuration (compiled code moves between the two), the
                // pool as allocator, and fiber stacks zeroed before reuse: a fresh mapping
                // used to give every call zeroed stacks, and a pooled one must too.
                config.allocation_strategy(InstanceAllocationStrategy::Pooling(plan.config()));
                config.async_stack_zeroing(true);
                let engine = Engine::new(&config)
                    .map_err(anyhow::Error::from)
                    .with_context(|| format!("creating the pooling wasm engine ({plan:?})"))?;
                let linker = linker(&engine)?;
                (engine, linker, Some(Pool::new(plan)))
            }
            None => (on_demand.clone(), on_demand_linker.clone(), None),
        };
        let http = reqwest::Client::builder()
            // A redirect could lead outside the allowlist: handlers see 3xx answers instead.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .context("building the handlers' HTTP client")?;
        let mut ticked = vec![engine.clone()];
        if pool.is_some() {
            ticked.push(on_demand.clone());
        }
        let ticker = EpochTicker::start(ticked)?;
        Ok(Shared {
            _ticker: ticker,
            fuel,
            keys: Default::default(),
            metrics: Default::default(),
            engine,
            linker,
            on_demand,
            on_demand_linker,
            pool,
            limits,
            handlers,
            http,
            tripped,
        })
    }

    /// Make compiled code a component: of the pooling engine when it fits a pool slot, else of
    /// the on-demand engine, with the reason it does not fit (blocking: maps the code).
    pub fn place(&self, artifact: Artifact<'_>) -> anyhow::Result<Placed> {
        let misfit = match artifact.deserialize(&self.engine) {
            Ok(component) => {
                return Ok(Placed {
                    component,
                    misfit: None,
                });
            }
            Err(e) if self.pool.is_some() => e,
            Err(e) => return Err(e),
        };
        let component = artifact.deserialize(&self.on_demand).with_context(|| {
            format!("placing the compiled code (the pool refused it: {misfit:#})")
        })?;
        Ok(Placed {
            component,
            misfit: Some(Arc::from(format!("{misfit:#}"))),
        })
    }

    /// The linker of the engine `component` belongs to.
    pub fn linker_for(&self, component: &Component) -> &Linker<CallState> {
        if Engine::same(component.engine(), &self.engine) {
            &self.linker
        } else {
            &self.on_demand_linker
        }
    }

    /// [`Shared::new_store_on`] the engine handlers are compiled with.
    pub fn new_store(
        self: &Arc<Self>,
        handler: &Arc<str>,
        config: &Arc<HandlerConfig>,
        deadline: Instant,
    ) -> Store<CallState> {
        self.new_store_on(&self.engine, handler, config, deadline)
    }

    /// A fresh store of `engine` for one call of `handler`: memory cap over the whole store, no
    /// preopens, env, args or sockets, captured stdio, and an epoch callback that yields every
    /// tick and traps past `deadline`.
    pub fn new_store_on(
        self: &Arc<Self>,
        engine: &Engine,
        handler: &Arc<str>,
        config: &Arc<HandlerConfig>,
        deadline: Instant,
    ) -> Store<CallState> {
        let stdout = GuestOutput::new(OUTPUT_CAP);
        let stderr = GuestOutput::new(OUTPUT_CAP);
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let state = CallState {
            handler: handler.clone(),
            config: config.clone(),
            shared: self.clone(),
            limits: CallLimiter::new(self.limits.memory_bytes),
            http_in_flight: 0,
            wasi,
            table: ResourceTable::new(),
            stdout,
            stderr,
            tape: config
                .record
                .is_some()
                .then(|| Arc::new(Tape::Record(Default::default()))),
            redactor: config
                .record
                .is_some()
                .then(|| Arc::new(Redactor::new(config))),
            queued: Default::default(),
            user_agent: None,
        };
        let mut store = Store::new(engine, state);
        if self.fuel {
            // Fails only on an engine without fuel, which `self.fuel` rules out.
            let _ = store.set_fuel(u64::MAX);
        }
        store.limiter(|state| &mut state.limits);
        store.set_epoch_deadline(1);
        // The callback runs only while guest code runs (an awaited host call checks no epoch),
        // so counting its calls measures guest CPU in ticks, apart from the wall deadline.
        let cpu_ticks = cpu_budget_ticks(self.limits.cpu_budget);
        let mut ticks: u64 = 0;
        store.epoch_deadline_callback(move |_| {
            if Instant::now() >= deadline {
                return Err(wasmtime::Error::new(DeadlineHit));
            }
            ticks += 1;
            if ticks > cpu_ticks {
                return Err(wasmtime::Error::new(CpuBudgetHit));
            }
            Ok(UpdateDeadline::Yield(1))
        });
        store
    }
}

/// Compiled code made a component of one of the engines ([`Shared::place`]).
#[derive(Clone)]
pub(crate) struct Placed {
    pub component: Component,
    /// Why it does not fit a pool slot, when it runs on the on-demand engine for that.
    pub misfit: Option<Arc<str>>,
}

/// A linker of `engine` with every import a handler may use: WASI (no sockets, no files) and
/// the slotd interfaces.
fn linker(engine: &Engine) -> anyhow::Result<Linker<CallState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)
        .map_err(anyhow::Error::from)
        .context("adding WASI to the linker")?;
    SlotdHandler::add_to_linker::<_, wasmtime::component::HasSelf<CallState>>(
        &mut linker,
        |state| state,
    )
    .map_err(anyhow::Error::from)
    .context("adding the slotd imports to the linker")?;
    Ok(linker)
}

/// How many epoch ticks of guest execution a CPU budget allows (at least one).
fn cpu_budget_ticks(budget: Duration) -> u64 {
    let per_tick = EPOCH_TICK.as_micros().max(1);
    u64::try_from(budget.as_micros() / per_tick)
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Raised by the epoch callback when a call's guest code ran past its CPU budget.
#[derive(Debug, thiserror::Error)]
#[error("the call ran past its guest CPU budget")]
pub(crate) struct CpuBudgetHit;

/// Raised by the epoch callback when a call runs past its wall deadline.
#[derive(Debug, thiserror::Error)]
#[error("the call ran past its deadline")]
pub(crate) struct DeadlineHit;

/// The host state of one call: which handler it serves and what that handler may use.
pub(crate) struct CallState {
    /// The handler's name (tags logs and metrics; selects its config).
    pub handler: Arc<str>,
    /// This handler's own settings, secrets and allowlist; nothing else's.
    pub config: Arc<HandlerConfig>,
    pub shared: Arc<Shared>,
    /// The call's memory cap over all its memories and tables (see `limiter.rs`).
    limits: CallLimiter,
    /// Host HTTP requests (or batches) the guest is awaiting now. Raised before the request
    /// is sent and lowered only when it completes, so a call cut off by its wall deadline
    /// while awaiting the provider still shows it: that deadline is the provider's slowness,
    /// not the guest's fault.
    pub http_in_flight: u32,
    wasi: WasiCtx,
    table: ResourceTable,
    pub stdout: GuestOutput,
    pub stderr: GuestOutput,
    /// Provider exchanges of this call, being recorded (`[handlers.X] record`) or replayed.
    pub tape: Option<Arc<Tape>>,
    /// How the tape hides secrets (set with `tape`).
    pub redactor: Option<Arc<Redactor>>,
    /// Units the guest said the provider holds in its queue during this call (contract 1.4
    /// `observe.queued`), by unit id: the position, when known. Bounded by the batch.
    pub queued: std::collections::HashMap<String, Option<u32>>,
    /// The `User-Agent` of the guest's HTTP requests when it sets none itself
    /// (`slotd/<version> <handler>/<version> (release <sha256 prefix>)`): a provider, and a
    /// test's simulator, see which handler release made each request.
    pub user_agent: Option<Arc<str>>,
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Advances the engines' epochs every [`EPOCH_TICK`] on a small thread until dropped.
pub(crate) struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub fn start(engines: Vec<Engine>) -> anyhow::Result<EpochTicker> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("slotd-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    for engine in &engines {
                        engine.increment_epoch();
                    }
                }
            })
            .context("starting the epoch ticker thread")?;
        Ok(EpochTicker {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
