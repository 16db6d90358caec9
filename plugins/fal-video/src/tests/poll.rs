//! Polls: the status (queued with its position, running, completed), the result read at once
//! on completion, and what each answer becomes.

use serde_json::{Value, json};
use slotd_sdk::testing::ScriptedHost;
use slotd_sdk::{HttpError, Outcome, Response};

use super::support::*;

/// A fal whose status answers `status` and whose result answers `result`.
fn fal(status: Result<Response, HttpError>, result: Result<Response, HttpError>) -> ScriptedHost {
    keyed_host()
        .on_request("GET", "/status", move |_| status.clone())
        .on_request("GET", APP, move |_| result.clone())
}

fn completed() -> Result<Response, HttpError> {
    answer(
        200,
        json!({"status": "COMPLETED", "request_id": "r1", "metrics": {"inference_time": 42.0}}),
    )
}

#[test]
fn queued_requests_are_said_with_their_position_and_polled_again() {
    let host = fal(
        answer(202, json!({"status": "IN_QUEUE", "queue_position": 3})),
        completed(),
    );
    let changes = tick_with(
        &host,
        &ctx(NOW + 1_000),
        vec![running("u1", "r1"), running("u2", "r2")],
    );
    assert_eq!(
        host.queued_said(),
        [("u1".to_string(), Some(3)), ("u2".to_string(), Some(3))]
    );
    assert_eq!(
        host.batches().len(),
        1,
        "the statuses of the batch in one round"
    );
    for c in &changes {
        assert!(
            matches!(c.outcome, Outcome::Running(Some(h)) if (4_000..=6_000).contains(&h)),
            "{c:?}"
        );
        assert_eq!(state(c)["status"], "IN_QUEUE");
        assert_eq!(state(c)["queue_position"], 3);
    }
    let urls: Vec<String> = host.requests().into_iter().map(|r| r.url).collect();
    assert_eq!(
        urls,
        [format!("{APP}/r1/status"), format!("{APP}/r2/status")]
    );

    let host = fal(
        answer(202, json!({"status": "IN_PROGRESS", "logs": null})),
        completed(),
    );
    let unit = slotd_sdk::Unit {
        state: json!({"accepted_at_ms": NOW, "status": "IN_PROGRESS", "webhook": true}).to_string(),
        ..running("u1", "r1")
    };
    let change = tick_one(&host, NOW + 1_000, unit);
    assert!(
        matches!(change.outcome, Outcome::Running(Some(h)) if h >= 12_000),
        "webhook: safety-net pace"
    );
    assert_eq!(change.state, None, "nothing new to record");
    assert!(host.queued_said().is_empty());
}

#[test]
fn a_completed_request_reads_its_result_at_once() {
    let host = fal(completed(), answer(200, video()));
    let change = tick_one(&host, NOW + 60_000, running("u1", "r1"));
    let Outcome::Succeeded(result) = &change.outcome else {
        panic!("{change:?}");
    };
    let result: Value = serde_json::from_str(result).unwrap_or_default();
    assert_eq!(
        result,
        json!({"request_id": "r1", "video": video()["video"]})
    );
    assert_eq!(change.cost.as_deref(), Some("0.2"));
    let batches = host.batches();
    assert_eq!(batches.len(), 2);
    assert_eq!(batches[1][0].url, format!("{APP}/r1"));
}

