//! The key never passes through the guest: every request goes through `send-authorized` with
//! the `api_key` credential (`Authorization: Key …`), none carries an `Authorization` header of
//! the guest's own, and the key appears in no log, state, result or error.

use serde_json::json;
use slotd_sdk::testing::ScriptedHost;
use slotd_sdk::{Credential, Handler, HttpError, Response};

use super::support::*;
use crate::FalVideoHandler;

/// A fal that answers everything the handler may ask, echoing the key into an error once.
fn fal() -> ScriptedHost {
    keyed_host()
        .on_request("POST", "/text-to-video", |r| {
            if r.body
                .as_deref()
                .is_some_and(|b| b.windows(4).any(|w| w == b"boom"))
            {
                return Ok(Response::new(504, ""));
            }
            answer(200, queued("r1"))
        })
        .on_request("GET", "/status", |_| {
            answer(200, json!({"status": "COMPLETED"}))
        })
        .on_request("GET", HISTORY, |_| answer(200, json!({"items": []})))
        .on_request("PUT", "/cancel", |_| {
            answer(202, json!({"status": "CANCELLATION_REQUESTED"}))
        })
        .on_request("GET", APP, |_| answer(200, video()))
}

#[test]
fn every_request_is_authorized_by_the_host_only_and_the_key_is_never_kept() {
    let scripted = fal();
    let spy = Spy::new(&scripted);
    let lost = slotd_sdk::Unit {
        spec: spec_of(T2V, json!({"prompt": "boom"})),
        ..fresh("d")
    };
    let mut states = Vec::new();
    let changes =
        FalVideoHandler::tick(&spy, &ctx(NOW), vec![fresh("a"), running("b", "r1"), lost]);
    let changes = changes.unwrap_or_else(|e| panic!("{e}"));
    let held = changes
        .iter()
        .find(|c| c.unit_id == "d")
        .and_then(|c| c.state.clone());
    states.extend(changes.iter().map(|c| format!("{c:?}")));
    let later = in_doubt("d", held.as_deref().unwrap_or("{}"));
    let changes = FalVideoHandler::tick(&spy, &ctx(NOW + 30_000), vec![later]);
    states.extend(changes.iter().flatten().map(|c| format!("{c:?}")));
    let cancelled = FalVideoHandler::cancel(&spy, &ctx(NOW), vec![running("c", "r1")]);
    states.extend(cancelled.iter().flatten().map(|c| format!("{c:?}")));

    assert!(
        spy.plain.borrow().is_empty(),
        "nothing is sent without the credential"
    );
    let asked = spy.authorized.borrow();
    assert_eq!(asked.len(), 6, "2 submits, status, result, history, cancel");
    let key_credential = Credential {
        header: "Authorization".into(),
        secret: "api_key".into(),
        prefix: "Key ".into(),
    };
    for a in asked.iter() {
        let r = &a.request;
        assert_eq!(
            a.credentials,
            std::slice::from_ref(&key_credential),
            "{} {}",
            r.method,
            r.url
        );
        assert_eq!(
            r.header("authorization"),
            None,
            "the guest sets no Authorization"
        );
        assert!(
            !format!("{r:?}").contains(KEY),
            "the key is not in the guest's request"
        );
    }
    let on_the_wire = scripted.requests();
    assert!(
        on_the_wire
            .iter()
            .all(|r| r.header("authorization") == Some(&format!("Key {KEY}")))
    );
    for text in states.iter().chain(scripted.logs().iter().map(|(_, m)| m)) {
        assert!(
            !text.contains(KEY) && !text.contains("key-secret"),
            "{text}"
        );
    }
    assert!(
        !scripted.logs().is_empty(),
        "the lost submit was logged (without the key)"
    );
}

#[test]
fn a_missing_key_fails_the_submit_and_a_malformed_setting_the_call() {
    let host = ScriptedHost::new().on_any(|_| answer(200, queued("r1")));
    let change = tick_one(&host, NOW, fresh("a"));
    assert_eq!(code(&change.outcome), Some("misconfigured"), "{change:?}");
    assert!(host.requests().is_empty(), "the host refused to send it");

    let bad = keyed_host().with_config("priority", "urgent");
    let got = FalVideoHandler::tick(&bad, &ctx(NOW), vec![fresh("a")]);
    assert!(got.is_err_and(|e| e.contains("handlers.fal-video.priority")));
    let got = FalVideoHandler::cancel(&bad, &ctx(NOW), vec![fresh("a")]);
    assert!(got.is_err_and(|e| e.contains("handlers.fal-video.priority")));
    let denied = keyed_host().on_any(|r| Err(HttpError::Denied(r.url.clone())));
    assert_eq!(
        code(&tick_one(&denied, NOW, fresh("a")).outcome),
        Some("misconfigured")
    );
}
