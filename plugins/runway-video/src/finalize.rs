//! `finalize`: what to store for a succeeded unit. Runway's output links are signed and expire
//! within 24–48 hours (an expired one answers 403). A unit finalized soon after the read that
//! saw it succeed (within [`FRESH_LINK_SECS`]) stores the link that read recorded: reading the
//! task again at once would be sooner than Runway's five-second pace. A unit that waited longer
//! for finalization reads the task again for a fresh link; only when Runway no longer has the
//! task (404) is the recorded link used, as the last chance. Any other failure is an error,
//! which the host retries with backoff.

use serde_json::Value;
use slotd_sdk::client::Call;
use slotd_sdk::{Artifact, Finalized, Host, TickContext, Unit};

use crate::answers::{self, Status};
use crate::settings::Config;
use crate::state::State;
use crate::tick::task_path;

/// How long after success the recorded link is used without reading the task again (times
/// `expected_duration_scale`): an hour, far inside the links' 24 hours.
pub const FRESH_LINK_SECS: f64 = 3600.0;

/// The artifact's name within the unit.
pub const ARTIFACT: &str = "video.mp4";
/// Runway's video outputs are MP4.
const CONTENT_TYPE: &str = "video/mp4";

/// The artifact of a succeeded unit, by a fresh link.
pub fn run(host: &dyn Host, ctx: &TickContext, unit: &Unit) -> Result<Finalized, String> {
    let cfg = Config::read(host)?;
    let recorded = recorded(unit);
    let fresh = State::of(unit)
        .succeeded_at_ms
        .is_some_and(|at| ctx.now_ms.saturating_sub(at) < cfg.scaled_ms(FRESH_LINK_SECS));
    if fresh && let Some(url) = recorded.as_ref().and_then(|r| r.1.clone()) {
        return Ok(stored(url));
    }
    let job_id = unit
        .provider_job_id
        .clone()
        .or_else(|| recorded.as_ref().map(|r| r.0.clone()))
        .ok_or_else(|| format!("unit {} has no Runway task id to read", unit.id))?;
    let answer = cfg
        .client(host)
        .send(&[Call::Get(task_path(&job_id))])
        .pop()
        .unwrap_or_else(|| Err(slotd_sdk::HttpError::Transport("no answer".into())));
    let url = match answer {
        Ok(r) if r.status == 404 => {
            let url = recorded.and_then(|r| r.1).ok_or_else(|| {
                format!("Runway no longer has task {job_id} and the unit recorded no output link")
            })?;
            host.warn(&format!(
                "Runway no longer has task {job_id} (unit {}); storing the link recorded at \
                 success, which may have expired",
                unit.id
            ));
            url
        }
        Ok(r) if (200..300).contains(&r.status) => {
            let task = answers::task(&r)?;
            match (task.status, task.output.into_iter().next()) {
                (Status::Succeeded, Some(url)) => url,
                (status, _) => {
                    return Err(format!(
                        "Runway task {job_id} is {} without output; cannot store it",
                        status.as_str()
                    ));
                }
            }
        }
        Ok(r) => {
            return Err(format!(
                "reading task {job_id}: {}",
                answers::error(&r).message
            ));
        }
        Err(e) => return Err(format!("reading task {job_id}: {e}")),
    };
    Ok(stored(url))
}

/// The video at `url`, to store.
fn stored(url: String) -> Finalized {
    Finalized {
        artifacts: vec![Artifact {
            name: ARTIFACT.into(),
            url,
            content_type: Some(CONTENT_TYPE.into()),
        }],
        result: None,
    }
}

/// The task id and first output link recorded in the unit's result at success.
fn recorded(unit: &Unit) -> Option<(String, Option<String>)> {
    let v: Value = serde_json::from_str(unit.result.as_deref()?).ok()?;
    let id = v.get("task_id")?.as_str()?.to_string();
    let url = v
        .get("output")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .map(str::to_string);
    Some((id, url))
}
