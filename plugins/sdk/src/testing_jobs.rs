//! Test support for submit → poll → result handlers ([`crate::jobs`]) on a [`ScriptedHost`]:
//! units in each situation ([`submitted`], [`with_job`], [`in_doubt`]), ticks that fail the
//! test on an `Err` ([`tick`], [`tick_one`]), what a change says ([`code`], [`state`]), what
//! the host saw ([`warnings`], [`sent`]), [`Spy`], which sees requests as the guest made
//! them (before the host inserts credentials), and routes (contract 1.5: [`routed`],
//! [`refusal`], [`planned`], [`with`]).

use std::cell::RefCell;

use serde_json::Value;

use super::{ScriptedHost, json_answer};
use crate::handler::Handler;
use crate::host::{AuthorizedRequest, Host, HttpError, Level, Request, Response};
use crate::route::RoutedShot;
use crate::types::{Change, Outcome, PlanError, TickContext, Unit, UnitStatus};

/// A unit of `task_type` the host just marked submitted (at `submitted_at_ms`), stage `main`,
/// task `task-1`, tenant `local`, idempotency key `<id>-main-0`, no job id, empty state.
pub fn submitted(id: &str, task_type: &str, spec: String, submitted_at_ms: u64) -> Unit {
    Unit {
        id: id.into(),
        task_id: "task-1".into(),
        task_type: task_type.into(),
        tenant: "local".into(),
        stage: "main".into(),
        status: UnitStatus::Submitted,
        spec,
        state: "{}".into(),
        idempotency_key: format!("{id}-main-0"),
        submitted_at_ms: Some(submitted_at_ms),
        ..Unit::default()
    }
}

/// `unit` once the provider accepted it as `job`, with `state`.
pub fn with_job(unit: Unit, job: &str, state: &Value) -> Unit {
    Unit {
        provider_job_id: Some(job.into()),
        state: state.to_string(),
        ..unit
    }
}

/// `unit` handed back `in-doubt` (submitted, no job id) with `state`.
pub fn in_doubt(unit: Unit, state: &str) -> Unit {
    Unit {
        in_doubt: true,
        state: state.into(),
        ..unit
    }
}

/// Run `H`'s tick and return the changes (an `Err` fails the test with its message).
pub fn tick<H: Handler>(host: &dyn Host, ctx: &TickContext, units: Vec<Unit>) -> Vec<Change> {
    match H::tick(host, ctx, units) {
        Ok(changes) => changes,
        Err(e) => panic!("tick failed: {e}"),
    }
}

/// The single change of `H`'s tick of one unit.
pub fn tick_one<H: Handler>(host: &dyn Host, ctx: &TickContext, unit: Unit) -> Change {
    let mut changes = tick::<H>(host, ctx, vec![unit]);
    assert_eq!(changes.len(), 1, "{changes:?}");
    changes.remove(0)
}

/// A JSON answer.
pub fn answer(status: u16, body: Value) -> Result<Response, HttpError> {
    json_answer(status, &body)
}

/// The error code of a failing or retried outcome.
pub fn code(outcome: &Outcome) -> Option<&str> {
    match outcome {
        Outcome::Fail(e) | Outcome::RetryAfter { error: e, .. } => e.code.as_deref(),
        _ => None,
    }
}

/// The state of a change as JSON (`null` when unchanged).
pub fn state(change: &Change) -> Value {
    change
        .state
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or(Value::Null)
}

/// The warnings logged.
pub fn warnings(host: &ScriptedHost) -> Vec<String> {
    host.logs()
        .into_iter()
        .filter(|(level, _)| *level == Level::Warn)
        .map(|(_, m)| m)
        .collect()
}

/// The requests sent with this method.
pub fn sent(host: &ScriptedHost, method: &str) -> Vec<Request> {
    host.requests()
        .into_iter()
        .filter(|r| r.method == method)
        .collect()
}

