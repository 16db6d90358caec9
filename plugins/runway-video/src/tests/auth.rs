//! The key never passes through the guest: every request goes through `send-authorized` with
//! the `api_key` credential, none carries an `Authorization` header of the guest's own, and
//! every one names the API version.

use serde_json::json;
use slotd_sdk::testing::{ScriptedHost, json_answer};
use slotd_sdk::{Credential, Handler, Response, Unit, UnitStatus};

use super::support::*;
use crate::RunwayVideo;

/// A Runway that answers everything the handler may ask.
fn runway() -> ScriptedHost {
    keyed_host()
        .on_request("POST", "/v1/", |_| json_answer(200, &json!({"id": "t1"})))
        .on_request("DELETE", "/v1/tasks/", |_| Ok(Response::new(204, "")))
        .on_request("GET", "/v1/tasks/", |_| {
            json_answer(200, &task("t1", "SUCCEEDED", json!({"output": [IMAGE]})))
        })
}

#[test]
fn every_request_is_authorized_by_the_host_only() {
    let scripted = runway();
    let spy = Spy::new(&scripted);
    let units = vec![fresh("a"), running("b", "t1")];
    assert!(RunwayVideo::tick(&spy, &ctx(NOW), units).is_ok());
    assert!(RunwayVideo::cancel(&spy, &ctx(NOW), vec![running("c", "t1")]).is_ok());
    let done = Unit {
        status: UnitStatus::Succeeded,
        ..running("d", "t1")
    };
    assert!(RunwayVideo::finalize(&spy, &ctx(NOW), done).is_ok());

    assert!(
        spy.plain.borrow().is_empty(),
        "nothing is sent without the credential"
    );
    let asked = spy.authorized.borrow();
    assert_eq!(
        asked.len(),
        5,
        "create, poll, delete, read back, finalize read"
    );
    for a in asked.iter() {
        let r = &a.request;
        assert_eq!(
            a.credentials,
            [Credential::bearer("api_key")],
            "{} {}",
            r.method,
            r.url
        );
        assert_eq!(
            r.header("authorization"),
            None,
            "the guest sets no Authorization"
        );
        assert_eq!(r.header("x-runway-version"), Some("2024-11-06"));
        assert!(
            !format!("{r:?}").contains(KEY),
            "the key is not in the guest's request"
        );
        if r.method == "POST" {
            assert_eq!(r.header("content-type"), Some("application/json"));
        }
    }
    // On the wire, the host has inserted the key.
    let sent = scripted.requests();
    assert!(
        sent.iter()
            .all(|r| r.header("authorization") == Some(&format!("Bearer {KEY}")))
    );
}
