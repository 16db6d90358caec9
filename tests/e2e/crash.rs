//! slotd killed (SIGKILL, a real process) in the middle of a run: after restart every unit
//! resumes, no unit is submitted twice, no slot is leaked.

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

fn write_config(
    dir: &Path,
    stub: &slotd_testkit::stub::StubHandle,
    port: u16,
) -> std::path::PathBuf {
    fixture_config_file(
        dir,
        stub,
        port,
        r#"
[limits]
call_deadline = "2s"

[scheduler]
tick_interval = "20ms"
min_rest = "1ms"
finalize_lease = "300ms"
"#,
    )
}

fn spawn(config: &Path, log: &Path) -> Child {
    spawn_slotd(config, log, &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_run_resumes_without_double_submission() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stub =
        slotd_testkit::stub::StubProvider::start(slotd_testkit::stub::StubOptions { limit: 100 })
            .await
            .expect("stub");
    let port = free_port();
    let config = write_config(dir.path(), &stub, port);
    let db_url = format!("sqlite://{}", dir.path().join("slotd.db").display());
    let objects_url = format!("file://{}", dir.path().join("objects").display());
    let log = dir.path().join("slotd.log");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();

    let mut child = spawn(&config, &log);
    wait_healthy(&client, &base).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let body =
            json!({"payload": {"count": 10, "polls": 3}, "idempotency_key": format!("crash-{i}")});
        ids.push(post_task(&client, &base, "fixture", body).await);
    }

    // Kill it three times while work is in flight, each time after more progress.
    for round in 1..=3u32 {
        let target = round * 7;
        eventually(Duration::from_secs(60), "provider progress", async || {
            (stub.stats().creates >= target).then_some(())
        })
        .await;
        child.kill().expect("SIGKILL slotd");
        child.wait().expect("reap");
        assert_check_clean(&db_url, None, &[("fixture", 5)]).await;
        child = spawn(&config, &log);
        wait_healthy(&client, &base).await;
    }

    wait_all_completed(&client, &base, &ids, Duration::from_secs(90)).await;

    let stats = stub.stats();
    assert_eq!(
        stats.creates, 30,
        "every unit created once: {:?}",
        stats.creates_by_key
    );
    assert!(
        stats.creates_by_key.values().all(|&n| n == 1),
        "a unit was submitted twice"
    );
    assert_eq!(stats.duplicate_creates, 0, "a key was sent twice");
    assert!(
        stats.max_in_flight <= 5,
        "provider saw {} in flight",
        stats.max_in_flight
    );
    let pools: Value = client
        .get(format!("{base}/v1/pools"))
        .send()
        .await
        .expect("pools")
        .json()
        .await
        .expect("json");
    let fixture = pools
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "fixture"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(fixture["used"], 0, "slot leaked: {pools}");
    assert_check_clean(&db_url, Some(&objects_url), &[("fixture", 5)]).await;
    child.kill().ok();
    child.wait().ok();
}

/// The Kling path killed repeatedly while units are submitted and others finalizing: every
/// unit completes, each `external_task_id` was created exactly once, nothing stays
/// `finalizing`, and the budget ledger holds one settled row per shot (no reservation lost or
/// doubled by a kill between the submit marker and the submit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kling_killed_mid_run_creates_each_job_once() {
    use crate::kling::{TIME_SCALE, kling_plugins, sim_options, video_payload};
    let dir = tempfile::TempDir::new().expect("tmp");
    let sim = slotd_sim::kling::start(sim_options(11))
        .await
        .expect("simulator");
    let port = free_port();
    let plugins = kling_plugins(dir.path());
    let tick_ms = (10_000.0 * TIME_SCALE) as u64;
    let text = format!(
        r#"
listen = "127.0.0.1:{port}"
database_url = "sqlite://{db}"
plugins_dir = "{plugins}"
object_store = "file://{objects}"

[limits]
call_deadline = "2s"

[scheduler]
tick_interval = "{tick_ms}ms"
min_rest = "2ms"
finalize_lease = "300ms"

[pools."kling:video"]
max_slots = 18

[handlers.kling-video]
base_url = "{base}"
access_key = "AK"
secret_key = "SK"
allowed_hosts = ["{host}"]

# A budget that covers the run: each submit marker reserves in the budget ledger, and kills
# land between reservations and submits too.
[tenants.local]
budget = {{ limit = 1000.0, period = "1d" }}
"#,
        db = dir.path().join("slotd.db").display(),
        plugins = plugins.display(),
        objects = dir.path().join("objects").display(),
        base = sim.base_url(),
        host = sim.addr(),
    );
    let config = dir.path().join("slotd.toml");
    std::fs::write(&config, text).expect("config");
    let db_url = format!("sqlite://{}", dir.path().join("slotd.db").display());
    let objects_url = format!("file://{}", dir.path().join("objects").display());
    let log = dir.path().join("slotd.log");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let mut child = spawn(&config, &log);
    wait_healthy(&client, &base).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            post_task(
                &client,
                &base,
                "video",
                json!({"payload": video_payload(20)}),
            )
            .await,
        );
    }
    for round in 1..=3u64 {
        let target = round * 12;
        eventually(Duration::from_secs(60), "provider progress", async || {
            (sim.stats().creates >= target).then_some(())
        })
        .await;
        child.kill().expect("SIGKILL slotd");
        child.wait().expect("reap");
        assert_check_clean(&db_url, None, &[("kling:video", 18)]).await;
        child = spawn(&config, &log);
        wait_healthy(&client, &base).await;
    }
    let views = wait_all_completed(&client, &base, &ids, Duration::from_secs(120)).await;
    for v in &views {
        for r in v["results"].as_array().expect("results") {
            assert_eq!(r["status"], "completed");
            assert!(r["object_key"].is_string(), "{r}");
        }
    }
    let stats = sim.stats();
    assert_eq!(stats.creates, 60, "every shot created once");
    assert!(
        stats.creates_by_external_id.values().all(|&n| n == 1),
        "an external_task_id was created twice: {:?}",
        stats.creates_by_external_id
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
    // The ledger: one row per shot (each was submitted once), every one settled with the
    // provider's cost (a standard 5-second shot costs 1 unit), nothing left reserved.
    let usage = get_json(&client, &format!("{base}/v1/tenants/local/usage"))
        .await
        .expect("usage");
    assert_eq!(usage["period"]["submissions"], 60, "{usage}");
    assert_eq!(usage["period"]["reserved"], 0.0, "{usage}");
    assert_eq!(usage["period"]["spent"], 60.0, "{usage}");
    assert_check_clean(&db_url, Some(&objects_url), &[("kling:video", 18)]).await;
    child.kill().ok();
    child.wait().ok();
}
