//! Cancel: `PUT cancel_url` and what each answer becomes; units without a request id.

use serde_json::json;
use slotd_sdk::testing::ScriptedHost;
use slotd_sdk::{CancelChange, CancelOutcome, Handler, HttpError, Response, Unit};

use super::support::*;
use crate::FalVideoHandler;

fn cancel(host: &ScriptedHost, now_ms: u64, units: Vec<Unit>) -> Vec<CancelChange> {
    match FalVideoHandler::cancel(host, &ctx(now_ms), units) {
        Ok(changes) => changes,
        Err(e) => panic!("cancel failed: {e}"),
    }
}

fn cancel_one(host: &ScriptedHost, now_ms: u64, unit: Unit) -> CancelChange {
    let mut changes = cancel(host, now_ms, vec![unit]);
    assert_eq!(changes.len(), 1, "{changes:?}");
    changes.remove(0)
}

type Answer = Result<Response, HttpError>;

fn fal(put: Answer, status: Answer) -> ScriptedHost {
    keyed_host()
        .on_request("PUT", "/cancel", move |_| put.clone())
        .on_request("GET", "/status", move |_| status.clone())
}

#[test]
fn cancel_answers() {
    let in_progress = || answer(202, json!({"status": "IN_PROGRESS"}));
    let already = || answer(400, json!({"status": "ALREADY_COMPLETED"}));
    let cases: Vec<(&str, Answer, Answer, &str)> = vec![
        (
            "202",
            answer(202, json!({"status": "CANCELLATION_REQUESTED"})),
            in_progress(),
            "ended",
        ),
        (
            "404",
            answer(404, json!({"status": "NOT_FOUND"})),
            in_progress(),
            "ended",
        ),
        (
            "400 completed",
            already(),
            answer(200, json!({"status": "COMPLETED"})),
            "ended",
        ),
        ("400 running", already(), in_progress(), "running"),
        (
            "400 queued",
            already(),
            answer(202, json!({"status": "IN_QUEUE"})),
            "running",
        ),
        (
            "400 unreadable",
            already(),
            Err(HttpError::Timeout),
            "running",
        ),
        ("500", Ok(Response::new(500, "")), in_progress(), "retry"),
        (
            "429",
            Ok(Response::new(429, "").with_header("Retry-After", "3")),
            in_progress(),
            "retry",
        ),
        ("timeout", Err(HttpError::Timeout), in_progress(), "retry"),
        (
            "401",
            answer(401, json!({"detail": "bad key"})),
            in_progress(),
            "retry",
        ),
    ];
    for (name, put, status, want) in cases {
        let host = fal(put, status);
        let change = cancel_one(&host, NOW, running("u1", "r1"));
        let got = match &change.outcome {
            CancelOutcome::Ended => "ended",
            CancelOutcome::Running(Some(_)) => "running",
            CancelOutcome::Running(None) => "running without a hint",
            CancelOutcome::RetryAfter { .. } => "retry",
        };
        assert_eq!(got, want, "{name}: {change:?}");
        let puts = sent(&host, "PUT");
        assert_eq!(puts.len(), 1);
        assert_eq!(puts[0].url, format!("{APP}/r1/cancel"));
        if name == "429" {
            assert!(matches!(
                change.outcome,
                CancelOutcome::RetryAfter {
                    after_ms: Some(3_000),
                    ..
                }
            ));
        }
        if name == "401" {
            assert!(
                matches!(&change.outcome, CancelOutcome::RetryAfter { error, .. }
                if error.code.as_deref() == Some("account_refused"))
            );
        }
    }
}

#[test]
fn units_without_a_request_id() {
    // Never sent, or answered "not created": nothing to stop, no request.
    let quiet = keyed_host();
    let refused = in_doubt(
        "b",
        &json!({"submission": format!("b-main-0@{NOW}"), "refused_at_ms": NOW}).to_string(),
    );
    let changes = cancel(&quiet, NOW, vec![fresh("a"), refused]);
    assert!(changes.iter().all(|c| c.outcome == CancelOutcome::Ended));
    assert!(quiet.requests().is_empty());

    // Outcome unknown: held while the history shows nothing, until the hold has passed.
    let unknown = json!({"submission": format!("u1-main-0@{NOW}"), "unknown_since": NOW,
                         "unknown_reason": "HTTP 504", "checked_at_ms": NOW + 30_000})
    .to_string();
    let empty = keyed_host().on_request("GET", HISTORY, |_| answer(200, json!({"items": []})));
    let early = cancel_one(&empty, NOW + 40_000, in_doubt("u1", &unknown));
    assert_eq!(
        early.outcome,
        CancelOutcome::Running(Some(20_000)),
        "until the next look"
    );
    assert!(empty.requests().is_empty(), "not due yet");
    let looked = cancel_one(&empty, NOW + 60_000, in_doubt("u1", &unknown));
    assert!(matches!(looked.outcome, CancelOutcome::Running(Some(_))));
    assert_eq!(empty.requests().len(), 1);
    let late = cancel_one(&empty, NOW + 900_000, in_doubt("u1", &unknown));
    assert_eq!(late.outcome, CancelOutcome::Ended);

    // Found still running: recorded, then PUT on the next call.
    let item = json!({"request_id": "req-9", "sent_at": crate::time::format_ms(NOW + 500),
                      "ended_at": null, "json_input": t2v_input()});
    let found = keyed_host().on_request("GET", HISTORY, move |_| {
        answer(200, json!({"items": [item.clone()]}))
    });
    let first = cancel_one(&found, NOW + 60_000, in_doubt("u1", &unknown));
    assert_eq!(first.outcome, CancelOutcome::Running(Some(1)));
    assert_eq!(state_of(&first)["found_request_id"], "req-9");
    let put = fal(
        answer(202, json!({"status": "CANCELLATION_REQUESTED"})),
        answer(202, json!({})),
    );
    let unit = in_doubt("u1", first.state.as_deref().unwrap_or("{}"));
    assert_eq!(
        cancel_one(&put, NOW + 61_000, unit).outcome,
        CancelOutcome::Ended
    );
    assert_eq!(sent(&put, "PUT")[0].url, format!("{APP}/req-9/cancel"));
}

fn state_of(change: &CancelChange) -> serde_json::Value {
    change
        .state
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}
