//! `finalize`: what to store for a succeeded unit. Runway's output links are signed and expire
//! within 24–48 hours (an expired one answers 403), and a unit may wait for finalization, so
//! the task is read again for a fresh link. Only when Runway no longer has the task (404) is
//! the link recorded at success used, as the last chance; any other failure is an error, which
//! the host retries with backoff.

use serde_json::Value;
use slotd_sdk::client::Call;
use slotd_sdk::{Artifact, Finalized, Host, Unit};

use crate::answers::{self, Status};
use crate::settings::Config;
use crate::tick::task_path;

/// The artifact's name within the unit.
pub const ARTIFACT: &str = "video.mp4";
/// Runway's video outputs are MP4.
const CONTENT_TYPE: &str = "video/mp4";

/// The artifact of a succeeded unit, by a fresh link.
pub fn run(host: &dyn Host, unit: &Unit) -> Result<Finalized, String> {
    let cfg = Config::read(host)?;
    let recorded = recorded(unit);
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
    Ok(Finalized {
        artifacts: vec![Artifact {
            name: ARTIFACT.into(),
            url,
            content_type: Some(CONTENT_TYPE.into()),
        }],
        result: None,
    })
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
