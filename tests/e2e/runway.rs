//! Runway end to end: the real Runway simulator (`slotd::sim_runway`) over HTTP, the built
//! `runway-video` component (contract 1.1: routing to a pool per model, host-inserted bearer
//! key, provider cancel), the real scheduler loops (or, where the moment of finalization must
//! be chosen, the scheduler driven by hand), finalization into the local object store. Every
//! test ends with `slotd check` on its database and objects.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use sha2::Digest;
use slotd::config::{Config, HandlerConfig, PoolConfig, SchedulerConfig, Secret};
use slotd::sim_runway::{API_KEY_DEFAULT, RunwayJob, RunwayOptions, RunwaySimHandle};

use crate::support::*;

/// Simulated Runway time runs 100x faster: a 5 s `gen4_turbo` clip (30–75 s plus a few
/// seconds `PENDING`) takes 0.3–0.8 s.
const TIME_SCALE: f64 = 0.01;
/// The model every test uses, and its pool.
const MODEL: &str = "gen4_turbo";
const POOL: &str = "runway:gen4_turbo";
/// The task type of `runway-video`.
const TASK_TYPE: &str = "runway_video";
/// The handler's name (its configuration section and recording file).
const HANDLER: &str = "runway-video";

pub fn sim_options(seed: u64) -> RunwayOptions {
    RunwayOptions {
        listen: "127.0.0.1:0".parse().expect("addr"),
        time_scale: TIME_SCALE,
        long_tail_rate: 0.0,
        seed,
        ..RunwayOptions::default()
    }
}

/// A payload of `shots` image-to-video shots of [`MODEL`], each named by `tag` and its index.
pub fn payload(tag: &str, shots: usize) -> Value {
    let shots: Vec<Value> = (0..shots)
        .map(|i| {
            json!({"prompt_image": format!("https://example.com/{tag}/{i}.png"),
                   "prompt_text": format!("{tag} shot {i}: a cat walks along a wall"),
                   "seed": i})
        })
        .collect();
    json!({"model": MODEL, "ratio": "1280:720", "duration": 5, "shots": shots})
}

/// A plugins directory holding only `runway-video.wasm`.
fn runway_plugins(dir: &Path) -> PathBuf {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugins dir");
    std::fs::copy(
        built_plugin("runway_video"),
        plugins.join(format!("{HANDLER}.wasm")),
    )
    .expect("copy runway-video.wasm");
    plugins
}

/// `[handlers.runway-video]` pointing at `sim`: tier 3 (5 slots per model), poll hints and the
/// outcome-unknown hold scaled like the simulator, the bearer key as the secret `api_key`.
fn handler_config(sim: &RunwaySimHandle, key: &str) -> HandlerConfig {
    let mut h = HandlerConfig::default();
    h.settings
        .insert("base_url".into(), sim.base_url().to_string());
    h.settings.insert("tier".into(), "3".into());
    h.settings.insert(
        "expected_duration_scale".into(),
        sim.stats().time_scale.to_string(),
    );
    h.secrets.insert("api_key".into(), Secret::new(key));
    h.allowed_hosts.push(sim.addr().to_string());
    h
}

/// A config for an in-process slotd against `sim`, timings scaled to its time factor.
fn runway_config(dir: &Path, sim: &RunwaySimHandle) -> Config {
    let scale = sim.stats().time_scale;
    let mut c = Config {
        database_url: format!("sqlite://{}", dir.join("slotd.db").display()),
        plugins_dir: runway_plugins(dir),
        object_store: format!("file://{}", dir.join("objects").display()),
        scheduler: SchedulerConfig::scaled_to(Duration::from_secs_f64(10.0 * scale)),
        ..Config::default()
    };
    c.scheduler.min_rest = Duration::from_millis(2);
    c.limits.call_deadline = Duration::from_secs(2);
    c.handlers
        .insert(HANDLER.into(), handler_config(sim, API_KEY_DEFAULT));
    c
}

/// A running slotd (real loops, real clock) against a Runway simulator.
pub struct Run {
    pub base: String,
    pub client: reqwest::Client,
    pub sim: RunwaySimHandle,
    pub services: slotd::services::Services,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    dir: tempfile::TempDir,
}

