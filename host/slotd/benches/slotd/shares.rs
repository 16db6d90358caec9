//! One Kling account of 20 over video and avatars, split two ways on the same mixed load
//! (docs/testing.md, `shares`): the fixed 18 + 2 split (`[pools]` maxima) against the account's
//! shares (`[provider_accounts.kling]`: video min 14 max 20, avatars min 2 max 6). The load is a
//! video backlog and bursts of avatar clones submitted as it drains. Printed side by side:
//! the makespan over every job against the ideal FIFO on the account's 20 slots, the account's
//! utilization while work waited, and how long the avatar bursts took; then shares ÷ fixed.
//! Embedded, polling, against the real simulator and handlers. `SLOTD_BENCH_SHOTS` changes the
//! video backlog (100 shots by default).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use slotd::demo::report::{ideal_fifo_makespan, pool_of_kind};
use slotd_core::config::{
    Config, HandlerConfig, PoolConfig, ProviderAccountConfig, SchedulerConfig, Secret, ShareConfig,
};
use slotd_sim::kling::{SimJob, SimOptions};

use crate::report::{Better, Report, Target};

const ACCOUNT: u32 = 20;
const SCALE: f64 = 0.1;
/// Avatar clones per burst, and the video creates after which each burst comes.
const BURST: usize = 6;
const BURSTS_AT: [f64; 3] = [0.0, 0.35, 0.7];

struct Figures {
    makespan: f64,
    ideal: f64,
    backlog_util: f64,
    /// Mean simulated seconds from a burst's submission to its last clone's end.
    burst_span: f64,
    wall: Duration,
}

fn config(
    dir: &std::path::Path,
    sim: &slotd_sim::kling::SimHandle,
    shares: bool,
) -> anyhow::Result<Config> {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins)?;
    for name in ["kling-video", "kling-avatar"] {
        let src = slotd_testkit::built_handler(name)
            .ok_or_else(|| anyhow::anyhow!("{name} not built"))?;
        std::fs::copy(src, plugins.join(format!("{name}.wasm")))?;
    }
    let mut c = Config::default();
    c.database_url = format!("sqlite://{}", dir.join("bench.db").display());
    c.plugins_dir = plugins;
    c.object_store = format!("file://{}", dir.join("objects").display());
    c.scheduler = SchedulerConfig::scaled_to(Duration::from_secs_f64(10.0 * SCALE));
    for name in ["kling-video", "kling-avatar"] {
        let mut h = HandlerConfig::default();
        h.settings
            .insert("base_url".into(), sim.base_url().to_string());
        h.settings.insert("access_key".into(), "AK".into());
        h.settings
            .insert("expected_duration_scale".into(), SCALE.to_string());
        h.secrets.insert("secret_key".into(), Secret::new("SK"));
        h.allowed_hosts.push(sim.addr().to_string());
        c.handlers.insert(name.into(), h);
    }
    if shares {
        let share = |min, max| ShareConfig {
            min,
            max: Some(max),
            account: None,
        };
        c.provider_accounts.insert(
            "kling".into(),
            ProviderAccountConfig {
                max_slots: ACCOUNT,
                pools: BTreeMap::from([
                    ("kling:video".to_string(), share(14, 20)),
                    ("kling:avatar".to_string(), share(2, 6)),
                ]),
            },
        );
    } else {
        c.pools
            .insert("kling:video".into(), PoolConfig::slots(ACCOUNT - 2));
        c.pools.insert("kling:avatar".into(), PoolConfig::slots(2));
    }
    Ok(c)
}

