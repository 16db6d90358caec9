//! Creating tasks: what is sent, and what each answer to a create means.

use serde_json::{Value, json};
use slotd_sdk::testing::json_answer;
use slotd_sdk::{Handler, HttpError, Outcome, TickContext, Unit};

use super::support::*;
use crate::RunwayVideo;

fn body_of(request: &slotd_sdk::Request) -> Value {
    request
        .body
        .as_deref()
        .and_then(|b| serde_json::from_slice(b).ok())
        .unwrap_or_default()
}

#[test]
fn a_fresh_unit_is_created_with_its_spec_and_accepted() {
    let host = keyed_host().on_request("POST", "/v1/image_to_video", |_| {
        json_answer(
            200,
            &json!({"id": "3086d332", "estimatedCost": {"credits": 25}}),
        )
    });
    let change = tick_one(&host, NOW, fresh("u1"));
    assert_eq!(change.outcome, Outcome::Accepted("3086d332".into()));
    assert_eq!(
        state(&change),
        json!({"created_at_ms": NOW, "estimated_credits": 25.0})
    );
    let sent = host.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].url,
        "https://api.dev.runwayml.com/v1/image_to_video"
    );
    assert_eq!(
        body_of(&sent[0]),
        json!({"model": "gen4_turbo", "promptImage": IMAGE, "promptText": "a cat",
               "ratio": "1280:720", "duration": 5, "seed": 1})
    );
}

#[test]
fn a_text_only_shot_goes_to_text_to_video_at_the_configured_base_url() {
    let host = keyed_host()
        .with_config("base_url", "http://127.0.0.1:18091/")
        .on_request("POST", "/v1/text_to_video", |_| {
            json_answer(200, &json!({"id": "t2"}))
        });
    let unit = Unit {
        spec: spec_of(json!({"model": "veo3.1_fast", "ratio": "720:1280",
                             "shots": [{"prompt_text": "waves"}]})),
        ..fresh("u1")
    };
    assert_eq!(
        tick_one(&host, NOW, unit).outcome,
        Outcome::Accepted("t2".into())
    );
    assert_eq!(
        host.requests()[0].url,
        "http://127.0.0.1:18091/v1/text_to_video"
    );
}