impl Run {
    /// slotd with `runway-video` against a simulator started with `opts`; `adjust` changes
    /// the config last (a pool size, the key, a recording directory).
    pub async fn start(opts: RunwayOptions, adjust: impl FnOnce(&mut Config, &Path)) -> Run {
        let dir = tempfile::TempDir::new().expect("tmp");
        let sim = slotd::sim_runway::spawn(opts).await.expect("simulator");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut config = runway_config(dir.path(), &sim);
        adjust(&mut config, dir.path());
        let services = slotd::app::build_with_clock(config, system_clock())
            .await
            .expect("build");
        assert!(
            services.registry.for_type(TASK_TYPE).is_some(),
            "runway-video must load"
        );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(slotd::run_with(
            services.clone(),
            Some(listener),
            async move {
                rx.await.ok();
            },
        ));
        Run {
            base: format!("http://{addr}"),
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

    /// Wait until every task is terminal; returns their views.
    pub async fn wait_terminal(&self, ids: &[String], deadline: Duration) -> Vec<Value> {
        eventually(deadline, "tasks terminal", async || {
            let mut out = Vec::new();
            for id in ids {
                let v = self.task(id).await;
                if !matches!(
                    v["status"].as_str(),
                    Some("completed" | "failed" | "cancelled")
                ) {
                    return None;
                }
                out.push(v);
            }
            Some(out)
        })
        .await
    }

    /// `slotd check` on the database and object store (online, as an operator would), with
    /// `pools` as the limits (the tier-sized pools are not in the config), then stop slotd.
    pub async fn stop(mut self, pools: &[(&str, u32)]) -> RunwaySimHandle {
        let c = &self.services.config;
        let mut limits: Vec<(&str, u32)> = c
            .pools
            .iter()
            .map(|(name, p)| (name.as_str(), p.max_slots))
            .collect();
        limits.extend_from_slice(pools);
        let now = slotd::clock::Clock::now_ms(self.services.clock.as_ref());
        let report = check_report_at(&c.database_url, Some(&c.object_store), &limits, now).await;
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

/// A unit's results entries (`results` of a task view).
fn results(view: &Value) -> &Vec<Value> {
    view["results"].as_array().expect("results")
}

/// Every completed unit's stored file: its bytes hash to the simulator's file of its Runway
/// task and to the recorded sha256. Returns how many were checked.
async fn check_stored_files(services: &slotd::services::Services, views: &[Value]) -> usize {
    let mut checked = 0;
    for v in views {
        for r in results(v) {
            if r["status"] != "completed" {
                continue;
            }
            let job = r["provider_task_id"].as_str().expect("provider_task_id");
            let key = r["object_key"].as_str().expect("object_key");
            let bytes = services
                .objects
                .get_bytes(key)
                .await
                .expect("stored object");
            let sha = hex::encode(sha2::Sha256::digest(&bytes));
            assert_eq!(
                sha,
                slotd::sim_runway::file_sha256(job),
                "stored file differs from Runway's output of {job}"
            );
            assert_eq!(r["sha256"], sha, "recorded sha256 differs from the file");
            checked += 1;
        }
    }
    checked
}

/// Every task took a slot the moment it was created: none ever waited `THROTTLED`.
fn never_throttled(jobs: &[RunwayJob]) {
    for j in jobs {
        assert_eq!(
            j.started,
            Some(j.created),
            "task {} waited THROTTLED: {j:?}",
            j.task_id
        );
    }
}

/// 40 shots of one model on its tier-3 pool (5 slots, the simulated account's concurrency):
/// all complete, the account never had more than 5 of our tasks unfinished (so none was
/// ever `THROTTLED`), each unit was created once, and every stored file is Runway's output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_forty_shots_on_a_pool_of_five_all_complete() {
    let run = Run::start(sim_options(1), |_, _| {}).await;
    let pools: Value = run
        .client
        .get(format!("{}/v1/pools", run.base))
        .send()
        .await
        .expect("pools")
        .json()
        .await
        .expect("json");
    let pool = pools
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == POOL))
        .cloned()
        .unwrap_or_default();
    assert_eq!(pool["max_slots"], 5, "tier 3 sizes the pool: {pools}");

    let ids = vec![
        run.submit(payload("a", 25)).await,
        run.submit(payload("b", 15)).await,
    ];
    let views = run.wait_terminal(&ids, Duration::from_secs(60)).await;
    for v in &views {
        assert_eq!(v["status"], "completed", "{v}");
    }
    assert_eq!(check_stored_files(&run.services, &views).await, 40);

    let stats = run.sim.stats();
    let m = &stats.models[MODEL];
    assert!(
        m.max_held_seen <= 5,
        "Runway saw {} of our {MODEL} tasks unfinished at once",
        m.max_held_seen
    );
    assert_eq!(m.max_held_seen, 5, "the pool was kept full");
    let jobs = run.sim.jobs();
    never_throttled(&jobs);
    assert_eq!(stats.creates, 40, "one create per unit");
    assert_eq!(jobs.len(), 40);
    let mut job_ids: Vec<&str> = views
        .iter()
        .flat_map(|v| results(v).iter())
        .filter_map(|r| r["provider_task_id"].as_str())
        .collect();
    job_ids.sort_unstable();
    job_ids.dedup();
    assert_eq!(job_ids.len(), 40, "each unit has a task of its own");
    assert_eq!(stats.validation_refusals + stats.auth_refusals, 0);
    assert_eq!(stats.downloads, 40, "each file downloaded once");
    assert_eq!(stats.link_refusals, 0);
    run.stop(&[(POOL, 5)]).await;
}

/// The statuses of a task's units, by index.
fn statuses(view: &Value) -> Vec<String> {
    results(view)
        .iter()
        .map(|u| u["status"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// A pool of 2 on an account of 2 whose cancels take effect only 400 ms after the `DELETE`
/// (the task runs on and keeps its slot meanwhile): task A's two units run and its third
/// waits, task B waits behind it, A is cancelled. slotd sends the `DELETE`s, keeps asking
/// while Runway still runs the tasks, and frees each slot only once its task is gone: B's
/// k-th create comes at or after the k-th moment one of A's tasks left Runway, so the
/// account never holds more than 2 of our tasks. A slotd that freed a slot at the cancel
/// request, or at the first `DELETE`, would create B's tasks inside the lag and fail this.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_cancel_deletes_running_tasks_and_reuses_slots_only_after_they_ended() {
    const LAG_MS: u64 = 400;
    let opts = RunwayOptions {
        // Tasks of 1.6–4 s: long enough to cancel them while they run.
        time_scale: 0.05,
        concurrency: 2,
        cancel_lag_ms: LAG_MS,
        ..sim_options(2)
    };
    let run = Run::start(opts, |c, _| {
        c.pools.insert(POOL.into(), PoolConfig { max_slots: 2 });
    })
    .await;
    let a = run.submit(payload("a", 3)).await;
    let a_jobs: Vec<String> = eventually(
        Duration::from_secs(20),
        "A's two tasks at Runway",
        async || {
            let v = run.task(&a).await;
            let jobs: Vec<String> = results(&v)
                .iter()
                .filter(|r| r["status"] == "submitted")
                .filter_map(|r| r["provider_task_id"].as_str().map(str::to_string))
                .collect();
            (jobs.len() == 2).then_some(jobs)
        },
    )
    .await;
    let b = run.submit(payload("b", 2)).await;
    let view = run.cancel(&a).await;
    assert_eq!(view["cancel_requested"], true, "{view}");
    for job in run
        .sim
        .jobs()
        .iter()
        .filter(|j| a_jobs.contains(&j.task_id))
    {
        assert!(
            j_unfinished(job),
            "A's task ended before the cancel: {job:?}"
        );
    }

    let views = run
        .wait_terminal(&[a.clone(), b.clone()], Duration::from_secs(30))
        .await;
    assert_eq!(views[0]["status"], "cancelled", "{}", views[0]);
    assert_eq!(statuses(&views[0]), ["cancelled"; 3], "{}", views[0]);
    let with_job = results(&views[0])
        .iter()
        .filter(|r| r["provider_task_id"].is_string())
        .count();
    assert_eq!(with_job, 2, "the waiting unit never reached Runway");
    assert_eq!(views[1]["status"], "completed", "{}", views[1]);
    assert_eq!(check_stored_files(&run.services, &views[1..]).await, 2);

    // The slots: B's tasks reached Runway only as A's left it.
    let stats = run.sim.stats();
    let jobs = run.sim.jobs();
    let mut gone: Vec<f64> = Vec::new();
    for j in jobs.iter().filter(|j| a_jobs.contains(&j.task_id)) {
        assert_eq!(j.status, "CANCELLED", "{j:?}");
        assert!(j.cancel_requested.is_some(), "no DELETE for {j:?}");
        assert!(j.ended.is_none(), "{j:?}");
        gone.push(j.cancelled_at.expect("cancelled_at"));
    }
    gone.sort_by(f64::total_cmp);
    let b_jobs: Vec<&RunwayJob> = jobs
        .iter()
        .filter(|j| !a_jobs.contains(&j.task_id))
        .collect();
    assert_eq!(b_jobs.len(), 2);
    for (k, j) in b_jobs.iter().enumerate() {
        assert!(
            j.created >= gone[k],
            "B's task {k} was created at {} s, before A's task {k} left Runway at {} s: {jobs:?}",
            j.created,
            gone[k]
        );
    }
    assert!(
        stats.models[MODEL].max_held_seen <= 2,
        "Runway held {} of our tasks at once",
        stats.models[MODEL].max_held_seen
    );
    // The cancels: one per running task, asked again while Runway still ran it.
    assert_eq!(stats.creates, 4, "A's two and B's two");
    assert_eq!(
        stats.cancelled, 2,
        "both of A's running tasks were cancelled"
    );
    assert!(
        stats.deletes >= 4,
        "each of A's tasks was asked again while Runway still ran it: {} DELETEs",
        stats.deletes
    );
    never_throttled(&jobs);
    run.stop(&[]).await;
}

/// Whether Runway still runs (or queues) the task.
fn j_unfinished(job: &RunwayJob) -> bool {
    matches!(job.status.as_str(), "THROTTLED" | "PENDING" | "RUNNING")
}

/// A unit whose create answer was lost (Runway made the task, and it runs) keeps its slot for
/// the outcome-unknown hold (the model's longest run) so that the phantom task cannot push the
/// next create into `THROTTLED`; cancelling its task must not shorten that. Pool of 1 on an
/// account of 1: A's create answer is lost, B waits, A is cancelled while the phantom runs.
/// A ends `cancelled` only when the hold has passed, and B's create reaches Runway only after
/// the phantom has ended: the account never holds 2 of our tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_a_cancelled_outcome_unknown_unit_keeps_its_slot_for_the_hold() {
    let opts = RunwayOptions {
        concurrency: 1,
        lost_answer_rate: 1.0,
        ..sim_options(6)
    };
    let run = Run::start(opts, |c, _| {
        c.pools.insert(POOL.into(), PoolConfig { max_slots: 1 });
        // The hold: 600 s × 0.002 = 1.2 s, longer than the phantom's 0.3–0.8 s.
        let h = c.handlers.get_mut(HANDLER).expect("handler config");
        h.settings
            .insert("expected_duration_scale".into(), "0.002".into());
    })
    .await;
    let a = run.submit(payload("phantom", 1)).await;
    eventually(Duration::from_secs(20), "A's lost create", async || {
        (run.sim.stats().faults.lost_answers == 1).then_some(())
    })
    .await;
    run.sim.set_lost_answer_rate(0.0);
    let b = run.submit(payload("after-phantom", 1)).await;
    // A holds its slot: B is not created while the phantom runs.
    eventually(Duration::from_secs(20), "A held", async || {
        let v = run.task(&a).await;
        results(&v)[0]["error"]["code"]
            .as_str()
            .is_some_and(|c| c == "timeout")
            .then_some(())
    })
    .await;
    run.cancel(&a).await;
    let views = run
        .wait_terminal(&[a.clone(), b.clone()], Duration::from_secs(20))
        .await;
    assert_eq!(views[0]["status"], "cancelled", "{}", views[0]);
    assert_eq!(views[1]["status"], "completed", "{}", views[1]);
    let jobs = run.sim.jobs();
    assert_eq!(jobs.len(), 2, "A's phantom and B's task: {jobs:?}");
    let phantom_end = jobs[0].ended.expect("the phantom ran to its end");
    assert!(
        jobs[1].created >= phantom_end,
        "B's task was created at {} s while A's phantom ran until {phantom_end} s",
        jobs[1].created
    );
    assert_eq!(run.sim.stats().models[MODEL].max_held_seen, 1);
    never_throttled(&jobs);
    run.stop(&[]).await;
}

/// `exp` (Unix milliseconds) of a signed output link.
fn link_expiry(url: &str) -> u64 {
    let (_, query) = url.split_once('?').expect("a signed link has a query");
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix("exp="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no exp in {url}"))
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .expect("clock after 1970")
}

/// Output links that live 300 ms: the units succeed (their results keep the links Runway
/// gave then), finalization is held back until every one of those links has expired (Runway
/// answers 403 to each), and then runs: it reads each task again for a fresh link and stores
/// Runway's file. The only refused downloads are the test's own probes of the old links.
/// (A TTL of 1 ms would expire the fresh links too before slotd could fetch them.) The
/// scheduler is driven by hand here, so that finalization starts only when the test says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_expired_output_links_are_refreshed_at_finalization() {
    const TTL_MS: u64 = 300;
    const SHOTS: usize = 3;
    let sim = slotd::sim_runway::spawn(RunwayOptions {
        output_ttl_ms: TTL_MS,
        ..sim_options(3)
    })
    .await
    .expect("simulator");
    let m = Manual::start_with(1, 1, |c| {
        std::fs::copy(
            built_plugin("runway_video"),
            c.plugins_dir.join(format!("{HANDLER}.wasm")),
        )
        .expect("copy runway-video.wasm");
        c.handlers
            .insert(HANDLER.into(), handler_config(&sim, API_KEY_DEFAULT));
        c.pools.insert(
            POOL.into(),
            PoolConfig {
                max_slots: SHOTS as u32,
            },
        );
    })
    .await;
    let id = m.submit(TASK_TYPE, payload("ttl", SHOTS)).await;
    let succeeded = eventually(
        Duration::from_secs(20),
        "every unit succeeded at Runway",
        async || {
            m.clock.advance(1_000);
            let now = slotd::clock::Clock::now_ms(m.clock.as_ref());
            m.scheduler.run_once(POOL, now).await.expect("run_once");
            let v = m.task(&id).await;
            (statuses(&v) == ["succeeded"; SHOTS]).then_some(v)
        },
    )
    .await;
    let old_links: Vec<String> = results(&succeeded)
        .iter()
        .map(|r| r["output"][0].as_str().expect("recorded link").to_string())
        .collect();
    let last_expiry = old_links.iter().map(|l| link_expiry(l)).max().unwrap_or(0);
    eventually(
        Duration::from_secs(5),
        "the recorded links expired",
        async || (unix_ms() > last_expiry).then_some(()),
    )
    .await;
    let http = reqwest::Client::new();
    for link in &old_links {
        let status = http.get(link).send().await.expect("probe").status();
        assert_eq!(status, 403, "{link} should have expired");
    }
    let before = sim.stats();
    assert_eq!(before.link_refusals, SHOTS as u64, "the probes");

    let now = slotd::clock::Clock::now_ms(m.clock.as_ref());
    m.scheduler.finalize_once(now).await.expect("finalize_once");
    m.scheduler.finalize_idle().await;
    let view = m.task(&id).await;
    assert_eq!(view["status"], "completed", "{view}");
    assert_eq!(check_stored_files(&m.services, &[view]).await, SHOTS);
    let after = sim.stats();
    assert_eq!(
        after.link_refusals, before.link_refusals,
        "slotd fetched an expired link"
    );
    assert_eq!(
        after.gets - before.gets,
        SHOTS as u64,
        "finalize read each task again"
    );
    assert_eq!(after.downloads - before.downloads, SHOTS as u64);
    m.check().await;
}

/// A key of the real form (`key_` + 128 hex digits) that appears nowhere else.
fn distinctive_key(seed: &str) -> String {
    let a = hex::encode(sha2::Sha256::digest(format!("{seed} 1")));
    let b = hex::encode(sha2::Sha256::digest(format!("{seed} 2")));
    format!("key_{a}{b}")
}

/// The needles a leak of `key` would show: the whole key, and its first 24 hex digits (a
/// truncated or reformatted copy).
fn key_needles(key: &str) -> [&str; 2] {
    [key, &key[4..28]]
}

/// Every log line at `trace`, except wasmtime's compiler (its trace is the generated code:
/// 30 MB for one handler, and nothing of slotd's).
const LOG_EVERYTHING: &str = "trace,wasmtime=info,wasmtime_internal_cranelift=info,\
                              cranelift_codegen=info,cranelift_frontend=info,regalloc2=info";

/// The bearer key, as the handler's README shows it configured (here in plain text in the
/// config file: a setting named `api_key` is a secret whatever its form), in a whole run of
/// the real `slotd` binary logging at `trace`: three shots to completion and one cancelled
/// while it runs (tick, finalize and cancel calls, creates, polls, downloads, a DELETE).
///
/// What it proves:
/// - (a) the key (or its first 24 digits) is nowhere in slotd's log;
/// - (b) nor in the `[handlers.runway-video] record` recording of every call;
/// - the host, not the guest, sent it: Runway accepted every request (no 401) although no
///   request the guest made carries an `Authorization` header (the recording holds each
///   request as the guest handed it to the host, before credentials are inserted; the
///   redactor would show a guest-set one as `***`, and there is none);
/// - the guest was never given it: everything that enters a guest call is in the recording
///   (the call's inputs, every HTTP answer, and `settings`, the whole map `config.get` reads:
///   it has no `api_key`), and the redactor, which replaces the key's value wherever it
///   appears, replaced nothing but signed-link parameters (`_jwt=***`). A guest has no other
///   way in (no environment, files or sockets), so the key is not in its memory.
///
/// The recording also replays offline exactly as recorded. A wrong key failing the units
/// with Runway's 401 is [`runway_a_wrong_key_fails_units_with_runways_401`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_the_bearer_key_stays_out_of_the_guest_the_logs_and_the_recording() {
    let key = distinctive_key("runway e2e: the key stays out");
    let sim = slotd::sim_runway::spawn(RunwayOptions {
        api_key: key.clone(),
        ..sim_options(4)
    })
    .await
    .expect("simulator");
    let dir = tempfile::TempDir::new().expect("tmp");
    let port = free_port();
    let db_url = format!("sqlite://{}", dir.path().join("slotd.db").display());
    let objects = format!("file://{}", dir.path().join("objects").display());
    let recordings = dir.path().join("recordings");
    let config = dir.path().join("slotd.toml");
    let text = format!(
        r#"
listen = "127.0.0.1:{port}"
database_url = "{db_url}"
plugins_dir = "{plugins}"
object_store = "{objects}"

[limits]
call_deadline = "2s"

[scheduler]
tick_interval = "100ms"
min_rest = "2ms"
poll_initial = "50ms"
poll_max = "300ms"

[pools."{POOL}"]
max_slots = 3

[handlers.{HANDLER}]
base_url = "{base}"
allowed_hosts = ["{host}"]
tier = 3
expected_duration_scale = {TIME_SCALE}
api_key = "{key}"
record = "{recordings}"
"#,
        plugins = runway_plugins(dir.path()).display(),
        base = sim.base_url(),
        host = sim.addr(),
        recordings = recordings.display(),
    );
    std::fs::write(&config, text).expect("write config");
    let log = dir.path().join("slotd.log");
    let mut child = spawn_slotd_with_env(&config, &log, &[], &[("SLOTD_LOG", LOG_EVERYTHING)]);
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    wait_healthy(&client, &base).await;

    let done = post_task(
        &client,
        &base,
        TASK_TYPE,
        json!({"payload": payload("key", 3)}),
    )
    .await;
    let cancelled = post_task(
        &client,
        &base,
        TASK_TYPE,
        json!({"payload": payload("cancelled", 1)}),
    )
    .await;
    let task = async |id: &str| -> Value {
        client
            .get(format!("{base}/v1/tasks/{id}"))
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json")
    };
    eventually(
        Duration::from_secs(30),
        "the second task at Runway",
        async || {
            results(&task(&cancelled).await)[0]["provider_task_id"]
                .is_string()
                .then_some(())
        },
    )
    .await;
    let r = client
        .post(format!("{base}/v1/tasks/{cancelled}/cancel"))
        .send()
        .await
        .expect("cancel");
    assert_eq!(r.status(), 200);
    wait_all_completed(
        &client,
        &base,
        std::slice::from_ref(&done),
        Duration::from_secs(30),
    )
    .await;
    eventually(Duration::from_secs(30), "the cancel", async || {
        (task(&cancelled).await["status"] == "cancelled").then_some(())
    })
    .await;
    assert_check_clean(&db_url, Some(&objects), &[(POOL, 3)]).await;
    child.kill().expect("stop slotd");
    child.wait().expect("reap slotd");

    // The host sent the key: every request was accepted.
    let stats = sim.stats();
    assert_eq!(stats.auth_refusals, 0);
    assert_eq!(stats.creates, 4);
    assert_eq!(stats.cancelled, 1);

    // (a) Not in the log.
    let logged = std::fs::read_to_string(&log).expect("slotd's log");
    assert!(
        logged.contains(HANDLER) && logged.contains("TRACE"),
        "the log holds the run at trace level: {} bytes",
        logged.len()
    );
    for needle in key_needles(&key) {
        assert!(!logged.contains(needle), "the key is in slotd's log");
    }

    // (b) Not in the recording, and nothing the guest saw needed hiding.
    let recording = recordings.join(format!("{HANDLER}.jsonl"));
    let raw = std::fs::read_to_string(&recording).expect("the recording");
    for needle in key_needles(&key) {
        assert!(!raw.contains(needle), "the key is in the recording");
    }
    assert_eq!(
        raw.matches("***").count(),
        raw.matches("_jwt=***").count(),
        "something other than a signed link's signature was redacted"
    );
    let records = slotd::runtime::tape::read(&recording).expect("the recording parses");
    for function in ["tick", "finalize", "cancel"] {
        assert!(
            records.iter().any(|r| r.function == function),
            "no {function} call recorded"
        );
    }
    let mut requests = 0;
    for r in &records {
        assert!(
            !r.settings.contains_key("api_key"),
            "config.get can read the key: {:?}",
            r.settings.keys()
        );
        for x in &r.exchanges {
            requests += 1;
            for (name, _) in &x.request.headers {
                assert!(
                    !name.eq_ignore_ascii_case("authorization"),
                    "the guest set {name} itself: {:?}",
                    x.request
                );
            }
        }
    }
    assert!(
        requests >= 8,
        "creates, polls, reads and a DELETE: {requests}"
    );
    let report = slotd::runtime::replay::replay(&built_plugin("runway_video"), &recording)
        .await
        .expect("the replay runs");
    assert_eq!(report.differing(), 0, "{report:?}");
}

/// A wrong key is Runway's 401 on every create: the units fail at once with code `http_401`
/// and a message naming the `api_key` secret, nothing is created, nothing retried. With the
/// previous test, where the guest sets no `Authorization` header yet Runway accepts the
/// requests, this shows the host is the one that inserts the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_a_wrong_key_fails_units_with_runways_401() {
    let run = Run::start(sim_options(5), |c, _| {
        let h = c.handlers.get_mut(HANDLER).expect("handler config");
        h.secrets.insert(
            "api_key".into(),
            Secret::new(distinctive_key("a key Runway never issued")),
        );
    })
    .await;
    let id = run.submit(payload("wrong-key", 2)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(20))
        .await;
    assert_eq!(views[0]["status"], "failed", "{}", views[0]);
    for r in results(&views[0]) {
        assert_eq!(r["status"], "failed", "{r}");
        assert_eq!(r["error"]["code"], "http_401", "{r}");
        let message = r["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("HTTP 401") && message.contains("api_key"),
            "{message}"
        );
        assert!(r["provider_task_id"].is_null(), "{r}");
    }
    let stats = run.sim.stats();
    assert_eq!(stats.auth_refusals, 2, "one refused create per unit");
    assert_eq!(stats.creates, 0);
    assert_eq!(stats.requests, 2, "a 401 is not retried");
    run.stop(&[]).await;
}

