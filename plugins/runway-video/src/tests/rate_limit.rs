//! A create answered 429: Runway's rate limit (a pace signal: nothing was created, create again
//! later, the pool stays open) or its daily generation limit (a quota: the host closes the
//! model's pool). Runway answers both with 429; only its own figures tell them apart
//! (`GET /v1/organization`: `usage.models[m].dailyGenerations` against
//! `tier.models[m].maxDailyGenerations`), so the handler reads them before it reports a quota.

use serde_json::{Value, json};
use slotd_sdk::testing::json_answer;
use slotd_sdk::{HttpError, Outcome, Response};

use super::support::*;

/// `GET /v1/organization` with gen4_turbo's daily limit and today's generations.
fn organization(used: u64, limit: u64) -> Value {
    json!({
        "creditBalance": 1000,
        "tier": {"maxMonthlyCreditSpend": 200000, "models": {
            "gen4_turbo": {"maxConcurrentGenerations": 5, "maxDailyGenerations": limit}}},
        "usage": {"models": {"gen4_turbo": {"dailyGenerations": used}}}
    })
}

fn too_many(retry_after: Option<&str>) -> Result<Response, HttpError> {
    let r = Response::new(429, r#"{"error":"Too many requests, try again later"}"#);
    Ok(match retry_after {
        Some(s) => r.with_header("Retry-After", s),
        None => r,
    })
}

/// The (method, path) of every request the guest sent, in order.
fn sent(host: &slotd_sdk::testing::ScriptedHost) -> Vec<(String, String)> {
    host.requests()
        .iter()
        .map(|r| {
            let path = r.url.trim_start_matches("https://api.dev.runwayml.com");
            (r.method.clone(), path.to_string())
        })
        .collect()
}

/// The issue's case: 4 of a million generations used, and a 429. Runway's rate limit, not its
/// daily limit: `rate_limited` (the host puts the unit back to `pending` and creates it again
/// after its backoff, or Runway's `Retry-After`), never `quota_exhausted` (which closes the
/// pool).
#[test]
fn a_429_with_the_days_generations_left_is_a_pace_signal_not_a_closure() {
    let host = keyed_host()
        .on_request("POST", "/v1/image_to_video", |_| too_many(Some("3")))
        .on_request("GET", "/v1/organization", |_| {
            json_answer(200, &organization(4, 1_000_000))
        });
    let change = tick_one(&host, NOW, fresh("u1"));
    assert!(
        matches!(&change.outcome, Outcome::RetryAfter { after_ms: Some(3_000), error }
            if error.code.as_deref() == Some("rate_limited")
                && error.message.starts_with("runway http_429: HTTP 429: Too many requests")
                && error.message.contains("rate limit")
                && error.message.contains("4 of 1000000")),
        "{:?}",
        change.outcome
    );
    // Nothing was created: safe to create again, even if the host hands it back in doubt.
    assert_eq!(
        state(&change),
        json!({"submission": format!("u1-main-0@{NOW}"), "refused_at_ms": NOW})
    );
    assert_eq!(
        sent(&host),
        [
            ("POST".to_string(), "/v1/image_to_video".to_string()),
            ("GET".to_string(), "/v1/organization".to_string())
        ]
    );
    // Without `Retry-After`, the host's own backoff paces it.
    let host = keyed_host()
        .on_request("POST", "/v1/", |_| too_many(None))
        .on_request("GET", "/v1/organization", |_| {
            json_answer(200, &organization(0, 50))
        });
    let change = tick_one(&host, NOW, fresh("u1"));
    assert!(
        matches!(&change.outcome, Outcome::RetryAfter { after_ms: None, error }
            if error.code.as_deref() == Some("rate_limited")),
        "{:?}",
        change.outcome
    );
}

/// Runway's figures say the day is spent: the daily limit, `quota_exhausted` (the host closes
/// the model's pool, spending no retry budget), `Retry-After` honoured when Runway sends it.
#[test]
fn a_429_at_the_daily_limit_is_a_quota_refusal() {
    for (retry_after, after_ms) in [(Some("30"), Some(30_000)), (None, None)] {
        let host = keyed_host()
            .on_request("POST", "/v1/", move |_| too_many(retry_after))
            .on_request("GET", "/v1/organization", |_| {
                json_answer(200, &organization(50, 50))
            });
        let change = tick_one(&host, NOW, fresh("u1"));
        assert!(
            matches!(&change.outcome, Outcome::RetryAfter { after_ms: a, error }
                if *a == after_ms
                    && error.code.as_deref() == Some("quota_exhausted")
                    && error.message.starts_with("runway http_429: ")
                    && error.message.contains("daily generation limit")
                    && error.message.contains("50 of 50")),
            "{retry_after:?}: {:?}",
            change.outcome
        );
        assert_eq!(
            state(&change),
            json!({"submission": format!("u1-main-0@{NOW}"), "refused_at_ms": NOW})
        );
        assert_eq!(sent(&host).len(), 2, "the create, then the organization");
    }
}

/// No figures, no closure: an organization Runway does not answer, answers with an error or
/// with something unreadable, or that does not list the model's daily limit, leaves the 429 a
/// pace signal.
#[test]
fn a_429_whose_daily_figures_cannot_be_read_is_a_pace_signal() {
    type Answer = Box<dyn Fn() -> Result<Response, HttpError>>;
    let unreadable: Vec<(&str, Answer)> = vec![
        (
            "503",
            Box::new(|| json_answer(503, &json!({"error": "busy"}))),
        ),
        ("429", Box::new(|| too_many(None))),
        ("timeout", Box::new(|| Err(HttpError::Timeout))),
        ("not JSON", Box::new(|| Ok(Response::new(200, "<html>")))),
        (
            "model not listed",
            Box::new(|| json_answer(200, &json!({"tier": {"models": {}}, "usage": {}}))),
        ),
        (
            "limit not a number",
            Box::new(|| {
                json_answer(
                    200,
                    &json!({"tier": {"models": {"gen4_turbo": {"maxDailyGenerations": "lots"}}}}),
                )
            }),
        ),
    ];
    for (what, answer) in unreadable {
        let host = keyed_host()
            .on_request("POST", "/v1/", |_| too_many(None))
            .on_request("GET", "/v1/organization", move |_| answer());
        let change = tick_one(&host, NOW, fresh("u1"));
        assert!(
            matches!(&change.outcome, Outcome::RetryAfter { error, .. }
                if error.code.as_deref() == Some("rate_limited")
                    && error.message.contains("rate limit")),
            "{what}: {:?}",
            change.outcome
        );
        assert_eq!(sent(&host).len(), 2, "{what}");
    }
}

/// One organization read serves every 429 of a tick; a tick without a 429 reads nothing.
#[test]
fn one_organization_read_serves_every_429_of_a_tick() {
    let host = keyed_host()
        .on_request("POST", "/v1/", |_| too_many(None))
        .on_request("GET", "/v1/organization", |_| {
            json_answer(200, &organization(7, 1_000))
        });
    let changes = tick(&host, NOW, vec![fresh("a"), fresh("b"), fresh("c")]);
    assert_eq!(changes.len(), 3);
    for c in &changes {
        assert_eq!(code(&c.outcome), Some("rate_limited"), "{:?}", c.outcome);
    }
    let orgs = sent(&host)
        .iter()
        .filter(|(_, p)| p == "/v1/organization")
        .count();
    assert_eq!(orgs, 1, "{:?}", sent(&host));
    let host = keyed_host().on_request("POST", "/v1/", |_| json_answer(200, &json!({"id": "t"})));
    tick(&host, NOW, vec![fresh("a"), fresh("b")]);
    assert_eq!(sent(&host).len(), 2, "two creates, no organization read");
}

/// A task read answered 429 is not a create: the task goes on at Runway, and the read is
/// retried at Runway's pace (or its `Retry-After`) without asking the organization.
#[test]
fn a_read_answered_429_is_retried_at_runways_pace_without_a_closure() {
    let host = keyed_host().on_request("GET", "/v1/tasks/", |_| too_many(Some("1")));
    let change = tick_one(&host, NOW + 60_000, running("u1", "t1"));
    assert!(
        matches!(&change.outcome, Outcome::RetryAfter { after_ms: Some(5_000), error }
            if error.code.as_deref() != Some("quota_exhausted")),
        "{:?}",
        change.outcome
    );
    assert_eq!(sent(&host).len(), 1, "no organization read for a task read");
}
