//! PostgreSQL unreachable for a while under a running slotd (a real process; the database cut
//! by a TCP proxy in front of the real server): the API answers 503 with `Retry-After`, the
//! scheduler pauses and resumes by itself, nothing is lost or submitted twice.

use std::time::Duration;

use serde_json::{Value, json};
use slotd_testkit::stub::proxy::TcpProxy;

use crate::kling::{TIME_SCALE, kling_plugins, sim_options, video_payload};
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_outage_is_503_then_resumes() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let db = crate::pg::PgSchema::create().await;
    let mut url = url::Url::parse(&db.url()).expect("database url");
    let target = format!(
        "{}:{}",
        url.host_str().unwrap_or("127.0.0.1"),
        url.port().unwrap_or(5432)
    );
    let proxy = TcpProxy::start(target).await.expect("proxy");
    url.set_port(Some(proxy.port())).expect("port");
    let sim = slotd_sim::kling::start(sim_options(31))
        .await
        .expect("simulator");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let plugins = kling_plugins(dir.path());
    let tick_ms = ((10_000.0 * TIME_SCALE) as u64).max(5);
    let config = dir.path().join("slotd.toml");
    std::fs::write(
        &config,
        format!(
            r#"
listen = "127.0.0.1:{port}"
database_url = "{url}"
plugins_dir = "{plugins}"
object_store = "file://{objects}"
[limits]
call_deadline = "2s"

[scheduler]
tick_interval = "{tick_ms}ms"
min_rest = "2ms"
[pools."kling:video"]
max_slots = 18
[handlers.kling-video]
base_url = "{base}"
access_key = "AK"
secret_key = "SK"
allowed_hosts = ["{host}"]
"#,
            plugins = plugins.display(),
            objects = dir.path().join("objects").display(),
            base = sim.base_url(),
            host = sim.addr(),
        ),
    )
    .expect("config");
    let log = dir.path().join("slotd.log");
    let mut child = spawn_slotd(&config, &log, &[]);
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    wait_healthy(&client, &base).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let r = client
            .post(format!("{base}/v1/tasks/video"))
            .json(&json!({"payload": video_payload(20)}))
            .send()
            .await
            .expect("post");
        assert_eq!(r.status(), 202);
        let v: Value = r.json().await.expect("json");
        ids.push(v["task_id"].as_str().expect("id").to_string());
    }
    eventually(Duration::from_secs(60), "work in flight", async || {
        (sim.stats().creates >= 10).then_some(())
    })
    .await;

    // The database goes away.
    proxy.set_up(false);
    let retry_after = eventually(
        Duration::from_secs(30),
        "a 503 with Retry-After",
        async || {
            let r = client
                .get(format!("{base}/v1/tasks/{}", ids[0]))
                .send()
                .await
                .ok()?;
            if r.status() != 503 {
                return None;
            }
            let ct = r.headers().get("content-type")?.to_str().ok()?.to_string();
            assert!(ct.starts_with("application/problem+json"), "{ct}");
            r.headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap_or_default().to_string())
        },
    )
    .await;
    assert!(!retry_after.is_empty());
    let r = client
        .post(format!("{base}/v1/tasks/video"))
        .json(&json!({"payload": video_payload(1)}))
        .send()
        .await
        .expect("post");
    assert_eq!(
        r.status(),
        503,
        "creating a task without a database is a 503, not a 500"
    );
    // Once a tick has failed, no earlier tick of the pool is still under way (a pool's ticks
    // run one at a time), so from here on nothing may be created at the provider: a create
    // needs its write-ahead marker in the database first.
    let failed_before = wait_tick_failures(&client, &base, 1).await;
    let creates_cut = sim.stats().creates;
    // Let the provider finish what it has while slotd cannot record anything, and the
    // scheduler try (and fail) at least twice more.
    eventually(
        Duration::from_secs(60),
        "provider idle during the outage",
        async || (sim.stats().running == 0).then_some(()),
    )
    .await;
    wait_tick_failures(&client, &base, failed_before + 2).await;
    assert_eq!(
        sim.stats().creates,
        creates_cut,
        "a job was created while the database was cut"
    );
    assert!(
        creates_cut < 40,
        "the outage came too late to test anything"
    );

    // It comes back: the scheduler resumes by itself and everything completes.
    proxy.set_up(true);
    wait_all_completed(&client, &base, &ids, Duration::from_secs(120)).await;
    let stats = sim.stats();
    assert_eq!(stats.creates, 40, "every shot created once");
    assert!(
        stats.creates_by_external_id.values().all(|&n| n == 1),
        "an external_task_id was created twice"
    );
    assert!(stats.max_running <= 18);
    assert_eq!(
        stats.rate_limited_1303, 0,
        "a submit met the account's limit of 20"
    );
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !log_text.contains("panicked"),
        "slotd panicked:\n{log_text}"
    );
    child.kill().ok();
    child.wait().ok();
    let objects = format!("file://{}", dir.path().join("objects").display());
    assert_check_clean(&db.url(), Some(&objects), &[("kling:video", 18)]).await;
}

/// Wait until the scheduler's failed ticks (`slotd_tick_failures_total`, all pools) reach
/// `at_least`; returns the count seen. `/metrics` needs no database.
async fn wait_tick_failures(client: &reqwest::Client, base: &str, at_least: u64) -> u64 {
    eventually(
        Duration::from_secs(60),
        "failed scheduler ticks",
        async || {
            let seen = metric_sum(client, base, "slotd_tick_failures_total").await? as u64;
            (seen >= at_least).then_some(seen)
        },
    )
    .await
}
