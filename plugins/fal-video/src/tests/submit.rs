//! Submits: what is sent (exactly the table's keys, the webhook URL encoded, the optional
//! headers, one round for the batch) and what each answer becomes.

use serde_json::{Value, json};
use slotd_sdk::{HttpError, Outcome, Response, TickContext};

use super::support::*;

fn with_callback(now_ms: u64) -> TickContext {
    TickContext {
        callback_url: Some(CALLBACK.into()),
        ..ctx(now_ms)
    }
}

#[test]
fn a_submit_sends_the_resolved_input_with_the_webhook_and_the_batch_in_one_round() {
    let host = keyed_host().on_request("POST", BASE, |r| {
        let n = r.url.len() % 7;
        answer(200, queued(&format!("req-{n}")))
    });
    let changes = tick_with(
        &host,
        &with_callback(NOW),
        vec![fresh("a"), fresh("b"), fresh("c")],
    );
    assert_eq!(changes.len(), 3);
    assert!(
        changes
            .iter()
            .all(|c| matches!(c.outcome, Outcome::Accepted(_)))
    );
    assert_eq!(host.batches().len(), 1, "one send-authorized for the batch");
    for r in sent(&host, "POST") {
        assert_eq!(
            r.url,
            format!(
                "{BASE}/{T2V}?fal_webhook=https%3A%2F%2Fslotd.example.com%2Fv1%2Fcallbacks%2F\
                 fal-video%3Ftoken%3Dt0k%26x%3D1"
            )
        );
        let body: Value =
            serde_json::from_slice(r.body.as_deref().unwrap_or_default()).unwrap_or_default();
        assert_eq!(body, t2v_input(), "only the table's keys, defaults filled");
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.header("accept"), Some("application/json"));
        assert_eq!(
            r.header("authorization"),
            Some(format!("Key {KEY}").as_str())
        );
        for h in [
            "x-fal-queue-priority",
            "x-fal-request-timeout",
            "x-fal-object-lifecycle-preference",
        ] {
            assert_eq!(r.header(h), None, "{h} only when configured");
        }
    }
    assert_eq!(state(&changes[0])["webhook"], true);
}

