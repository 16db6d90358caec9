//! Runway's outcome-unknown rule end to end: a real `slotd serve` process with the built
//! `runway-video.wasm` is SIGKILLed after Runway (the simulator, in this test process, so it
//! outlives slotd) accepted a create and before slotd recorded the task id. Runway has no
//! client-side id and no task list, so after the restart the unit must never be created again
//! automatically: it holds its slot for the model's longest run (× `expected_duration_scale`)
//! and then fails with `submission_unknown`; only a user's retry creates it again.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::Digest;
use slotd_sim::runway::{API_KEY_DEFAULT, RunwayOptions, RunwaySimHandle};

use crate::support::*;

/// The only pool of the test: Runway's `gen4_turbo` at tier 1, one slot.
const POOL: &str = "runway:gen4_turbo";
/// The simulator runs 1000x faster: a 5 s `gen4_turbo` clip takes tens of milliseconds.
const SIM_TIME_SCALE: f64 = 0.001;
/// The handler's `expected_duration_scale`: `gen4_turbo`'s 600 s hold becomes 12 s, longer
/// than the wait for an untouched in-doubt unit (`call_deadline` + 1 s = 6 s), so the hold is
/// seen holding.
const HOLD_SCALE: f64 = 0.02;
const HOLD_MS: i64 = 12_000;
/// How late the simulator answers the first create (after creating the task): the window in
/// which slotd is killed. Below `call_deadline`, so the call itself never times out.
const SLOW_MS: u64 = 3_000;

fn write_config(dir: &Path, sim: &RunwaySimHandle, port: u16) -> PathBuf {
    let plugins = plugins_with(dir, &[("runway-video", built_plugin("runway-video"))]);
    let text = format!(
        r#"
listen = "127.0.0.1:{port}"
database_url = "sqlite://{db}"
plugins_dir = "{plugins}"
object_store = "file://{objects}"

[limits]
call_deadline = "5s"

[scheduler]
tick_interval = "100ms"
min_rest = "1ms"
finalize_lease = "500ms"

[pools."{POOL}"]
max_slots = 1

[handlers.runway-video]
base_url = "{base}"
api_key = "{API_KEY_DEFAULT}"
allowed_hosts = ["{host}"]
tier = 1
expected_duration_scale = {HOLD_SCALE}
read_organization = "false"
"#,
        db = dir.join("slotd.db").display(),
        plugins = plugins.display(),
        objects = dir.join("objects").display(),
        base = sim.base_url(),
        host = sim.addr(),
    );
    let path = dir.join("slotd.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

fn one_shot(prompt: &str) -> Value {
    json!({"payload": {"model": "gen4_turbo", "ratio": "1280:720", "duration": 5,
        "shots": [{"prompt_image": "https://example.com/frame.png", "prompt_text": prompt}]}})
}

async fn get_json(client: &reqwest::Client, url: &str) -> Value {
    client
        .get(url)
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON answer")
}

/// The task's only unit, as stored (`?units=true`).
async fn unit_of(client: &reqwest::Client, base: &str, task: &str) -> Value {
    let v = get_json(client, &format!("{base}/v1/tasks/{task}?units=true")).await;
    v["units"][0].clone()
}

/// `(used, units by status)` of the test's pool.
async fn pool(client: &reqwest::Client, base: &str) -> (u64, Value) {
    let pools = get_json(client, &format!("{base}/v1/pools")).await;
    let p = pools
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == POOL))
        .cloned()
        .unwrap_or_else(|| panic!("no pool {POOL}: {pools}"));
    (p["used"].as_u64().expect("used"), p["units"].clone())
}

/// The stored file of a completed task's unit matches the simulator's bytes for its job.
async fn assert_file_matches(objects: &slotd_server::objects::Objects, view: &Value) {
    let r = &view["results"][0];
    let job = r["provider_task_id"].as_str().expect("provider_task_id");
    let key = r["object_key"].as_str().expect("object_key");
    let bytes = objects.get_bytes(key).await.expect("stored object");
    let sha = hex::encode(sha2::Sha256::digest(&bytes));
    assert_eq!(sha, slotd_sim::runway::file_sha256(job), "{r}");
    assert_eq!(r["sha256"], sha, "{r}");
}

