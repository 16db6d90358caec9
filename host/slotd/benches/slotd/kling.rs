//! Slot fullness at a small request budget (docs/testing.md), against the real Kling simulator with the
//! real handler and scheduler: a backlog of shots on `kling:video` (pool = account limit = 20),
//! once polling only and once with callbacks. Backlog utilization is busy slot-seconds over
//! (slots × the time shots were still waiting to be submitted); makespan is divided by the ideal
//! zero-overhead FIFO schedule of the same jobs. Each run is made embedded (SQLite, one
//! process: the `sqlite` column) and in cluster mode (PostgreSQL and Redis, one API and two
//! scheduler processes: the `cluster` column; skipped when either server does not answer).
//! `SLOTD_BENCH_SHOTS` and `SLOTD_BENCH_TIME_SCALE` change the run (100 shots at time × 0.1 by
//! default).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use slotd::demo::report::{ideal_fifo_makespan, pool_figures};
use slotd_core::config::{Config, HandlerConfig, PoolConfig, SchedulerConfig, Secret};
use slotd_sim::kling::SimOptions;

use crate::report::{Report, Target};

pub(crate) const LIMIT: u32 = 20;

pub(crate) struct Figures {
    pub backlog_util: f64,
    pub util: f64,
    pub makespan_ratio: f64,
    pub requests_per_shot: f64,
    /// Create requests, accepted or refused 1303.
    pub create_requests: u64,
    /// Shots completed.
    pub shots: u64,
    pub refusals_1303: u64,
    /// Per burst of the other client: simulated seconds from its end until slotd's jobs filled
    /// what it gave back.
    pub refill_delays: Vec<f64>,
    /// Queries of one task sooner than the handler's pace after its create or previous query,
    /// counted by the simulator.
    pub reads_too_soon: u64,
    /// Mean time a freed slot stood idle, simulated seconds ([`idle_between_jobs`]).
    pub idle_gap: f64,
    /// Mean job length, simulated seconds.
    pub mean_job: f64,
    pub wall: Duration,
}

/// How long a freed slot stood idle, on average (simulated seconds): the i-th job to end
/// against the start of the (LIMIT + i)-th job, the one that took its slot; and the mean
/// job's length. Nearly all of it is the time until a poll noticed the end (a slot freed by a
/// noticed end is granted and created within milliseconds), so `idle / job` is about what
/// polling costs in utilization.
fn idle_between_jobs(jobs: &[slotd_sim::kling::SimJob]) -> (f64, f64) {
    let mut starts: Vec<f64> = jobs.iter().map(|j| j.started).collect();
    let mut ends: Vec<f64> = jobs.iter().filter_map(|j| j.ended).collect();
    starts.sort_by(f64::total_cmp);
    ends.sort_by(f64::total_cmp);
    let gaps: Vec<f64> = ends
        .iter()
        .zip(starts.iter().skip(LIMIT as usize))
        .map(|(end, next)| (next - end).max(0.0))
        .collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let lengths: Vec<f64> = jobs.iter().map(|j| j.planned_seconds).collect();
    (mean(&gaps), mean(&lengths))
}

/// slotd on SQLite in `dir` with the Kling video handler against `sim`, the pool at the
/// account limit, timings compressed like the provider's time; callbacks to `public` if given.
fn config(
    dir: &std::path::Path,
    sim: &slotd_sim::kling::SimHandle,
    time_scale: f64,
    prior: f64,
    public: Option<std::net::SocketAddr>,
) -> anyhow::Result<Config> {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins)?;
    let src = slotd_testkit::built_handler("kling-video")
        .ok_or_else(|| anyhow::anyhow!("kling-video not built"))?;
    std::fs::copy(src, plugins.join("kling-video.wasm"))?;
    let mut c = Config::default();
    c.database_url = format!("sqlite://{}", dir.join("bench.db").display());
    c.plugins_dir = plugins;
    c.object_store = format!("file://{}", dir.join("objects").display());
    // The seed's timings, compressed like the provider's time.
    c.scheduler = SchedulerConfig::scaled_to(Duration::from_secs_f64(10.0 * time_scale));
    c.max_units_per_task = 1000;
    c.pools
        .insert("kling:video".into(), PoolConfig::slots(LIMIT));
    let mut h = HandlerConfig::default();
    h.settings
        .insert("base_url".into(), sim.base_url().to_string());
    h.settings.insert("access_key".into(), "AK".into());
    h.settings
        .insert("expected_duration_scale".into(), time_scale.to_string());
    if prior != 1.0 {
        // The handler expects jobs `prior` × as long as they run (its pace stays).
        h.settings.insert(
            "stated_duration_scale".into(),
            (time_scale * prior).to_string(),
        );
    }
    h.secrets.insert("secret_key".into(), Secret::new("SK"));
    h.allowed_hosts.push(sim.addr().to_string());
    c.handlers.insert("kling-video".into(), h);
    c.public_url = public.map(|addr| format!("http://{addr}"));
    Ok(c)
}

