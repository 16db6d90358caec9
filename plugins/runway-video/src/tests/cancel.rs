//! `cancel`: DELETE the task, then make sure Runway no longer runs it before the slot is freed.

use serde_json::{Value, json};
use slotd_sdk::testing::{ScriptedHost, json_answer};
use slotd_sdk::{CancelChange, CancelOutcome, Handler, HttpError, Response, Unit};

use super::support::*;
use crate::RunwayVideo;

fn cancel(host: &ScriptedHost, units: Vec<Unit>) -> Vec<CancelChange> {
    match RunwayVideo::cancel(host, &ctx(NOW), units) {
        Ok(changes) => changes,
        Err(e) => panic!("cancel failed: {e}"),
    }
}

fn deleted_then(read: Result<Response, HttpError>) -> ScriptedHost {
    let mut read = Some(read);
    keyed_host()
        .on_request("DELETE", "/v1/tasks/t1", |_| Ok(Response::new(204, "")))
        .on_request("GET", "/v1/tasks/t1", move |_| {
            read.take()
                .unwrap_or_else(|| Err(HttpError::Transport("read twice".into())))
        })
}

fn read(status: u16, body: Value) -> Result<Response, HttpError> {
    json_answer(status, &body)
}

#[test]
fn a_deleted_task_that_runway_no_longer_has_has_ended() {
    let host = deleted_then(read(404, json!({"error": "Could not find Task"})));
    let changes = cancel(&host, vec![running("u1", "t1")]);
    assert_eq!(changes[0].outcome, CancelOutcome::Ended);
    let sent: Vec<(String, String)> = host
        .requests()
        .into_iter()
        .map(|r| (r.method, r.url))
        .collect();
    assert_eq!(
        sent,
        [
            (
                "DELETE".to_string(),
                "https://api.dev.runwayml.com/v1/tasks/t1".to_string()
            ),
            (
                "GET".to_string(),
                "https://api.dev.runwayml.com/v1/tasks/t1".to_string()
            ),
        ]
    );
}

#[test]
fn a_deleted_task_read_back_terminal_has_ended_and_one_still_running_keeps_its_slot() {
    for status in ["CANCELLED", "SUCCEEDED", "FAILED"] {
        let host = deleted_then(read(
            200,
            task("t1", status, json!({"cost": {"credits": 0}})),
        ));
        let changes = cancel(&host, vec![running("u1", "t1")]);
        assert_eq!(changes[0].outcome, CancelOutcome::Ended, "{status}");
        assert_eq!(changes[0].cost.as_deref(), Some("0"));
    }
    for answer in [
        read(200, task("t1", "RUNNING", json!({}))),
        read(200, task("t1", "THROTTLED", json!({}))),
        read(503, json!({"error": "busy"})),
        Err(HttpError::Timeout),
    ] {
        let host = deleted_then(answer);
        let changes = cancel(&host, vec![running("u1", "t1")]);
        assert_eq!(changes[0].outcome, CancelOutcome::Running(Some(5_000)));
    }
}

#[test]
fn a_task_runway_does_not_know_has_ended_without_a_read() {
    let host = keyed_host().on_request("DELETE", "/v1/tasks/", |_| {
        json_answer(404, &json!({"error": "Could not find Task"}))
    });
    let changes = cancel(&host, vec![running("u1", "t1")]);
    assert_eq!(changes[0].outcome, CancelOutcome::Ended);
    assert_eq!(host.requests().len(), 1);
}

#[test]
fn a_delete_that_could_not_be_made_is_asked_again() {
    let host = keyed_host()
        .on_any(|_| Ok(Response::new(503, r#"{"error":"busy"}"#).with_header("Retry-After", "3")));
    let changes = cancel(&host, vec![running("u1", "t1")]);
    assert!(matches!(&changes[0].outcome,
        CancelOutcome::RetryAfter { after_ms: Some(3_000), error } if error.code.as_deref() == Some("http_503")));
    let host = keyed_host().on_any(|_| Err(HttpError::Timeout));
    let changes = cancel(&host, vec![running("u1", "t1")]);
    assert!(matches!(&changes[0].outcome,
        CancelOutcome::RetryAfter { after_ms: None, error } if error.code.as_deref() == Some("timeout")));
}

#[test]
fn a_batch_takes_two_rounds_at_most() {
    let host = keyed_host()
        .on_request("DELETE", "/v1/tasks/gone", |_| json_answer(404, &json!({})))
        .on_request("DELETE", "/v1/tasks/", |_| Ok(Response::new(204, "")))
        .on_request("GET", "/v1/tasks/", |r| {
            let id = r.url.rsplit('/').next().unwrap_or_default().to_string();
            json_answer(200, &task(&id, "CANCELLED", json!({})))
        });
    let units = vec![running("a", "ta"), running("b", "gone"), running("c", "tc")];
    let changes = cancel(&host, units);
    assert_eq!(host.batches().len(), 2);
    assert_eq!(host.batches()[1].len(), 2, "only the 204s are read back");
    let mut ended: Vec<&str> = changes
        .iter()
        .filter(|c| c.outcome == CancelOutcome::Ended)
        .map(|c| c.unit_id.as_str())
        .collect();
    ended.sort_unstable();
    assert_eq!(ended, ["a", "b", "c"]);
}

/// An in-doubt unit has no task id to `DELETE`. Its create's outcome unknown (recorded, or
/// nothing recorded since the submit marker), a task may run at Runway: the slot stays held
/// until the outcome-unknown hold (600 s for `gen4_turbo`) has passed, then it ends. Its
/// create answered "not created": nothing exists, it ends at once. No request either way.
#[test]
fn an_in_doubt_unit_is_held_for_the_outcome_unknown_hold_without_a_request() {
    let host = keyed_host().on_any(|_| Err(HttpError::Timeout));
    let submission = format!("u1-main-0@{NOW}");
    let unknown =
        json!({"submission": submission, "unknown_since": NOW - 100_000, "unknown_reason": "x"});
    let lost = in_doubt("u1", &unknown.to_string());
    let changes = cancel(&host, vec![lost.clone()]);
    assert_eq!(changes[0].outcome, CancelOutcome::Running(Some(500_000)));
    let marked_long_ago = Unit {
        submitted_at_ms: Some(NOW - 600_000),
        ..in_doubt("u2", "{}")
    };
    let marked_now = in_doubt("u3", "{}");
    let refused = in_doubt(
        "u4",
        &json!({"submission": format!("u4-main-0@{NOW}"), "refused_at_ms": NOW}).to_string(),
    );
    let changes = cancel(&host, vec![marked_long_ago, marked_now, refused]);
    let outcomes: Vec<&CancelOutcome> = changes.iter().map(|c| &c.outcome).collect();
    assert_eq!(
        outcomes,
        [
            &CancelOutcome::Ended,
            &CancelOutcome::Running(Some(600_000)),
            &CancelOutcome::Ended
        ]
    );
    let past_the_hold = RunwayVideo::cancel(&host, &ctx(NOW + 500_000), vec![lost]);
    assert_eq!(
        past_the_hold.map(|c| c[0].outcome.clone()),
        Ok(CancelOutcome::Ended)
    );
    // Not in doubt (the host never sent it): nothing at Runway.
    assert_eq!(
        cancel(&host, vec![fresh("u5")])[0].outcome,
        CancelOutcome::Ended
    );
    assert!(host.requests().is_empty());
}

#[test]
fn the_handler_claims_cancel_and_routing() {
    let features = slotd_sdk::features::<RunwayVideo>();
    assert!(features.cancel && features.routing);
}
