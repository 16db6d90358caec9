//! Pika through fal end to end: the real fal queue simulator (`slotd_sim::fal`) over HTTP, the
//! built `fal-video` component (contract 1.4: a pool per model, the fal key inserted by the
//! host, webhooks verified against the simulator's published Ed25519 keys, jobs fal holds
//! `IN_QUEUE` reported to the host), the real scheduler loops, finalization into the local
//! object store. Every test ends with `slotd check` on its database and objects.
//!
//! This file holds the harness ([`Run`]), the throughput test and the held-but-queued test;
//! webhooks are in `fal_webhooks`, cancel and the lost submit answer in `fal_cancel`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use slotd_core::config::{Config, HandlerConfig, PoolConfig, SchedulerConfig, Secret};
use slotd_sim::fal::{FalOptions, FalSimHandle, KEY_DEFAULT};

use crate::support::*;

/// Simulated fal time runs 100x faster: a 5 s 720p Pika clip takes well under a second.
pub const TIME_SCALE: f64 = 0.01;
/// The model every test uses, and its pool.
pub const MODEL: &str = "fal-ai/pika/v2.2/text-to-video";
pub const POOL: &str = "fal:fal-ai/pika/v2.2/text-to-video";
/// The task type and the handler.
pub const TASK_TYPE: &str = "fal_video";
pub const HANDLER: &str = "fal-video";
/// The simulator's seed: its webhook keys derive from it ([`signer`]).
pub const SEED: u64 = 25;

/// A simulator 100x faster than fal, no long tail, its default account (8 at once).
pub fn sim_options() -> FalOptions {
    FalOptions {
        listen: "127.0.0.1:0".parse().expect("addr"),
        time_scale: TIME_SCALE,
        long_tail_rate: 0.0,
        seed: SEED,
        ..FalOptions::default()
    }
}

/// The simulator's webhook signer, rebuilt from its seed (its keys are not secrets).
pub fn signer() -> slotd_sim::fal::webhook::Signer {
    slotd_sim::fal::webhook::Signer::from_seed(SEED)
}

/// `shots` Pika 2.2 text-to-video shots, each named by `tag` and its index.
pub fn payload(tag: &str, shots: usize) -> Value {
    let shots: Vec<Value> = (0..shots)
        .map(|i| {
            json!({"prompt": format!("{tag} shot {i}: a paper boat drifts down a gutter"),
                   "duration": 5, "resolution": "720p", "aspect_ratio": "16:9", "seed": i})
        })
        .collect();
    json!({"model": MODEL, "shots": shots})
}

/// A plugins directory holding only `fal-video.wasm`.
pub fn fal_plugins(dir: &Path) -> PathBuf {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugins dir");
    std::fs::copy(
        built_plugin("fal_video"),
        plugins.join(format!("{HANDLER}.wasm")),
    )
    .expect("copy fal-video.wasm");
    plugins
}

/// `[handlers.fal-video]` pointing every fal host (queue, history, keys) at `sim`, with the
/// key as the secret `api_key` and poll hints scaled like the simulator.
pub fn handler_config(sim: &FalSimHandle, key: &str) -> HandlerConfig {
    let mut h = HandlerConfig::default();
    for (k, v) in [
        ("base_url", sim.base_url().to_string()),
        ("history_url", sim.base_url().to_string()),
        ("jwks_url", sim.jwks_url()),
        ("concurrency", "4".to_string()),
        ("expected_duration_scale", TIME_SCALE.to_string()),
    ] {
        h.settings.insert(k.into(), v);
    }
    h.secrets.insert("api_key".into(), Secret::new(key));
    h.allowed_hosts.push(sim.addr().to_string());
    h
}

/// A config for an in-process slotd against `sim`: the model's pool at 4 slots, timings scaled
/// to the simulator.
pub fn fal_config(dir: &Path, sim: &FalSimHandle) -> Config {
    let mut c = Config {
        database_url: format!("sqlite://{}", dir.join("slotd.db").display()),
        plugins_dir: fal_plugins(dir),
        object_store: format!("file://{}", dir.join("objects").display()),
        scheduler: SchedulerConfig::scaled_to(Duration::from_secs_f64(10.0 * TIME_SCALE)),
        ..Config::default()
    };
    c.scheduler.min_rest = Duration::from_millis(2);
    c.limits.call_deadline = Duration::from_secs(2);
    c.pools.insert(
        POOL.into(),
        PoolConfig {
            max_slots: Some(4),
            ..PoolConfig::default()
        },
    );
    c.handlers
        .insert(HANDLER.into(), handler_config(sim, KEY_DEFAULT));
    c
}

/// A running slotd (real loops, real clock, a public URL so fal's webhooks reach it) against
/// a fal simulator.
pub struct Run {
    /// `slotd check` when the run is dropped (first field: it runs before the rest drops).
    _check: CheckOnDrop,
    pub base: String,
    pub client: reqwest::Client,
    pub sim: FalSimHandle,
    pub services: slotd_server::services::Services,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    dir: tempfile::TempDir,
}

impl Run {
    /// slotd with `fal-video` against a simulator started with `opts`; `adjust` changes the
    /// config last.
    pub async fn start(opts: FalOptions, adjust: impl FnOnce(&mut Config, &Path)) -> Run {
        let dir = tempfile::TempDir::new().expect("tmp");
        let sim = slotd_sim::fal::spawn(opts).await.expect("simulator");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut config = fal_config(dir.path(), &sim);
        config.public_url = Some(format!("http://{addr}"));
        adjust(&mut config, dir.path());
        let services = slotd_server::app::build_with_clock(config, system_clock())
            .await
            .expect("build");
        assert!(
            services.registry.for_type(TASK_TYPE).is_some(),
            "fal-video must load"
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
            dir,
        }
    }