/// Where slotd runs for a Kling run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Deployment {
    /// One process, SQLite, in-process slots (the embedded defaults).
    Embedded,
    /// PostgreSQL and Redis, one API and two scheduler processes ([`crate::cluster`]).
    Cluster,
}

/// The `[handlers.kling-video]` section of [`config`], as a cluster's file says it.
fn handler_toml(sim: &slotd_sim::kling::SimHandle, time_scale: f64) -> String {
    format!(
        "[handlers.kling-video]\nbase_url = \"{}\"\naccess_key = \"AK\"\nsecret_key = \"SK\"\n\
         expected_duration_scale = \"{time_scale}\"\nallowed_hosts = [\"{}\"]\n",
        sim.base_url(),
        sim.addr()
    )
}

/// slotd running one way or the other, until stopped.
pub(crate) enum Running {
    Embedded {
        stop: tokio::sync::oneshot::Sender<()>,
        server: tokio::task::JoinHandle<anyhow::Result<()>>,
    },
    Cluster(crate::cluster::Cluster),
}

pub(crate) async fn start(
    deployment: Deployment,
    dir: &std::path::Path,
    sim: &slotd_sim::kling::SimHandle,
    time_scale: f64,
    callbacks: bool,
) -> anyhow::Result<Option<(String, Running)>> {
    start_with_prior(deployment, dir, sim, time_scale, 1.0, callbacks).await
}

