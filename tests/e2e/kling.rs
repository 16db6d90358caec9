//! Kling end to end: the real simulator over HTTP, the real Kling handlers, the real scheduler
//! loops, finalization into the local object store.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use sha2::Digest;
use slotd_core::config::{Config, HandlerConfig, PoolConfig, SchedulerConfig, Secret};
use slotd_sim::kling::{SimHandle, SimOptions};

use crate::support::*;

/// Simulated Kling time runs 500x faster: a 30 s – 2 min clip takes 60–240 ms.
pub const TIME_SCALE: f64 = 0.002;

/// Today's builds of the two Kling handlers.
pub fn kling_builds() -> Vec<Component> {
    ["kling-video", "kling-avatar"]
        .into_iter()
        .map(|name| (name, built_plugin(name)))
        .collect()
}

/// `<repo>/tests/fixtures/contract-1.0/<file>`: a Kling component built against contract 1.0.0,
/// kept as a binary.
pub fn contract_1_0(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/contract-1.0")
        .join(file)
}

/// `dir/plugins` holding today's Kling handlers.
pub fn kling_plugins(dir: &Path) -> PathBuf {
    plugins_with(dir, &kling_builds())
}

pub fn kling_config(dir: &Path, sim: &SimHandle, video_slots: u32) -> Config {
    kling_config_with(dir, sim, video_slots, &kling_builds())
}

/// [`kling_config`] loading `components` (the Kling handlers among them are configured for
/// `sim`).
pub fn kling_config_with(
    dir: &Path,
    sim: &SimHandle,
    video_slots: u32,
    components: &[Component],
) -> Config {
    let mut c = Config {
        database_url: format!("sqlite://{}", dir.join("slotd.db").display()),
        plugins_dir: plugins_with(dir, components),
        object_store: format!("file://{}", dir.join("objects").display()),
        scheduler: SchedulerConfig::scaled_to(Duration::from_secs_f64(10.0 * TIME_SCALE)),
        ..Config::default()
    };
    c.scheduler.min_rest = Duration::from_millis(2);
    // Short deadline: an in-doubt unit waits out the call that may still be creating it.
    c.limits.call_deadline = Duration::from_secs(2);
    c.pools
        .insert("kling:video".into(), PoolConfig::slots(video_slots));
    c.pools.insert("kling:avatar".into(), PoolConfig::slots(2));
    for name in ["kling-video", "kling-avatar"] {
        let mut h = HandlerConfig::default();
        h.settings
            .insert("base_url".into(), sim.base_url().to_string());
        h.settings.insert("access_key".into(), "AK".into());
        h.secrets.insert("secret_key".into(), Secret::new("SK"));
        h.allowed_hosts.push(sim.addr().to_string());
        c.handlers.insert(name.into(), h);
    }
    c
}

pub fn sim_options(seed: u64) -> SimOptions {
    SimOptions {
        listen: "127.0.0.1:0".parse().expect("addr"),
        concurrency: 20,
        time_scale: TIME_SCALE,
        access_key: "AK".into(),
        secret_key: "SK".into(),
        seed,
        ..SimOptions::default()
    }
}

pub fn video_payload(shots: usize) -> Value {
    let shots: Vec<Value> = (0..shots)
        .map(|i| json!({"prompt": format!("shot {i}: a cat walks on a wall")}))
        .collect();
    json!({"model_name": "kling-v1-6", "mode": "std", "duration": "5", "aspect_ratio": "16:9", "shots": shots})
}

/// An `avatar_clone` payload: a voice cloned, then an element carrying it.
pub fn avatar_payload() -> Value {
    json!({"voice_name": "Mia", "voice_url": "https://example.com/v.mp3", "element_name": "Mia",
           "element_description": "presenter", "frontal_image": "https://example.com/f.png",
           "refer_images": ["https://example.com/l.png"]})
}