    /// The run's temporary directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub async fn submit(&self, payload: Value) -> String {
        post_task(
            &self.client,
            &self.base,
            TASK_TYPE,
            json!({ "payload": payload }),
        )
        .await
    }

    pub async fn get(&self, path: &str) -> Value {
        self.client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json")
    }

    pub async fn task(&self, id: &str) -> Value {
        self.get(&format!("/v1/tasks/{id}")).await
    }

    /// `POST /v1/tasks/{id}/cancel`, answered 200.
    pub async fn cancel(&self, id: &str) -> Value {
        let r = self
            .client
            .post(format!("{}/v1/tasks/{id}/cancel", self.base))
            .send()
            .await
            .expect("cancel");
        assert_eq!(r.status(), 200);
        r.json().await.expect("json")
    }

    /// The pool's entry in `GET /v1/pools`.
    pub async fn pool(&self) -> Value {
        let pools = self.get("/v1/pools").await;
        pools
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == POOL).cloned())
            .unwrap_or_else(|| panic!("no pool {POOL} in {pools}"))
    }

    /// Wait until every task is terminal; returns their views.
    pub async fn wait_terminal(&self, ids: &[String], deadline: Duration) -> Vec<Value> {
        tasks_terminal(&self.client, &self.base, ids, deadline).await
    }

    /// `slotd check` on the database and object store (online, as an operator would), then
    /// stop slotd; the simulator is handed back.
    pub async fn stop(mut self) -> FalSimHandle {
        let c = &self.services.config;
        let limits: Vec<(&str, u32)> = c
            .pools
            .iter()
            .filter_map(|(name, p)| Some((name.as_str(), p.max_slots?)))
            .collect();
        let now = slotd_core::clock::Clock::now_ms(self.services.clock.as_ref());
        let report = check_report_with(
            &c.database_url,
            Some(&c.object_store),
            &limits,
            quotas_of(c),
            now,
        )
        .await;
        assert!(report.units > 0, "slotd check saw no units");
        if let Some(s) = self.stop.take() {
            s.send(()).ok();
        }
        if let Some(h) = self.server.take() {
            h.await.expect("join").expect("slotd stopped cleanly");
        }
        self.sim
    }
}

/// A task view's results.
pub fn results(view: &Value) -> &Vec<Value> {
    view["results"].as_array().expect("results")
}

/// Every completed unit's stored file hashes to the simulator's file of its fal request and to
/// the recorded sha256. Returns how many were checked.
pub async fn check_stored_files(
    services: &slotd_server::services::Services,
    views: &[Value],
) -> usize {
    check_provider_files(services, views, slotd_sim::fal::file_sha256).await
}

/// 40 Pika shots on a pool of 4 with a fal account that runs 8: all complete, fal never had
/// more than 4 of ours unfinished (queued or running), each shot was submitted once, every
/// stored file is fal's output; the webhooks (verified against the simulator's JWKS) arrived
/// and were applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fal_forty_pika_shots_on_a_pool_of_four_complete() {
    let run = Run::start(sim_options(), |_, _| {}).await;
    let ids = vec![
        run.submit(payload("a", 20)).await,
        run.submit(payload("b", 20)).await,
    ];
    let views = run.wait_terminal(&ids, Duration::from_secs(120)).await;
    for v in &views {
        assert_eq!(v["status"], "completed", "{v}");
    }
    assert_eq!(check_stored_files(&run.services, &views).await, 40);
    let stats = run.sim.stats();
    let account = &stats.accounts[slotd_sim::fal::ACCOUNT_DEFAULT];
    assert_eq!(account.submits, 40, "each shot submitted once: {stats:?}");
    assert!(
        account.max_unfinished <= 4,
        "fal held {} of ours at once; the pool has 4 slots",
        account.max_unfinished
    );
    assert_eq!(account.succeeded, 40);
    assert!(
        stats.webhooks_sent > 0,
        "fal's webhooks reached slotd: {stats:?}"
    );
    assert_eq!(
        stats.unknown_input_keys, 0,
        "only the schema's keys are sent"
    );
    run.stop().await.shutdown().await.expect("sim stop");
}

/// The account runs 2 at once but the pool holds 4 slots: fal queues two of ours. Those units
/// show it (`wait_reason: provider_queue`, fal's position), the pool's effective limit drops to
/// what fal runs, and everything still completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fal_jobs_held_in_fals_queue_show_it_and_lower_the_pool_to_what_fal_runs() {
    let opts = FalOptions {
        concurrency: 2,
        // Slower: a queued request waits seconds, several of the handler's reads.
        time_scale: 0.1,
        ..sim_options()
    };
    let run = Run::start(opts, |_, _| {}).await;
    let id = run.submit(payload("queued", 6)).await;
    let seen = eventually(
        Duration::from_secs(60),
        "a unit shown queued at fal",
        async || {
            let view = run.task(&id).await;
            results(&view)
                .iter()
                .find(|r| r["wait_reason"] == "provider_queue")
                .cloned()
        },
    )
    .await;
    assert_eq!(seen["status"], "submitted", "{seen}");
    assert!(seen["provider_queue_position"].is_u64(), "{seen}");
    let lowered = eventually(
        Duration::from_secs(60),
        "the effective limit lowered",
        async || {
            let pool = run.pool().await;
            (pool["effective_max_slots"].as_u64()? <= 2).then_some(pool)
        },
    )
    .await;
    assert_eq!(lowered["max_slots"], 4, "{lowered}");
    let views = run.wait_terminal(&[id], Duration::from_secs(120)).await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    for r in results(&views[0]) {
        assert!(
            r.get("wait_reason").is_none(),
            "a finished unit waits for nothing: {r}"
        );
    }
    run.stop().await.shutdown().await.expect("sim stop");
}
