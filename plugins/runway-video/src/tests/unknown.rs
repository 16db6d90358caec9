//! The outcome-unknown rule: a create whose answer was lost is never sent again by itself; the
//! unit holds its slot for the model's longest run, then fails `submission_unknown`.

use serde_json::json;
use slotd_sdk::testing::json_answer;
use slotd_sdk::{HttpError, Outcome, Response, Unit};

use super::support::*;

/// `gen4_turbo`'s longest run (600 s) in ms.
const HOLD_MS: u64 = 600_000;

fn held_for(outcome: &Outcome) -> Option<u64> {
    match outcome {
        Outcome::RetryAfter { after_ms, error } if error.code.as_deref() == Some("timeout") => {
            *after_ms
        }
        _ => None,
    }
}

#[test]
fn a_lost_create_answer_holds_the_slot_and_is_never_sent_again() {
    let lost = [
        ("HTTP 504", Ok(Response::new(504, "Gateway Timeout"))),
        (
            "overloaded",
            Ok(Response::new(504, r#"{"error":"overloaded"}"#)),
        ),
        ("timed out", Err(HttpError::Timeout)),
        (
            "reset",
            Err(HttpError::Transport("connection reset".into())),
        ),
        ("not JSON", Ok(Response::new(200, "<html>"))),
    ];
    for (why, answer) in lost {
        let host = keyed_host().on_any(move |_| answer.clone());
        let change = tick_one(&host, NOW, fresh("u1"));
        assert_eq!(held_for(&change.outcome), Some(HOLD_MS), "{why}");
        let s = state(&change);
        assert_eq!(s["unknown_since"], NOW, "{why}");
        assert_eq!(s["submission"], format!("u1-main-0@{NOW}"));
        assert!(
            s["unknown_reason"]
                .as_str()
                .is_some_and(|r| r.contains(why)),
            "{s}"
        );
        assert_eq!(
            warnings(&host).len(),
            1,
            "{why}: logged once for the operator"
        );
        assert!(warnings(&host)[0].contains("dailyGenerations"));
        assert_eq!(host.requests().len(), 1);
    }
}

#[test]
fn the_hold_counts_down_without_requests_then_fails_submission_unknown() {
    let host = keyed_host().on_any(|_| Ok(Response::new(504, "")));
    let first = tick_one(&host, NOW, fresh("u1"));
    let kept = first.state.clone().unwrap_or_default();

    let quiet = host_without_runway();
    let later = tick_one(&quiet, NOW + 100_000, in_doubt("u1", &kept));
    assert_eq!(held_for(&later.outcome), Some(HOLD_MS - 100_000));
    assert_eq!(later.state.as_deref(), Some(kept.as_str()));
    assert!(warnings(&quiet).is_empty(), "already reported");

    let end = tick_one(&quiet, NOW + HOLD_MS, in_doubt("u1", &kept));
    assert_eq!(code(&end.outcome), Some("submission_unknown"));
    assert!(matches!(&end.outcome, Outcome::Fail(e)
        if e.message.contains("HTTP 504") && e.message.contains("retry of this task resubmits")));
    assert!(
        quiet.requests().is_empty(),
        "no create, no lookup: there is nothing to look up"
    );
}

/// A host whose Runway answers every create: any request would be visible (and wrong).
fn host_without_runway() -> slotd_sdk::testing::ScriptedHost {
    keyed_host().on_any(|_| json_answer(200, &json!({"id": "duplicate"})))
}

#[test]
fn a_unit_arriving_in_doubt_with_nothing_recorded_is_outcome_unknown() {
    let quiet = host_without_runway();
    let unit = Unit {
        submitted_at_ms: Some(NOW - 30_000),
        idempotency_key: "u1-main-0".into(),
        ..in_doubt("u1", "{}")
    };
    let change = tick_one(&quiet, NOW, unit);
    assert_eq!(held_for(&change.outcome), Some(HOLD_MS - 30_000));
    let s = state(&change);
    assert_eq!(
        s["unknown_since"],
        NOW - 30_000,
        "counted from the submit marker"
    );
    assert!(
        s["unknown_reason"]
            .as_str()
            .is_some_and(|r| r.contains("slotd lost track"))
    );
    assert_eq!(warnings(&quiet).len(), 1);
    assert!(quiet.requests().is_empty());
}

#[test]
fn records_of_an_earlier_submission_do_not_count() {
    let quiet = host_without_runway();
    // Refused in an earlier submission; this one (marked later) is in doubt: unknown.
    let old = json!({"submission": "u1-main-0@5", "refused_at_ms": 6}).to_string();
    let change = tick_one(&quiet, NOW, in_doubt("u1", &old));
    assert_eq!(held_for(&change.outcome), Some(HOLD_MS));
    assert!(quiet.requests().is_empty());
    // A unknown outcome of an earlier submission does not stop a fresh one (a retry).
    let stale = json!({"submission": "u1-main-0@5", "unknown_since": 5}).to_string();
    let retried = Unit {
        idempotency_key: "u1-main-1".into(),
        state: stale,
        ..fresh("u1")
    };
    let change = tick_one(&quiet, NOW, retried);
    assert_eq!(change.outcome, Outcome::Accepted("duplicate".into()));
}

#[test]
fn the_hold_is_the_models_longest_run_times_the_scale() {
    let veo =
        spec_of(json!({"model": "veo3.1", "ratio": "1280:720", "shots": [{"prompt_text": "x"}]}));
    let host = keyed_host().on_any(|_| Err(HttpError::Timeout));
    let unit = Unit {
        spec: veo.clone(),
        ..fresh("u1")
    };
    assert_eq!(
        held_for(&tick_one(&host, NOW, unit).outcome),
        Some(1_500_000)
    );
    let fast = keyed_host()
        .with_config("expected_duration_scale", "0.001")
        .on_any(|_| Err(HttpError::Timeout));
    let change = tick_one(&fast, NOW, fresh("u1"));
    assert_eq!(held_for(&change.outcome), Some(600));
    let kept = change.state.unwrap_or_default();
    let end = tick_one(&fast, NOW + 600, in_doubt("u1", &kept));
    assert_eq!(code(&end.outcome), Some("submission_unknown"));
}