async fn submit(
    client: &reqwest::Client,
    base: &str,
    ty: &str,
    payload: Value,
) -> anyhow::Result<String> {
    let v: Value = client
        .post(format!("{base}/v1/tasks/{ty}"))
        .json(&json!({ "payload": payload }))
        .send()
        .await?
        .json()
        .await?;
    v["task_id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("no task id: {v}"))
}

fn avatar() -> Value {
    json!({"voice_name": "Mia", "voice_url": "https://example.com/v.mp3", "element_name": "Mia",
           "element_description": "presenter", "frontal_image": "https://example.com/f.png",
           "refer_images": ["https://example.com/l.png"]})
}

async fn run_one(shots: usize, shares: bool) -> anyhow::Result<Figures> {
    let dir = tempfile::TempDir::new()?;
    let sim = slotd_sim::kling::start(SimOptions {
        listen: "127.0.0.1:0".parse()?,
        concurrency: ACCOUNT,
        time_scale: SCALE,
        seed: 2042,
        // No 10-15 minute stragglers: the makespan is the split's, not one late job's.
        long_tail_rate: 0.0,
        access_key: "AK".into(),
        secret_key: "SK".into(),
        ..SimOptions::default()
    })
    .await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let services = slotd_server::app::build(config(dir.path(), &sim, shares)?).await?;
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(slotd_server::run_with(
        services,
        Some(listener),
        async move {
            rx.await.ok();
        },
    ));
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut ids = vec![crate::kling::create_video_task(&client, &base, shots).await?];
    // Each burst: when it was submitted (simulated seconds since the first create), its ids.
    let mut bursts: Vec<(f64, Vec<String>)> = Vec::new();
    let sim_now = || {
        sim.first_create()
            .map_or(0.0, |t| t.elapsed().as_secs_f64() / SCALE)
    };
    for at in BURSTS_AT {
        let creates = (at * shots as f64) as u64;
        while sim
            .stats()
            .creates_by_kind
            .get("text2video")
            .copied()
            .unwrap_or(0)
            < creates
        {
            if started.elapsed() > Duration::from_secs(600) {
                anyhow::bail!("the video backlog did not progress");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let at = sim_now();
        let mut burst = Vec::new();
        for _ in 0..BURST {
            burst.push(submit(&client, &base, "avatar_clone", avatar()).await?);
        }
        ids.extend(burst.iter().cloned());
        bursts.push((at, burst));
    }
    for id in &ids {
        loop {
            let v: Value = client
                .get(format!("{base}/v1/tasks/{id}"))
                .send()
                .await?
                .json()
                .await?;
            if matches!(v["status"].as_str(), Some("completed" | "failed")) {
                break;
            }
            if started.elapsed() > Duration::from_secs(900) {
                anyhow::bail!("run did not finish: {}", v["message"]);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let wall = started.elapsed();
    stop.send(()).ok();
    server.await??;
    let mut jobs = sim.jobs();
    jobs.sort_by(|a, b| a.started.total_cmp(&b.started));
    let first = jobs.first().map_or(0.0, |j| j.started);
    let last_end = jobs.iter().filter_map(|j| j.ended).fold(first, f64::max);
    let last_start = jobs.iter().map(|j| j.started).fold(first, f64::max);
    let busy_backlog: f64 = jobs
        .iter()
        .map(|j| (j.ended.unwrap_or(last_end).min(last_start) - j.started).max(0.0))
        .sum();
    let window = (last_start - first).max(1e-9);
    let durations: Vec<f64> = jobs.iter().map(|j| j.planned_seconds).collect();
    // A burst's clones end with their element job; the burst is done at the last of them.
    let avatars: Vec<&SimJob> = jobs
        .iter()
        .filter(|j| pool_of_kind(&j.kind) == "kling:avatar")
        .collect();
    let mut spans = Vec::new();
    for (i, (at, _)) in bursts.iter().enumerate() {
        let next = bursts.get(i + 1).map_or(f64::MAX, |b| b.0);
        let end = avatars
            .iter()
            .filter(|j| j.started >= *at && j.started < next)
            .filter_map(|j| j.ended)
            .fold(*at, f64::max);
        spans.push(end - at);
    }
    Ok(Figures {
        makespan: last_end - first,
        ideal: ideal_fifo_makespan(&durations, ACCOUNT),
        backlog_util: busy_backlog / (f64::from(ACCOUNT) * window),
        burst_span: spans.iter().sum::<f64>() / spans.len().max(1) as f64,
        wall,
    })
}

pub async fn run(report: &mut Report) {
    let shots: usize = std::env::var("SLOTD_BENCH_SHOTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let mut fixed = None;
    for (name, shares) in [("fixed_18_2", false), ("shares", true)] {
        eprintln!(
            "shares {name}: {shots} video shots and {} bursts of {BURST} avatar clones on one Kling account of {ACCOUNT} at time x{SCALE}…",
            BURSTS_AT.len()
        );
        let f = run_one(shots, shares).await.expect("kling run");
        eprintln!(
            "shares {name}: makespan {:.0} s ({:.3}x the ideal FIFO on {ACCOUNT} slots), account \
             utilization while work waited {:.4}, avatar bursts done in {:.0} s on average, wall \
             {:.1} s",
            f.makespan,
            f.makespan / f.ideal.max(1e-9),
            f.backlog_util,
            f.burst_span,
            f.wall.as_secs_f64()
        );
        report.add(
            &format!("makespan_fifo_{name}"),
            "sqlite",
            f.makespan / f.ideal.max(1e-9),
            "ratio",
            Target::None(Better::Lower),
        );
        report.add(
            &format!("account_util_{name}"),
            "sqlite",
            f.backlog_util,
            "ratio",
            Target::None(Better::Higher),
        );
        report.add(
            &format!("avatar_burst_s_{name}"),
            "sqlite",
            f.burst_span,
            "s",
            Target::None(Better::Lower),
        );
        match &fixed {
            None => fixed = Some(f),
            Some(base) => {
                eprintln!(
                    "shares ÷ fixed 18+2: makespan {:.3}x, utilization {:.3}x, avatar bursts {:.3}x",
                    f.makespan / base.makespan.max(1e-9),
                    f.backlog_util / base.backlog_util.max(1e-9),
                    f.burst_span / base.burst_span.max(1e-9)
                );
                report.add(
                    "makespan_shares_over_fixed",
                    "sqlite",
                    f.makespan / base.makespan.max(1e-9),
                    "ratio",
                    Target::AtMost(1.0),
                );
            }
        }
    }
}
