//! Soak: the real `slotd` binary against the Kling simulator with faults on (5xx, malformed
//! answers, failures after acceptance), a few hundred shots, and the process SIGKILLed at
//! random moments. 10 kills by default; `SLOTD_SOAK_KILLS=50` for a long run,
//! `SLOTD_SOAK_SEED` to replay one (the seed is printed).
//!
//! After every kill and restart: the simulator saw each `external_task_id` created at most
//! once, never more than the pool's own limit at once and no 1303 refusal (the pool fits the
//! account). At the end: every unit ended `completed` or `failed` with a reason, none is left
//! `submitted` or `finalizing`, and every stored file's sha256 matches the provider's file.

use std::path::Path;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use sha2::Digest;
use slotd_sim::kling::{SimHandle, SimOptions};

use crate::kling::{kling_plugins, video_payload};
use crate::support::*;

/// The pools' own limits (video, avatar); the simulated account allows [`ACCOUNT_LIMIT`], more
/// than both together, so a slot handed out twice shows as a job the pool does not allow
/// (the simulator counts each kind's peak), not as a refusal the provider makes for slotd.
const POOL_LIMIT: u32 = 18;
const AVATAR_LIMIT: u32 = 1;
const POOLS: [(&str, u32); 2] = [("kling:video", POOL_LIMIT), ("kling:avatar", AVATAR_LIMIT)];
const ACCOUNT_LIMIT: u32 = 24;
/// Simulated Kling time runs 100x faster: a 30 s – 2 min clip takes 0.3–1.2 s, so a kill
/// usually lands while jobs run and downloads stream.
const TIME_SCALE: f64 = 0.01;
const KILLS_DEFAULT: usize = 10;
const SHOTS_PER_TASK: usize = 30;

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn write_config(dir: &Path, sim: &SimHandle, port: u16) -> std::path::PathBuf {
    let plugins = kling_plugins(dir);
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
finalize_lease = "500ms"

[pools."kling:video"]
max_slots = {POOL_LIMIT}

[pools."kling:avatar"]
max_slots = {AVATAR_LIMIT}

[handlers.kling-video]
base_url = "{base}"
access_key = "AK"
secret_key = "SK"
allowed_hosts = ["{host}"]

[handlers.kling-avatar]
base_url = "{base}"
access_key = "AK"
secret_key = "SK"
allowed_hosts = ["{host}"]
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

/// What must hold at every instant of the run, checked after each kill.
fn assert_provider_invariants(sim: &SimHandle, when: &str) {
    let stats = sim.stats();
    let twice: Vec<_> = stats
        .creates_by_external_id
        .iter()
        .filter(|(_, n)| **n > 1)
        .collect();
    assert!(
        twice.is_empty(),
        "{when}: external_task_id created more than once: {twice:?}"
    );
    // Video shots are text2video jobs (the video pool); voices and elements share the
    // avatar pool, so each of their kinds alone stays within it.
    let peak = |kind: &str| {
        stats
            .max_running_by_kind
            .get(kind)
            .copied()
            .unwrap_or_default()
    };
    assert!(
        peak("text2video") <= POOL_LIMIT,
        "{when}: the provider ran {} video jobs at once; the pool allows {POOL_LIMIT}",
        peak("text2video")
    );
    for kind in ["custom-voices", "advanced-custom-elements"] {
        assert!(
            peak(kind) <= AVATAR_LIMIT,
            "{when}: the provider ran {} {kind} jobs at once; the avatar pool allows \
             {AVATAR_LIMIT}",
            peak(kind)
        );
    }
    assert!(
        stats.max_running <= POOL_LIMIT + AVATAR_LIMIT,
        "{when}: the provider saw {} jobs at once; the pools allow {}",
        stats.max_running,
        POOL_LIMIT + AVATAR_LIMIT
    );
    assert_eq!(
        stats.rate_limited_1303, 0,
        "{when}: the provider refused a submit for lack of capacity"
    );
}

async fn task_view(client: &reqwest::Client, base: &str, id: &str) -> Option<Value> {
    client
        .get(format!("{base}/v1/tasks/{id}?units=true"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_random_moments_under_provider_faults() {
    let kills = env_number("SLOTD_SOAK_KILLS").map_or(KILLS_DEFAULT, |n| n as usize);
    let seed = env_number("SLOTD_SOAK_SEED").unwrap_or(20261201);
    eprintln!("soak: {kills} kills, seed {seed} (SLOTD_SOAK_SEED={seed} replays it)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);

    let sim = slotd_sim::kling::start(SimOptions {
        listen: "127.0.0.1:0".parse().expect("addr"),
        concurrency: ACCOUNT_LIMIT,
        time_scale: TIME_SCALE,
        access_key: "AK".into(),
        secret_key: "SK".into(),
        seed,
        fail_5xx_rate: 0.05,
        malformed_rate: 0.03,
        failure_after_accept_rate: 0.05,
        ..SimOptions::default()
    })
    .await
    .expect("simulator");
    let dir = tempfile::TempDir::new().expect("tmp");
    let port = free_port();
    let config = write_config(dir.path(), &sim, port);
    let log = dir.path().join("slotd.log");
    let database_url = format!("sqlite://{}", dir.path().join("slotd.db").display());
    let objects_url = format!("file://{}", dir.path().join("objects").display());
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();

    let mut child = spawn_slotd(&config, &log, &[]);
    wait_healthy(&client, &base).await;
    // A few hundred shots (more for a long run, so kills keep landing mid-run), and two
    // avatar clones (two provider stages each).
    let tasks = kills.max(10);
    let mut ids = Vec::new();
    for _ in 0..tasks {
        ids.push(
            post_task(
                &client,
                &base,
                "video",
                json!({"payload": video_payload(SHOTS_PER_TASK)}),
            )
            .await,
        );
    }
    for i in 0..2 {
        ids.push(
            post_task(
                &client,
                &base,
                "avatar_clone",
                json!({"payload": {
                    "voice_name": format!("voice {i}"),
                    "voice_url": "https://example.com/voice.mp3",
                    "element_name": format!("element {i}"),
                    "element_description": "a presenter",
                    "frontal_image": "https://example.com/front.png",
                    "refer_images": ["https://example.com/left.png"],
                }}),
            )
            .await,
        );
    }

    let started = Instant::now();
    for kill in 1..=kills {
        // A random moment: between 0.2 and 1.5 s of the process's life.
        let wait = Duration::from_millis(rng.random_range(200..1_500));
        tokio::time::sleep(wait).await;
        child.kill().expect("SIGKILL slotd");
        child.wait().expect("reap slotd");
        assert_provider_invariants(&sim, &format!("after kill {kill}"));
        child = spawn_slotd(&config, &log, &[]);
        wait_healthy(&client, &base).await;
        assert_provider_invariants(&sim, &format!("after restart {kill}"));
        // The database's own invariants, online while the new process works.
        assert_check_clean(&database_url, None, &POOLS).await;
    }
    eprintln!(
        "soak: {kills} kills done after {:.1}s; {} creates so far",
        started.elapsed().as_secs_f64(),
        sim.stats().creates
    );

    // Everything ends, each unit completed or failed with a reason.
    let views = eventually(
        Duration::from_secs(300),
        "every task terminal",
        async || {
            let mut out = Vec::new();
            for id in &ids {
                let v = task_view(&client, &base, id).await?;
                if !matches!(v["status"].as_str(), Some("completed" | "failed")) {
                    return None;
                }
                out.push(v);
            }
            Some(out)
        },
    )
    .await;
    child.kill().ok();
    child.wait().ok();
    assert_provider_invariants(&sim, "at the end");
    assert_check_clean(&database_url, Some(&objects_url), &POOLS).await;

    let objects = slotd_server::objects::Objects::open(&format!(
        "file://{}",
        dir.path().join("objects").display()
    ))
    .expect("object store");
    let (mut completed, mut failed, mut files) = (0, 0, 0);
    for v in &views {
        for u in v["units"].as_array().expect("units") {
            let status = u["status"].as_str().unwrap_or_default();
            assert!(
                !matches!(status, "submitted" | "finalizing" | "pending" | "succeeded"),
                "unit left {status}: {u}"
            );
        }
        for r in v["results"].as_array().expect("results") {
            match r["status"].as_str() {
                Some("completed") => {
                    completed += 1;
                    let Some(key) = r["object_key"].as_str() else {
                        continue; // avatar clones store no file
                    };
                    let Some(job) = r["provider_task_id"].as_str() else {
                        panic!("completed without a provider task id: {r}");
                    };
                    let bytes = objects.get_bytes(key).await.expect("stored object");
                    let sha = hex::encode(sha2::Sha256::digest(&bytes));
                    assert_eq!(
                        sha,
                        slotd_sim::kling::file_sha256(job),
                        "stored file differs: {r}"
                    );
                    assert_eq!(r["sha256"], sha, "recorded sha256 differs: {r}");
                    files += 1;
                }
                Some("failed") => {
                    failed += 1;
                    assert!(
                        r["error"]["message"]
                            .as_str()
                            .is_some_and(|m| !m.is_empty()),
                        "unit failed without a reason: {r}"
                    );
                }
                other => panic!("unit ended {other:?}: {r}"),
            }
        }
    }
    let stats = sim.stats();
    // The video shots: one stage each (the avatar clones make two jobs per unit).
    let (units, retries, never) = unit_log_counts(&database_url, "kling:video").await;
    let video_creates = stats
        .creates_by_kind
        .get("text2video")
        .copied()
        .unwrap_or_default();
    eprintln!(
        "soak: {completed} completed ({files} files checked), {failed} failed; video: {units} \
         units, {never} failed before any acceptance, {video_creates} creates; provider: {} \
         creates, max {} at once, faults {:?}",
        stats.creates, stats.max_running, stats.faults
    );
    assert_eq!(
        video_creates as i64,
        units + retries - never,
        "the provider's creates are the units ({units}) plus recorded retries ({retries}) less \
         units that failed before any acceptance ({never}): a resubmit under a new key shows"
    );
    assert!(completed > 0, "nothing completed");
    assert!(
        stats.faults.http_5xx > 0 && stats.faults.malformed > 0,
        "faults were injected: {:?}",
        stats.faults
    );
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !log_text.contains("panicked"),
        "slotd panicked:\n{log_text}"
    );
}
