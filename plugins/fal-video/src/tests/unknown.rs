//! The outcome-unknown rule: a submit whose answer was lost is never sent again; the history
//! is read every 30 s and the request found there is accepted; nothing found once the hold
//! has passed fails `submission_unknown`. Units handed back in doubt are treated the same way.

use std::cell::Cell;
use std::rc::Rc;

use serde_json::{Value, json};
use slotd_sdk::testing::ScriptedHost;
use slotd_sdk::{Outcome, Response};

use super::support::*;
use crate::time::format_ms;

/// The hold of a 5 s 720p text-to-video clip: its p99 (2.5 × 150 s) is under the 900 s floor.
const HOLD_MS: u64 = 900_000;

/// A history item.
fn item(id: &str, sent_ms: u64, input: Value, ended: bool) -> Value {
    json!({"request_id": id, "endpoint_id": T2V, "sent_at": format_ms(sent_ms),
           "started_at": null, "ended_at": if ended { json!(format_ms(sent_ms + 90_000)) } else { Value::Null },
           "status_code": 200, "duration": 80.0, "json_input": input, "json_output": null})
}

/// A host whose fal answers submits 504 (counted) and the history with `items`.
fn fal_with_history(items: Vec<Value>, submits: Rc<Cell<u32>>) -> ScriptedHost {
    keyed_host()
        .on_request("POST", BASE, move |_| {
            submits.set(submits.get() + 1);
            Ok(Response::new(504, "Gateway Timeout"))
        })
        .on_request("GET", HISTORY, move |_| {
            answer(
                200,
                json!({"items": items.clone(), "next_cursor": null, "has_more": false}),
            )
        })
}

fn held_for(outcome: &Outcome) -> Option<u64> {
    match outcome {
        Outcome::RetryAfter { after_ms, error } if error.code.as_deref() == Some("timeout") => {
            *after_ms
        }
        _ => None,
    }
}

#[test]
fn a_lost_submit_is_never_sent_again_and_fails_after_the_hold() {
    let submits = Rc::new(Cell::new(0));
    let other = item(
        "someone-else",
        NOW + 1_000,
        json!({"prompt": "a dog"}),
        true,
    );
    let host = fal_with_history(vec![other], submits.clone());
    let first = tick_one(&host, NOW, fresh("u1"));
    assert_eq!(held_for(&first.outcome), Some(30_000));
    let mut kept = first.state.clone().unwrap_or_default();

    // Several ticks: no submit, a history read when due, the slot held.
    for at in [10_000, 30_000, 45_000, 60_000, 400_000, HOLD_MS - 1] {
        let change = tick_one(&host, NOW + at, in_doubt("u1", &kept));
        assert!(held_for(&change.outcome).is_some(), "{at}: {change:?}");
        kept = change.state.clone().unwrap_or_default();
    }
    assert_eq!(submits.get(), 1, "the lost submit is never sent again");
    let reads = sent(&host, "GET");
    assert_eq!(
        reads.len(),
        4,
        "at 30 s, 60 s, 400 s and 900 s - 1 ms: every 30 s at most"
    );
    let q = &reads[0].url;
    assert!(
        q.starts_with(&format!(
            "{HISTORY}?endpoint_id=fal-ai%2Fpika%2Fv2.2%2Ftext-to-video"
        )),
        "{q}"
    );
    assert!(
        q.contains(&format!(
            "&start={}",
            format_ms(NOW - 60_000).replace(':', "%3A")
        )),
        "{q}"
    );
    assert!(q.contains("&expand=payloads&limit=100"), "{q}");
    assert_eq!(
        reads[0].header("authorization"),
        Some(format!("Key {KEY}").as_str())
    );

    let end = tick_one(&host, NOW + HOLD_MS, in_doubt("u1", &kept));
    assert_eq!(code(&end.outcome), Some("submission_unknown"), "{end:?}");
    assert!(matches!(&end.outcome, Outcome::Fail(e)
        if e.message.contains("HTTP 504") && e.message.contains("retry of this task resubmits")));
    assert_eq!(submits.get(), 1);
    assert_eq!(sent(&host, "GET").len(), 5, "one last look before failing");
}

