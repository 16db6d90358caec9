//! Completion webhooks with the real binary: the task ends while the receiver is
//! down, slotd is killed (SIGKILL) before any delivery could succeed, the receiver comes up,
//! slotd restarts, and the receiver gets the task's end: one `webhook-id`, signed with the
//! configured secret (possibly more than once), and the attempts are visible through the API.
//! A `callback_url` on a private address is refused at the door.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::support::*;

/// `whsec_` + base64 of a 24-byte key.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn write_config(
    dir: &Path,
    stub: &slotd_testkit::stub::StubHandle,
    port: u16,
) -> std::path::PathBuf {
    let sections = format!(
        r#"
[scheduler]
tick_interval = "50ms"
min_rest = "1ms"

[webhooks]
secret = "{SECRET}"
allow_private = true
retry_base = "100ms"
retry_max = "300ms"
timeout = "2s"
"#
    );
    fixture_config_file(dir, stub, port, &sections)
}

/// What the receiver got: each request's headers and body.
type Received = Arc<Mutex<Vec<(HeaderMap, String)>>>;

async fn receiver(port: u16, got: Received) -> tokio::task::JoinHandle<()> {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: String| {
            let got = got.clone();
            async move {
                got.lock().expect("lock").push((headers, body));
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind the receiver");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_between_the_end_and_the_delivery_loses_nothing() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stub =
        slotd_testkit::stub::StubProvider::start(slotd_testkit::stub::StubOptions { limit: 100 })
            .await
            .expect("stub");
    let port = free_port();
    let hook_port = free_port();
    let config = write_config(dir.path(), &stub, port);
    let log = dir.path().join("slotd.log");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();

    let mut child = spawn_slotd(&config, &log, &[]);
    wait_healthy(&client, &base).await;
    // The receiver is down: its port answers nothing.
    let body = json!({
        "payload": {"count": 3, "polls": 1},
        "callback_url": format!("http://127.0.0.1:{hook_port}/hook"),
    });
    let id = post_task(&client, &base, "fixture", body).await;
    wait_all_completed(
        &client,
        &base,
        std::slice::from_ref(&id),
        Duration::from_secs(60),
    )
    .await;
    let hooks = format!("{base}/v1/tasks/{id}/webhooks");
    // At least one attempt failed: the delivery is queued and retrying.
    eventually(Duration::from_secs(30), "a failed attempt", async || {
        let v = get_json(&client, &hooks).await?;
        let d = v["deliveries"].as_array()?.first()?.clone();
        (d["attempts_made"].as_i64()? >= 1 && d["status"] == "pending").then_some(())
    })
    .await;
    child.kill().expect("SIGKILL slotd");
    child.wait().expect("reap");

    let got: Received = Arc::default();
    let server = receiver(hook_port, got.clone()).await;
    let mut child = spawn_slotd(&config, &log, &[]);
    wait_healthy(&client, &base).await;
    eventually(Duration::from_secs(30), "the delivery", async || {
        (!got.lock().ok()?.is_empty()).then_some(())
    })
    .await;
    let view: Value = eventually(Duration::from_secs(30), "recorded delivered", async || {
        let v = get_json(&client, &hooks).await?;
        (v["deliveries"][0]["status"] == "delivered").then_some(v)
    })
    .await;
    child.kill().ok();
    child.wait().ok();
    server.abort();

    let received = got.lock().expect("lock").clone();
    let ids: std::collections::BTreeSet<String> = received
        .iter()
        .filter_map(|(h, _)| h.get("webhook-id")?.to_str().ok().map(str::to_string))
        .collect();
    assert_eq!(
        ids.len(),
        1,
        "one webhook-id, however many deliveries: {ids:?}"
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    for (headers, body) in &received {
        let header = |n: &str| {
            headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let ts: i64 = header("webhook-timestamp").parse().expect("timestamp");
        slotd_core::standard_webhooks::verify(
            SECRET,
            &header("webhook-id"),
            ts,
            body.as_bytes(),
            &header("webhook-signature"),
            now,
        )
        .expect("a valid signature");
        let v: Value = serde_json::from_str(body).expect("json body");
        assert_eq!(v["type"], "task.completed");
        assert_eq!(v["data"]["task_id"], id.as_str());
        assert_eq!(v["data"]["status"], "completed");
    }
    let d = &view["deliveries"][0];
    let attempts = d["attempts"].as_array().expect("attempts");
    assert!(attempts.len() >= 2, "{view}");
    assert!(attempts[0]["error"].is_string(), "{view}");
    assert_eq!(attempts.last().expect("last")["status"], 200);
}

#[tokio::test]
async fn a_private_callback_url_is_refused_at_the_door() {
    let m = Manual::start(1, 10).await;
    for url in [
        "http://127.0.0.1:9/hook",
        "http://10.0.0.5/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hook",
        "http://localhost/hook",
    ] {
        let (status, body) = api_call(
            &m.services,
            "POST",
            "/v1/tasks/fixture",
            Some(json!({"payload": {"count": 1}, "callback_url": url})),
        )
        .await;
        assert_eq!(status, 422, "{url}: {body}");
        assert!(
            body["detail"]
                .as_str()
                .is_some_and(|d| d.contains("allow_private")),
            "{body}"
        );
    }
    // Nothing was stored for them.
    let (_, list) = api_call(&m.services, "GET", "/v1/tasks", None).await;
    assert_eq!(list["tasks"].as_array().map(Vec::len), Some(0), "{list}");
    // A public target is taken (its delivery comes when the task ends).
    let id = m
        .submit_body(json!({"payload": {"count": 1}, "callback_url": "https://example.com/hook"}))
        .await;
    m.run_until(&["fixture"], 100, async |m| {
        m.task(&id).await["status"] == "completed"
    })
    .await;
    m.check().await;
}