#[test]
fn configured_submit_headers_go_on_submits_only() {
    let host = keyed_host()
        .with_config("priority", "low")
        .with_config("start_timeout_s", "120")
        .with_config("media_ttl_s", "86400")
        .on_request("POST", BASE, |_| answer(200, queued("r1")))
        .on_request("GET", "/status", |_| {
            answer(202, json!({"status": "IN_PROGRESS"}))
        });
    tick_with(&host, &ctx(NOW), vec![fresh("a"), running("b", "r2")]);
    let post = &sent(&host, "POST")[0];
    assert_eq!(post.header("x-fal-queue-priority"), Some("low"));
    assert_eq!(post.header("x-fal-request-timeout"), Some("120"));
    assert_eq!(
        post.header("x-fal-object-lifecycle-preference"),
        Some(r#"{"expiration_duration_seconds": 86400}"#)
    );
    assert_eq!(
        post.url,
        format!("{BASE}/{T2V}"),
        "no fal_webhook without a callback URL"
    );
    let get = &sent(&host, "GET")[0];
    assert_eq!(get.header("x-fal-queue-priority"), None);
}

#[test]
fn an_accepted_submit_keeps_only_urls_on_the_base_host() {
    let host = keyed_host().on_request("POST", BASE, |_| {
        let mut body = queued("r1");
        body["response_url"] = json!("https://attacker.test/fal-ai/pika/requests/r1");
        answer(202, body)
    });
    let change = tick_one(&host, NOW, fresh("a"));
    assert_eq!(change.outcome, Outcome::Accepted("r1".into()));
    let s = state(&change);
    assert_eq!(s["status_url"], format!("{APP}/r1/status"));
    assert_eq!(s["cancel_url"], format!("{APP}/r1/cancel"));
    assert_eq!(s["response_url"], Value::Null);
    assert_eq!(s["accepted_at_ms"], NOW);

    // The result is then read from the URL built under owner/app, not the foreign one.
    let poll = keyed_host()
        .on_request("GET", "/r1/status", |_| {
            answer(200, json!({"status": "COMPLETED"}))
        })
        .on_request("GET", &format!("{APP}/r1"), |_| answer(200, video()));
    let unit = slotd_sdk::Unit {
        provider_job_id: Some("r1".into()),
        state: change.state.clone().unwrap_or_default(),
        ..fresh("a")
    };
    let done = tick_one(&poll, NOW + 60_000, unit);
    assert!(matches!(done.outcome, Outcome::Succeeded(_)), "{done:?}");
    assert_eq!(sent(&poll, "GET")[1].url, format!("{APP}/r1"));
}

#[test]
fn refusals_that_created_nothing_retry_and_failures_fail() {
    let detail = json!({"detail": [{"loc": ["body", "prompt"], "msg": "Field required", "type": "missing"}]});
    let cases: Vec<(&str, Result<Response, HttpError>, &str)> = vec![
        (
            "401",
            answer(401, json!({"detail": "Invalid key"})),
            "account_refused",
        ),
        (
            "403",
            answer(
                403,
                json!({"detail": "User is locked. Reason: Exhausted balance."}),
            ),
            "account_exhausted",
        ),
        (
            "429",
            Ok(Response::new(429, "{}").with_header("Retry-After", "7")),
            "rate_limited",
        ),
    ];
    for (name, reply, want) in cases {
        let host = keyed_host().on_any(move |_| reply.clone());
        let change = tick_one(&host, NOW, fresh("a"));
        assert_eq!(code(&change.outcome), Some(want), "{name}");
        assert!(
            matches!(change.outcome, Outcome::RetryAfter { .. }),
            "{name}"
        );
        assert_eq!(
            state(&change)["refused_at_ms"],
            NOW,
            "{name}: recorded as not created"
        );
        if name == "429" {
            assert!(matches!(
                change.outcome,
                Outcome::RetryAfter {
                    after_ms: Some(7_000),
                    ..
                }
            ));
        }
        // Handed back in doubt, it is submitted again: nothing exists at fal.
        let again = keyed_host().on_any(|_| answer(200, queued("r9")));
        let unit = in_doubt("a", change.state.as_deref().unwrap_or("{}"));
        assert_eq!(
            tick_one(&again, NOW + 9_000, unit).outcome,
            Outcome::Accepted("r9".into())
        );
    }
    let cases: Vec<(Result<Response, HttpError>, &str)> = vec![
        (
            answer(404, json!({"detail": "Application not found"})),
            "unknown_model",
        ),
        (answer(422, detail.clone()), "missing"),
        (
            answer(
                400,
                json!({"detail": "bad header", "error_type": "bad_request"}),
            ),
            "bad_request",
        ),
        (
            Err(HttpError::Denied("queue.fal.run".into())),
            "misconfigured",
        ),
    ];
    for (reply, want) in cases {
        let host = keyed_host().on_any(move |_| reply.clone());
        let change = tick_one(&host, NOW, fresh("a"));
        assert!(
            matches!(&change.outcome, Outcome::Fail(_)),
            "{want}: {change:?}"
        );
        assert_eq!(code(&change.outcome), Some(want));
    }
    let host = keyed_host().on_any(move |_| answer(422, detail.clone()));
    let change = tick_one(&host, NOW, fresh("a"));
    assert!(
        matches!(&change.outcome, Outcome::Fail(e) if e.message.contains("body.prompt: Field required"))
    );
}

/// Contract 1.5: a server error fal answered queued nothing: `not_created` (the host sends the
/// unit back to `pending`), fal's status, type and text kept. Recorded refused all the same: a
/// host that predates the convention gives the unit back in doubt, and it is submitted again
/// rather than held.
#[test]
fn a_submit_answered_with_a_server_error_is_not_created_and_may_be_sent_again() {
    let internal = json!({"detail": "Internal server error", "error_type": "internal_error"});
    for (why, reply) in [
        ("fal HTTP 500: Internal server error", answer(500, internal)),
        (
            "fal HTTP 503: <html>busy</html>",
            Ok(Response::new(503, "<html>busy</html>")),
        ),
        ("fal HTTP 500: internal", Ok(Response::new(500, "internal"))),
    ] {
        let host = keyed_host().on_any(move |_| reply.clone());
        let change = tick_one(&host, NOW, fresh("a"));
        assert!(
            matches!(&change.outcome, Outcome::RetryAfter { error, .. }
                if error.code.as_deref() == Some("not_created")
                    && error.message.contains(why)
                    && error.message.ends_with("(no request was queued)")),
            "{why}: {:?}",
            change.outcome
        );
        assert_eq!(
            state(&change),
            json!({"submission": format!("a-main-0@{NOW}"), "refused_at_ms": NOW})
        );
        assert!(
            warnings(&host).is_empty(),
            "{why}: no lost answer to report"
        );
        let again = in_doubt("a", change.state.as_deref().unwrap_or_default());
        let host = keyed_host().on_any(|_| answer(200, queued("r2")));
        let change = tick_one(&host, NOW + 10_000, again);
        assert_eq!(change.outcome, Outcome::Accepted("r2".into()), "{why}");
    }
}

#[test]
fn lost_answers_hold_the_slot_instead_of_failing_or_retrying() {
    for (why, reply) in [
        (
            "HTTP 502",
            Ok(Response::new(502, "<html>502 Bad Gateway</html>")),
        ),
        (
            "HTTP 504",
            Ok(Response::new(504, "<html>504 Gateway Time-out</html>")),
        ),
        ("timed out", Err(HttpError::Timeout)),
        (
            "reset",
            Err(HttpError::Transport("connection reset".into())),
        ),
        ("not JSON", Ok(Response::new(200, "<html>"))),
    ] {
        let host = keyed_host().on_any(move |_| reply.clone());
        let change = tick_one(&host, NOW, fresh("a"));
        assert_eq!(code(&change.outcome), Some("timeout"), "{why}");
        assert!(
            matches!(
                change.outcome,
                Outcome::RetryAfter {
                    after_ms: Some(30_000),
                    ..
                }
            ),
            "{why}: next look at the history in 30 s"
        );
        let s = state(&change);
        assert_eq!(s["unknown_since"], NOW);
        assert!(
            s["unknown_reason"]
                .as_str()
                .is_some_and(|r| r.contains(why)),
            "{s}"
        );
        assert_eq!(warnings(&host).len(), 1, "{why}: the operator is told once");
    }
}
