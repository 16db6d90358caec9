//! `scale`: what one unit costs the shared parts of a cluster, and how the cluster grows
//! (docs/scale.md). Real processes: one `--role api` and M `--role scheduler` processes of the
//! real binary over one PostgreSQL database and one Redis server of their own (so the servers'
//! statistics count this run only), N Kling simulators (one per account, 20 jobs at once each)
//! in this process, provider callbacks on.
//!
//! Two kinds of runs:
//! - **steady**: 10 s videos arrive at a million units a day scaled to the run (× N/100
//!   accounts, ÷ the time scale), for `SLOTD_SCALE_SECONDS` (60); at that rate 100 accounts'
//!   slots are ~1.2× oversubscribed, so work waits. Per unit: PostgreSQL statements, WAL
//!   bytes and rows written (`pg_stat_statements` and `pg_stat_database` of the run's own
//!   database), Redis commands (`INFO commandstats`), scheduler and API CPU time
//!   (`/proc/PID/stat`); per run: slot utilization while work waits and the arrival-to-submit
//!   latency (both from the simulators' own job log), read before anything is dropped.
//! - **saturated**: a burst of short jobs (time × 0.002) far beyond what slotd can turn over,
//!   so the figure is slotd's own throughput, with 1, 2 and 4 schedulers; when 4 do not give
//!   3× of 1, the resource that saturated first (host CPU, or the busiest process) is named.
//!
//! `SLOTD_SCALE_TIME_SCALE` (0.1) compresses the jobs of the steady runs, `SLOTD_SCALE_BURST`
//! (4,000) sizes the saturated ones.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use slotd_sim::kling::{SimHandle, SimOptions};

use crate::cluster;
use crate::report::{Better, Report, Target};

mod analysis;
mod servers;

use analysis::{fifo_latencies, jobs_wall, quantile, utilization_while_waiting};

use servers::{Counters, PrivateDb, PrivateRedis};

const SLOTS_PER_ACCOUNT: u32 = 20;
const UNITS_PER_DAY: f64 = 1_000_000.0;
/// Units in one task (the configured `max_units_per_task`).
const TASK_MAX: usize = 1000;

pub async fn run(report: &mut Report) {
    let time_scale = env_f64("SLOTD_SCALE_TIME_SCALE", 0.1);
    let seconds = env_f64("SLOTD_SCALE_SECONDS", 60.0);
    for (accounts, schedulers) in [(10, 1), (30, 1), (100, 1), (100, 4)] {
        let shape = Shape {
            accounts,
            schedulers,
            time_scale,
            load: Load::Steady {
                for_: Duration::from_secs_f64(seconds),
            },
        };
        match measure(&shape).await {
            Ok(Some(m)) => m.record_steady(report, &shape),
            Ok(None) => return,
            Err(e) => eprintln!("scale {}: {e:#}", shape.backend()),
        }
    }
    let mut throughput = BTreeMap::new();
    for schedulers in [1, 2, 4] {
        let shape = Shape {
            accounts: 100,
            schedulers,
            time_scale: 0.002,
            load: Load::Burst {
                units: env_f64("SLOTD_SCALE_BURST", 4000.0) as usize,
            },
        };
        match measure(&shape).await {
            Ok(Some(m)) => {
                report.add(
                    "scale_units_per_s",
                    &shape.backend(),
                    m.units_per_s,
                    "1/s",
                    Target::None(Better::Higher),
                );
                m.record_costs(report, &shape, "scale_burst");
                throughput.insert(schedulers, m);
            }
            Ok(None) => return,
            Err(e) => eprintln!("scale {}: {e:#}", shape.backend()),
        }
    }
    if let (Some(one), Some(four)) = (throughput.get(&1), throughput.get(&4)) {
        let ratio = four.units_per_s / one.units_per_s.max(f64::MIN_POSITIVE);
        report.add(
            "scale_4_over_1",
            "accounts=100,schedulers=4",
            ratio,
            "x",
            Target::AtLeast(3.0),
        );
        if ratio < 3.0 {
            let (resource, value) = four.saturated_by();
            eprintln!(
                "scale: 4 schedulers give {ratio:.2}× of 1; saturated first: {resource} at {value:.2}"
            );
            report.add(
                "scale_saturated_by",
                "accounts=100,schedulers=4",
                value,
                &resource,
                Target::None(Better::Lower),
            );
        }
    }
}

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|v: &f64| v.is_finite() && *v > 0.0)
        .unwrap_or(default)
}