fn spawn(config: &Path, log: &Path) -> Child {
    spawn_slotd(config, log, &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_crash_between_create_and_task_id_holds_then_fails_then_retry_resubmits() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let sim = slotd_sim::runway::spawn(RunwayOptions {
        listen: "127.0.0.1:0".parse().expect("addr"),
        time_scale: SIM_TIME_SCALE,
        long_tail_rate: 0.0,
        slow_first: 1,
        slow_ms: SLOW_MS,
        ..RunwayOptions::default()
    })
    .await
    .expect("Runway simulator");
    let port = free_port();
    let config = write_config(dir.path(), &sim, port);
    let db_url = format!("sqlite://{}", dir.path().join("slotd.db").display());
    let objects_url = format!("file://{}", dir.path().join("objects").display());
    let objects = slotd_server::objects::Objects::open(&objects_url).expect("object store");
    let log = dir.path().join("slotd.log");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();

    let mut child = spawn(&config, &log);
    wait_healthy(&client, &base).await;
    let first = post_task(&client, &base, "runway_video", one_shot("the lost one")).await;

    // Runway created the task; its answer is on its way for SLOW_MS more.
    eventually(
        Duration::from_secs(20),
        "Runway accepted the create",
        async || (sim.stats().creates == 1).then_some(()),
    )
    .await;
    let unit = unit_of(&client, &base, &first).await;
    assert_eq!(unit["status"], "submitted", "{unit}");
    assert!(
        unit["provider_job_id"].is_null(),
        "task id recorded: {unit}"
    );
    assert_eq!(sim.stats().faults.slow, 1, "the answer is still delayed");
    let submitted_at = unit["submitted_at"].as_i64().expect("submitted_at");
    child.kill().expect("SIGKILL slotd");
    child.wait().expect("reap");
    assert_check_clean(&db_url, None, &[(POOL, 1)]).await;

    // Restart (every answer is fast now) and queue a second unit for the same one-slot pool.
    child = spawn(&config, &log);
    wait_healthy(&client, &base).await;
    let second = post_task(&client, &base, "runway_video", one_shot("the waiting one")).await;

    // Through the hold: one create, the slot held by the lost unit, the second one waiting.
    // Each sample reads the lost unit last: if it is still `submitted` then, everything read
    // before was read during the hold (it only leaves `submitted` by failing).
    let mut held_samples = 0;
    let failed = eventually(
        Duration::from_secs(40),
        "the lost unit failed",
        async || {
            let creates = sim.stats().creates;
            let (used, units) = pool(&client, &base).await;
            let waiting = unit_of(&client, &base, &second).await;
            let unit = unit_of(&client, &base, &first).await;
            if unit["status"] == "failed" {
                return Some(unit);
            }
            assert_eq!(unit["status"], "submitted", "{unit}");
            assert_eq!(creates, 1, "created again during the hold");
            assert_eq!(used, 1, "the held slot was released: {units}");
            assert_eq!(waiting["status"], "pending", "{waiting}");
            held_samples += 1;
            None
        },
    )
    .await;
    let failed_at = failed["updated_at"].as_i64().expect("updated_at");
    assert!(
        failed_at >= submitted_at + HOLD_MS,
        "failed {} ms after the create, before the {HOLD_MS} ms hold ended",
        failed_at - submitted_at
    );
    assert!(held_samples > 10, "the hold was seen {held_samples} times");
    eprintln!(
        "held {} ms after the create ({held_samples} samples)",
        failed_at - submitted_at
    );
    let error: Value =
        serde_json::from_str(failed["error"].as_str().expect("error")).expect("json");
    assert_eq!(error["code"], "submission_unknown", "{error}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("retry")),
        "{error}"
    );
    let view = get_json(&client, &format!("{base}/v1/tasks/{first}")).await;
    assert_eq!(view["status"], "failed", "{view}");
    assert_eq!(view["error"]["code"], "submission_unknown", "{view}");

    // The slot goes to the waiting unit (the simulator's second create), which completes.
    let views = wait_all_completed(
        &client,
        &base,
        std::slice::from_ref(&second),
        Duration::from_secs(20),
    )
    .await;
    assert_file_matches(&objects, &views[0]).await;
    assert_eq!(sim.stats().creates, 2);

    // A user's retry resubmits the lost unit on purpose: one more create, and it completes.
    let retried: Value = client
        .post(format!("{base}/v1/tasks/{first}/retry"))
        .send()
        .await
        .expect("retry")
        .json()
        .await
        .expect("json");
    assert_eq!(retried["retried"], 1, "{retried}");
    let views = wait_all_completed(
        &client,
        &base,
        std::slice::from_ref(&first),
        Duration::from_secs(20),
    )
    .await;
    assert_file_matches(&objects, &views[0]).await;
    let stats = sim.stats();
    assert_eq!(stats.creates, 3, "one create per submission: {stats:?}");
    let model = &stats.models["gen4_turbo"];
    assert!(
        model.max_held_seen <= 1,
        "slotd had {} tasks at Runway at once on a one-slot pool",
        model.max_held_seen
    );
    eventually(Duration::from_secs(10), "the slot released", async || {
        (pool(&client, &base).await.0 == 0).then_some(())
    })
    .await;

    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !log_text.contains("panicked"),
        "slotd panicked:\n{log_text}"
    );
    assert_eq!(
        log_text.matches("dailyGenerations").count(),
        1,
        "the operator is told once how to count orphans:\n{log_text}"
    );
    assert_check_clean(&db_url, Some(&objects_url), &[(POOL, 1)]).await;
    child.kill().ok();
    child.wait().ok();
}
