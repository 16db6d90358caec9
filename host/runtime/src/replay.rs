//! `slotd plugin replay FILE.wasm RECORDING`: run a handler offline against a recording
//! ([`super::tape`]). Every recorded `tick`, `finalize` and `cancel` call is made again with its
//! recorded inputs; the handler's HTTP requests are answered from the recording (each must be
//! the request recorded at that point), and what it returns must equal what it returned when
//! recorded. Each call's guest instruction count (wasmtime fuel) is reported, so a handler's CPU
//! cost is a number a test can assert.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::Value;
use wasmtime::Store;
use wasmtime::component::Component;

use super::bindings::{SlotdHandlerPre, extensions};
use super::engine::{CallState, Shared};
use super::tape::{self, CallRecord, Redactor, Replaying, Tape};
use super::tape_json;
use slotd_core::config::{HandlerConfig, RuntimeLimits};

/// Wall time allowed per replayed call (no network: generous, only a runaway guest hits it).
const CALL_DEADLINE: Duration = Duration::from_secs(30);

/// One replayed call.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayedCall {
    /// Position in the recording, from 1.
    pub line: usize,
    pub function: String,
    /// Requests the handler sent.
    pub requests: usize,
    /// Guest instructions executed (wasmtime fuel), instantiation included.
    pub fuel: u64,
    /// What the handler returned now.
    pub output: Value,
    /// Every way this call differed from the recording (empty: identical).
    pub differences: Vec<String>,
    /// Why the call was not replayed (a function replay does not cover), if it was not.
    pub skipped: Option<String>,
}

/// A whole replay.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayReport {
    pub calls: Vec<ReplayedCall>,
}

impl ReplayReport {
    /// Calls that differed from the recording.
    pub fn differing(&self) -> usize {
        self.calls
            .iter()
            .filter(|c| !c.differences.is_empty())
            .count()
    }
}

/// Replay `recording` against the component in `wasm`.
pub async fn replay(wasm: &Path, recording: &Path) -> anyhow::Result<ReplayReport> {
    let records = tape::read(recording)?;
    if records.is_empty() {
        bail!("{} holds no calls", recording.display());
    }
    let bytes = tokio::fs::read(wasm)
        .await
        .with_context(|| format!("reading {}", wasm.display()))?;
    let (tripped, _rx) = tokio::sync::mpsc::unbounded_channel();
    let limits = RuntimeLimits {
        call_deadline: CALL_DEADLINE,
        cpu_budget: CALL_DEADLINE,
        ..RuntimeLimits::default()
    };
    let shared = Arc::new(Shared::build(limits, BTreeMap::new(), tripped, true)?);
    let engine = shared.engine.clone();
    let component = tokio::task::spawn_blocking(move || Component::new(&engine, &bytes))
        .await
        .context("the compile task did not finish")?
        .map_err(|e| anyhow!("{e:#}"))
        .with_context(|| format!("{} is not a valid component", wasm.display()))?;
    let pre = shared
        .linker
        .instantiate_pre(&component)
        .map_err(|e| anyhow!("{e:#}"))
        .context("linking the component's imports")?;
    let ext = super::linked::extension_indices(&pre)?;
    let pre = SlotdHandlerPre::new(pre).map_err(|e| anyhow!("{e:#}"))?;
    let mut calls = Vec::with_capacity(records.len());
    for (i, record) in records.iter().enumerate() {
        let call = replay_call(&shared, &pre, ext.as_ref(), record)
            .await
            .with_context(|| format!("{} line {}", recording.display(), i + 1))?;
        calls.push(ReplayedCall {
            line: i + 1,
            ..call
        });
    }
    Ok(ReplayReport { calls })
}

fn skipped(record: &CallRecord, why: &str) -> ReplayedCall {
    ReplayedCall {
        line: 0,
        function: record.function.clone(),
        requests: 0,
        fuel: 0,
        output: Value::Null,
        differences: Vec::new(),
        skipped: Some(why.to_string()),
    }
}

