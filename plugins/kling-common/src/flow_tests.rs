//! The tick flow against a scripted provider: which requests go out, in which rounds, and
//! what each answer becomes.

use std::cell::Cell;
use std::rc::Rc;

use serde_json::json;

use slotd_sdk::testing::{DEFAULT_NOW_MS, ScriptedHost};
use slotd_sdk::{Change, HttpError, Outcome, ProviderError, Response, Unit};

use crate::answer::{ACCOUNT_EXHAUSTED, ACCOUNT_REFUSED, NOT_CREATED};
use crate::client::Client;
use crate::flow::{self, Settings};
use crate::job::Job;
use crate::testing::{kling, kling_host};
use crate::video;

fn unit(id: &str, job_id: Option<&str>, in_doubt: bool) -> Unit {
    Unit {
        id: id.into(),
        stage: "video".into(),
        spec: json!({"prompt": "p", "model_name": "kling-v1"}).to_string(),
        state: "{}".into(),
        provider_job_id: job_id.map(String::from),
        idempotency_key: format!("{id}-video-0"),
        in_doubt,
        submitted_at_ms: Some(1_781_080_790_000),
        ..Unit::default()
    }
}

fn run(host: &ScriptedHost, units: &[Unit]) -> Vec<Change> {
    let mut client =
        Client::new(host, "kling-video", DEFAULT_NOW_MS).unwrap_or_else(|e| panic!("{e}"));
    let jobs: Vec<Job<'_>> = units
        .iter()
        .map(|u| Job {
            unit: u,
            collection: video::TEXT2VIDEO,
            body: json!({"prompt": "p"}),
            expected_secs: (30, 120),
            stated: false,
            page_size_max: video::PAGE_SIZE_MAX,
        })
        .collect();
    let settings = Settings {
        now_ms: DEFAULT_NOW_MS,
        callback_url: Some("https://slotd.example/v1/callbacks/kling-video"),
        hint_scale: crate::task::Scales::same(1.0),
    };
    flow::run(&mut client, &jobs, &settings, &|_, t| video::success(t))
}

fn task(id: &str, status: &str) -> serde_json::Value {
    json!({"task_id": id, "task_status": status, "created_at": 1_781_080_790_000i64,
           "task_info": {"external_task_id": format!("k-{id}")}})
}

#[test]
fn submits_carry_the_key_and_callback_and_go_out_in_one_batch() {
    let host = kling_host(|r| {
        let body: serde_json::Value =
            serde_json::from_slice(r.body.as_deref().unwrap_or_default()).unwrap_or_default();
        let key = body["external_task_id"].as_str().unwrap_or_default();
        kling(
            200,
            0,
            "SUCCEED",
            json!({"task_id": format!("job-{key}"), "task_status": "submitted"}),
        )
    });
    let changes = run(&host, &[unit("a", None, false), unit("b", None, false)]);
    assert_eq!(
        changes[0].outcome,
        Outcome::Accepted("job-a-video-0".into())
    );
    assert_eq!(
        changes[1].outcome,
        Outcome::Accepted("job-b-video-0".into())
    );
    let batches = host.batches();
    assert_eq!(batches.len(), 1, "one round");
    let r = &batches[0][0];
    assert_eq!(
        (r.method.as_str(), r.url.as_str()),
        ("POST", "http://kling.test/v1/videos/text2video")
    );
    let body: serde_json::Value =
        serde_json::from_slice(r.body.as_deref().unwrap_or_default()).unwrap_or_default();
    assert_eq!(
        body["callback_url"],
        "https://slotd.example/v1/callbacks/kling-video"
    );
    assert!(
        r.headers
            .iter()
            .any(|(k, v)| k == "authorization" && v.starts_with("Bearer "))
    );
}

#[test]
fn an_expired_token_is_re_signed_once_then_retried_later() {
    let calls = Rc::new(Cell::new(0));
    let seen = calls.clone();
    let host = kling_host(move |_| {
        seen.set(seen.get() + 1);
        if seen.get() == 1 {
            kling(401, 1004, "Authorization token has expired", json!(null))
        } else {
            kling(200, 0, "SUCCEED", task("7", "processing"))
        }
    });
    let changes = run(&host, &[unit("a", Some("7"), false)]);
    assert_eq!(calls.get(), 2, "resent once in the same call");
    assert!(matches!(changes[0].outcome, Outcome::Running(Some(_))));

    // Still refused after the re-sign: the account's credentials, not the job.
    let always = kling_host(|_| kling(401, 1003, "not yet valid", json!(null)));
    let changes = run(&always, &[unit("a", Some("7"), false)]);
    assert_eq!(always.requests().len(), 2, "one re-sign only");
    assert_eq!(
        changes[0].outcome,
        Outcome::retry(ProviderError::new(
            Some(ACCOUNT_REFUSED),
            "kling 1003: not yet valid"
        ))
    );
}

