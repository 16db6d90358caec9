//! Polling tasks: what each status and answer of `GET /v1/tasks/{id}` means.

use serde_json::{Value, json};
use slotd_sdk::testing::{ScriptedHost, json_answer};
use slotd_sdk::{HttpError, Outcome, Response};

use super::support::*;

fn answering(status: u16, body: Value) -> ScriptedHost {
    keyed_host().on_request("GET", "/v1/tasks/t1", move |_| json_answer(status, &body))
}

fn poll(host: &ScriptedHost, now_ms: u64) -> slotd_sdk::Change {
    tick_one(host, now_ms, running("u1", "t1"))
}

#[test]
fn tasks_still_going_are_polled_after_a_hint_of_at_least_five_seconds() {
    for status in ["THROTTLED", "PENDING", "RUNNING"] {
        let host = answering(200, task("t1", status, json!({})));
        // A 5 s gen4_turbo clip is expected to take at least 30 s.
        assert_eq!(
            poll(&host, NOW + 10_000).outcome,
            Outcome::Running(Some(20_000))
        );
        assert_eq!(
            poll(&host, NOW + 29_000).outcome,
            Outcome::Running(Some(5_000))
        );
        assert_eq!(
            poll(&host, NOW + 300_000).outcome,
            Outcome::Running(Some(5_000))
        );
        assert_eq!(
            host.requests()[0].url,
            "https://api.dev.runwayml.com/v1/tasks/t1"
        );
    }
    let fast = answering(200, task("t1", "RUNNING", json!({})))
        .with_config("expected_duration_scale", "0.001");
    assert_eq!(poll(&fast, NOW + 1).outcome, Outcome::Running(Some(29)));
    assert_eq!(poll(&fast, NOW + 100).outcome, Outcome::Running(Some(5)));
}

#[test]
fn the_status_is_recorded_when_it_changes_and_throttling_is_reported() {
    let host = answering(200, task("t1", "RUNNING", json!({"progress": 0.45})));
    let change = poll(&host, NOW + 40_000);
    assert_eq!(
        state(&change),
        json!({"created_at_ms": NOW, "status": "RUNNING", "progress": 0.45})
    );
    let same = slotd_sdk::Unit {
        state: change.state.clone().unwrap_or_default(),
        ..running("u1", "t1")
    };
    assert_eq!(
        tick_one(&host, NOW + 45_000, same).state,
        None,
        "unchanged: not rewritten"
    );

    let throttled = answering(200, task("t1", "THROTTLED", json!({})));
    let change = poll(&throttled, NOW + 5_000);
    assert_eq!(warnings(&throttled).len(), 1);
    assert!(warnings(&throttled)[0].contains("pool runway:gen4_turbo has more slots"));
    let still = slotd_sdk::Unit {
        state: change.state.unwrap_or_default(),
        ..running("u1", "t1")
    };
    let quiet = answering(200, task("t1", "THROTTLED", json!({})));
    tick_one(&quiet, NOW + 10_000, still);
    assert!(warnings(&quiet).is_empty(), "reported once per spell");
}

#[test]
fn a_succeeded_task_records_its_output_and_cost() {
    let host = answering(
        200,
        task(
            "t1",
            "SUCCEEDED",
            json!({"output": ["https://cdn.test/v.mp4?_jwt=a"], "cost": {"credits": 24}}),
        ),
    );
    let change = poll(&host, NOW + 60_000);
    let Outcome::Succeeded(result) = &change.outcome else {
        panic!("{change:?}");
    };
    let result: Value = serde_json::from_str(result).unwrap_or_default();
    assert_eq!(
        result,
        json!({"task_id": "t1", "created_at": "2026-08-11T06:12:01.171Z",
               "output": ["https://cdn.test/v.mp4?_jwt=a"]})
    );
    assert_eq!(change.cost.as_deref(), Some("24"));
    // Without `cost`, the listed price: 5 credits/s × 5 s.
    let host = answering(
        200,
        task(
            "t1",
            "SUCCEEDED",
            json!({"output": ["https://cdn.test/v.mp4"]}),
        ),
    );
    assert_eq!(poll(&host, NOW).cost.as_deref(), Some("25"));
}

