use serde_json::json;

use super::*;
use crate::testing::{ScriptedHost, json_answer};

#[test]
fn requests_are_relative_to_the_base_url_with_json_bodies() {
    let host = ScriptedHost::new().on_any(|r| json_answer(200, &json!({"echo": r.url})));
    let mut client = Client::new(&host, " http://p.test/api/ ").with_timeout_ms(Some(900));
    client.set_header("x-version", "1");
    client.set_header("X-Version", "2");
    let answers = client.send(&[
        Call::Get("/jobs/1".into()),
        Call::Post("/jobs".into(), json!({"a": 1})),
        Call::Delete("/jobs/1".into()),
    ]);
    assert_eq!(answers.len(), 3);
    let body = answers[0]
        .as_ref()
        .map_err(|e| e.to_string())
        .and_then(json);
    assert_eq!(body, Ok(json!({"echo": "http://p.test/api/jobs/1"})));
    let batches = host.batches();
    assert_eq!(batches.len(), 1, "one round");
    let post = &batches[0][1];
    assert_eq!(post.method, "POST");
    assert_eq!(post.body.as_deref(), Some(&br#"{"a":1}"#[..]));
    assert_eq!(
        post.headers,
        [
            ("x-version".to_string(), "2".to_string()),
            ("content-type".to_string(), "application/json".to_string())
        ]
    );
    assert_eq!(post.timeout_ms, Some(900));
    assert_eq!(batches[0][2].method, "DELETE");
}

#[test]
fn credentials_go_through_send_authorized() {
    let host = ScriptedHost::new()
        .with_secret("api_key", "sk-1")
        .on_any(|_| Ok(Response::new(204, "")));
    let client = Client::new(&host, "http://p.test").with_credential(Credential::bearer("api_key"));
    let answers = client.send(&[Call::Get("/a".into())]);
    assert_eq!(answers[0].as_ref().map(|r| r.status), Ok(204));
    let sent = host.requests();
    assert_eq!(sent[0].header("authorization"), Some("Bearer sk-1"));
}

#[test]
fn statuses_and_transport_errors_are_classified() {
    for (status, class) in [
        (200, Class::Success),
        (201, Class::Success),
        (429, Class::RateLimited),
        (404, Class::NotFound),
        (400, Class::Refused),
        (401, Class::Refused),
        (500, Class::Unavailable),
        (503, Class::Unavailable),
        (302, Class::Unexpected),
    ] {
        assert_eq!(Class::of_status(status), class, "{status}");
    }
    assert_eq!(Class::of_error(&HttpError::Timeout), Class::Timeout);
    assert_eq!(Class::of_error(&HttpError::TooLarge(9)), Class::Unreachable);
    assert_eq!(
        Class::of_error(&HttpError::Denied("x".into())),
        Class::Misconfigured
    );
    assert!(Class::RateLimited.is_transient() && Class::Timeout.is_transient());
    assert!(!Class::Refused.is_transient() && !Class::Misconfigured.is_transient());
}

#[test]
fn failures_become_outcomes_with_the_providers_wait() {
    let now = 1_000_000;
    let ok = Ok(Response::new(200, "{}"));
    assert_eq!(failure(&ok, now), None);
    let limited = Ok(Response::new(429, "slow down").with_header("Retry-After", "7"));
    assert_eq!(
        failure(&limited, now),
        Some(Outcome::RetryAfter {
            after_ms: Some(7_000),
            error: ProviderError::new(Some("http_429"), "HTTP 429: slow down"),
        })
    );
    let down = Ok(Response::new(503, ""));
    assert!(matches!(
        failure(&down, now),
        Some(Outcome::RetryAfter { after_ms: None, error }) if error.message == "HTTP 503"
    ));
    let refused = Ok(Response::new(422, "x".repeat(500)));
    match failure(&refused, now) {
        Some(Outcome::Fail(e)) => {
            assert_eq!(e.code.as_deref(), Some("http_422"));
            assert!(e.message.len() < 220, "the body is cut");
        }
        other => panic!("{other:?}"),
    }
    let slow = Err(HttpError::Timeout);
    assert!(matches!(
        failure(&slow, now),
        Some(Outcome::RetryAfter { error, .. }) if error.code.as_deref() == Some("timeout")
    ));
    let denied = Err(HttpError::Denied("evil.test".into()));
    assert!(
        matches!(failure(&denied, now), Some(Outcome::Fail(e)) if e.code.as_deref() == Some("http"))
    );
}
