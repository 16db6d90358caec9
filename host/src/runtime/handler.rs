//! [`Handler`]: a loaded handler component with typed async calls.
//!
//! Every call gets a fresh store (no guest state survives between calls), instantiates the
//! pre-instantiated component, runs under the wall deadline, and turns traps, deadlines and
//! guest `err`s into a [`HandlerFault`]. Calls record `slotd_handler_call_seconds` and
//! `slotd_handler_faults_total`; captured guest stdout/stderr is logged under the handler name.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use wasmtime::Store;

use super::bindings::SlotdHandlerPre;
use super::convert;
use super::engine::{CallState, CpuBudgetHit, DeadlineHit, Shared};
use super::limiter::cap_message;
use super::quarantine::{Health, Tripped};
use super::{
    BatchUnit, CallbackChange, Finalized, HandlerFault, HandlerInfo, PlanError, PlannedUnit,
    TickContext,
};
use crate::config::{HandlerConfig, RuntimeLimits};
use crate::model::{Change, Unit};

/// Characters of guest stderr appended to a trap message (where a panic message lands).
const TRAP_STDERR_TAIL: usize = 600;

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
    /// Name used in logs and metrics, and the key of its config section.
    name: Arc<str>,
    /// This handler's `[handlers.<name>]` section (empty when none is configured).
    config: Arc<HandlerConfig>,
    pre: SlotdHandlerPre<CallState>,
    shared: Arc<Shared>,
    /// Consecutive crashing calls of this version (quarantine).
    health: Health,
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
    ($self:ident, $function:literal, |$bindings:ident, $store:ident| $call:expr) => {{
        let started = Instant::now();
        let deadline = $self.shared.limits.call_deadline;
        let mut store = $self
            .shared
            .new_store(&$self.name, &$self.config, started + deadline);
        let answer = tokio::time::timeout(deadline, async {
            let $bindings = $self
                .pre
                .instantiate_async(&mut store)
                .await
                .map_err(Failure::Instantiate)?;
            let $store = &mut store;
            $call.await.map_err(Failure::Call)
        })
        .await;
        $self.settle($function, started, &store, answer)
    }};
}

impl Handler {
    pub(crate) fn new(
        name: Arc<str>,
        info: HandlerInfo,
        sha256: String,
        path: PathBuf,
        pre: SlotdHandlerPre<CallState>,
        shared: Arc<Shared>,
    ) -> Handler {
        // No configuration until `with_info` has the declared name and the registry has checked
        // the file may serve it: `describe` of an unchecked file sees no settings, no secrets
        // and no hosts, whatever the file is called.
        let config = Arc::new(HandlerConfig::default());
        Handler {
            info,
            sha256,
            path,
            loaded_at_ms: now_ms(),
            name,
            config,
            pre,
            shared,
            health: Health::default(),
        }
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

    /// Ask the component what it serves (done once, at load).
    pub(crate) async fn describe(&self) -> Result<HandlerInfo, HandlerFault> {
        let info = guest_call!(self, "describe", |b, store| b
            .slotd_handler_handler()
            .call_describe(store))?;
        Ok(convert::info(info))
    }

    /// Validate a payload and split it into units.
    pub async fn plan(
        &self,
        task_type: &str,
        payload: &str,
    ) -> Result<Result<Vec<PlannedUnit>, PlanError>, HandlerFault> {
        let answer = guest_call!(self, "plan", |b, store| b
            .slotd_handler_handler()
            .call_plan(store, task_type, payload))?;
        Ok(answer
            .map(|units| units.into_iter().map(convert::planned).collect())
            .map_err(convert::plan_error))
    }

    /// Advance a batch of units of one pool.
    pub async fn tick(
        &self,
        ctx: &TickContext,
        batch: &[BatchUnit],
    ) -> Result<Vec<Change>, HandlerFault> {
        let ctx = convert::context(ctx);
        let batch = convert::batch(batch);
        let answer = guest_call!(self, "tick", |b, store| b
            .slotd_handler_handler()
            .call_tick(store, &ctx, &batch))?;
        let changes = self.guest_err("tick", answer)?;
        Ok(changes.into_iter().map(convert::change).collect())
    }

    /// Say what to store for a succeeded unit.
    pub async fn finalize(
        &self,
        ctx: &TickContext,
        unit: &Unit,
    ) -> Result<Finalized, HandlerFault> {
        let ctx = convert::context(ctx);
        let unit = convert::unit(unit, false);
        let answer = guest_call!(self, "finalize", |b, store| b
            .slotd_handler_handler()
            .call_finalize(store, &ctx, &unit))?;
        Ok(convert::finalized(self.guest_err("finalize", answer)?))
    }

    /// Turn a provider webhook into changes.
    pub async fn on_callback(
        &self,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Vec<CallbackChange>, HandlerFault> {
        let answer = guest_call!(self, "on_callback", |b, store| b
            .slotd_handler_handler()
            .call_on_callback(store, headers, body))?;
        let changes = self.guest_err("on_callback", answer)?;
        Ok(changes.into_iter().map(convert::callback_change).collect())
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
        metrics::counter!(
            "slotd_handler_faults_total",
            "handler" => self.name.to_string(),
            "kind" => fault.kind(),
        )
        .increment(1);
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
        metrics::histogram!(
            "slotd_handler_call_seconds",
            "handler" => self.name.to_string(),
            "function" => function,
        )
        .record(started.elapsed().as_secs_f64());
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