#[test]
fn result_answers() {
    let detail = json!({"detail": [{"loc": ["body", "image_url"], "msg": "could not download",
                                    "type": "file_download_error", "url": "https://docs.fal.ai/errors"}]});
    let cases: Vec<(Result<Response, HttpError>, &str, bool)> = vec![
        (answer(422, detail), "file_download_error", true),
        (
            answer(
                499,
                json!({"detail": "cancelled", "error_type": "client_cancelled"}),
            ),
            "cancelled_at_provider",
            true,
        ),
        (
            answer(404, json!({"detail": "Request not found"})),
            "result_gone",
            true,
        ),
        (answer(410, json!({})), "result_gone", true),
        (
            Ok(Response::new(504, "{}").with_header("X-Fal-Request-Timeout-Type", "user")),
            "start_timeout",
            true,
        ),
        (
            answer(
                500,
                json!({"detail": "boom", "error_type": "runner_server_error"}),
            ),
            "runner_server_error",
            false,
        ),
        (Err(HttpError::Timeout), "timeout", false),
        (
            answer(200, json!({"video": {"content_type": "video/mp4"}})),
            "unexpected_answer",
            false,
        ),
        (
            answer(401, json!({"detail": "bad key"})),
            "account_refused",
            false,
        ),
    ];
    for (result, want, fails) in cases {
        let host = fal(completed(), result);
        let change = tick_one(&host, NOW + 60_000, running("u1", "r1"));
        assert_eq!(code(&change.outcome), Some(want), "{change:?}");
        assert_eq!(matches!(change.outcome, Outcome::Fail(_)), fails, "{want}");
        assert_eq!(change.cost, None);
    }
    let host = fal(
        completed(),
        answer(
            422,
            json!({"detail": [{"loc": ["body", "prompt"], "msg": "flagged",
        "type": "content_policy_violation"}]}),
        ),
    );
    let change = tick_one(&host, NOW, running("u1", "r1"));
    assert!(
        matches!(&change.outcome, Outcome::Fail(e) if e.message.contains("body.prompt: flagged"))
    );
    let host = fal(
        completed(),
        answer(400, json!({"detail": "Request is still in progress"})),
    );
    assert!(matches!(
        tick_one(&host, NOW, running("u1", "r1")).outcome,
        Outcome::Running(Some(_))
    ));
}

#[test]
fn status_answers() {
    let cases: Vec<(Result<Response, HttpError>, &str, bool)> = vec![
        (
            answer(404, json!({"detail": "Request not found"})),
            "request_not_found",
            true,
        ),
        (
            answer(401, json!({"detail": "no"})),
            "account_refused",
            false,
        ),
        (
            answer(403, json!({"detail": "User is locked"})),
            "account_exhausted",
            false,
        ),
        (answer(429, json!({})), "http_429", false),
        (
            Ok(Response::new(502, "<html>bad gateway</html>")),
            "http_502",
            false,
        ),
        (Err(HttpError::Timeout), "timeout", false),
        (Err(HttpError::Transport("reset".into())), "http", false),
        (
            answer(200, json!({"status": "SOMETHING"})),
            "unexpected_answer",
            false,
        ),
        (
            Ok(Response::new(200, "not json")),
            "unexpected_answer",
            false,
        ),
    ];
    for (status, want, fails) in cases {
        let host = fal(status, answer(200, video()));
        let change = tick_one(&host, NOW, running("u1", "r1"));
        assert_eq!(code(&change.outcome), Some(want), "{change:?}");
        assert_eq!(matches!(change.outcome, Outcome::Fail(_)), fails, "{want}");
        assert_eq!(host.batches().len(), 1, "{want}: no result read");
    }
    let host = fal(
        Ok(Response::new(503, "").with_header("Retry-After", "20")),
        completed(),
    );
    let change = tick_one(&host, NOW, running("u1", "r1"));
    assert!(matches!(
        change.outcome,
        Outcome::RetryAfter {
            after_ms: Some(20_000),
            ..
        }
    ));
}

#[test]
fn finalize_stores_the_recorded_video() {
    use slotd_sdk::Handler;
    let unit = |result: Value| slotd_sdk::Unit {
        result: Some(result.to_string()),
        ..running("u1", "r1")
    };
    let done = crate::FalVideoHandler::finalize(
        &keyed_host(),
        &ctx(NOW),
        unit(json!({"request_id": "r1", "video": {"url": VIDEO, "content_type": "video/webm"}})),
    );
    let done = done.unwrap_or_default();
    assert_eq!(done.artifacts.len(), 1);
    assert_eq!(done.artifacts[0].name, "video.mp4");
    assert_eq!(done.artifacts[0].url, VIDEO);
    assert_eq!(
        done.artifacts[0].content_type.as_deref(),
        Some("video/webm")
    );
    let plain = crate::FalVideoHandler::finalize(
        &keyed_host(),
        &ctx(NOW),
        unit(json!({"request_id": "r1", "video": {"url": VIDEO}})),
    );
    assert_eq!(
        plain.unwrap_or_default().artifacts[0]
            .content_type
            .as_deref(),
        Some("video/mp4")
    );
    let broken =
        crate::FalVideoHandler::finalize(&keyed_host(), &ctx(NOW), unit(json!({"video": {}})));
    assert!(broken.is_err_and(|e| e.contains("video.url")));
}
