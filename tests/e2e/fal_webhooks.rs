//! fal's webhooks end to end: slotd's own per-unit callback token is the first gate, then
//! `fal-video` checks fal's Ed25519 signature against the keys the simulator publishes
//! (fetched by the host through the allowlist, contract 1.4 `signing.verify-ed25519`). A
//! forged delivery (a key not published, a stale timestamp, a body for another request, a
//! request slotd never made, a replay) changes nothing.

use std::time::Duration;

use ed25519_dalek::Signer as _;
use serde_json::{Value, json};
use slotd_sim::fal::FalOptions;

use crate::fal::*;
use crate::support::*;

/// A delivery as fal sends it: the body and its four signature headers.
struct Delivery {
    body: Vec<u8>,
    headers: Vec<(&'static str, String)>,
}

fn body_for(request_id: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "error": null, "gateway_request_id": request_id,
        "payload": {"video": {"url": "https://v3.fal.media/files/forged.mp4"}},
        "request_id": request_id, "status": "OK"
    }))
    .expect("json")
}

fn now_s() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs(),
    )
    .expect("seconds")
}

/// Signed by the simulator's own key (the one its JWKS publishes).
fn signed(request_id: &str, user_id: &str, at: i64, body: Vec<u8>) -> Delivery {
    let headers = signer().headers(request_id, user_id, at, &body);
    Delivery { body, headers }
}

/// Signed over the right message by a key fal never published.
fn signed_by_a_stranger(request_id: &str, user_id: &str) -> Delivery {
    let at = now_s();
    let body = body_for(request_id);
    let key = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]);
    let message = slotd_sim::fal::webhook::message(request_id, user_id, at, &body);
    let sig = key.sign(message.as_bytes());
    Delivery {
        body,
        headers: vec![
            ("X-Fal-Webhook-Request-Id", request_id.to_string()),
            ("X-Fal-Webhook-User-Id", user_id.to_string()),
            ("X-Fal-Webhook-Timestamp", at.to_string()),
            ("X-Fal-Webhook-Signature", hex::encode(sig.to_bytes())),
        ],
    }
}

async fn deliver(client: &reqwest::Client, url: &str, d: &Delivery) -> (u16, Value) {
    let mut req = client
        .post(url)
        .header("content-type", "application/json")
        .body(d.body.clone());
    for (k, v) in &d.headers {
        req = req.header(*k, v);
    }
    let resp = req.send().await.expect("deliver");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// One shot runs at fal (slowed so it stays `IN_PROGRESS` a while). While it runs, forged
/// deliveries to its real webhook URL are refused (400: a stranger's key, a stale timestamp,
/// a body naming another request than the signed headers, a missing header) or change nothing
/// (200 and ignored: a validly signed delivery for a request slotd never made). The unit stays
/// `submitted` with its job. After it completes by fal's own webhook, a replay of a valid
/// delivery for it is ignored too. Each refusal is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fal_forged_webhooks_change_nothing() {
    let opts = FalOptions {
        // Slower than the other tests: the shot stays at fal for seconds.
        time_scale: 0.1,
        ..sim_options()
    };
    let run = Run::start(opts, |_, _| {}).await;
    let id = run.submit(payload("forged", 1)).await;
    let job = eventually(
        Duration::from_secs(60),
        "the shot running at fal",
        async || {
            run.sim
                .jobs()
                .into_iter()
                .find(|j| j.status == "IN_PROGRESS" && j.webhook_url.is_some())
        },
    )
    .await;
    let url = job.webhook_url.clone().expect("webhook url");
    assert!(url.starts_with(&run.base), "slotd's callback URL: {url}");
    let user = run.sim.stats().accounts[slotd_sim::fal::ACCOUNT_DEFAULT]
        .user_id
        .clone();
    let request = job.request_id.clone();
    let before = run.task(&id).await;
    let unit_before = results(&before)[0].clone();
    assert_eq!(unit_before["status"], "submitted");

    let stranger = signed_by_a_stranger(&request, &user);
    let stale = signed(&request, &user, now_s() - 600, body_for(&request));
    let mut swapped = signed(&request, &user, now_s(), body_for("another-request"));
    swapped.body = body_for("another-request");
    let mut missing = signed(&request, &user, now_s(), body_for(&request));
    missing
        .headers
        .retain(|(k, _)| !k.eq_ignore_ascii_case("X-Fal-Webhook-Signature"));
    for (what, d) in [
        ("a stranger's key", &stranger),
        ("a stale timestamp", &stale),
        ("a body for another request", &swapped),
        ("no signature header", &missing),
    ] {
        let (status, answer) = deliver(&run.client, &url, d).await;
        assert_eq!(status, 400, "{what}: {answer}");
        assert!(
            answer.to_string().contains("fal-video"),
            "{what}: the refusal names the handler: {answer}"
        );
    }
    // Validly signed, but for a request slotd never made: nothing to change.
    let unknown = "0191f4f0-0000-7000-8000-000000000000";
    let (status, answer) = deliver(
        &run.client,
        &url,
        &signed(unknown, &user, now_s(), body_for(unknown)),
    )
    .await;
    assert_eq!((status, &answer["applied"]), (200, &json!(0)), "{answer}");
    assert_eq!(answer["ignored"], 1, "{answer}");

    let after = run.task(&id).await;
    let unit_after = &results(&after)[0];
    assert_eq!(unit_after["status"], "submitted", "{unit_after}");
    assert_eq!(
        unit_after["provider_task_id"],
        unit_before["provider_task_id"]
    );
    assert_eq!(run.sim.jobs()[0].status, "IN_PROGRESS", "fal still runs it");

    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(120))
        .await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    let stats = run.sim.stats();
    assert!(
        stats.webhooks_sent >= 1,
        "fal's own webhook was accepted: {stats:?}"
    );
    // A replay of a valid delivery after the end: accepted as authentic, changes nothing.
    let replay = signed(&request, &user, now_s(), body_for(&request));
    let (status, answer) = deliver(&run.client, &url, &replay).await;
    assert_eq!((status, &answer["applied"]), (200, &json!(0)), "{answer}");
    let end = run.task(&id).await;
    assert_eq!(end["status"], "completed");
    assert_eq!(
        results(&end)[0]["object_key"],
        results(&views[0])[0]["object_key"]
    );

    let metrics = run
        .client
        .get(format!("{}/metrics", run.base))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let refused = metric_value(
        &metrics,
        "slotd_provider_callbacks_refused_total",
        "handler-refused",
    );
    assert!(refused >= 4.0, "four refusals counted: {refused}");
    run.stop().await.shutdown().await.expect("sim stop");
}

/// The value of the first sample of `name` whose labels contain `label`.
fn metric_value(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .next()
        .unwrap_or(0.0)
}