#[test]
fn the_request_found_in_the_history_is_accepted_and_then_polled() {
    let submits = Rc::new(Cell::new(0));
    let mine = t2v_input();
    let items = vec![
        item("too-early", NOW - 120_000, mine.clone(), true),
        item("other-input", NOW + 500, json!({"prompt": "a dog"}), true),
        item("req-orphan", NOW + 800, mine.clone(), true),
    ];
    let host = fal_with_history(items, submits.clone());
    let first = tick_one(&host, NOW, fresh("u1"));
    let kept = first.state.clone().unwrap_or_default();
    let found = tick_one(&host, NOW + 30_000, in_doubt("u1", &kept));
    assert_eq!(found.outcome, Outcome::Accepted("req-orphan".into()));
    assert_eq!(state(&found)["accepted_at_ms"], NOW + 30_000);
    assert_eq!(submits.get(), 1);

    // Polled as usual from then on, under owner/app.
    let poll = keyed_host()
        .on_request("GET", &format!("{APP}/req-orphan/status"), |_| {
            answer(200, json!({"status": "COMPLETED"}))
        })
        .on_request("GET", &format!("{APP}/req-orphan"), |_| {
            answer(200, video())
        });
    let unit = slotd_sdk::Unit {
        provider_job_id: Some("req-orphan".into()),
        state: found.state.clone().unwrap_or_default(),
        ..fresh("u1")
    };
    assert!(matches!(
        tick_one(&poll, NOW + 40_000, unit).outcome,
        Outcome::Succeeded(_)
    ));
}

#[test]
fn two_units_with_the_same_input_never_take_the_same_request() {
    let mine = t2v_input();
    let items = vec![item("req-1", NOW + 100, mine.clone(), false)];
    let host = fal_with_history(items, Rc::new(Cell::new(0)));
    let kept = json!({"submission": format!("a-main-0@{NOW}"), "unknown_since": NOW,
                      "unknown_reason": "HTTP 504"});
    let b_kept = json!({"submission": format!("b-main-0@{NOW}"), "unknown_since": NOW,
                        "unknown_reason": "HTTP 504"});
    let changes = tick_with(
        &host,
        &ctx(NOW + 30_000),
        vec![
            in_doubt("a", &kept.to_string()),
            in_doubt("b", &b_kept.to_string()),
        ],
    );
    assert_eq!(
        changes[0].outcome,
        Outcome::Accepted("req-1".into()),
        "unfinished items count"
    );
    assert!(held_for(&changes[1].outcome).is_some());
}

#[test]
fn an_in_doubt_unit_with_nothing_recorded_is_looked_up_not_resubmitted() {
    let submits = Rc::new(Cell::new(0));
    let host = fal_with_history(vec![], submits.clone());
    // Marked at NOW, the call was lost; the host hands it back 40 s later.
    let change = tick_one(&host, NOW + 40_000, in_doubt("u1", "{}"));
    assert!(held_for(&change.outcome).is_some(), "{change:?}");
    assert_eq!(submits.get(), 0);
    assert_eq!(
        sent(&host, "GET").len(),
        1,
        "the history was read at once (30 s passed)"
    );
    let s = state(&change);
    assert_eq!(s["unknown_since"], NOW);
    assert!(
        s["unknown_reason"]
            .as_str()
            .is_some_and(|r| r.contains("lost track"))
    );
    assert_eq!(s["checked_at_ms"], NOW + 40_000);

    let found = fal_with_history(
        vec![item("req-7", NOW + 2_000, t2v_input(), true)],
        submits.clone(),
    );
    let unit = in_doubt("u1", change.state.as_deref().unwrap_or("{}"));
    assert_eq!(
        tick_one(&found, NOW + 71_000, unit).outcome,
        Outcome::Accepted("req-7".into())
    );
    assert_eq!(submits.get(), 0);
}

#[test]
fn a_failed_history_read_keeps_holding_and_the_hold_scales() {
    let host = keyed_host()
        .with_config("expected_duration_scale", "0.001")
        .on_request("GET", HISTORY, |_| answer(500, json!({"detail": "oops"})));
    let kept = json!({"submission": format!("u1-main-0@{NOW}"), "unknown_since": NOW,
                      "unknown_reason": "request timed out"})
    .to_string();
    let change = tick_one(&host, NOW + 30, in_doubt("u1", &kept));
    assert_eq!(held_for(&change.outcome), Some(30));
    assert!(
        matches!(&change.outcome, Outcome::RetryAfter { error, .. } if error.message.contains("history read failed"))
    );
    let end = tick_one(
        &host,
        NOW + 900,
        in_doubt("u1", &change.state.unwrap_or_default()),
    );
    assert_eq!(code(&end.outcome), Some("submission_unknown"));
}