/// A [`Host`] that passes everything to a [`ScriptedHost`] and records the requests as the
/// guest asked for them: those sent plainly and those sent with credentials, before the host
/// inserts the credential headers (the scripted host records them after).
pub struct Spy<'h> {
    /// The host answering.
    pub inner: &'h ScriptedHost,
    /// Requests sent without credentials.
    pub plain: RefCell<Vec<Request>>,
    /// Requests sent with credentials, as the guest asked.
    pub authorized: RefCell<Vec<AuthorizedRequest>>,
}

impl<'h> Spy<'h> {
    /// A spy over `inner`, nothing recorded yet.
    pub fn new(inner: &'h ScriptedHost) -> Spy<'h> {
        Spy {
            inner,
            plain: RefCell::new(Vec::new()),
            authorized: RefCell::new(Vec::new()),
        }
    }
}

impl Host for Spy<'_> {
    fn send_batch(&self, requests: Vec<Request>) -> Vec<Result<Response, HttpError>> {
        self.plain.borrow_mut().extend(requests.iter().cloned());
        self.inner.send_batch(requests)
    }

    fn send_authorized(
        &self,
        requests: Vec<AuthorizedRequest>,
    ) -> Vec<Result<Response, HttpError>> {
        self.authorized
            .borrow_mut()
            .extend(requests.iter().cloned());
        self.inner.send_authorized(requests)
    }

    fn send(&self, request: Request) -> Result<Response, HttpError> {
        self.plain.borrow_mut().push(request.clone());
        self.inner.send(request)
    }

    fn hmac_sha256(&self, secret: &str, data: &[u8]) -> Result<Vec<u8>, String> {
        self.inner.hmac_sha256(secret, data)
    }

    fn config(&self, key: &str) -> Option<String> {
        self.inner.config(key)
    }

    fn log(&self, level: Level, message: &str) {
        self.inner.log(level, message);
    }

    fn wall_clock_ms(&self) -> Option<u64> {
        self.inner.wall_clock_ms()
    }

    fn verify_ed25519(&self, keys_url: &str, message: &[u8], sig: &[u8]) -> Result<bool, String> {
        self.inner.verify_ed25519(keys_url, message, sig)
    }

    fn queued(&self, unit_id: &str, position: Option<u32>) {
        self.inner.queued(unit_id, position);
    }
}

/// `H`'s answer to one canonical shot for `model` (contract 1.5 `plan-shot`).
pub fn plan_shot<H: Handler>(
    host: &dyn Host,
    model: &str,
    shot: &Value,
) -> Result<RoutedShot, PlanError> {
    H::plan_shot(host, model, &shot.to_string())
}

/// The unit `H` makes of one canonical shot (a refusal fails the test).
pub fn routed<H: Handler>(host: &dyn Host, model: &str, shot: &Value) -> RoutedShot {
    plan_shot::<H>(host, model, shot).unwrap_or_else(|e| panic!("refused: {e:?}"))
}

/// The field and message of `H`'s refusal of one canonical shot (routing it fails the test).
pub fn refusal<H: Handler>(host: &dyn Host, model: &str, shot: &Value) -> (Option<String>, String) {
    match plan_shot::<H>(host, model, shot) {
        Ok(r) => panic!("routed: {r:?}"),
        Err(e) => (e.field, e.message),
    }
}

/// The spec and pool `H`'s `plan-routed` gives the first unit of `payload` (a refusal fails
/// the test).
pub fn planned<H: Handler>(host: &dyn Host, task_type: &str, payload: &Value) -> (String, String) {
    let units = H::plan_routed(host, task_type, &payload.to_string());
    let mut units = units.unwrap_or_else(|e| panic!("plan refused: {e:?}"));
    assert!(!units.is_empty(), "plan-routed made no unit");
    let unit = units.remove(0);
    let pool = unit
        .pools
        .first()
        .map(|(_, p)| p.clone())
        .unwrap_or_default();
    (unit.spec, pool)
}

/// `shot` (an object) with `key` set to `value`.
pub fn with(mut shot: Value, key: &str, value: Value) -> Value {
    if let Some(map) = shot.as_object_mut() {
        map.insert(key.into(), value);
    }
    shot
}