/// `<repo>/tests/recordings/runway`.
fn committed_recordings() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/recordings/runway")
}

/// [`Run::start`] with every `runway-video` call recorded into the run's `recordings/`.
async fn recorded_run(opts: RunwayOptions, slots: u32) -> Run {
    Run::start(opts, |c, dir| {
        c.pools.insert(POOL.into(), PoolConfig { max_slots: slots });
        let h = c.handlers.get_mut(HANDLER).expect("handler config");
        h.record = Some(dir.join("recordings"));
    })
    .await
}

/// One shot to completion: create, polls, finalize.
async fn success_flow() -> (&'static str, Run) {
    let run = recorded_run(sim_options(10), 1).await;
    let id = run.submit(payload("success", 1)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(20))
        .await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    ("success", run)
}

/// Four shots on a pool of 2 over an account of 2: batches of two, and no task ever waits
/// `THROTTLED`.
async fn throttled_free_flow() -> (&'static str, Run) {
    let opts = RunwayOptions {
        concurrency: 2,
        ..sim_options(11)
    };
    let run = recorded_run(opts, 2).await;
    let id = run.submit(payload("throttled-free", 4)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(20))
        .await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    never_throttled(&run.sim.jobs());
    ("throttled-free", run)
}

/// Two shots on a pool of 2 over an account of 1 (a misconfigured pool): the second task
/// waits `THROTTLED` (the handler warns), and both still complete.
async fn throttled_flow() -> (&'static str, Run) {
    let opts = RunwayOptions {
        concurrency: 1,
        ..sim_options(12)
    };
    let run = recorded_run(opts, 2).await;
    let id = run.submit(payload("throttled", 2)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(20))
        .await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    assert_eq!(run.sim.stats().models[MODEL].max_held_seen, 2);
    ("throttled", run)
}

