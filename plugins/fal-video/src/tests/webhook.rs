//! Webhooks: verified first (headers, timestamp, Ed25519 signature by a key of the JWKS the
//! host reads, the body's request id), then only a hint to poll the request now.

use serde_json::json;
use slotd_sdk::testing::ScriptedHost;
use slotd_sdk::{CallbackChange, Handler, HttpError, Outcome};

use super::support::signing::{headers, jwks};
use super::support::*;
use crate::FalVideoHandler;

const NOW_S: i64 = (NOW / 1000) as i64;

fn body(request_id: &str) -> Vec<u8> {
    json!({"error": null, "gateway_request_id": request_id, "payload": {"video": {"url": VIDEO}},
           "request_id": request_id, "status": "OK"})
    .to_string()
    .into_bytes()
}

/// A host whose JWKS lists the key of seed 7 (after a decoy).
fn host() -> ScriptedHost {
    keyed_host().on_request("GET", JWKS, |_| answer(200, jwks(&[7])))
}

fn callback(
    host: &ScriptedHost,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<Vec<CallbackChange>, String> {
    FalVideoHandler::on_callback(host, headers, body)
}

#[test]
fn a_valid_webhook_asks_for_a_poll_of_that_request_now() {
    let host = host();
    let b = body("req-1");
    let got = callback(&host, &headers("req-1", NOW_S - 20, &b, 7), &b);
    assert_eq!(
        got,
        Ok(vec![CallbackChange {
            provider_job_id: Some("req-1".into()),
            idempotency_key: None,
            outcome: Outcome::Running(Some(0)),
            state: None,
            cost: None,
        }])
    );
    let reads = host.requests();
    assert_eq!(reads.len(), 1);
    assert_eq!(reads[0].url, JWKS, "the host fetched the configured JWKS");
    let error_body = json!({"error": "Invalid status code: 422", "payload": {"detail": []},
                            "request_id": "req-2", "status": "ERROR"})
    .to_string()
    .into_bytes();
    let got = callback(
        &host,
        &headers("req-2", NOW_S + 100, &error_body, 7),
        &error_body,
    );
    assert!(
        matches!(&got, Ok(c) if c[0].outcome == Outcome::Running(Some(0))),
        "the payload is not trusted either way"
    );
}

#[test]
fn forged_stale_or_incomplete_webhooks_are_refused() {
    let host = host();
    let b = body("req-1");
    let good = headers("req-1", NOW_S, &b, 7);
    let refused = |headers: &[(String, String)], body: &[u8], why: &str| {
        let got = callback(&host, headers, body);
        let lower = |s: &str| s.to_ascii_lowercase();
        assert!(
            got.as_ref().is_err_and(|e| lower(e).contains(&lower(why))),
            "{why}: {got:?}"
        );
    };
    // Each header missing.
    for i in 0..4 {
        let mut h = good.clone();
        let (name, _) = h.remove(i);
        refused(&h, &b, &name);
    }
    // A body altered after signing.
    let mut altered = b.clone();
    altered.push(b' ');
    refused(&good, &altered, "does not verify");
    // A bad signature: right length, wrong bytes; and not hex.
    let mut h = good.clone();
    h[3].1 = "00".repeat(64);
    refused(&h, &b, "does not verify");
    h[3].1 = "zz".into();
    refused(&h, &b, "not hex");
    // Stale and future timestamps.
    refused(&headers("req-1", NOW_S - 301, &b, 7), &b, "more than 300 s");
    refused(&headers("req-1", NOW_S + 301, &b, 7), &b, "more than 300 s");
    let mut h = good.clone();
    h[2].1 = "yesterday".into();
    refused(&h, &b, "Unix seconds");
    // Signed by a key the JWKS does not list.
    refused(&headers("req-1", NOW_S, &b, 9), &b, "does not verify");
    // The body names another request than the signed header.
    let other = body("req-other");
    refused(
        &headers("req-1", NOW_S, &other, 7),
        &other,
        "is not the signed",
    );
}

#[test]
fn a_jwks_that_cannot_be_read_refuses_the_webhook() {
    let b = body("req-1");
    let h = headers("req-1", NOW_S, &b, 7);
    for (name, host) in [
        (
            "HTTP 503",
            keyed_host().on_request("GET", JWKS, |_| answer(503, json!({}))),
        ),
        (
            "transport",
            keyed_host().on_request("GET", JWKS, |_| Err(HttpError::Timeout)),
        ),
        (
            "no usable",
            keyed_host().on_request("GET", JWKS, |_| answer(200, json!({"keys": []}))),
        ),
    ] {
        let got = callback(&host, &h, &b);
        assert!(
            got.as_ref()
                .is_err_and(|e| e.contains("could not be checked")),
            "{name}: {got:?}"
        );
    }
    let elsewhere = ScriptedHost::new()
        .with_config("jwks_url", "https://keys.example.com/jwks")
        .on_request("GET", "https://keys.example.com/jwks", |_| {
            answer(200, jwks(&[7]))
        });
    assert!(
        callback(&elsewhere, &h, &b).is_ok(),
        "jwks_url is configurable"
    );
    let no_clock = host().with_now_ms(None);
    assert!(callback(&no_clock, &h, &b).is_err_and(|e| e.contains("no clock")));
}
