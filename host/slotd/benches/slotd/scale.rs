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
//! (4,000) sizes the saturated ones, and `SLOTD_SCALE_ONLY` (a comma list of `steady-10x1`,
//! `steady-30x1`, `steady-100x1`, `steady-100x4`, `burst-100x1`, `burst-100x2`,
//! `burst-100x4`) runs only those shapes. `layouts` (named only, never by default) measures
//! what a unit's life writes under other table layouts (`scale/layouts.rs`).
//!
//! `SLOTD_SCALE_BASELINE=/path/to/slotd` names an earlier build of slotd: the one-scheduler
//! shapes at 100 accounts then run it first, on its own migrations, and report this build's
//! figures over its (`scale_units_per_s_over_baseline`, `…_baseline_…_after_over_before`), so
//! a change's before and after come from one run on one machine. Every run stores its
//! artifacts in memory (`SLOTD_SCALE_OBJECTS=disk` for the bench's disk): see
//! [`objects_dir`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::{Value, json};
use slotd_sim::kling::{SimHandle, SimOptions};

use crate::cluster;
use crate::report::{Better, Report, Target};

mod analysis;
mod figures;
mod layouts;
mod own_pg;
mod servers;

use analysis::{fifo_latencies, jobs_wall, quantile, utilization_while_waiting};

use own_pg::OwnPostgres;
use servers::{Counters, PrivateDb, PrivateRedis};

const SLOTS_PER_ACCOUNT: u32 = 20;
const UNITS_PER_DAY: f64 = 1_000_000.0;
/// Units in one task (the configured `max_units_per_task`).
const TASK_MAX: usize = 1000;

