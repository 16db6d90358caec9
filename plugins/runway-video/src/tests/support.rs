//! What the handler tests share: a scripted host with the key configured, units in each
//! situation and Runway's task objects, over the SDK's test support for submit → poll →
//! result handlers (`slotd_sdk::testing::jobs`: ticks, [`Spy`], which sees requests as the
//! guest made them, and what a change says).

use serde_json::{Value, json};
use slotd_sdk::testing::{ScriptedHost, jobs};
use slotd_sdk::{Change, Host, TickContext, Unit};

use crate::RunwayVideo;
use crate::payload::{TASK_TYPE, plan};

pub use slotd_sdk::testing::jobs::{Spy, code, state, warnings};

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
    jobs::submitted(id, TASK_TYPE, turbo_spec(), NOW)
}

/// A unit whose Runway task `job` was created at [`NOW`].
pub fn running(id: &str, job: &str) -> Unit {
    jobs::with_job(fresh(id), job, &json!({"created_at_ms": NOW}))
}

/// A unit the host gives back `in-doubt` with `state`.
pub fn in_doubt(id: &str, state: &str) -> Unit {
    jobs::in_doubt(fresh(id), state)
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
    jobs::tick::<RunwayVideo>(host, &ctx(now_ms), units)
}

/// The single change of a one-unit tick.
pub fn tick_one(host: &dyn Host, now_ms: u64, unit: Unit) -> Change {
    jobs::tick_one::<RunwayVideo>(host, &ctx(now_ms), unit)
}