/// Contract 1.2: the provider refusing the account (credentials, balance) at submit or poll
/// gives the unit back with an account code instead of failing it; a job-level refusal still
/// fails it.
#[test]
fn account_refusals_are_retried_with_the_account_codes_at_submit_and_poll() {
    for (status, code, message, want) in [
        (401, 1000, "authentication failed", ACCOUNT_REFUSED),
        (401, 1001, "authorization is empty", ACCOUNT_REFUSED),
        (401, 1002, "invalid token", ACCOUNT_REFUSED),
        (429, 1101, "account in arrears", ACCOUNT_EXHAUSTED),
        (429, 1102, "resource pack exhausted", ACCOUNT_EXHAUSTED),
    ] {
        let host = kling_host(move |_| kling(status, code, message, json!(null)));
        let units = [unit("a", None, false), unit("b", Some("7"), false)];
        let changes = run(&host, &units);
        let expected = Outcome::retry(ProviderError::new(
            Some(want),
            format!("kling {code}: {message}"),
        ));
        assert_eq!(changes[0].outcome, expected, "submit answered {code}");
        assert_eq!(changes[1].outcome, expected, "poll answered {code}");
        assert_eq!(host.requests().len(), 2, "{code}: no re-sign, no lookup");
    }
    // Job-level refusals still fail the unit at submit.
    for (status, code) in [(400, 1200), (400, 1300), (403, 1103)] {
        let host = kling_host(move |_| kling(status, code, "refused", json!(null)));
        let changes = run(&host, &[unit("a", None, false)]);
        assert!(
            matches!(&changes[0].outcome, Outcome::Fail(e) if e.code.as_deref() == Some(code.to_string().as_str())),
            "{code}: {:?}",
            changes[0].outcome
        );
    }
}

/// Contract 1.5: a create Kling answered with an HTTP 5xx made no task, so it is `not_created`
/// (the host sends the unit back to `pending` instead of looking it up), Kling's code, message
/// and status kept; a poll answered 5xx, and a create whose answer never came, stay ordinary
/// retries.
#[test]
fn a_create_answered_5xx_is_not_created_and_the_rest_stay_retries() {
    for (status, code, message) in [
        (500, 5000, "internal error"),
        (503, 5001, "service under maintenance"),
        (504, 5002, "internal timeout"),
    ] {
        let host = kling_host(move |_| kling(status, code, message, json!(null)));
        let units = [unit("a", None, false), unit("b", Some("7"), false)];
        let changes = run(&host, &units);
        assert_eq!(
            changes[0].outcome,
            Outcome::retry(ProviderError::new(
                Some(NOT_CREATED),
                format!("kling {code}: {message} (HTTP {status}, no task was created)")
            )),
            "submit answered {status}/{code}"
        );
        assert_eq!(
            changes[1].outcome,
            Outcome::retry(ProviderError::new(Some(&code.to_string()), message)),
            "poll answered {status}/{code}"
        );
        assert_eq!(
            host.requests().len(),
            2,
            "{code}: no lookup after the create"
        );
    }
    // Without Kling's envelope (a gateway's page): still an answer.
    let page = kling_host(|_| Ok(Response::new(502, "<html>bad gateway</html>")));
    let changes = run(&page, &[unit("a", None, false)]);
    assert!(
        matches!(&changes[0].outcome, Outcome::RetryAfter { error, .. }
            if error.code.as_deref() == Some(NOT_CREATED) && error.message.contains("HTTP 502")),
        "{:?}",
        changes[0].outcome
    );
    // No answer: the create may have made a task; a plain retry, looked up in doubt next.
    let lost = kling_host(|_| Err(HttpError::Timeout));
    let changes = run(&lost, &[unit("a", None, false)]);
    assert!(
        matches!(&changes[0].outcome, Outcome::RetryAfter { error, .. }
            if error.code.as_deref() == Some("timeout")),
        "{:?}",
        changes[0].outcome
    );
    // An in-doubt unit not found by its external id, then refused 5xx: not created either.
    let host = kling_host(|r| match r.method.as_str() {
        "GET" => kling(404, 1203, "no such task", json!(null)),
        _ => kling(500, 5000, "internal error", json!(null)),
    });
    let changes = run(&host, &[unit("a", None, true)]);
    assert!(
        matches!(&changes[0].outcome, Outcome::RetryAfter { error, .. }
            if error.code.as_deref() == Some(NOT_CREATED)),
        "{:?}",
        changes[0].outcome
    );
}

