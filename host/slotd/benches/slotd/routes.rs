//! Routes (docs/routes.md, docs/testing.md): two figures.
//!
//! - **Makespan of routed shots over two providers.** 100 canonical shots (`SLOTD_BENCH_SHOTS`)
//!   posted as one task of a `clip` route, `ordered` over the Kling video handler (pool
//!   `kling:video`, 20 slots) and the fal handler's Pika 2.2 image-to-video (10 slots), the
//!   real built handlers against the Kling and fal simulators at time × 0.1
//!   (`SLOTD_BENCH_TIME_SCALE`), embedded slotd (SQLite) with provider callbacks (Kling's
//!   callbacks, fal's webhooks; `SLOTD_BENCH_ROUTES_CALLBACKS=0` polls instead). The measured
//!   makespan, from the first create at either provider to the last job's end, is divided by
//!   the ideal FIFO schedule of the same jobs on 30 slots with zero overhead: every job of both
//!   simulators' job lists in the order it was created, each lasting what the simulator drew
//!   for it (Kling: create to end; fal: its dispatch wait, which holds a slot at fal too, plus
//!   its run). The two simulators count time from different origins (Kling from its first
//!   create, fal from its start); both are placed on one real-time line. Long tails are off in
//!   both: one 10-minute job would make every run's makespan that job's.
//!   `SLOTD_BENCH_ROUTES_TRACE=1` prints the pools every 50 simulated seconds and every job.
//! - **The fill tick at 10,000 routed pending units**: `run_once_fill_10k`'s fill (the fixture
//!   handler, 1,000 free slots, five fill ticks each followed by the poll tick that ends the
//!   units it granted) with every pending unit waiting on a route instead of on the pool. The
//!   fixture has no `routes` export (contract 1.5), so the units are stored directly with the
//!   routing the API would give them: two options, the fixture's pool (`fixture`, picked by the
//!   route's `ordered` policy while it has room) and `fixture-b`, whose room every fill reads.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use slotd::demo::report::ideal_fifo_makespan;
use slotd_core::clock::Clock;
use slotd_core::config::{
    Config, HandlerConfig, PoolConfig, RouteConfig, RoutePolicy, RouteTarget, SchedulerConfig,
    Secret,
};
use slotd_core::model::{ROUTE_STAGE, RouteOption, TargetUnit, UnitRouting, route_pool};
use slotd_sim::fal::{FalOptions, FalSimHandle};
use slotd_sim::kling::{SimHandle, SimOptions};
use slotd_store::{NewTask, NewUnit, TaskTerms};

use crate::common::{median, ms};
use crate::report::{Better, Report, Target};
use crate::tick::{DUE, IN_FLIGHT, print_steps, scheduler};

/// The route every run uses (a task type: `POST /v1/tasks/clip`).
const ROUTE: &str = "clip";
const KLING_POOL: &str = "kling:video";
const KLING_SLOTS: u32 = 20;
const FAL_MODEL: &str = "fal-ai/pika/v2.2/image-to-video";
const FAL_POOL: &str = "fal:fal-ai/pika/v2.2/image-to-video";
const FAL_SLOTS: u32 = 10;
/// The longest dispatch wait the fal simulator draws (0.5 + 1.5 s); a longer wait between
/// submit and start means the request queued behind the account's concurrency.
const FAL_DISPATCH_MAX_S: f64 = 2.0;

/// One provider job on the run's common time line: real seconds since the run's start for its
/// create and end, simulated seconds for its drawn duration.
struct Job {
    provider: &'static str,
    created: f64,
    ended: Option<f64>,
    duration: f64,
}