/// What arrives.
#[derive(Clone, Copy, Debug)]
enum Load {
    /// A million units a day scaled to the run, for this long.
    Steady { for_: Duration },
    /// This many units at once.
    Burst { units: usize },
}

#[derive(Clone, Copy, Debug)]
struct Shape {
    accounts: usize,
    schedulers: usize,
    time_scale: f64,
    load: Load,
}

impl Shape {
    fn backend(&self) -> String {
        format!("accounts={},schedulers={}", self.accounts, self.schedulers)
    }

    fn slots(&self) -> u32 {
        SLOTS_PER_ACCOUNT * self.accounts as u32
    }

    /// Units per second of wall time: a million a day for 100 accounts, in proportion to the
    /// accounts, in the run's compressed time.
    fn rate(&self) -> f64 {
        UNITS_PER_DAY / 86_400.0 * (self.accounts as f64 / 100.0) / self.time_scale
    }
}

/// One run's figures.
struct Measured {
    units: usize,
    wall: Duration,
    units_per_s: f64,
    delta: Counters,
    cores: usize,
    backlog_util: f64,
    latency_p50_ms: f64,
    latency_p99_ms: f64,
    peak_per_account: u32,
}

impl Measured {
    fn per_unit(&self, v: f64) -> f64 {
        v / self.units.max(1) as f64
    }

    fn cpu_of(&self, prefix: &str) -> f64 {
        self.delta
            .cpu
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v)
            .sum()
    }

    fn record_costs(&self, report: &mut Report, shape: &Shape, prefix: &str) {
        let b = shape.backend();
        if let Some(s) = self.delta.pg_statements {
            report.add(
                &format!("{prefix}_pg_statements_per_unit"),
                &b,
                self.per_unit(s),
                "1",
                Target::None(Better::Lower),
            );
        }
        for (name, v, unit) in [
            ("pg_wal_bytes_per_unit", self.delta.pg_wal_bytes, "B"),
            ("pg_rows_per_unit", self.delta.pg_rows, "1"),
            ("redis_commands_per_unit", self.delta.redis_commands, "1"),
            (
                "scheduler_cpu_ms_per_unit",
                self.cpu_of("scheduler") * 1e3,
                "ms",
            ),
            ("api_cpu_ms_per_unit", self.cpu_of("api") * 1e3, "ms"),
            (
                "postgres_cpu_ms_per_unit",
                self.cpu_of("postgres") * 1e3,
                "ms",
            ),
        ] {
            report.add(
                &format!("{prefix}_{name}"),
                &b,
                self.per_unit(v),
                unit,
                Target::None(Better::Lower),
            );
        }
    }

    fn record_steady(&self, report: &mut Report, shape: &Shape) {
        let b = shape.backend();
        self.record_costs(report, shape, "scale");
        let target = if shape.accounts >= 100 {
            Target::AtLeast(0.99)
        } else {
            Target::None(Better::Higher)
        };
        report.add("scale_backlog_util", &b, self.backlog_util, "ratio", target);
        report.add(
            "scale_submit_latency_p50",
            &b,
            self.latency_p50_ms,
            "ms",
            Target::None(Better::Lower),
        );
        report.add(
            "scale_submit_latency_p99",
            &b,
            self.latency_p99_ms,
            "ms",
            Target::None(Better::Lower),
        );
        report.add(
            "scale_steady_units_per_s",
            &b,
            self.units_per_s,
            "1/s",
            Target::None(Better::Higher),
        );
        report.add(
            "scale_account_peak",
            &b,
            f64::from(self.peak_per_account),
            "jobs",
            Target::AtMost(f64::from(SLOTS_PER_ACCOUNT)),
        );
    }

    /// The resource that saturated first: the host's CPU when it was nearly all busy, else
    /// the busiest process (in cores).
    fn saturated_by(&self) -> (String, f64) {
        let secs = self.wall.as_secs_f64().max(1e-9);
        let host = if self.delta.host_total > 0.0 {
            self.delta.host_busy / self.delta.host_total * self.cores as f64
        } else {
            0.0
        };
        if host >= 0.9 * self.cores as f64 {
            return (format!("host_cpu_cores_busy_of_{}", self.cores), host);
        }
        self.delta
            .cpu
            .iter()
            .map(|(k, v)| (format!("{k}_cpu_cores"), v / secs))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or_else(|| ("unknown".into(), 0.0))
    }
}