pub async fn run(report: &mut Report) {
    let time_scale = env_f64("SLOTD_SCALE_TIME_SCALE", 0.1);
    let seconds = env_f64("SLOTD_SCALE_SECONDS", 60.0);
    // One server of the run's own for every shape (each gets a database of its own in it).
    let own = OwnPostgres::start().await;
    let only = std::env::var("SLOTD_SCALE_ONLY").unwrap_or_default();
    let wanted = |name: String| only.is_empty() || only.split(',').any(|o| o.trim() == name);
    for (accounts, schedulers) in [(10, 1), (30, 1), (100, 1), (100, 4)] {
        if !wanted(format!("steady-{accounts}x{schedulers}")) {
            continue;
        }
        let mut before = None;
        let mut baseline_run = None;
        for schema in schemas(accounts, schedulers) {
            let shape = Shape {
                accounts,
                schedulers,
                time_scale,
                load: Load::Steady {
                    for_: Duration::from_secs_f64(seconds),
                },
                schema,
            };
            match measure(&shape, own.as_ref()).await {
                Ok(Some(m)) => {
                    m.record_steady(report, &shape);
                    match schema {
                        Schema::Previous => before = Some(m),
                        Schema::Baseline => baseline_run = Some(m),
                        Schema::Current => {
                            if let Some(b) = &before {
                                m.record_against(report, &shape, b, "scale");
                            }
                            if let Some(b) = &baseline_run {
                                m.record_against(report, &shape, b, "scale_baseline");
                            }
                        }
                    }
                }
                Ok(None) => return,
                Err(e) => eprintln!("scale {}: {e:#}", shape.backend()),
            }
        }
    }
    let throughput = saturated(report, own.as_ref(), &wanted).await;
    // Asked for by name only: it measures layouts, not slotd.
    if only.split(',').any(|o| o.trim() == "layouts") {
        layouts::run(report, own.as_ref().map(|pg| pg.admin_url.as_str())).await;
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

/// The saturated runs (100 accounts, 1, 2 and 4 schedulers; one scheduler also on the
/// previous schema first): their figures, and the measurements by scheduler count.
async fn saturated(
    report: &mut Report,
    own: Option<&OwnPostgres>,
    wanted: impl Fn(String) -> bool,
) -> BTreeMap<usize, Measured> {
    let mut throughput = BTreeMap::new();
    for schedulers in [1, 2, 4] {
        if !wanted(format!("burst-100x{schedulers}")) {
            continue;
        }
        let mut before = None;
        let mut baseline_run = None;
        for schema in schemas(100, schedulers) {
            let shape = Shape {
                accounts: 100,
                schedulers,
                time_scale: 0.002,
                load: Load::Burst {
                    units: env_f64("SLOTD_SCALE_BURST", 4000.0) as usize,
                },
                schema,
            };
            match measure(&shape, own).await {
                Ok(Some(m)) => {
                    report.add(
                        "scale_units_per_s",
                        &shape.backend(),
                        m.units_per_s,
                        "1/s",
                        Target::None(Better::Higher),
                    );
                    m.record_costs(report, &shape, "scale_burst");
                    m.record_refusals(report, &shape, "scale_burst_account_refusals");
                    match schema {
                        Schema::Previous => before = Some(m),
                        Schema::Baseline => baseline_run = Some(m),
                        Schema::Current => {
                            // The throughput target is against the build a change started
                            // from, on the same machine in the same run.
                            for (against, prefix, ratio, target) in [
                                (
                                    &before,
                                    "scale_burst",
                                    "scale_units_per_s_after_over_before",
                                    Target::None(Better::Higher),
                                ),
                                (
                                    &baseline_run,
                                    "scale_burst_baseline",
                                    "scale_units_per_s_over_baseline",
                                    Target::AtLeast(3.0),
                                ),
                            ] {
                                let Some(b) = against else { continue };
                                m.record_against(report, &shape, b, prefix);
                                report.add(
                                    ratio,
                                    &shape.backend(),
                                    m.units_per_s / b.units_per_s.max(f64::MIN_POSITIVE),
                                    "x",
                                    target,
                                );
                            }
                            throughput.insert(schedulers, m);
                        }
                    }
                }
                Ok(None) => return throughput,
                Err(e) => eprintln!("scale {}: {e:#}", shape.backend()),
            }
        }
    }
    throughput
}

/// The schemas a shape runs on: the one-scheduler shapes at 100 accounts also run on the
/// schema as it was before the lean-write migrations (`previous_schema/postgres.sql`), first, so one run
/// shows before and after on the same machine; `SLOTD_SCALE_BEFORE=0` skips those.
fn schemas(accounts: usize, schedulers: usize) -> Vec<Schema> {
    let compare = std::env::var("SLOTD_SCALE_BEFORE").map_or(true, |v| v != "0");
    let mut schemas = Vec::new();
    if accounts == 100 && schedulers == 1 {
        if baseline().is_some() {
            schemas.push(Schema::Baseline);
        }
        if compare {
            schemas.push(Schema::Previous);
        }
    }
    schemas.push(Schema::Current);
    schemas
}

/// The earlier build `SLOTD_SCALE_BASELINE` names, if it is a file.
fn baseline() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os("SLOTD_SCALE_BASELINE")?);
    if path.is_file() {
        Some(path)
    } else {
        eprintln!(
            "scale: SLOTD_SCALE_BASELINE={} is not a file; no baseline runs",
            path.display()
        );
        None
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

/// Which schema a run's database has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Schema {
    /// Every migration.
    Current,
    /// An earlier build of slotd (the binary `SLOTD_SCALE_BASELINE` names) on its own
    /// migrations: the code and schema a change started from, run beside this build.
    Baseline,
    /// Every migration, then `previous_schema/postgres.sql`: the layout before the lean-write migrations.
    Previous,
}

#[derive(Clone, Copy, Debug)]
struct Shape {
    accounts: usize,
    schedulers: usize,
    time_scale: f64,
    load: Load,
    schema: Schema,
}

impl Shape {
    fn backend(&self) -> String {
        let schema = match self.schema {
            Schema::Current => "",
            Schema::Previous => ",schema=previous",
            Schema::Baseline => ",binary=baseline",
        };
        format!(
            "accounts={},schedulers={}{schema}",
            self.accounts, self.schedulers
        )
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
    /// The most jobs one account's provider ran at once, from the simulators' job lists. It
    /// cannot pass the account's limit (a simulator refuses beyond it), so it is read beside
    /// [`Measured::refusals`].
    peak_per_account: u32,
    /// Creates the simulators refused over the whole run, every account summed: 429/1303
    /// (account full) and 429/1102 (balance). A grant past an account's room shows here, not
    /// in the peak.
    refusals: Refusals,
}

/// Creates the simulators refused, by Kling's code.
#[derive(Clone, Copy, Debug, Default)]
struct Refusals {
    full_1303: u64,
    balance_1102: u64,
}

impl Refusals {
    /// Summed over every account's simulator.
    fn of(sims: &[SimHandle]) -> Refusals {
        sims.iter()
            .map(SimHandle::stats)
            .fold(Refusals::default(), |r, s| Refusals {
                full_1303: r.full_1303 + s.rate_limited_1303,
                balance_1102: r.balance_1102 + s.balance_refusals,
            })
    }

    fn total(&self) -> u64 {
        self.full_1303 + self.balance_1102
    }
}

/// One run, `None` when PostgreSQL or Redis is not there to run it on.
async fn measure(shape: &Shape, own: Option<&OwnPostgres>) -> anyhow::Result<Option<Measured>> {
    let b = shape.backend();
    eprintln!(
        "scale {b}: {:?}, time x{}, {:.0} units/s",
        shape.load,
        shape.time_scale,
        shape.rate()
    );
    let binary = match shape.schema {
        Schema::Baseline => baseline().context("the baseline binary went away")?,
        Schema::Current | Schema::Previous => PathBuf::from(env!("CARGO_BIN_EXE_slotd")),
    };
    let dir = tempfile::TempDir::new()?;
    let objects = objects_dir()?;
    let Some(db) = PrivateDb::create(own.map(|pg| pg.admin_url.as_str())).await? else {
        eprintln!("PostgreSQL not reachable: the scale figures are skipped");
        return Ok(None);
    };
    let Some(redis) = PrivateRedis::start(dir.path()).await? else {
        eprintln!("redis-server not found or not answering: the scale figures are skipped");
        db.drop_database().await;
        return Ok(None);
    };
    let ready = match shape.schema {
        Schema::Previous => db.as_previous_schema().await,
        Schema::Current | Schema::Baseline => Ok(()),
    };
    let result = match ready {
        Ok(()) => run_on(shape, &binary, dir.path(), objects.path(), &db, &redis).await,
        Err(e) => Err(e),
    };
    drop(redis);
    db.drop_database().await;
    result.map(Some)
}

/// Where a run's artifacts are stored: a directory in memory (`/dev/shm`) unless
/// `SLOTD_SCALE_OBJECTS=disk` (or the machine has no `/dev/shm`). A cluster stores artifacts in
/// a remote object store; on the bench's local disk, the filesystem's inode allocation for
/// each artifact's directories and file (ext4 searching past recently deleted inodes) was a
/// third of the scheduler's CPU in a saturated run, a cost of the disk, not of slotd.
fn objects_dir() -> anyhow::Result<tempfile::TempDir> {
    let disk = std::env::var("SLOTD_SCALE_OBJECTS").is_ok_and(|v| v == "disk");
    let shm = Path::new("/dev/shm");
    if !disk && shm.is_dir() {
        match tempfile::TempDir::new_in(shm) {
            Ok(d) => return Ok(d),
            Err(e) => eprintln!("scale: artifacts on disk ({} refused: {e})", shm.display()),
        }
    }
    Ok(tempfile::TempDir::new()?)
}

async fn run_on(
    shape: &Shape,
    binary: &Path,
    dir: &Path,
    objects: &Path,
    db: &PrivateDb,
    redis: &PrivateRedis,
) -> anyhow::Result<Measured> {
    let sims = start_sims(shape).await?;
    let api_listen = format!("127.0.0.1:{}", cluster::free_port()?);
    let file = write_config(dir, objects, shape, &db.url, &redis.url, &api_listen, &sims)?;
    let cluster = cluster::start_binary(binary, dir, &file, &api_listen, shape.schedulers).await?;
    let pids = process_ids(&cluster, redis);
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
            // The planner's statistics, as a database in service has them (before the window:
            // the ANALYZE's own cost is not the units').
            db.analyze().await?;
            let from = Instant::now();
            let before = db.counters(redis, &pids).await?;
            let (_, arrivals) = arriving.await??;
            let after = db.counters(redis, &pids).await?;
            let to = Instant::now();
            (before, after, (from, to), arrivals, to - from)
        }
        Load::Burst { .. } => {
            let before = db.counters(redis, &pids).await?;
            // No statistics gathered here (the steady runs': `PrivateDb::analyze`): the burst
            // is a fresh database's first minute, and statistics taken when every unit is
            // pending mislead the planner about every later moment of it.
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
    if units == 0 {
        anyhow::bail!(
            "no job ended in the {:.1} s measuring window: the arrivals are too short for jobs \
             at time × {} (raise SLOTD_SCALE_SECONDS); nothing to divide the costs by",
            wall.as_secs_f64(),
            shape.time_scale
        );
    }
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
        refusals: Refusals::of(&sims),
    };
    m.print(shape);
    m.print_wal_by_record(db).await;
    for sim in sims {
        let _ = sim.shutdown().await;
    }
    Ok(m)
}

/// One Kling simulator per account: 20 jobs at once, its own keys.
async fn start_sims(shape: &Shape) -> anyhow::Result<Vec<SimHandle>> {
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
    Ok(sims)
}

/// The processes whose CPU is read, by name: the API first, then each scheduler.
fn process_ids(cluster: &cluster::Cluster, redis: &PrivateRedis) -> BTreeMap<String, u32> {
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
    pids
}

fn write_config(
    dir: &Path,
    objects: &Path,
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
        objects = objects.display(),
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
