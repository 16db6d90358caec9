//! The engine, its epoch ticker, and the per-call store: the one place where the sandbox
//! budgets of docs/handlers.md are applied (memory cap, guest CPU via epochs, wall deadline).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::SlotdHandler;
use super::limiter::CallLimiter;
use super::output::GuestOutput;
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
    pub engine: Engine,
    pub linker: Linker<CallState>,
    pub limits: RuntimeLimits,
    pub handlers: BTreeMap<String, HandlerConfig>,
    /// One HTTP client for every handler: connection pools are reused across calls.
    pub http: reqwest::Client,
    /// Where a version that crossed its quarantine threshold is reported.
    pub tripped: tokio::sync::mpsc::UnboundedSender<Tripped>,
    /// Whether stores are metered with fuel (see [`Shared::build`]).
    pub fuel: bool,
    /// Signing keys providers publish, kept between calls (`signing.verify-ed25519`).
    pub keys: crate::host_impl::KeyCache,
    /// The instance's metrics registry (calls, faults, provider HTTP timings).
    pub metrics: slotd_core::telemetry::Metrics,
    /// Lives as long as anything can still call a handler (a `Handler` keeps `Shared`, and
    /// may outlive the `Runtime` that loaded it); without it deadlines would never fire.
    _ticker: EpochTicker,
}

impl Shared {
    pub fn new(
        limits: RuntimeLimits,
        handlers: BTreeMap<String, HandlerConfig>,
        tripped: tokio::sync::mpsc::UnboundedSender<Tripped>,
    ) -> anyhow::Result<Shared> {
        Shared::build(limits, handlers, tripped, false)
    }

    /// [`Shared::new`], with fuel metering when `fuel` (every store starts with `u64::MAX`
    /// fuel, so the instructions a call ran are read back; used by `slotd plugin replay`).
    pub fn build(
        limits: RuntimeLimits,
        handlers: BTreeMap<String, HandlerConfig>,
        tripped: tokio::sync::mpsc::UnboundedSender<Tripped>,
        fuel: bool,
    ) -> anyhow::Result<Shared> {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        config.consume_fuel(fuel);
        config.wasm_component_model(true);
        let engine = Engine::new(&config)
            .map_err(anyhow::Error::from)
            .context("creating the wasm engine")?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(anyhow::Error::from)
            .context("adding WASI to the linker")?;
        SlotdHandler::add_to_linker::<_, wasmtime::component::HasSelf<CallState>>(
            &mut linker,
            |state| state,
        )
        .map_err(anyhow::Error::from)
        .context("adding the slotd imports to the linker")?;
        let http = reqwest::Client::builder()
            // A redirect could lead outside the allowlist: handlers see 3xx answers instead.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .context("building the handlers' HTTP client")?;
        let ticker = EpochTicker::start(engine.clone())?;
        Ok(Shared {
            _ticker: ticker,
            fuel,
            keys: Default::default(),
            metrics: Default::default(),
            engine,
            linker,
            limits,
            handlers,
            http,
            tripped,
        })
    }

    /// A fresh store for one call of `handler`: memory cap over the whole store, no preopens, env, args or sockets,
    /// captured stdio, and an epoch callback that yields every tick and traps past `deadline`.
    pub fn new_store(
        self: &Arc<Self>,
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
        };
        let mut store = Store::new(&self.engine, state);
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
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Advances the engine's epoch every [`EPOCH_TICK`] on a small thread until dropped.
pub(crate) struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub fn start(engine: Engine) -> anyhow::Result<EpochTicker> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("slotd-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
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
