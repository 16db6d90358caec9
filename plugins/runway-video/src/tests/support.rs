//! What the handler tests share: a scripted host with the key configured, units in each
//! situation, Runway's task objects, and [`Spy`], which sees requests as the guest made them
//! (before the host inserts credentials).

use std::cell::RefCell;

use serde_json::{Value, json};
use slotd_sdk::testing::ScriptedHost;
use slotd_sdk::{
    AuthorizedRequest, Change, Handler, Host, HttpError, Level, Outcome, Request, Response,
    TickContext, Unit, UnitStatus,
};

use crate::RunwayVideo;
use crate::payload::{TASK_TYPE, plan};

/// The API key the scripted host holds; the guest never sees it.
pub const KEY: &str = "key_0123456789abcdef";
/// slotd's clock in the tests.
pub const NOW: u64 = 1_781_080_794_000;
pub const IMAGE: &str = "https://cdn.example.com/frame.png";

/// A host with the `api_key` secret and the default configuration.
pub fn keyed_host() -> ScriptedHost {
    ScriptedHost::new().with_secret("api_key", KEY)
}

pub fn ctx(now_ms: u64) -> TickContext {
    TickContext {
        pool: "runway:gen4_turbo".into(),
        now_ms,
        callback_url: None,
    }
}

/// The spec `plan` makes of a one-shot payload.
pub fn spec_of(payload: Value) -> String {
    plan(TASK_TYPE, &payload.to_string())
        .ok()
        .and_then(|shots| shots.into_iter().next())
        .map(|s| s.spec)
        .unwrap_or_default()
}

/// docs/interfaces.md's example: a 5 s `gen4_turbo` clip from an image.
pub fn turbo_spec() -> String {
    spec_of(
        json!({"model": "gen4_turbo", "ratio": "1280:720", "duration": 5,
                   "shots": [{"prompt_image": IMAGE, "prompt_text": "a cat", "seed": 1}]}),
    )
}

/// A unit the host just marked submitted (at [`NOW`]), with no job id.
pub fn fresh(id: &str) -> Unit {
    Unit {
        id: id.into(),
        task_id: "task-1".into(),
        task_type: TASK_TYPE.into(),
        tenant: "local".into(),
        stage: "main".into(),
        status: UnitStatus::Submitted,
        spec: turbo_spec(),
        state: "{}".into(),
        idempotency_key: format!("{id}-main-0"),
        submitted_at_ms: Some(NOW),
        ..Unit::default()
    }
}

/// A unit whose Runway task `job` was created at [`NOW`].
pub fn running(id: &str, job: &str) -> Unit {
    Unit {
        provider_job_id: Some(job.into()),
        state: json!({"created_at_ms": NOW}).to_string(),
        ..fresh(id)
    }
}

/// A unit the host gives back `in-doubt` with `state`.
pub fn in_doubt(id: &str, state: &str) -> Unit {
    Unit {
        in_doubt: true,
        state: state.into(),
        ..fresh(id)
    }
}

/// A task object as `GET /v1/tasks/{id}` answers it.
pub fn task(id: &str, status: &str, extra: Value) -> Value {
    let mut t = json!({"id": id, "createdAt": "2026-08-11T06:12:01.171Z", "status": status});
    if let (Some(t), Value::Object(extra)) = (t.as_object_mut(), extra) {
        t.extend(extra);
    }
    t
}

/// Run a tick and return the changes (an `Err` fails the test with its message).
pub fn tick(host: &dyn Host, now_ms: u64, units: Vec<Unit>) -> Vec<Change> {
    match RunwayVideo::tick(host, &ctx(now_ms), units) {
        Ok(changes) => changes,
        Err(e) => panic!("tick failed: {e}"),
    }
}

/// The single change of a one-unit tick.
pub fn tick_one(host: &dyn Host, now_ms: u64, unit: Unit) -> Change {
    let mut changes = tick(host, now_ms, vec![unit]);
    assert_eq!(changes.len(), 1, "{changes:?}");
    changes.remove(0)
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

/// A [`Host`] that passes everything to a [`ScriptedHost`] and records the requests as the
/// guest asked for them: those sent plainly and those sent with credentials, before the host
/// inserts the credential headers (the scripted host records them after).
pub struct Spy<'h> {
    pub inner: &'h ScriptedHost,
    pub plain: RefCell<Vec<Request>>,
    pub authorized: RefCell<Vec<AuthorizedRequest>>,
}

impl<'h> Spy<'h> {
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
}
