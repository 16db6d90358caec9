//! Runway end to end: the real Runway simulator (`slotd_sim::runway`) over HTTP, the built
//! `runway-video` component (contract 1.1: routing to a pool per model, host-inserted bearer
//! key, provider cancel), the real scheduler loops (or, where the moment of finalization must
//! be chosen, the scheduler driven by hand), finalization into the local object store. Every
//! test ends with `slotd check` on its database and objects.
//!
//! This file holds the harness ([`Run`]) and the throughput and output-link tests; cancel is
//! in `runway_cancel`, the bearer key in `runway_key`, the recorded flows in
//! `runway_recordings`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use slotd_core::config::{Config, HandlerConfig, PoolConfig, SchedulerConfig, Secret};
use slotd_sim::runway::{API_KEY_DEFAULT, RunwayJob, RunwayOptions, RunwaySimHandle};

use crate::support::*;

/// Simulated Runway time runs 100x faster: a 5 s `gen4_turbo` clip (30–75 s plus a few
/// seconds `PENDING`) takes 0.3–0.8 s.
pub const TIME_SCALE: f64 = 0.01;
/// The model every test uses, and its pool.
pub const MODEL: &str = "gen4_turbo";
pub const POOL: &str = "runway:gen4_turbo";
/// The task type of `runway-video`.
pub const TASK_TYPE: &str = "runway_video";
/// The handler's name (its configuration section and recording file).
pub const HANDLER: &str = "runway-video";

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
pub fn runway_plugins(dir: &Path) -> PathBuf {
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
pub fn handler_config(sim: &RunwaySimHandle, key: &str) -> HandlerConfig {
    let mut h = HandlerConfig::default();
    h.settings
        .insert("base_url".into(), sim.base_url().to_string());
    h.settings.insert("tier".into(), "3".into());
    h.settings.insert(
        "expected_duration_scale".into(),
        sim.stats().time_scale.to_string(),
    );
    // The simulator's day (shortened in quota tests), for the daily limit it publishes.
    h.settings
        .insert("day_secs".into(), sim.stats().day_secs.to_string());
    // Off unless a test turns it on: an organization read is a request, and the fault tests
    // count requests and draw faults per request.
    h.settings
        .insert("read_organization".into(), "false".into());
    h.secrets.insert("api_key".into(), Secret::new(key));
    h.allowed_hosts.push(sim.addr().to_string());
    h
}

/// A config for an in-process slotd against `sim`, timings scaled to its time factor.
pub fn runway_config(dir: &Path, sim: &RunwaySimHandle) -> Config {
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
    /// `slotd check` when the run is dropped (first field: it runs before the rest drops).
    _check: CheckOnDrop,
    pub base: String,
    pub client: reqwest::Client,
    pub sim: RunwaySimHandle,
    pub services: slotd_server::services::Services,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    dir: tempfile::TempDir,
}

impl Run {
    /// slotd with `runway-video` against a simulator started with `opts`; `adjust` changes
    /// the config last (a pool size, the key, a recording directory).
    pub async fn start(opts: RunwayOptions, adjust: impl FnOnce(&mut Config, &Path)) -> Run {
        let dir = tempfile::TempDir::new().expect("tmp");
        let sim = slotd_sim::runway::spawn(opts).await.expect("simulator");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut config = runway_config(dir.path(), &sim);
        adjust(&mut config, dir.path());
        let services = slotd_server::app::build_with_clock(config, system_clock())
            .await
            .expect("build");
        assert!(
            services.registry.for_type(TASK_TYPE).is_some(),
            "runway-video must load"
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
        tasks_terminal(&self.client, &self.base, ids, deadline).await
    }

    /// `slotd check` on the database and object store (online, as an operator would), with
    /// `pools` as the limits (the tier-sized pools are not in the config), then stop slotd.
    pub async fn stop(mut self, pools: &[(&str, u32)]) -> RunwaySimHandle {
        let c = &self.services.config;
        let mut limits: Vec<(&str, u32)> = c
            .pools
            .iter()
            .filter_map(|(name, p)| Some((name.as_str(), p.max_slots?)))
            .collect();
        limits.extend_from_slice(pools);
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

/// A unit's results entries (`results` of a task view).
pub fn results(view: &Value) -> &Vec<Value> {
    view["results"].as_array().expect("results")
}

/// Every completed unit's stored file: its bytes hash to the simulator's file of its Runway
/// task and to the recorded sha256. Returns how many were checked.
pub async fn check_stored_files(
    services: &slotd_server::services::Services,
    views: &[Value],
) -> usize {
    check_provider_files(services, views, slotd_sim::runway::file_sha256).await
}

/// Every task took a slot the moment it was created: none ever waited `THROTTLED`.
pub fn never_throttled(jobs: &[RunwayJob]) {
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

/// Runway's pace ("updates are not expected more often than every five seconds per task"):
/// 20 shots on a pool of 5 with the simulator, the handler's hints and the scheduler all on a
/// 0.02 time scale (a 200 ms tick, a 100 ms pace). A backlog waits the whole run, so poll
/// rounds are on, yet no task is read sooner than the pace after its create or its last read:
/// the first poll waits for the create's pace, rounds never bring a hinted read forward, and
/// finalization stores the link the succeeding read recorded instead of reading again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_reads_keep_runways_pace_with_a_backlog() {
    let run = Run::start(
        RunwayOptions {
            time_scale: 0.02,
            ..sim_options(5)
        },
        |_, _| {},
    )
    .await;
    let ids = vec![run.submit(payload("pace", 20)).await];
    let views = run.wait_terminal(&ids, Duration::from_secs(90)).await;
    for v in &views {
        assert_eq!(v["status"], "completed", "{v}");
    }
    let stats = run.sim.stats();
    let early: Vec<(String, u32)> = run
        .sim
        .jobs()
        .iter()
        .filter(|j| j.reads_too_soon > 0)
        .map(|j| (j.task_id.clone(), j.reads_too_soon))
        .collect();
    assert_eq!(
        stats.polls_too_soon, 0,
        "reads sooner than Runway's pace, by task: {early:?}"
    );
    assert!(
        stats.gets >= 20,
        "every task was read to see it end: {} reads",
        stats.gets
    );
    assert_eq!(stats.downloads, 20);
    run.stop(&[(POOL, 5)]).await;
}

/// The pace test with Runway's faults on task reads: a tenth of reads answered 429 and a tenth
/// 502/503/504 (before taking effect). From the simulator's own log of every read (faulted
/// ones included), no task is read sooner than the pace after its create or its previous read
/// of any outcome: a read retried after a 429 or a 5xx waits the pace too, counted from the
/// answer. Faults were
/// injected (at least 5 of each) and reads did follow them. Every unit still completes, at the
/// default retry budget: a faulted read of a running job spends none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_reads_keep_runways_pace_after_429_and_5xx_answers() {
    const SHOTS: usize = 20;
    const TIME_SCALE_PACE: f64 = 0.02;
    let run = Run::start(
        RunwayOptions {
            time_scale: TIME_SCALE_PACE,
            read_429_rate: 0.1,
            read_5xx_rate: 0.1,
            ..sim_options(6)
        },
        |_, _| {},
    )
    .await;
    let ids = vec![run.submit(payload("pace-faults", SHOTS)).await];
    let views = run.wait_terminal(&ids, Duration::from_secs(90)).await;
    for v in &views {
        assert_eq!(v["status"], "completed", "{v}");
    }
    // Runway's five seconds, in the simulator's seconds (the log's unit).
    const PACE: f64 = 5.0;
    // slotd counts a paced read's delay from the handler's answer (the read's own answer
    // came before it), so no read may arrive sooner than the pace after the previous one; 1
    // real ms (0.05 s here) covers the rounding of the two clocks to milliseconds. A retry on
    // the host's backoff instead of the pace comes 60 real ms (3 s here) early, and a delay
    // counted from the tick's start instead of the answer comes early by however long the
    // tick took to reach the read (tens of ms on a loaded machine).
    const SLACK: f64 = 0.001 / TIME_SCALE_PACE;
    let jobs = run.sim.jobs();
    let reads = run.sim.reads();
    let mut early = Vec::new();
    let (mut after_fault, mut checked) = (0, 0);
    for job in &jobs {
        // (time, status) of the previous request that counts: the create, then each read.
        let mut prev = (job.created, 200);
        for r in reads.iter().filter(|r| r.task_id == job.task_id) {
            checked += 1;
            if prev.1 != 200 {
                after_fault += 1;
            }
            if r.at - prev.0 < PACE - SLACK {
                early.push(format!(
                    "task {} read at {:.3} s ({}), {:.3} s after the {} at {:.3} s",
                    job.task_id,
                    r.at,
                    r.status,
                    r.at - prev.0,
                    if prev.1 == 200 {
                        "create or read answered 200".to_string()
                    } else {
                        format!("read answered {}", prev.1)
                    },
                    prev.0
                ));
            }
            prev = (r.at, r.status);
        }
    }
    assert!(
        early.is_empty(),
        "{} of {checked} reads came sooner than Runway's pace:\n{}",
        early.len(),
        early.join("\n")
    );
    let faults = |f: fn(u16) -> bool| reads.iter().filter(|r| f(r.status)).count();
    let (too_many, failed) = (faults(|s| s == 429), faults(|s| (502..=504).contains(&s)));
    assert!(
        too_many >= 5 && failed >= 5,
        "faults injected on reads: {too_many} 429s, {failed} 5xx of {} reads",
        reads.len()
    );
    assert!(
        after_fault >= 10,
        "reads that followed a faulted read: {after_fault}"
    );
    assert_eq!(checked, reads.len(), "every read was of one of our tasks");
    assert_eq!(jobs.len(), SHOTS, "one Runway task per unit");
    assert_eq!(run.sim.stats().downloads, SHOTS as u64);
    eprintln!(
        "{} reads: {too_many} answered 429, {failed} 5xx, {after_fault} after a faulted read",
        reads.len()
    );
    run.stop(&[(POOL, 5)]).await;
}

/// A quarter of Runway's task reads faulted (a tenth 429, the rest 502/503/504, before taking
/// effect), with a quarter of the jobs in Runway's long tail, at the default retry budget. A
/// read's transient error once spent one of the stage's five retries and a good read gave none
/// back, so a long job's sixth faulted read failed its unit and freed its slot while Runway ran
/// and billed the job on, never fetched. Now: no unit fails while its job runs, every job
/// Runway made is some completed unit's, stored, and none is left running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_a_quarter_of_reads_faulted_fails_no_unit_whose_job_runs() {
    const SHOTS: usize = 12;
    let run = Run::start(
        RunwayOptions {
            read_429_rate: 0.1,
            read_5xx_rate: 0.15,
            long_tail_rate: 0.25,
            ..sim_options(11)
        },
        |_, _| {},
    )
    .await;
    assert_eq!(
        run.services.config.scheduler.retry_budget,
        SchedulerConfig::default().retry_budget,
        "the default budget"
    );
    let id = run.submit(payload("read-faults", SHOTS)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(120))
        .await;
    assert_eq!(
        views[0]["status"],
        "completed",
        "units: {:?}",
        statuses(&views[0])
    );
    let units = run.services.store.task_units(&id).await.expect("units");
    let ours: std::collections::BTreeSet<String> = units
        .iter()
        .filter_map(|u| u.provider_job_id.clone())
        .collect();
    let jobs = run.sim.jobs();
    let orphans: Vec<String> = jobs
        .iter()
        .filter(|j| !ours.contains(&j.task_id) || j.status != "SUCCEEDED")
        .map(|j| format!("{} {}", j.task_id, j.status))
        .collect();
    assert!(
        orphans.is_empty(),
        "jobs at Runway no completed unit holds: {orphans:?}"
    );
    assert_eq!(jobs.len(), SHOTS, "one Runway task per unit");
    assert_eq!(run.sim.stats().downloads, SHOTS as u64);
    let reads = run.sim.reads();
    let faulted = reads.iter().filter(|r| r.status != 200).count();
    let long = jobs.iter().filter(|j| j.planned_seconds > 120.0).count();
    assert!(
        faulted >= 20 && long >= 1,
        "the faults were not drawn: {faulted} of {} reads faulted, {long} long jobs",
        reads.len()
    );
    eprintln!(
        "{} reads, {faulted} faulted; {long} jobs in the long tail",
        reads.len()
    );
    run.stop(&[(POOL, 5)]).await;
}

/// The statuses of a task's units, by index.
pub fn statuses(view: &Value) -> Vec<String> {
    results(view)
        .iter()
        .map(|u| u["status"].as_str().unwrap_or("?").to_string())
        .collect()
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

/// Output links that live 1 s: the units succeed (their results keep the links Runway
/// gave then), finalization is held back until every one of those links has expired (Runway
/// answers 403 to each) and, on slotd's clock, past the hour in which the handler trusts a
/// recorded link, and then runs: it reads each task again for a fresh link and stores
/// Runway's file. The only refused downloads are the test's own probes of the old links.
/// (A TTL of 1 ms would expire the fresh links too before slotd could fetch them.) The
/// scheduler is driven by hand here, so that finalization starts only when the test says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_expired_output_links_are_refreshed_at_finalization() {
    // Long enough for a fresh link to be fetched at once even on a busy machine.
    const TTL_MS: u64 = 1_000;
    const SHOTS: usize = 3;
    let sim = slotd_sim::runway::spawn(RunwayOptions {
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
        c.pools.insert(POOL.into(), PoolConfig::slots(SHOTS as u32));
    })
    .await;
    let id = m.submit(TASK_TYPE, payload("ttl", SHOTS)).await;
    let succeeded = eventually(
        Duration::from_secs(20),
        "every unit succeeded at Runway",
        async || {
            m.clock.advance(1_000);
            let now = slotd_core::clock::Clock::now_ms(m.clock.as_ref());
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

    // The units waited over an hour (Runway's, at the test's scale) for finalization, so the
    // handler no longer trusts the links recorded at success and reads each task again.
    m.clock
        .advance(3_600_000.0_f64.mul_add(TIME_SCALE, 1_000.0) as i64);
    let now = slotd_core::clock::Clock::now_ms(m.clock.as_ref());
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

/// Durations from the first second (contract 1.3 `provider.durations`): on a fresh slotd whose
/// pool has never seen a job end, the handler's statement of how long a Runway task takes
/// (6–15 s of generation per clip second) gives a backlog task an ETA at once, and a task whose
/// deadline no job can meet fails `deadline_unreachable` before any create (none of its clips
/// is in Runway's own job list), while not one Runway task has ended yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_a_fresh_slotd_has_etas_and_refuses_unreachable_deadlines_from_the_first_second() {
    // 5 s clips at 0.05: 1.5–3.75 s of generation each; the tick is 500 ms.
    let run = Run::start(
        RunwayOptions {
            time_scale: 0.05,
            ..sim_options(13)
        },
        |_, _| {},
    )
    .await;
    let backlog = run.submit(payload("backlog", 30)).await;
    let view = run.task(&backlog).await;
    let eta = view["estimated_completion_at"].as_i64();
    assert!(eta.is_some(), "an ETA before any job ended: {view}");
    let ended = |run: &Run| {
        run.sim
            .jobs()
            .iter()
            .filter(|j| j.status == "SUCCEEDED" || j.status == "FAILED")
            .count()
    };
    assert_eq!(ended(&run), 0);
    let deadline = unix_ms() + 1_200;
    // 10 s clips (3–7.5 s of generation): the simulator's job list tells its tasks from the
    // backlog's 5 s ones.
    let mut late_payload = payload("late", 3);
    late_payload["duration"] = json!(10);
    let late = post_task(
        &run.client,
        &run.base,
        TASK_TYPE,
        json!({"payload": late_payload,
               "deadline": crate::deadlines::rfc3339(deadline as i64)}),
    )
    .await;
    let failed = eventually(
        Duration::from_secs(10),
        "the late task failed",
        async || {
            let v = run.task(&late).await;
            (v["status"] == "failed").then_some(v)
        },
    )
    .await;
    assert_eq!(ended(&run), 0, "refused before any Runway task ended");
    for unit in results(&failed) {
        assert_eq!(unit["error"]["code"], "deadline_unreachable", "{unit}");
        assert!(unit["provider_task_id"].is_null(), "{unit}");
    }
    let views = run
        .wait_terminal(&[backlog], Duration::from_secs(120))
        .await;
    assert_eq!(views[0]["status"], "completed");
    // Runway's own record: every task it made is one of the backlog's 5 s clips, none of the
    // late task's 10 s ones, and each create it accepted is one of those tasks.
    let jobs = run.sim.jobs();
    let clips = |secs: u32| jobs.iter().filter(|j| j.duration == secs).count();
    assert_eq!(clips(10), 0, "the late task reached Runway: {jobs:?}");
    assert!(clips(5) >= 30, "the backlog's tasks: {jobs:?}");
    assert_eq!(run.sim.stats().creates, jobs.len() as u64);
    run.stop(&[(POOL, 5)]).await;
}