/// A running slotd (real loops, real clock) against a simulator.
pub struct Run {
    /// `slotd check` when the run is dropped (first field: it runs before the rest drops).
    _check: CheckOnDrop,
    pub base: String,
    pub client: reqwest::Client,
    pub sim: SimHandle,
    pub services: slotd_server::services::Services,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl Run {
    pub async fn start(opts: SimOptions, video_slots: u32, callbacks: bool) -> Run {
        Run::start_with(opts, video_slots, callbacks, |_| {}).await
    }

    /// [`Run::start`] with a last adjustment of the config (e.g. a handler secret).
    pub async fn start_with(
        opts: SimOptions,
        video_slots: u32,
        callbacks: bool,
        adjust: impl FnOnce(&mut Config),
    ) -> Run {
        Run::start_loading(opts, video_slots, callbacks, &kling_builds(), adjust).await
    }

    /// [`Run::start_with`] loading `components` instead of today's Kling builds (both Kling
    /// handlers must be among them; `adjust` configures any other).
    pub async fn start_loading(
        opts: SimOptions,
        video_slots: u32,
        callbacks: bool,
        components: &[Component],
        adjust: impl FnOnce(&mut Config),
    ) -> Run {
        let dir = tempfile::TempDir::new().expect("tmp");
        let sim = slotd_sim::kling::start(opts).await.expect("simulator");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut config = kling_config_with(dir.path(), &sim, video_slots, components);
        if callbacks {
            config.public_url = Some(format!("http://{addr}"));
        }
        adjust(&mut config);
        let services = slotd_server::app::build_with_clock(config, system_clock())
            .await
            .expect("build");
        assert!(
            services.registry.for_type("video").is_some(),
            "kling-video must load"
        );
        assert!(
            services.registry.for_type("avatar_clone").is_some(),
            "kling-avatar must load"
        );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(slotd_server::run_with(
            services.clone(),
            Some(listener),
            async move {
                rx.await.ok();
            },
        ));
        Run {
            base: format!("http://{addr}"),
            _check: CheckOnDrop::for_services(&services),
            client: reqwest::Client::new(),
            sim,
            services,
            stop: Some(tx),
            server: Some(server),
            _dir: dir,
        }
    }

    pub async fn submit(&self, ty: &str, payload: Value) -> String {
        let r = self
            .client
            .post(format!("{}/v1/tasks/{ty}", self.base))
            .json(&json!({"payload": payload}))
            .send()
            .await
            .expect("post");
        let status = r.status();
        let v: Value = r.json().await.expect("json");
        assert_eq!(status, 202, "{v}");
        v["task_id"].as_str().expect("id").to_string()
    }

    pub async fn task(&self, id: &str) -> Value {
        self.client
            .get(format!("{}/v1/tasks/{id}", self.base))
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json")
    }

    /// Wait until every task is terminal; returns their views.
    pub async fn wait_terminal(&self, ids: &[String], deadline: Duration) -> Vec<Value> {
        tasks_terminal(&self.client, &self.base, ids, deadline).await
    }

    /// Audit the database and object store with `slotd check` (online, as an operator
    /// would), then stop slotd.
    pub async fn stop(mut self) -> SimHandle {
        assert_services_check_clean(&self.services).await;
        if let Some(s) = self.stop.take() {
            s.send(()).ok();
        }
        if let Some(h) = self.server.take() {
            h.await.expect("join").expect("slotd stopped cleanly");
        }
        self.sim
    }
}

/// Every completed unit's stored file has the provider's bytes for its job (both simulators
/// serve the same deterministic content per job id) and the recorded sha256 and size; returns
/// how many were checked.
pub async fn check_stored_files(run: &Run, views: &[Value]) -> usize {
    let mut checked = 0;
    for v in views {
        for r in v["results"].as_array().expect("results") {
            if r["status"] != "completed" {
                continue;
            }
            let job = r["provider_task_id"].as_str().expect("provider_task_id");
            let key = r["object_key"].as_str().expect("object_key");
            let bytes = run
                .services
                .objects
                .get_bytes(key)
                .await
                .expect("stored object");
            let sha = hex::encode(sha2::Sha256::digest(&bytes));
            assert_eq!(
                sha,
                slotd_sim::kling::file_sha256(job),
                "stored file differs from the provider's"
            );
            assert_eq!(
                r["sha256"], sha,
                "recorded sha256 differs from the stored file"
            );
            assert_eq!(r["bytes"].as_u64(), Some(bytes.len() as u64));
            checked += 1;
        }
    }
    checked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_shots_on_a_pool_of_18() {
    let run = Run::start(sim_options(1), 18, false).await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(run.submit("video", video_payload(20)).await);
    }
    let views = run.wait_terminal(&ids, Duration::from_secs(120)).await;
    for v in &views {
        assert_eq!(v["status"], "completed", "{v}");
    }
    assert_eq!(check_stored_files(&run, &views).await, 100);
    let stats = run.sim.stats();
    assert!(
        stats.max_running <= 18,
        "simulator saw {} at once",
        stats.max_running
    );
    assert_eq!(stats.rate_limited_1303, 0);
    assert_eq!(stats.validation_refusals, 0);
    assert_eq!(stats.auth_refusals, 0);
    assert_eq!(stats.creates, 100);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misconfigured_pool_gets_1303_but_nothing_fails() {
    let run = Run::start(sim_options(2), 25, false).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(run.submit("video", video_payload(20)).await);
    }
    let views = run.wait_terminal(&ids, Duration::from_secs(120)).await;
    for v in &views {
        assert_eq!(v["status"], "completed", "{v}");
    }
    let stats = run.sim.stats();
    assert!(
        stats.rate_limited_1303 > 0,
        "a pool of 25 on an account of 20 must meet 1303"
    );
    // The refusals came from a full account: it ran its 20 (the pool's 25 is held by the
    // replayed slot peaks of `slotd check` when the run ends).
    assert_eq!(stats.max_running, 20);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avatar_clone_carries_the_voice_into_the_element() {
    let run = Run::start(sim_options(3), 18, false).await;
    let id = run.submit("avatar_clone", avatar_payload()).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    let r = &views[0]["results"][0];
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    let voice = r["voice_id"].as_str().expect("voice_id").to_string();
    assert!(
        r["element_id"].is_string() || r["element_id"].is_number(),
        "{r}"
    );
    let stats = run.sim.stats();
    assert!(
        stats.element_voice_ids.values().any(|v| *v == voice),
        "element request did not carry {voice}"
    );
    assert_eq!(stats.creates_by_kind.get("custom-voices").copied(), Some(1));
    assert_eq!(
        stats
            .creates_by_kind
            .get("advanced-custom-elements")
            .copied(),
        Some(1)
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_faults_end_in_completion_or_a_recorded_reason() {
    let mut opts = sim_options(4);
    opts.fail_5xx_rate = 0.10;
    opts.malformed_rate = 0.05;
    let run = Run::start(opts, 18, false).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        ids.push(run.submit("video", video_payload(20)).await);
    }
    let views = run.wait_terminal(&ids, Duration::from_secs(180)).await;
    let mut completed = 0;
    for v in &views {
        for r in v["results"].as_array().expect("results") {
            match r["status"].as_str() {
                Some("completed") => completed += 1,
                Some("failed") => assert!(
                    r["error"]["message"].is_string(),
                    "failed without a reason: {r}"
                ),
                other => panic!("unit ended {other:?}"),
            }
        }
    }
    assert!(completed > 0);
    let stats = run.sim.stats();
    assert!(
        stats.faults.http_5xx > 0 && stats.faults.malformed > 0,
        "faults were injected: {:?}",
        stats.faults
    );
    assert!(stats.max_running <= 18);
    assert_eq!(
        stats.rate_limited_1303, 0,
        "a submit met the account's limit of 20"
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_after_acceptance_is_recorded_and_retry_resubmits_only_it() {
    let mut opts = sim_options(5);
    opts.failure_after_accept_rate = 0.3;
    let run = Run::start(opts, 18, false).await;
    let id = run.submit("video", video_payload(12)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    let failed: Vec<&Value> = views[0]["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter(|r| r["status"] == "failed")
        .collect();
    assert!(
        !failed.is_empty(),
        "seed 5 at 30% fails some units: {}",
        views[0]
    );
    assert_eq!(views[0]["status"], "failed");
    for r in &failed {
        assert!(
            r["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{r}"
        );
    }
    let kept = views[0]["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter(|r| r["status"] == "completed" && r["object_key"].is_string())
        .count();
    assert_eq!(kept + failed.len(), 12, "the others' results are kept");
    let creates_before = run.sim.stats().creates;
    let r: Value = run
        .client
        .post(format!("{}/v1/tasks/{id}/retry", run.base))
        .send()
        .await
        .expect("retry")
        .json()
        .await
        .expect("json");
    assert_eq!(r["retried"].as_u64(), Some(failed.len() as u64), "{r}");
    run.wait_terminal(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    let creates_after = run.sim.stats().creates;
    assert_eq!(
        creates_after - creates_before,
        failed.len() as u64,
        "retry resubmits only the failed units"
    );
    run.stop().await;
}

/// The same workload twice: polling only, then with callbacks. With callbacks the host must
/// have applied them (most shots end by callback, none refused) and the provider must see at
/// most half the queries polling needs. Either way, no task is queried sooner than the
/// handler's pace (5 s, scaled) after its create or its previous query (counted by the
/// simulator).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_need_fewer_queries_than_polling() {
    // Both counts follow the timing: under a browser or schemathesis beside it on two cores,
    // polling's list queries batched more units (8–10 queries, 14–17 alone) and callbacks
    // came after more polls were due (5–8 queries, 2–3 alone), so the ratio is measured alone.
    let _quiet = QUIET.lock().await;
    const SHOTS: usize = 40;
    let mut queries = Vec::new();
    for callbacks in [false, true] {
        let run = Run::start(sim_options(6), 18, callbacks).await;
        let mut ids = Vec::new();
        for _ in 0..2 {
            ids.push(run.submit("video", video_payload(SHOTS / 2)).await);
        }
        let views = run.wait_terminal(&ids, Duration::from_secs(120)).await;
        for v in &views {
            assert_eq!(v["status"], "completed", "{v}");
        }
        // Shots whose job's end the host learnt from a callback (the event log says so).
        let mut ended_by_callback = 0;
        for id in &ids {
            let events = run.services.store.unit_events(id).await.expect("events");
            ended_by_callback += events
                .iter()
                .filter(|e| e.from_status.as_deref() == Some("submitted"))
                .filter(|e| e.to_status == "succeeded")
                .filter(|e| e.detail.as_deref().is_some_and(|d| d.contains("callback")))
                .count();
        }
        let stats = run.stop().await.stats();
        if callbacks {
            assert!(stats.callbacks_sent > 0);
            assert_eq!(
                stats.callbacks_rejected, 0,
                "slotd refused a genuine callback"
            );
            assert!(
                ended_by_callback * 2 > SHOTS,
                "only {ended_by_callback} of {SHOTS} shots ended by callback"
            );
        } else {
            assert_eq!(ended_by_callback, 0, "callbacks without a public URL");
        }
        assert_eq!(
            stats.single_reads_too_soon, 0,
            "queries of a task sooner than its pace; callbacks {callbacks}"
        );
        queries.push(stats.single_queries + stats.list_queries);
    }
    eprintln!(
        "provider queries: polling only {}, with callbacks {}",
        queries[0], queries[1]
    );
    assert!(
        queries[1] * 2 <= queries[0],
        "callbacks {} vs polling {} queries: not even half",
        queries[1],
        queries[0]
    );
}