/// [`start`] with the handler's stated durations `prior` × the real ones (embedded only).
async fn start_with_prior(
    deployment: Deployment,
    dir: &std::path::Path,
    sim: &slotd_sim::kling::SimHandle,
    time_scale: f64,
    prior: f64,
    callbacks: bool,
) -> anyhow::Result<Option<(String, Running)>> {
    if deployment == Deployment::Cluster {
        let tick = Duration::from_secs_f64(10.0 * time_scale);
        let handler = handler_toml(sim, time_scale);
        let Some(c) = crate::cluster::start(dir, &handler, LIMIT, tick, callbacks).await? else {
            return Ok(None);
        };
        return Ok(Some((c.base.clone(), Running::Cluster(c))));
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let c = config(dir, sim, time_scale, prior, callbacks.then_some(addr))?;
    let services = slotd_server::app::build(c).await?;
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(slotd_server::run_with(
        services,
        Some(listener),
        async move {
            rx.await.ok();
        },
    ));
    Ok(Some((
        format!("http://{addr}"),
        Running::Embedded { stop, server },
    )))
}

/// Post one Kling video task of `shots` 5 s std shots; its id.
pub(crate) async fn create_video_task(
    client: &reqwest::Client,
    base: &str,
    shots: usize,
) -> anyhow::Result<String> {
    let shots: Vec<Value> = (0..shots)
        .map(|i| json!({"prompt": format!("shot {i}")}))
        .collect();
    let resp: Value = client
        .post(format!("{base}/v1/tasks/video"))
        .json(&json!({"payload": {"model_name": "kling-v1-6", "mode": "std", "duration": "5", "shots": shots}}))
        .send()
        .await?
        .json()
        .await?;
    resp["task_id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("no task id: {resp}"))
}

/// The classes of the mixed workload, in the order shots cycle through them: two 5 s `std`
/// shots, then a 5 s `pro`, a 10 s `std` and a 10 s `pro` (the last three run 60–300 simulated
/// seconds, the first 30–120; any may land in Kling's long tail, 10–15 minutes).
pub(crate) const MIX: [(&str, &str); 5] = [
    ("std", "5"),
    ("std", "5"),
    ("pro", "5"),
    ("std", "10"),
    ("pro", "10"),
];

/// Post one Kling video task of `shots` shots cycling through [`MIX`]; its id.
pub(crate) async fn create_mixed_task(
    client: &reqwest::Client,
    base: &str,
    shots: usize,
) -> anyhow::Result<String> {
    let shots: Vec<Value> = (0..shots)
        .map(|i| {
            let (mode, duration) = MIX[i % MIX.len()];
            json!({"prompt": format!("shot {i}"), "mode": mode, "duration": duration})
        })
        .collect();
    let resp: Value = client
        .post(format!("{base}/v1/tasks/video"))
        .json(&json!({"payload": {"model_name": "kling-v1-6", "shots": shots}}))
        .send()
        .await?
        .json()
        .await?;
    resp["task_id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("no task id: {resp}"))
}

/// One run of the Kling benchmark: where slotd runs, the shots, the provider's behaviour.
#[derive(Clone, Debug)]
pub(crate) struct RunSpec {
    pub deployment: Deployment,
    pub shots: usize,
    pub time_scale: f64,
    /// The handler's stated durations are `prior` × the real ones.
    pub prior: f64,
    pub callbacks: bool,
    /// Share of creates the simulator refuses 1303 at random.
    pub over_capacity_rate: f64,
    /// Another client of the account: (slots, burst, gap), simulated seconds.
    pub other_client: Option<(u32, f64, f64)>,
}

impl RunSpec {
    pub(crate) fn new(
        deployment: Deployment,
        shots: usize,
        time_scale: f64,
        callbacks: bool,
    ) -> Self {
        RunSpec {
            deployment,
            shots,
            time_scale,
            prior: 1.0,
            callbacks,
            over_capacity_rate: 0.0,
            other_client: None,
        }
    }
}

/// The Kling simulator as `spec` asks for it: the account at [`LIMIT`], its random refusals
/// and its other client.
async fn start_sim(spec: &RunSpec) -> anyhow::Result<slotd_sim::kling::SimHandle> {
    let time_scale = spec.time_scale;
    let (other_slots, burst, gap) = spec.other_client.unwrap_or((0, 0.0, 0.0));
    let sim = slotd_sim::kling::start(SimOptions {
        listen: "127.0.0.1:0".parse()?,
        concurrency: LIMIT,
        time_scale,
        seed: 2026,
        access_key: "AK".into(),
        secret_key: "SK".into(),
        over_capacity_rate: spec.over_capacity_rate,
        other_client_slots: other_slots,
        other_client_burst_secs: if other_slots > 0 {
            burst
        } else {
            SimOptions::default().other_client_burst_secs
        },
        other_client_gap_secs: if other_slots > 0 {
            gap
        } else {
            SimOptions::default().other_client_gap_secs
        },
        ..SimOptions::default()
    })
    .await?;
    Ok(sim)
}

pub(crate) async fn run_one(spec: &RunSpec) -> anyhow::Result<Option<Figures>> {
    let time_scale = spec.time_scale;
    let dir = tempfile::TempDir::new()?;
    let sim = start_sim(spec).await?;
    let Some((base, running)) = start_with_prior(
        spec.deployment,
        dir.path(),
        &sim,
        time_scale,
        spec.prior,
        spec.callbacks,
    )
    .await?
    else {
        return Ok(None);
    };
    let client = reqwest::Client::new();
    let started = Instant::now();
    let id = create_mixed_task(&client, &base, spec.shots).await?;
    let view = loop {
        let v: Value = client
            .get(format!("{base}/v1/tasks/{id}"))
            .send()
            .await?
            .json()
            .await?;
        if matches!(v["status"].as_str(), Some("completed" | "failed")) {
            break v;
        }
        if started.elapsed() > Duration::from_secs(600) {
            anyhow::bail!("run did not finish: {}", v["message"]);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let wall = started.elapsed();
    let stats = sim.stats();
    eprintln!(
        "  provider requests: {} ({} creates, {} single queries, {} list queries), {} downloads; \
         queries of a task sooner than its pace: {}",
        stats.requests,
        stats.creates,
        stats.single_queries,
        stats.list_queries,
        stats.downloads,
        stats.single_reads_too_soon
    );
    let jobs = sim.jobs();
    let (idle_gap, mean_job) = idle_between_jobs(&jobs);
    let slots = BTreeMap::from([("kling:video".to_string(), LIMIT)]);
    let f = pool_figures(&jobs, &slots)
        .remove("kling:video")
        .unwrap_or_default();
    let durations: Vec<f64> = jobs.iter().map(|j| j.planned_seconds).collect();
    let ideal = ideal_fifo_makespan(&durations, LIMIT);
    // Makespan from the first submission (sim time 0 is the first create).
    let last_end = jobs.iter().filter_map(|j| j.ended).fold(0.0, f64::max);
    let completed = view["completed"].as_u64().unwrap_or(0).max(1);
    let refill = slotd_sim::kling::refill_delays(&jobs, &stats.other_client_bursts, LIMIT);
    match running {
        Running::Embedded { stop, server } => {
            stop.send(()).ok();
            server.await??;
        }
        // Killing the processes (the cluster's drop) is all it takes.
        Running::Cluster(cluster) => drop(cluster),
    }
    Ok(Some(Figures {
        backlog_util: f.backlog_utilization,
        util: f.utilization,
        makespan_ratio: if ideal > 0.0 { last_end / ideal } else { 1.0 },
        requests_per_shot: stats.requests as f64 / completed as f64,
        create_requests: stats.creates + stats.rate_limited_1303,
        shots: completed,
        refusals_1303: stats.rate_limited_1303,
        refill_delays: refill.into_iter().flatten().collect(),
        reads_too_soon: stats.single_reads_too_soon,
        idle_gap,
        mean_job,
        wall,
    }))
}

/// `SLOTD_BENCH_SHOTS`, 100 by default.
pub(crate) fn shots() -> usize {
    std::env::var("SLOTD_BENCH_SHOTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100)
}

/// `SLOTD_BENCH_TIME_SCALE`, 0.1 by default.
pub(crate) fn time_scale() -> f64 {
    std::env::var("SLOTD_BENCH_TIME_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.1)
}

pub async fn run(report: &mut Report) {
    let shots = shots();
    let scale = time_scale();
    for (mode, callbacks, util, makespan, requests) in [
        ("polling", false, 0.98, 1.02, 3.0),
        ("callbacks", true, 0.995, 1.01, 1.1),
    ] {
        for (deployment, backend) in [
            (Deployment::Embedded, "sqlite"),
            (Deployment::Cluster, "cluster"),
        ] {
            eprintln!(
                "kling: {shots} shots on {LIMIT} slots at time x{scale}, {mode}, {deployment:?}…"
            );
            let Some(f) = run_one(&RunSpec::new(deployment, shots, scale, callbacks))
                .await
                .expect("kling run")
            else {
                continue;
            };
            eprintln!(
                "kling {mode} {deployment:?}: whole-run utilization {:.4}, wall {:.1} s",
                f.util,
                f.wall.as_secs_f64()
            );
            let name = |n: &str| format!("mixed_{n}_{mode}");
            report.add(
                &name("backlog_util"),
                backend,
                f.backlog_util,
                "ratio",
                Target::AtLeast(util),
            );
            report.add(
                &name("makespan_fifo"),
                backend,
                f.makespan_ratio,
                "ratio",
                Target::AtMost(makespan),
            );
            report.add(
                &name("requests_per_shot"),
                backend,
                f.requests_per_shot,
                "1",
                Target::AtMost(requests),
            );
            report.add(
                &name("refusals_1303"),
                backend,
                f.refusals_1303 as f64,
                "1",
                Target::AtMost(0.0),
            );
            report.add(
                &name("reads_too_soon"),
                backend,
                f.reads_too_soon as f64,
                "1",
                Target::AtMost(0.0),
            );
        }
    }
}

/// A wrong duration prior (docs/testing.md, `prior`): the polling mode, embedded, at time × 0.1, with the
/// handler's stated durations right, ten times too long and ten times too short (its poll pace
/// unchanged): backlog utilization and provider requests per shot of each, printed beside the
/// right prior's. `SLOTD_BENCH_SHOTS` changes the run (100 shots by default).
pub async fn run_prior(report: &mut Report) {
    let shots = shots();
    let scale = 0.1;
    let mut right = None;
    for (name, prior) in [("right", 1.0), ("10x_long", 10.0), ("10x_short", 0.1)] {
        eprintln!("kling prior {name}: {shots} shots on {LIMIT} slots at time x{scale}, polling…");
        let spec = RunSpec {
            prior,
            ..RunSpec::new(Deployment::Embedded, shots, scale, false)
        };
        let f = run_one(&spec)
            .await
            .expect("kling run")
            .expect("an embedded run always starts");
        let baseline = *right.get_or_insert(f.backlog_util);
        eprintln!(
            "kling prior {name}: backlog utilization {:.4} ({:.3}x the right prior's), {:.2} \
             provider requests per shot, a freed slot idle {:.2} s on average (jobs {:.1} s), \
             wall {:.1} s",
            f.backlog_util,
            f.backlog_util / baseline.max(1e-9),
            f.requests_per_shot,
            f.idle_gap,
            f.mean_job,
            f.wall.as_secs_f64()
        );
        report.add(
            &format!("mixed_backlog_util_prior_{name}"),
            "sqlite",
            f.backlog_util,
            "ratio",
            Target::AtLeast(0.98),
        );
        report.add(
            &format!("mixed_requests_per_shot_prior_{name}"),
            "sqlite",
            f.requests_per_shot,
            "1",
            Target::AtMost(3.0),
        );
        report.add(
            &format!("mixed_reads_too_soon_prior_{name}"),
            "sqlite",
            f.reads_too_soon as f64,
            "1",
            Target::AtMost(0.0),
        );
    }
}