struct Makespan {
    measured: f64,
    /// Per provider, busy slot time over its slots while shots still waited for a create.
    backlog_util: [(&'static str, f64); 2],
    ideal: f64,
    kling_jobs: usize,
    fal_jobs: usize,
    unfinished: usize,
    fal_queued: usize,
    requests: u64,
    wall: Duration,
    status: String,
}

/// slotd on SQLite in `dir` with the Kling video and fal handlers against the simulators, the
/// pools at the accounts' limits, the `clip` route over both, callbacks to `public`.
fn makespan_config(
    dir: &std::path::Path,
    kling: &SimHandle,
    fal: &FalSimHandle,
    time_scale: f64,
    public: Option<std::net::SocketAddr>,
) -> anyhow::Result<Config> {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins)?;
    for h in ["kling-video", "fal-video"] {
        let src =
            slotd_testkit::built_handler(h).ok_or_else(|| anyhow::anyhow!("{h} not built"))?;
        std::fs::copy(src, plugins.join(format!("{h}.wasm")))?;
    }
    let mut c = Config::default();
    c.database_url = format!("sqlite://{}", dir.join("bench.db").display());
    c.plugins_dir = plugins;
    c.object_store = format!("file://{}", dir.join("objects").display());
    // The seed's timings, compressed like the providers' time (as the `kling` group).
    c.scheduler = SchedulerConfig::scaled_to(Duration::from_secs_f64(10.0 * time_scale));
    c.max_units_per_task = 1000;
    c.public_url = public.map(|addr| format!("http://{addr}"));
    c.pools
        .insert(KLING_POOL.into(), PoolConfig::slots(KLING_SLOTS));
    c.pools
        .insert(FAL_POOL.into(), PoolConfig::slots(FAL_SLOTS));
    let mut k = HandlerConfig::default();
    k.settings
        .insert("base_url".into(), kling.base_url().to_string());
    k.settings.insert("access_key".into(), "AK".into());
    k.settings
        .insert("expected_duration_scale".into(), time_scale.to_string());
    k.secrets.insert("secret_key".into(), Secret::new("SK"));
    k.allowed_hosts.push(kling.addr().to_string());
    c.handlers.insert("kling-video".into(), k);
    let mut f = HandlerConfig::default();
    for (key, value) in [
        ("base_url", fal.base_url().to_string()),
        ("history_url", fal.base_url().to_string()),
        ("jwks_url", fal.jwks_url()),
        ("concurrency", FAL_SLOTS.to_string()),
        ("expected_duration_scale", time_scale.to_string()),
    ] {
        f.settings.insert(key.into(), value);
    }
    f.secrets
        .insert("api_key".into(), Secret::new(slotd_sim::fal::KEY_DEFAULT));
    f.allowed_hosts.push(fal.addr().to_string());
    c.handlers.insert("fal-video".into(), f);
    c.routes.insert(
        ROUTE.into(),
        RouteConfig {
            policy: RoutePolicy::Ordered,
            targets: vec![
                RouteTarget {
                    handler: "kling-video".into(),
                    model: "kling-v1-6".into(),
                    weight: None,
                },
                RouteTarget {
                    handler: "fal-video".into(),
                    model: FAL_MODEL.into(),
                    weight: None,
                },
            ],
        },
    );
    Ok(c)
}

/// `n` canonical image-to-video shots of 5 s, 16:9 (no `seed`: Kling takes none).
fn shots(n: usize) -> Value {
    let shots: Vec<Value> = (0..n)
        .map(|i| {
            json!({"prompt": format!("shot {i}: a paper boat drifts down a gutter"),
                   "image_url": format!("https://example.com/bench/{i}.png"),
                   "duration": 5, "aspect_ratio": "16:9"})
        })
        .collect();
    json!({ "shots": shots })
}

async fn makespan_run(
    shots_n: usize,
    time_scale: f64,
    callbacks: bool,
) -> anyhow::Result<Makespan> {
    let dir = tempfile::TempDir::new()?;
    // The run's time line: real seconds since `t0`.
    let t0 = Instant::now();
    let since = |t: Instant| t.saturating_duration_since(t0).as_secs_f64();
    let kling = slotd_sim::kling::start(SimOptions {
        listen: "127.0.0.1:0".parse()?,
        concurrency: KLING_SLOTS,
        time_scale,
        seed: 2026,
        access_key: "AK".into(),
        secret_key: "SK".into(),
        long_tail_rate: 0.0,
        ..SimOptions::default()
    })
    .await?;
    // fal's job times count from the simulator's start (its clock is made in `spawn`).
    let fal_origin = since(Instant::now());
    let fal = slotd_sim::fal::spawn(FalOptions {
        listen: "127.0.0.1:0".parse()?,
        concurrency: FAL_SLOTS,
        time_scale,
        seed: 2026,
        long_tail_rate: 0.0,
        ..FalOptions::default()
    })
    .await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let config = makespan_config(
        dir.path(),
        &kling,
        &fal,
        time_scale,
        callbacks.then_some(addr),
    )?;
    let services = slotd_server::app::build(config).await?;
    for h in ["kling-video", "fal-video"] {
        let routable = services.registry.by_name(h).is_some_and(|l| l.routable());
        anyhow::ensure!(routable, "{h} is not loaded or serves no routes");
    }
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(slotd_server::run_with(
        services,
        Some(listener),
        async move {
            rx.await.ok();
        },
    ));
    let base = format!("http://{addr}");
    let client = reqwest::Client::new();
    let started = Instant::now();
    let resp = client
        .post(format!("{base}/v1/tasks/{ROUTE}"))
        .json(&json!({ "payload": shots(shots_n) }))
        .send()
        .await?;
    let code = resp.status();
    let body: Value = resp.json().await?;
    anyhow::ensure!(code.as_u16() == 202, "submit answered {code}: {body}");
    let id = body["task_id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("no task id: {body}"))?;
    // Kling's job times count from its first create, which no list shows in real time; while
    // a job runs, its busy window is "now − first create", so one read then places it.
    let mut kling_origin = None;
    let trace = std::env::var_os("SLOTD_BENCH_ROUTES_TRACE").is_some();
    let mut last_trace = Instant::now();
    let view = loop {
        if kling_origin.is_none() {
            let before = Instant::now();
            let stats = kling.stats();
            if stats.running > 0 {
                kling_origin = Some(since(before) - stats.busy_window_seconds * time_scale);
            }
        }
        let v: Value = client
            .get(format!("{base}/v1/tasks/{id}"))
            .send()
            .await?
            .json()
            .await?;
        if matches!(v["status"].as_str(), Some("completed" | "failed")) {
            break v;
        }
        if trace && last_trace.elapsed() >= Duration::from_secs_f64(50.0 * time_scale) {
            last_trace = Instant::now();
            let pools: Value = client
                .get(format!("{base}/v1/pools"))
                .send()
                .await?
                .json()
                .await?;
            let at = started.elapsed().as_secs_f64() / time_scale;
            for p in pools.as_array().into_iter().flatten() {
                let name = p["name"].as_str().unwrap_or_default();
                if [KLING_POOL, FAL_POOL, route_pool(ROUTE).as_str()].contains(&name) {
                    eprintln!(
                        "  at {at:>6.1} s: {name}: used {}, effective {}, units {}",
                        p["used"], p["effective_max_slots"], p["units"]
                    );
                }
            }
        }
        if started.elapsed() > Duration::from_secs(600) {
            anyhow::bail!("run did not finish: {}", v["message"]);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let wall = started.elapsed();
    stop.send(()).ok();
    server.await??;
    let kling_jobs = kling.jobs();
    let fal_jobs = fal.jobs();
    if trace {
        let k = kling.stats();
        let f = fal.stats();
        eprintln!(
            "  Kling: {} callbacks answered ({} refused), {} without answer; fal: {} webhook \
             attempts, {} answered 2xx, {} failed, {} given up",
            k.callbacks_sent,
            k.callbacks_rejected,
            k.callbacks_failed,
            f.webhook_attempts,
            f.webhooks_sent,
            f.webhooks_failed,
            f.webhooks_given_up
        );
    }
    let kling_origin = match kling_origin {
        Some(o) => o,
        None if kling_jobs.is_empty() => 0.0,
        None => anyhow::bail!("never saw a Kling job running: its times cannot be placed"),
    };
    let real = |origin: f64, sim_s: f64| origin + sim_s * time_scale;
    let mut jobs: Vec<Job> = Vec::with_capacity(kling_jobs.len() + fal_jobs.len());
    jobs.extend(kling_jobs.iter().map(|j| Job {
        provider: "kling",
        created: real(kling_origin, j.started),
        ended: j.ended.map(|e| real(kling_origin, e)),
        duration: j.planned_seconds,
    }));
    let mut fal_queued = 0;
    jobs.extend(fal_jobs.iter().map(|j| {
        let dispatch = j.started.map_or(0.0, |s| (s - j.submitted).max(0.0));
        if dispatch > FAL_DISPATCH_MAX_S + 0.05 {
            fal_queued += 1;
        }
        Job {
            provider: "fal",
            created: real(fal_origin, j.submitted),
            ended: j.ended.map(|e| real(fal_origin, e)),
            duration: dispatch.min(FAL_DISPATCH_MAX_S) + j.planned_seconds,
        }
    }));
    jobs.sort_by(|a, b| a.created.total_cmp(&b.created));
    let durations: Vec<f64> = jobs.iter().map(|j| j.duration).collect();
    let first = jobs.first().map_or(0.0, |j| j.created);
    let last = jobs.iter().filter_map(|j| j.ended).fold(first, f64::max);
    let last_create = jobs.iter().map(|j| j.created).fold(first, f64::max);
    let backlog_util = [("Kling", "kling", KLING_SLOTS), ("fal", "fal", FAL_SLOTS)].map(
        |(name, provider, slots)| {
            let busy: f64 = jobs
                .iter()
                .filter(|j| j.provider == provider)
                .map(|j| (j.ended.unwrap_or(last).min(last_create) - j.created).max(0.0))
                .sum();
            let window = f64::from(slots) * (last_create - first);
            (name, if window > 0.0 { busy / window } else { 1.0 })
        },
    );
    if trace {
        let sim = |t: f64| (t - first) / time_scale;
        for j in &jobs {
            eprintln!(
                "  {:<5} created {:>7.1} s, ended {:>7.1} s, drawn {:>6.1} s",
                j.provider,
                sim(j.created),
                j.ended.map_or(f64::NAN, sim),
                j.duration
            );
        }
    }
    eprintln!(
        "  sim origins: Kling's first create {:.1} ms after fal's start",
        (kling_origin - fal_origin) * 1e3
    );
    Ok(Makespan {
        measured: (last - first) / time_scale,
        backlog_util,
        ideal: ideal_fifo_makespan(&durations, KLING_SLOTS + FAL_SLOTS),
        kling_jobs: kling_jobs.len(),
        fal_jobs: fal_jobs.len(),
        unfinished: jobs.iter().filter(|j| j.ended.is_none()).count(),
        fal_queued,
        requests: kling.stats().requests + fal.stats().requests,
        wall,
        status: view["status"].as_str().unwrap_or("?").to_string(),
    })
}

async fn makespan(report: &mut Report) {
    let shots_n: usize = std::env::var("SLOTD_BENCH_SHOTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let scale: f64 = std::env::var("SLOTD_BENCH_TIME_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.1);
    let callbacks = std::env::var("SLOTD_BENCH_ROUTES_CALLBACKS").map_or(true, |v| v != "0");
    let mode = if callbacks { "callbacks" } else { "polling" };
    eprintln!(
        "routes: {shots_n} shots on route {ROUTE:?} over Kling ({KLING_SLOTS} slots) and fal \
         ({FAL_SLOTS}) at time x{scale}, {mode}…"
    );
    let m = makespan_run(shots_n, scale, callbacks)
        .await
        .expect("routes run");
    let ratio = if m.ideal > 0.0 {
        m.measured / m.ideal
    } else {
        1.0
    };
    eprintln!(
        "routes: task {}, {} jobs on Kling and {} on fal, {} provider requests, wall {:.1} s",
        m.status,
        m.kling_jobs,
        m.fal_jobs,
        m.requests,
        m.wall.as_secs_f64()
    );
    if m.unfinished > 0 || m.kling_jobs + m.fal_jobs != shots_n || m.status != "completed" {
        eprintln!(
            "routes: WARNING {} jobs for {shots_n} shots, {} unfinished: the figures are off",
            m.kling_jobs + m.fal_jobs,
            m.unfinished
        );
    }
    if m.fal_queued > 0 {
        eprintln!(
            "routes: WARNING {} fal requests queued behind the account's concurrency",
            m.fal_queued
        );
    }
    eprintln!(
        "routes: slots busy while shots waited: {}",
        m.backlog_util
            .iter()
            .map(|(p, u)| format!("{p} {u:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // A polling run's figures are named apart: the target is the callbacks run's.
    let name = |n: &str| {
        if callbacks {
            n.to_string()
        } else {
            format!("{n}_polling")
        }
    };
    eprintln!(
        "routes: makespan {:.1} s, ideal FIFO on {} slots {:.1} s (simulated): {ratio:.4} x",
        m.measured,
        KLING_SLOTS + FAL_SLOTS,
        m.ideal
    );
    report.add(
        &name("routes_makespan_ratio"),
        "sqlite",
        ratio,
        "x",
        Target::AtMost(1.02),
    );
    report.add(
        &name("routes_makespan_s"),
        "sqlite",
        m.measured,
        "s",
        Target::None(Better::Lower),
    );
    report.add(
        &name("routes_ideal_makespan_s"),
        "sqlite",
        m.ideal,
        "s",
        Target::None(Better::Lower),
    );
}

/// The fixture's plan of unit `index` in `pool` (task type = pool, stage `main`), as a route
/// option.
fn fixture_option(model: &str, pool: &str, index: u32) -> RouteOption {
    RouteOption {
        handler: "fixture".into(),
        model: model.into(),
        plan: Some(TargetUnit {
            task_type: pool.into(),
            stage: "main".into(),
            pool: pool.into(),
            spec: json!({"behavior": "quick", "index": index}).to_string(),
            state: "{}".into(),
            estimate: None,
            expected_ms: None,
        }),
        refused: None,
    }
}

/// Store `units` pending units of the route, in tasks of 1,000, as a route's task would.
async fn seed_routed(services: &slotd_server::services::Services, units: u32, now: i64) {
    // The service holds no unit write: the seed writes as another process would, through a
    // store of its own on the same database.
    let store = slotd_store::open(&services.config.database_url)
        .await
        .expect("the store, with its unit writes");
    let mut left = units;
    while left > 0 {
        let n = left.min(1000);
        left -= n;
        let units = (0..n)
            .map(|i| {
                let routing = UnitRouting {
                    route: ROUTE.into(),
                    options: vec![
                        fixture_option("quick", "fixture", i),
                        fixture_option("quick-b", "fixture-b", i),
                    ],
                    bound: None,
                };
                NewUnit {
                    id: uuid::Uuid::now_v7().to_string(),
                    pool: route_pool(ROUTE),
                    stage: ROUTE_STAGE.into(),
                    spec: json!({"prompt": format!("shot {i}"), "duration": 5.0,
                                 "aspect_ratio": "16:9"})
                    .to_string(),
                    state: "{}".into(),
                    routes: None,
                    routing: Some(routing.to_json()),
                    cost_estimate: None,
                    planned_release: None,
                }
            })
            .collect();
        let task = NewTask {
            id: uuid::Uuid::now_v7().to_string(),
            tenant: "local".into(),
            task_type: ROUTE.into(),
            payload: r#"{"shots":[]}"#.into(),
            idempotency_key: None,
            priority: 0,
            completion_webhook_url: None,
            units,
            now,
            terms: TaskTerms::default(),
        };
        store.task_create(task).await.expect("store routed task");
    }
}

/// `run_once_fill_10k` with the pending units on a route.
async fn fill_routed(report: &mut Report, backend: &str, url: &str) -> f64 {
    let dir = tempfile::TempDir::new().expect("tmp");
    let (services, sched, clock) = scheduler(dir.path(), DUE, url, |c| {
        c.routes.insert(
            ROUTE.into(),
            RouteConfig {
                policy: RoutePolicy::Ordered,
                targets: ["quick", "quick-b"]
                    .iter()
                    .map(|m| RouteTarget {
                        handler: "fixture".into(),
                        model: (*m).into(),
                        weight: None,
                    })
                    .collect(),
            },
        );
    })
    .await;
    let rounds = 5;
    seed_routed(&services, IN_FLIGHT + rounds * DUE, clock.now_ms()).await;
    let mut fills = Vec::new();
    let mut steps = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let r = sched
            .run_once("fixture", clock.now_ms())
            .await
            .expect("fill tick");
        fills.push(t.elapsed());
        steps.push((t.elapsed(), r.steps.clone()));
        assert_eq!(
            r.claimed as u32, DUE,
            "a routed fill tick should fill {DUE} slots"
        );
        clock.advance(60_000);
        let r = sched
            .run_once("fixture", clock.now_ms())
            .await
            .expect("freeing tick");
        assert_eq!(r.succeeded as u32, DUE, "the poll should end every unit");
        clock.advance(1);
    }
    let left = services
        .store
        .unit_list_pending(&route_pool(ROUTE), &[ROUTE.to_string()], clock.now_ms(), 1)
        .await
        .expect("pending on the route");
    assert!(!left.is_empty(), "the route's backlog should remain");
    print_steps(backend, "routed fill", steps);
    let fill_ms = ms(median(fills));
    report.add(
        "run_once_fill_routed_10k",
        backend,
        fill_ms,
        "ms",
        Target::AtMost(20.0),
    );
    fill_ms
}

pub async fn run(report: &mut Report) {
    makespan(report).await;
    let dir = tempfile::TempDir::new().expect("tmp");
    for (backend, url) in crate::common::backends(dir.path()).await {
        eprintln!("routes: {backend}, fill ticks at {IN_FLIGHT}+ pending on a route…");
        let routed = fill_routed(report, backend, &url).await;
        let plain = report
            .records
            .iter()
            .find(|r| r.name == "run_once_fill_10k" && r.backend == backend)
            .map(|r| r.value);
        match plain {
            Some(plain) => eprintln!(
                "routes: {backend} fill tick {routed:.2} ms routed, {plain:.2} ms unrouted \
                 (run_once_fill_10k): {:.2} x",
                routed / plain.max(1e-9)
            ),
            None => eprintln!(
                "routes: {backend} fill tick {routed:.2} ms routed (run `tick` in the same run \
                 for the unrouted figure beside it)"
            ),
        }
    }
}