#[test]
fn creates_and_polls_of_a_batch_go_out_in_one_round() {
    let host = keyed_host()
        .on_request("POST", "/v1/", |_| json_answer(200, &json!({"id": "new"})))
        .on_request("GET", "/v1/tasks/", |r| {
            let id = r.url.rsplit('/').next().unwrap_or_default().to_string();
            json_answer(200, &task(&id, "RUNNING", json!({"progress": 0.5})))
        });
    let changes = tick(
        &host,
        NOW + 60_000,
        vec![
            fresh("a"),
            running("b", "tb"),
            fresh("c"),
            running("d", "td"),
        ],
    );
    assert_eq!(
        host.batches().len(),
        1,
        "one send-authorized for the whole batch"
    );
    assert_eq!(host.requests().len(), 4);
    let ids: Vec<&str> = changes.iter().map(|c| c.unit_id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c", "d"]);
    assert!(matches!(changes[1].outcome, Outcome::Running(Some(_))));
}

#[test]
fn a_validation_refusal_fails_with_the_issue_code_and_paths() {
    let host = keyed_host().on_any(|_| {
        json_answer(
            400,
            &json!({"error": "Validation of body failed", "issues": [
            {"code": "custom", "path": ["promptImage"], "message": "Failed to fetch asset"}]}),
        )
    });
    let change = tick_one(&host, NOW, fresh("u1"));
    assert_eq!(code(&change.outcome), Some("custom"));
    assert!(matches!(&change.outcome, Outcome::Fail(e)
        if e.message.contains("promptImage: Failed to fetch asset")));
}

#[test]
fn unavailable_models_fail() {
    let host = keyed_host().on_any(move |_| json_answer(403, &json!({"error": "no"})));
    let change = tick_one(&host, NOW, fresh("u1"));
    assert_eq!(code(&change.outcome), Some("http_403"));
    assert!(matches!(&change.outcome, Outcome::Fail(e) if e.message.contains("not be available")));
}

/// Contract 1.2: a refused key is the account's problem, not the job's. Nothing was created,
/// so the unit is recorded refused (safe to create again) and given back with
/// `account_refused`, Runway's status and text in the message.
#[test]
fn a_refused_key_gives_the_unit_back_as_account_refused() {
    let host = keyed_host().on_any(|_| json_answer(401, &json!({"error": "Invalid API key"})));
    let change = tick_one(&host, NOW, fresh("u1"));
    assert!(
        matches!(&change.outcome, Outcome::RetryAfter { after_ms: None, error }
            if error.code.as_deref() == Some("account_refused")
                && error.message.starts_with("runway http_401: HTTP 401: Invalid API key")),
        "{:?}",
        change.outcome
    );
    assert_eq!(
        state(&change),
        json!({"submission": format!("u1-main-0@{NOW}"), "refused_at_ms": NOW})
    );
}

/// Contract 1.5: a server error Runway answered (any 5xx but 504, which may hide a task)
/// made no task: `not_created`, Runway's status and text kept, so the host sends the unit back
/// to `pending`. Recorded refused all the same: a host that predates the convention gives the
/// unit back in doubt, and it is created again rather than held.
#[test]
fn a_create_answered_with_a_server_error_is_not_created_and_may_be_created_again() {
    for status in [500, 502, 503] {
        let host = keyed_host().on_any(move |_| json_answer(status, &json!({"error": "busy"})));
        let change = tick_one(&host, NOW, fresh("u1"));
        assert!(
            matches!(&change.outcome, Outcome::RetryAfter { after_ms: None, error }
                if error.code.as_deref() == Some("not_created")
                    && error.message.starts_with(&format!("runway http_{status}: HTTP {status}: busy"))
                    && error.message.contains("no task was created")),
            "{status}: {:?}",
            change.outcome
        );
        assert_eq!(
            state(&change),
            json!({"submission": format!("u1-main-0@{NOW}"), "refused_at_ms": NOW})
        );
        // The host keeps the unit submitted and gives it back in doubt, with that state.
        let again = in_doubt("u1", change.state.as_deref().unwrap_or_default());
        let host = keyed_host().on_any(|_| json_answer(200, &json!({"id": "t9"})));
        let change = tick_one(&host, NOW + 10_000, again);
        assert_eq!(change.outcome, Outcome::Accepted("t9".into()), "{status}");
        assert_eq!(host.requests()[0].method, "POST");
    }
}

#[test]
fn a_request_the_host_would_not_send_fails_without_reaching_runway() {
    let no_key = slotd_sdk::testing::ScriptedHost::new()
        .on_any(|_| json_answer(200, &json!({"id": "never"})));
    let change = tick_one(&no_key, NOW, fresh("u1"));
    assert!(matches!(&change.outcome, Outcome::Fail(e) if e.message.contains("no secret")));
    assert!(no_key.requests().is_empty());
    let denied = keyed_host().on_any(|_| Err(HttpError::Denied("api.dev.runwayml.com".into())));
    assert!(matches!(
        tick_one(&denied, NOW, fresh("u1")).outcome,
        Outcome::Fail(_)
    ));
}

#[test]
fn an_unusable_spec_fails_the_unit_alone() {
    let host = keyed_host().on_any(|_| json_answer(200, &json!({"id": "t1"})));
    let broken = Unit {
        spec: "{}".into(),
        ..fresh("bad")
    };
    let changes = tick(&host, NOW, vec![broken, fresh("good")]);
    assert_eq!(code(&changes[0].outcome), Some("bad_spec"));
    assert_eq!(changes[1].outcome, Outcome::Accepted("t1".into()));
}

#[test]
fn a_bad_setting_fails_the_call_naming_the_key() {
    let host = keyed_host().with_config("expected_duration_scale", "fast");
    let err = RunwayVideo::tick(&host, &TickContext::default(), vec![fresh("u1")]).err();
    assert!(err.is_some_and(|e| e.contains("handlers.runway-video.expected_duration_scale")));
    assert!(host.requests().is_empty());
}

#[test]
fn runway_sends_no_callbacks() {
    let err = RunwayVideo::on_callback(&keyed_host(), &[], b"{}").err();
    assert!(err.is_some_and(|e| e.contains("no webhooks")));
}

#[test]
fn plan_routed_puts_each_shot_on_its_models_pool_and_plain_plan_takes_gen4_turbo_only() {
    let payload = json!({"model": "gen4_turbo", "ratio": "1280:720", "shots": [
        {"prompt_image": IMAGE}, {"prompt_text": "x", "model": "veo3.1", "ratio": "1920:1080"}]});
    let routed = RunwayVideo::plan_routed(&keyed_host(), "runway_video", &payload.to_string());
    let pools: Vec<Vec<(String, String)>> = routed
        .unwrap_or_default()
        .into_iter()
        .map(|u| u.pools)
        .collect();
    assert_eq!(
        pools,
        [
            [("main".to_string(), "runway:gen4_turbo".to_string())],
            [("main".to_string(), "runway:veo3.1".to_string())]
        ]
    );
    let plain = RunwayVideo::plan(&keyed_host(), "runway_video", &payload.to_string());
    assert!(
        plain.is_err_and(|e| e.field.as_deref() == Some("model") && e.message.contains("veo3.1"))
    );
    let turbo_only =
        json!({"model": "gen4_turbo", "ratio": "1280:720", "shots": [{"prompt_image": IMAGE}]});
    assert_eq!(
        RunwayVideo::plan(&keyed_host(), "runway_video", &turbo_only.to_string()).map(|u| u.len()),
        Ok(1)
    );
}
