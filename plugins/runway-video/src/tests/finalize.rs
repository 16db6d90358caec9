//! `finalize`: the link recorded at success while it is fresh (no second read within Runway's
//! pace); after that a fresh signed link from a new read of the task, the recorded one only
//! when Runway no longer has the task.

use serde_json::json;
use slotd_sdk::testing::{ScriptedHost, json_answer};
use slotd_sdk::{Finalized, Handler, HttpError, Response, Unit, UnitStatus};

use super::support::*;
use crate::RunwayVideo;

const RECORDED: &str = "https://cdn.test/v.mp4?_jwt=old";
const FRESH: &str = "https://cdn.test/v.mp4?_jwt=new";

fn succeeded() -> Unit {
    Unit {
        status: UnitStatus::Succeeded,
        result: Some(json!({"task_id": "t1", "output": [RECORDED]}).to_string()),
        ..running("u1", "t1")
    }
}

fn finalize(host: &ScriptedHost) -> Result<Finalized, String> {
    RunwayVideo::finalize(host, &ctx(NOW), succeeded())
}

fn url(done: &Result<Finalized, String>) -> Option<&str> {
    done.as_ref()
        .ok()
        .and_then(|f| f.artifacts.first())
        .map(|a| a.url.as_str())
}

/// A unit whose success was seen at `at_ms` (slotd's clock).
fn succeeded_at(at_ms: u64) -> Unit {
    Unit {
        state: json!({"succeeded_at_ms": at_ms}).to_string(),
        ..succeeded()
    }
}

#[test]
fn a_unit_finalized_soon_after_success_stores_the_recorded_link_without_a_read() {
    let host = keyed_host().on_any(|_| Err(HttpError::Transport("no read expected".into())));
    let done = RunwayVideo::finalize(&host, &ctx(NOW), succeeded_at(NOW - 2_000));
    assert_eq!(url(&done), Some(RECORDED));
    assert!(host.requests().is_empty(), "{:?}", host.requests());
    // An hour later the recorded link may be near its end: the task is read again.
    let host = keyed_host().on_request("GET", "/v1/tasks/t1", |_| {
        json_answer(200, &task("t1", "SUCCEEDED", json!({"output": [FRESH]})))
    });
    let late = NOW + 3_600_000;
    let done = RunwayVideo::finalize(&host, &ctx(late), succeeded_at(NOW));
    assert_eq!(url(&done), Some(FRESH));
}

#[test]
fn the_task_is_read_again_for_a_fresh_link() {
    let host = keyed_host().on_request("GET", "/v1/tasks/t1", |_| {
        json_answer(200, &task("t1", "SUCCEEDED", json!({"output": [FRESH]})))
    });
    let done = finalize(&host);
    assert_eq!(url(&done), Some(FRESH));
    let artifact = done.ok().and_then(|f| f.artifacts.into_iter().next());
    assert_eq!(
        artifact.as_ref().map(|a| a.name.as_str()),
        Some("video.mp4")
    );
    assert_eq!(
        artifact.and_then(|a| a.content_type).as_deref(),
        Some("video/mp4")
    );
}

#[test]
fn the_recorded_link_is_used_only_when_runway_no_longer_has_the_task() {
    let host = keyed_host().on_any(|_| json_answer(404, &json!({"error": "Could not find Task"})));
    assert_eq!(url(&finalize(&host)), Some(RECORDED));
    assert_eq!(warnings(&host).len(), 1);
    for failure in [
        Ok(Response::new(500, "")),
        Ok(Response::new(403, "")),
        Err(HttpError::Timeout),
        json_answer(200, &task("t1", "RUNNING", json!({}))),
        Ok(Response::new(200, "<html>")),
    ] {
        let mut failure = Some(failure);
        let host = keyed_host().on_any(move |_| {
            failure
                .take()
                .unwrap_or_else(|| Err(HttpError::Transport("asked twice".into())))
        });
        let done = finalize(&host);
        assert!(
            done.is_err(),
            "{done:?}: the host retries finalize with backoff"
        );
    }
}

#[test]
fn without_a_recorded_link_a_missing_task_is_an_error() {
    let host = keyed_host().on_any(|_| json_answer(404, &json!({})));
    let unit = Unit {
        result: None,
        ..succeeded()
    };
    let done = RunwayVideo::finalize(&host, &ctx(NOW), unit);
    assert!(done.is_err_and(|e| e.contains("no output link")));
}