async fn replay_call(
    shared: &Arc<Shared>,
    pre: &SlotdHandlerPre<CallState>,
    ext: Option<&extensions::GuestIndices>,
    record: &CallRecord,
) -> anyhow::Result<ReplayedCall> {
    let config = Arc::new(HandlerConfig {
        settings: record.settings.clone(),
        ..HandlerConfig::default()
    });
    let redactor = Arc::new(Redactor::new(&config));
    let tape = Arc::new(Tape::Replay(Mutex::new(Replaying {
        pending: record.exchanges.iter().cloned().collect(),
        differences: Vec::new(),
    })));
    let name: Arc<str> = Arc::from(record.handler.as_str());
    let mut store = shared.new_store(&name, &config, Instant::now() + CALL_DEADLINE);
    store.data_mut().tape = Some(tape.clone());
    store.data_mut().redactor = Some(redactor.clone());
    let output = match record.function.as_str() {
        "tick" | "finalize" => core_call(pre, &mut store, record).await?,
        "cancel" => match ext {
            Some(ext) => cancel_call(pre, ext, &mut store, record).await?,
            None => bail!("the recording has a cancel call but the component exports no cancel"),
        },
        other => return Ok(skipped(record, &format!("{other} calls are not replayed"))),
    };
    let output = redactor.json(output);
    let fuel = store.get_fuel().map(|left| u64::MAX - left).unwrap_or(0);
    let Tape::Replay(state) = &*tape else {
        bail!("the replay tape changed kind");
    };
    let state = std::mem::take(&mut *state.lock());
    let mut differences = state.differences;
    if !state.pending.is_empty() {
        differences.push(format!(
            "the handler sent {} request(s) fewer than recorded (next: {} {})",
            state.pending.len(),
            state.pending[0].request.method,
            state.pending[0].request.url
        ));
    }
    if output != record.output {
        differences.push(format!(
            "the handler returned {output} where the recording has {}",
            record.output
        ));
    }
    Ok(ReplayedCall {
        line: 0,
        function: record.function.clone(),
        requests: record.exchanges.len(),
        fuel,
        output,
        differences,
        skipped: None,
    })
}

async fn core_call(
    pre: &SlotdHandlerPre<CallState>,
    store: &mut Store<CallState>,
    record: &CallRecord,
) -> anyhow::Result<Value> {
    let input = &record.input;
    let ctx = tape_json::context_of(input.get("ctx").context("input has no ctx")?)?;
    let bindings = pre
        .instantiate_async(&mut *store)
        .await
        .map_err(|e| anyhow!("instantiating: {e:#}"))?;
    let h = bindings.slotd_handler_handler();
    let output = if record.function == "tick" {
        let units = tape_json::units_of(input.get("units").context("input has no units")?)?;
        let answer = h.call_tick(&mut *store, &ctx, &units).await;
        answer
            .map(|a| tape_json::result(&a, |c| tape_json::changes(c)))
            .unwrap_or_else(|e| fault_json(&e))
    } else {
        let unit = tape_json::unit_of(input.get("unit").context("input has no unit")?)?;
        let answer = h.call_finalize(&mut *store, &ctx, &unit).await;
        answer
            .map(|a| tape_json::result(&a, tape_json::finalized))
            .unwrap_or_else(|e| fault_json(&e))
    };
    Ok(output)
}

async fn cancel_call(
    pre: &SlotdHandlerPre<CallState>,
    ext: &extensions::GuestIndices,
    store: &mut Store<CallState>,
    record: &CallRecord,
) -> anyhow::Result<Value> {
    let input = &record.input;
    let ctx = tape_json::context_of(input.get("ctx").context("input has no ctx")?)?;
    let units = tape_json::units_of(input.get("units").context("input has no units")?)?;
    let instance = pre
        .instance_pre()
        .instantiate_async(&mut *store)
        .await
        .map_err(|e| anyhow!("instantiating: {e:#}"))?;
    let guest = ext
        .load(&mut *store, &instance)
        .map_err(|e| anyhow!("{e:#}"))?;
    let answer = guest.call_cancel(&mut *store, &ctx, &units).await;
    Ok(answer
        .map(|a| tape_json::result(&a, |c| tape_json::cancel_changes(c)))
        .unwrap_or_else(|e| fault_json(&e)))
}

/// A trap or deadline during replay, in the recording's `{"fault": kind}` form.
fn fault_json(e: &wasmtime::Error) -> Value {
    let kind = if e.is::<super::engine::DeadlineHit>() {
        "deadline"
    } else if e.is::<super::engine::CpuBudgetHit>() {
        "cpu"
    } else {
        "trap"
    };
    serde_json::json!({ "fault": kind })
}