#[test]
fn duplicates_are_looked_up_and_adopted() {
    let host = kling_host(|r| match r.method.as_str() {
        "POST" => kling(
            400,
            1201,
            "external_task_id: \"a-video-0\" is already used",
            json!(null),
        ),
        _ => kling(200, 0, "SUCCEED", task("42", "processing")),
    });
    let changes = run(&host, &[unit("a", None, false)]);
    assert_eq!(changes[0].outcome, Outcome::Accepted("42".into()));
    let urls: Vec<String> = host.requests().iter().map(|r| r.url.clone()).collect();
    assert_eq!(urls[1], "http://kling.test/v1/videos/text2video/a-video-0");
}

/// An in-doubt unit whose job already ended at the provider records the job id first: a unit
/// must never end without the provider task id it ran as (found by the soak test, where a
/// create answered with a cut body was adopted straight into `succeeded`).
#[test]
fn in_doubt_units_found_finished_record_the_job_id_first() {
    for status in ["succeed", "failed"] {
        let host = kling_host(move |_| kling(200, 0, "SUCCEED", task("42", status)));
        let changes = run(&host, &[unit("a", None, true)]);
        assert_eq!(
            changes[0].outcome,
            Outcome::Accepted("42".into()),
            "lookup found a {status} task"
        );
    }
}

#[test]
fn in_doubt_units_not_found_are_submitted_and_other_codes_classified() {
    let host = kling_host(|r| match (r.method.as_str(), r.url.as_str()) {
        ("GET", _) => kling(404, 1203, "no such task", json!(null)),
        (_, _) => kling(
            429,
            1303,
            "parallel task over resource pack limit",
            json!(null),
        ),
    });
    let changes = run(&host, &[unit("a", None, true)]);
    assert_eq!(changes[0].outcome, Outcome::CapacityRejected(Some(1_000)));
    assert_eq!(host.batches().len(), 2, "lookup round, then submit round");

    let refused = kling_host(|_| kling(400, 1301, "content moderation", json!(null)));
    let changes = run(&refused, &[unit("a", None, false)]);
    match &changes[0].outcome {
        Outcome::Fail(e) => assert_eq!(e.code.as_deref(), Some("1301")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn several_due_units_share_a_list_page_and_the_missing_fall_back_to_single_queries() {
    let host = kling_host(|r| {
        if r.url.contains("pageNum=1") {
            // Newest first, not full: "3" is not on it.
            kling(
                200,
                0,
                "SUCCEED",
                json!([task("2", "processing"), task("1", "failed")]),
            )
        } else {
            kling(200, 0, "SUCCEED", task("3", "processing"))
        }
    });
    // Past their shortest expected duration: the hints are the paces.
    let late = |id, job| Unit {
        submitted_at_ms: Some(DEFAULT_NOW_MS - 200_000),
        ..unit(id, Some(job), false)
    };
    let units = [late("a", "1"), late("b", "2"), late("c", "3")];
    let changes = run(&host, &units);
    assert!(
        matches!(&changes[0].outcome, Outcome::Fail(e) if e.code.as_deref() == Some("task_failed"))
    );
    // Read on the page, "b" may be on the next page at once; "c", queried on its own, keeps
    // the per-task pace.
    assert_eq!(
        changes[1].outcome,
        Outcome::Running(Some(crate::task::LIST_POLL_MS))
    );
    assert_eq!(
        changes[2].outcome,
        Outcome::Running(Some(crate::task::LATE_POLL_MS))
    );
    let urls: Vec<String> = host.requests().iter().map(|r| r.url.clone()).collect();
    assert_eq!(
        urls,
        [
            "http://kling.test/v1/videos/text2video?pageNum=1&pageSize=50",
            "http://kling.test/v1/videos/text2video/3",
        ]
    );
}