/// One run, `None` when PostgreSQL or Redis is not there to run it on.
async fn measure(shape: &Shape) -> anyhow::Result<Option<Measured>> {
    let b = shape.backend();
    eprintln!(
        "scale {b}: {:?}, time x{}, {:.0} units/s",
        shape.load,
        shape.time_scale,
        shape.rate()
    );
    let dir = tempfile::TempDir::new()?;
    let Some(db) = PrivateDb::create().await? else {
        eprintln!("PostgreSQL not reachable: the scale figures are skipped");
        return Ok(None);
    };
    let Some(redis) = PrivateRedis::start(dir.path()).await? else {
        eprintln!("redis-server not found or not answering: the scale figures are skipped");
        db.drop_database().await;
        return Ok(None);
    };
    let result = run_on(shape, dir.path(), &db, &redis).await;
    drop(redis);
    db.drop_database().await;
    result.map(Some)
}

async fn run_on(
    shape: &Shape,
    dir: &Path,
    db: &PrivateDb,
    redis: &PrivateRedis,
) -> anyhow::Result<Measured> {
    let mut sims = Vec::new();
    for i in 0..shape.accounts {
        sims.push(
            slotd_sim::kling::start(SimOptions {
                listen: "127.0.0.1:0".parse()?,
                concurrency: SLOTS_PER_ACCOUNT,
                time_scale: shape.time_scale,
                seed: 2026 + i as u64,
                access_key: format!("AK{i}"),
                secret_key: format!("SK{i}"),
                ..SimOptions::default()
            })
            .await?,
        );
    }
    let api_listen = format!("127.0.0.1:{}", cluster::free_port()?);
    let file = write_config(dir, shape, &db.url, &redis.url, &api_listen, &sims)?;
    let cluster = cluster::start_with(dir, &file, &api_listen, shape.schedulers).await?;
    let mut pids: BTreeMap<String, u32> = BTreeMap::new();
    for (i, pid) in cluster.pids().into_iter().enumerate() {
        let name = if i == 0 {
            "api".to_string()
        } else {
            format!("scheduler-{}", i - 1)
        };
        pids.insert(name, pid);
    }
    pids.insert("redis".into(), redis.child.id());
    pids.insert("bench".into(), std::process::id());
    let client = reqwest::Client::new();
    let started = Instant::now();
    let (before, after, window, arrivals, wall) = match shape.load {
        Load::Steady { for_ } => {
            // Costs are read over the second half of the arrivals: by then the slots are
            // full and every phase (submit, callback, finalize) runs at the same pace.
            let arriving = {
                let (client, base, shape) = (client.clone(), cluster.base.clone(), *shape);
                tokio::spawn(async move { arrive(&shape, &client, &base).await })
            };
            tokio::time::sleep_until((started + for_ / 2).into()).await;
            let from = Instant::now();
            let before = db.counters(redis, &pids).await?;
            let (_, arrivals) = arriving.await??;
            let after = db.counters(redis, &pids).await?;
            let to = Instant::now();
            (before, after, (from, to), arrivals, to - from)
        }
        Load::Burst { .. } => {
            let before = db.counters(redis, &pids).await?;
            let (tasks, arrivals) = arrive(shape, &client, &cluster.base).await?;
            wait_done(
                &client,
                &cluster.base,
                &tasks,
                &sims,
                arrivals.len(),
                started,
            )
            .await?;
            let after = db.counters(redis, &pids).await?;
            (
                before,
                after,
                (started, Instant::now()),
                arrivals,
                started.elapsed(),
            )
        }
    };
    let jobs = jobs_wall(&sims, shape.time_scale);
    let mut delta = after.minus(&before);
    let units = match shape.load {
        // Units turned over in the window: jobs that ended in it.
        Load::Steady { .. } => jobs
            .iter()
            .filter(|(_, _, e)| e.is_some_and(|e| e >= window.0 && e < window.1))
            .count(),
        Load::Burst { .. } => {
            drop(cluster);
            // The slotd processes are gone: their backends flushed their row counts on exit.
            delta.pg_rows = db.rows_settled().await? - before.pg_rows;
            arrivals.len()
        }
    };
    let (backlog_util, peak) = utilization_while_waiting(&arrivals, &jobs, shape, window);
    let latencies = fifo_latencies(&arrivals, &jobs, window);
    let m = Measured {
        units,
        wall,
        units_per_s: units as f64 / wall.as_secs_f64().max(1e-9),
        delta,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        backlog_util,
        latency_p50_ms: quantile(&latencies, 0.5),
        latency_p99_ms: quantile(&latencies, 0.99),
        peak_per_account: peak,
    };
    eprintln!(
        "scale {}: {} units in {:.1} s ({:.1}/s); per unit: {} statements, {:.0} WAL bytes, \
         {:.1} rows, {:.1} Redis commands, scheduler {:.2} ms, API {:.2} ms, PostgreSQL {:.2} ms \
         CPU; util while waiting {:.4}; submit latency p50 {:.0} ms p99 {:.0} ms; CPU by \
         process (s): {:?}",
        shape.backend(),
        m.units,
        wall.as_secs_f64(),
        m.units_per_s,
        m.delta
            .pg_statements
            .map_or("?".into(), |s| format!("{:.1}", m.per_unit(s))),
        m.per_unit(m.delta.pg_wal_bytes),
        m.per_unit(m.delta.pg_rows),
        m.per_unit(m.delta.redis_commands),
        m.per_unit(m.cpu_of("scheduler")) * 1e3,
        m.per_unit(m.cpu_of("api")) * 1e3,
        m.per_unit(m.cpu_of("postgres")) * 1e3,
        m.backlog_util,
        m.latency_p50_ms,
        m.latency_p99_ms,
        m.delta
            .cpu
            .iter()
            .map(|(k, v)| format!("{k}={v:.1}"))
            .collect::<Vec<_>>(),
    );
    let mut top: Vec<(&String, &f64)> = m.delta.redis_by_command.iter().collect();
    top.sort_by(|a, b| b.1.total_cmp(a.1));
    eprintln!(
        "  Redis commands per unit: {}",
        top.iter()
            .take(10)
            .map(|(k, v)| format!("{k} {:.1}", m.per_unit(**v)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for sim in sims {
        let _ = sim.shutdown().await;
    }
    Ok(m)
}

fn write_config(
    dir: &Path,
    shape: &Shape,
    database: &str,
    redis: &str,
    api_listen: &str,
    sims: &[SimHandle],
) -> anyhow::Result<std::path::PathBuf> {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins)?;
    let src = slotd_testkit::built_handler("kling-video")
        .ok_or_else(|| anyhow::anyhow!("kling-video not built"))?;
    std::fs::copy(src, plugins.join("kling-video.wasm"))?;
    let mut accounts = String::new();
    for (i, sim) in sims.iter().enumerate() {
        accounts.push_str(&format!(
            "[[handlers.kling-video.accounts]]\nname = \"a{i}\"\nmax_slots = {SLOTS_PER_ACCOUNT}\n\
             base_url = \"{}\"\naccess_key = \"AK{i}\"\nsecret_key = \"SK{i}\"\n\
             allowed_hosts = [\"{}\"]\n\n",
            sim.base_url(),
            sim.addr()
        ));
    }
    let tick_ms = (10_000.0 * shape.time_scale).max(1.0).round() as u64;
    let config = format!(
        r#"database_url = "{database}"
redis_url = "{redis}"
redis_prefix = "slotd-scale:"
plugins_dir = "{plugins}"
cache_dir = "{cache}"
object_store = "file://{objects}"
max_units_per_task = {TASK_MAX}
public_url = "http://{api_listen}"

[scheduler]
tick_interval = "{tick_ms}ms"

[handlers.kling-video]
expected_duration_scale = "{scale}"

{accounts}"#,
        plugins = plugins.display(),
        cache = dir.join("cache").display(),
        objects = dir.join("objects").display(),
        scale = shape.time_scale,
    );
    let file = dir.join("scale.toml");
    std::fs::write(&file, config)?;
    Ok(file)
}

/// Post the load: tasks of 10 s videos, each shot one unit. Returns the task ids and each
/// unit's arrival.
async fn arrive(
    shape: &Shape,
    client: &reqwest::Client,
    base: &str,
) -> anyhow::Result<(Vec<String>, Vec<Instant>)> {
    let mut posts = tokio::task::JoinSet::new();
    let mut arrivals = Vec::new();
    let post = |n: usize, posts: &mut tokio::task::JoinSet<anyhow::Result<String>>| {
        let client = client.clone();
        let base = base.to_string();
        posts.spawn(async move { create_task(&client, &base, n).await });
    };
    match shape.load {
        Load::Burst { units } => {
            let mut left = units;
            while left > 0 {
                let n = left.min(TASK_MAX);
                let now = Instant::now();
                arrivals.extend(std::iter::repeat_n(now, n));
                post(n, &mut posts);
                left -= n;
            }
        }
        Load::Steady { for_ } => {
            let rate = shape.rate();
            let start = Instant::now();
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let elapsed = start.elapsed().min(for_);
                let owed = (rate * elapsed.as_secs_f64()).floor() as usize;
                let mut n = owed.saturating_sub(arrivals.len());
                while n > 0 {
                    let k = n.min(TASK_MAX);
                    arrivals.extend(std::iter::repeat_n(Instant::now(), k));
                    post(k, &mut posts);
                    n -= k;
                }
                if elapsed >= for_ {
                    break;
                }
            }
        }
    }
    let mut tasks = Vec::new();
    while let Some(r) = posts.join_next().await {
        tasks.push(r??);
    }
    Ok((tasks, arrivals))
}

async fn create_task(client: &reqwest::Client, base: &str, shots: usize) -> anyhow::Result<String> {
    let shots: Vec<Value> = (0..shots)
        .map(|i| json!({"prompt": format!("shot {i}")}))
        .collect();
    let resp = client
        .post(format!("{base}/v1/tasks/video"))
        .json(&json!({"payload": {"model_name": "kling-v1-6", "mode": "std", "duration": "10", "shots": shots}}))
        .send()
        .await?;
    let status = resp.status();
    let body: Value = resp.json().await?;
    body["task_id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("POST /v1/tasks/video answered {status}: {body}"))
}

/// Until every job ended at its simulator (read in this process, free), then every task is
/// finished (read from the API once each, after that).
async fn wait_done(
    client: &reqwest::Client,
    base: &str,
    tasks: &[String],
    sims: &[SimHandle],
    units: usize,
    started: Instant,
) -> anyhow::Result<()> {
    let deadline = started + Duration::from_secs(900);
    let mut last_note = Instant::now();
    loop {
        let (mut created, mut ended) = (0, 0);
        for s in sims {
            let st = s.stats();
            created += st.creates;
            ended += s.jobs().iter().filter(|j| j.ended.is_some()).count();
        }
        if created as usize >= units && ended >= units {
            break;
        }
        if Instant::now() > deadline {
            anyhow::bail!("after 900 s: {created} of {units} created, {ended} ended");
        }
        if last_note.elapsed() > Duration::from_secs(10) {
            eprintln!("  … {created} of {units} created, {ended} ended");
            last_note = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for id in tasks {
        loop {
            let v: Value = client
                .get(format!("{base}/v1/tasks/{id}"))
                .send()
                .await?
                .json()
                .await?;
            match v["status"].as_str() {
                Some("completed") => break,
                Some("failed" | "cancelled") => anyhow::bail!("task {id} ended {v}"),
                _ => {}
            }
            if Instant::now() > deadline {
                anyhow::bail!("task {id} did not finish: {v}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}