/// One shot that Runway accepts and then fails with a `failureCode`.
async fn failure_flow() -> (&'static str, Run) {
    let opts = RunwayOptions {
        failure_after_accept_rate: 1.0,
        ..sim_options(13)
    };
    let run = recorded_run(opts, 1).await;
    let id = run.submit(payload("failure", 1)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(20))
        .await;
    let r = &results(&views[0])[0];
    assert_eq!(r["status"], "failed", "{r}");
    let code = run.sim.jobs()[0]
        .failure_code
        .clone()
        .expect("a drawn failure");
    assert_eq!(r["error"]["code"], code.as_str(), "{r}");
    ("failure", run)
}

/// One shot whose create answer is lost (Runway made the task): the handler never creates
/// it again, holds the slot for the model's longest run (600 s, scaled to 0.6 s here), then
/// fails the unit `submission_unknown`.
async fn outcome_unknown_flow() -> (&'static str, Run) {
    let opts = RunwayOptions {
        lost_answer_rate: 1.0,
        time_scale: 0.001,
        ..sim_options(14)
    };
    let run = recorded_run(opts, 1).await;
    let id = run.submit(payload("outcome-unknown", 1)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(20))
        .await;
    let r = &results(&views[0])[0];
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(r["error"]["code"], "submission_unknown", "{r}");
    let stats = run.sim.stats();
    assert_eq!(
        (stats.requests, stats.creates, stats.faults.lost_answers),
        (1, 1, 1),
        "one create, made at Runway, its answer lost, never sent again"
    );
    ("outcome-unknown", run)
}