#[test]
fn a_succeeded_task_without_output_is_retried_not_trusted() {
    let host = answering(200, task("t1", "SUCCEEDED", json!({"output": []})));
    let change = poll(&host, NOW);
    assert!(matches!(change.outcome, Outcome::RetryAfter { .. }));
    assert_eq!(code(&change.outcome), Some("unexpected_answer"));
}

#[test]
fn failed_tasks_fail_with_their_failure_code() {
    for (failure_code, retryable) in [
        ("SAFETY.INPUT.TEXT", false),
        ("INPUT_PREPROCESSING.SAFETY.TEXT", false),
        ("INTERNAL", true),
        ("INPUT_PREPROCESSING.INTERNAL", true),
    ] {
        let host = answering(
            200,
            task(
                "t1",
                "FAILED",
                json!({"failure": "no", "failureCode": failure_code, "cost": {"credits": 0}}),
            ),
        );
        let change = poll(&host, NOW);
        assert_eq!(code(&change.outcome), Some(failure_code));
        assert!(
            matches!(&change.outcome, Outcome::Fail(e)
            if e.message.contains("retryable") == retryable),
            "{failure_code}"
        );
        assert_eq!(change.cost.as_deref(), Some("0"), "refunded");
    }
    let host = answering(200, task("t1", "FAILED", json!({})));
    assert_eq!(code(&poll(&host, NOW).outcome), Some("task_failed"));
}

#[test]
fn cancelled_and_unknown_tasks_fail() {
    let host = answering(200, task("t1", "CANCELLED", json!({})));
    assert_eq!(
        code(&poll(&host, NOW).outcome),
        Some("cancelled_at_provider")
    );
    let host = answering(404, json!({"error": "Could not find Task"}));
    let change = poll(&host, NOW);
    assert_eq!(code(&change.outcome), Some("task_not_found"));
    assert!(
        matches!(&change.outcome, Outcome::Fail(e) if e.message.contains("Could not find Task"))
    );
}

#[test]
fn a_slow_or_failing_runway_is_retried_and_a_timeout_costs_no_budget() {
    // Every failed read is still a read: the next one waits Runway's five seconds at least.
    let paced = |outcome: &Outcome| {
        matches!(
            outcome,
            Outcome::RetryAfter {
                after_ms: Some(5_000),
                ..
            }
        )
    };
    let host = keyed_host().on_any(|_| Err(HttpError::Timeout));
    let change = poll(&host, NOW);
    assert!(paced(&change.outcome), "{:?}", change.outcome);
    assert_eq!(code(&change.outcome), Some("timeout"));
    for status in [429, 500, 502, 503, 504] {
        let host = answering(status, json!({"error": "busy"}));
        let expected = format!("http_{status}");
        let change = poll(&host, NOW);
        assert_eq!(code(&change.outcome), Some(expected.as_str()));
        assert!(paced(&change.outcome), "{status}: {:?}", change.outcome);
    }
    let soon =
        keyed_host().on_any(|_| Ok(Response::new(503, "{}").with_header("retry-after", "1")));
    assert!(
        paced(&poll(&soon, NOW).outcome),
        "a Retry-After shorter than the pace"
    );
    let limited =
        keyed_host().on_any(|_| Ok(Response::new(429, "{}").with_header("retry-after", "7")));
    assert!(matches!(
        poll(&limited, NOW).outcome,
        Outcome::RetryAfter {
            after_ms: Some(7_000),
            ..
        }
    ));
    let garbled = answering(200, json!({"id": "t1", "status": "EXPLODED"}));
    assert_eq!(
        code(&poll(&garbled, NOW).outcome),
        Some("unexpected_answer")
    );
    // A refused key (contract 1.2): the task runs on; the account is refused, not the job.
    let refused = poll(&answering(401, json!({"error": "Invalid API key"})), NOW);
    assert_eq!(code(&refused.outcome), Some("account_refused"));
    assert!(paced(&refused.outcome), "{:?}", refused.outcome);
    let bad_request = answering(400, json!({"error": "bad id"}));
    assert!(matches!(poll(&bad_request, NOW).outcome, Outcome::Fail(_)));
}