/// One shot cancelled while it runs: `DELETE`, then the task read back gone.
async fn cancel_flow() -> (&'static str, Run) {
    let opts = RunwayOptions {
        time_scale: 0.05,
        ..sim_options(15)
    };
    let run = recorded_run(opts, 1).await;
    let id = run.submit(payload("cancel", 1)).await;
    eventually(Duration::from_secs(20), "the task at Runway", async || {
        results(&run.task(&id).await)[0]["provider_task_id"]
            .is_string()
            .then_some(())
    })
    .await;
    run.cancel(&id).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(20))
        .await;
    assert_eq!(views[0]["status"], "cancelled", "{}", views[0]);
    assert_eq!(run.sim.stats().cancelled, 1);
    ("cancel", run)
}

/// The Runway flows, each in a slotd of its own with `[handlers.runway-video] record` set:
/// success, a THROTTLED-free run of batches, a THROTTLED run, a failure after acceptance, an
/// outcome-unknown create (lost answer) and a cancel. Each recording replays offline exactly
/// as recorded, with the guest's instruction count reported. With `SLOTD_WRITE_RECORDINGS=1`
/// they are written to `tests/recordings/runway/` (how the committed ones were made; those
/// replay in `slotd`'s `committed_recordings_replay`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_flows_record_and_replay() {
    let flows = futures::join!(
        success_flow(),
        throttled_free_flow(),
        throttled_flow(),
        failure_flow(),
        outcome_unknown_flow(),
        cancel_flow(),
    );
    let flows = [flows.0, flows.1, flows.2, flows.3, flows.4, flows.5];
    let write = std::env::var_os("SLOTD_WRITE_RECORDINGS").is_some();
    let wasm = built_plugin("runway_video");
    for (name, run) in flows {
        let recording = run.dir().join(format!("recordings/{HANDLER}.jsonl"));
        let report = slotd::runtime::replay::replay(&wasm, &recording)
            .await
            .unwrap_or_else(|e| panic!("{name}: the replay runs: {e:#}"));
        assert!(!report.calls.is_empty(), "{name}: nothing recorded");
        for c in &report.calls {
            assert!(c.differences.is_empty(), "{name}: {:?}", c.differences);
            assert!(c.skipped.is_some() || c.fuel > 0, "{name}: fuel: {c:?}");
        }
        if write {
            let out = committed_recordings();
            std::fs::create_dir_all(&out).expect("create tests/recordings/runway");
            std::fs::copy(&recording, out.join(format!("{name}.jsonl")))
                .expect("copy the recording");
        }
        run.stop(&[]).await;
    }
}
