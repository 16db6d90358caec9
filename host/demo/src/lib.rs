//! `slotd demo`: slotd's main job, end to end, on one machine with nothing to install.
//!
//! Starts the Kling simulator (two accounts: 20 and 10 concurrent tasks, time compressed), an embedded
//! slotd (SQLite, in-process slots, local object store) with the Kling handlers, submits a
//! realistic mix from several tenants (a long video task, short ones, avatar clones, Runway and
//! Pika shots, and shots on the `clip` route that Kling, Runway and Pika all serve), shows live
//! progress per task and per pool, and ends with a summary measured against the ideal.

mod accounts;
mod pika;
pub mod report;
mod route;
mod runway;

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use slotd_core::config::{ApiKey, Config, HandlerConfig, PoolConfig, SchedulerConfig, Secret};
use slotd_sim::kling::{SimHandle, SimOptions};

/// Options of `slotd demo`.
#[derive(Clone, Debug, clap::Args)]
pub struct DemoOptions {
    /// Simulated time factor: 0.1 runs a 2-minute Kling job in 12 s.
    #[arg(long, default_value_t = 0.1)]
    pub time_scale: f64,
    /// Working directory (database, artifacts); replaced at start.
    #[arg(long, default_value = "slotd-demo")]
    pub dir: PathBuf,
    /// Poll only: do not ask the simulator for callbacks.
    #[arg(long)]
    pub no_callbacks: bool,
    /// Seed of the simulator's draws.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Share of accepted jobs that the provider fails later (content moderation and the like).
    #[arg(long, default_value_t = 0.04)]
    pub failure_rate: f64,
}

/// The simulated account's credentials (the handlers sign with them through the host).
const DEMO_ACCESS_KEY: &str = "demo-access-key";
const DEMO_SECRET_KEY: &str = "demo-secret-key";

/// The operators' key: an admin's, so the console shows every tenant's work during the demo.
const OPS_KEY: &str = "demo-key-ops";

const TENANTS: [(&str, &str); 3] = [
    ("studio-a", "demo-key-studio-a"),
    ("studio-b", "demo-key-studio-b"),
    ("studio-c", "demo-key-studio-c"),
];

fn prepare_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).with_context(|| format!("creating {}", plugins.display()))?;
    for name in [
        "kling-video",
        "kling-avatar",
        runway::HANDLER,
        pika::HANDLER,
    ] {
        let src = slotd_testkit::built_handler(name).with_context(|| {
            format!("the {name} handler is not built; run `cargo build` in the repository")
        })?;
        std::fs::copy(&src, plugins.join(format!("{name}.wasm")))
            .with_context(|| format!("copying {}", src.display()))?;
    }
    Ok(plugins)
}

fn demo_config(
    opts: &DemoOptions,
    sim: &SimHandle,
    plugins: PathBuf,
    public: Option<String>,
) -> Config {
    let mut c = Config::default();
    let dir = &opts.dir;
    c.database_url = format!("sqlite://{}", dir.join("slotd.db").display());
    c.plugins_dir = plugins;
    c.object_store = format!("file://{}", dir.join("objects").display());
    c.public_url = public;
    // The seed's timings, compressed like the provider's.
    c.scheduler = SchedulerConfig::scaled_to(Duration::from_secs_f64(10.0 * opts.time_scale));
    // kling:video's capacity is its accounts' (see `accounts.rs`).
    c.pools.insert("kling:avatar".into(), PoolConfig::slots(2));
    for name in ["kling-video", "kling-avatar"] {
        let mut h = HandlerConfig::default();
        h.settings
            .insert("base_url".into(), sim.base_url().to_string());
        h.settings
            .insert("access_key".into(), "demo-access-key".into());
        h.secrets
            .insert("secret_key".into(), Secret::new("demo-secret-key"));
        // Poll hints and stated durations in the simulator's compressed time.
        h.settings.insert(
            "expected_duration_scale".into(),
            opts.time_scale.to_string(),
        );
        h.allowed_hosts.push(sim.addr().to_string());
        c.handlers.insert(name.into(), h);
    }
    c.api_keys = TENANTS
        .iter()
        .map(|(t, k)| ApiKey {
            key: Secret::new(*k),
            tenant: (*t).into(),
            admin: false,
        })
        .chain([ApiKey {
            key: Secret::new(OPS_KEY),
            tenant: "ops".into(),
            admin: true,
        }])
        .collect();
    c
}

/// A submitted task and how to show it.
struct Submitted {
    id: String,
    /// Its task type (a handler's, or the route's).
    ty: &'static str,
    label: String,
    key: &'static str,
    units: u32,
}

fn shots(n: u32, pro_every: u32, image_every: u32) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let mut s = json!({"prompt": format!("Shot {}: a slow dolly shot across a neon-lit street in the rain", i + 1)});
            if pro_every > 0 && i % pro_every == pro_every - 1 {
                s["mode"] = json!("pro");
                s["duration"] = json!("10");
            }
            if image_every > 0 && i % image_every == image_every - 1 {
                s["image"] = json!("https://example.com/storyboard/frame.png");
            }
            s
        })
        .collect()
}

fn workload() -> Vec<(&'static str, &'static str, String, Value, u32)> {
    let video = |shots: Vec<Value>| {
        json!({"model_name": "kling-v1-6", "mode": "std", "duration": "5", "aspect_ratio": "16:9",
               "negative_prompt": "blurry, low quality", "shots": shots})
    };
    let avatar = |name: &str| {
        json!({"voice_name": name, "voice_url": "https://example.com/voices/sample.mp3",
               "element_name": name, "element_description": "A friendly presenter for product videos",
               "frontal_image": "https://example.com/faces/front.png",
               "refer_images": ["https://example.com/faces/left.png"]})
    };
    vec![
        (
            "studio-a",
            "video",
            "feature film, 36 shots".into(),
            video(shots(36, 6, 0)),
            36,
        ),
        (
            "studio-b",
            "video",
            "ad spot 1, 4 shots".into(),
            video(shots(4, 0, 0)),
            4,
        ),
        (
            "studio-b",
            "video",
            "ad spot 2, 4 shots".into(),
            video(shots(4, 0, 2)),
            4,
        ),
        (
            "studio-c",
            "avatar_clone",
            "avatar: Mia".into(),
            avatar("Mia"),
            1,
        ),
        (
            "studio-c",
            "video",
            "teaser, 3 shots".into(),
            video(shots(3, 0, 0)),
            3,
        ),
        (
            "studio-c",
            "avatar_clone",
            "avatar: Leo".into(),
            avatar("Leo"),
            1,
        ),
    ]
    .into_iter()
    .chain(runway::workload())
    .chain(pika::workload())
    .chain(route::workload())
    .collect()
}

fn key_of(tenant: &str) -> &'static str {
    TENANTS
        .iter()
        .find(|(t, _)| *t == tenant)
        .map_or("", |(_, k)| k)
}

fn bar(done: u64, total: u64, width: usize) -> String {
    let filled = if total == 0 {
        width
    } else {
        ((done as f64 / total as f64) * width as f64).round() as usize
    };
    format!(
        "[{}{}]",
        "#".repeat(filled.min(width)),
        ".".repeat(width - filled.min(width))
    )
}

async fn get_json(client: &reqwest::Client, url: &str, key: &str) -> anyhow::Result<Value> {
    Ok(client
        .get(url)
        .bearer_auth(key)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?)
}

/// How the demo ended: each task's final view (`GET /v1/tasks/{id}`) and what the Runway
/// simulator saw.
pub struct DemoOutcome {
    pub tasks: Vec<Value>,
    pub runway: slotd_sim::runway::RunwayStats,
    /// What the fal simulator (Pika) saw.
    pub pika: slotd_sim::fal::FalStats,
    /// What the backup Kling account's simulator saw.
    pub backup: slotd_sim::kling::SimStats,
    /// How the `clip` route's shots went.
    pub route: route::RouteOutcome,
}

/// Run the demo until every task is done (or `stop` resolves), then print the summary.
pub async fn run(
    opts: DemoOptions,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<DemoOutcome> {
    if !(0.001..=1.0).contains(&opts.time_scale) {
        bail!(
            "--time-scale must be between 0.001 and 1.0, got {}",
            opts.time_scale
        );
    }
    let plugins = prepare_dir(&opts.dir)?;
    let sim = slotd_sim::kling::start(SimOptions {
        listen: "127.0.0.1:0".parse()?,
        concurrency: 20,
        time_scale: opts.time_scale,
        seed: opts.seed,
        access_key: DEMO_ACCESS_KEY.into(),
        secret_key: DEMO_SECRET_KEY.into(),
        failure_after_accept_rate: opts.failure_rate,
        ..SimOptions::default()
    })
    .await?;
    let backup = accounts::start_backup(opts.time_scale, opts.seed, opts.failure_rate).await?;
    let runway_sim = runway::start(opts.time_scale, opts.seed).await?;
    let fal_sim = pika::start(opts.time_scale, opts.seed).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let base = format!("http://{addr}");
    let public = (!opts.no_callbacks).then(|| base.clone());
    let mut config = demo_config(&opts, &sim, plugins, public);
    accounts::configure(&mut config, &backup)?;
    runway::configure(&mut config, &runway_sim, opts.time_scale);
    pika::configure(&mut config, &fal_sim, opts.time_scale);
    route::configure(&mut config);
    let services = slotd_server::app::build(config).await?;
    let objects_root = services.objects.local_root.clone();
    let token = tokio_util::sync::CancellationToken::new();
    let server_stop = token.clone();
    let server = tokio::spawn(slotd_server::run_with(
        services,
        Some(listener),
        async move { server_stop.cancelled().await },
    ));
    let interrupted = tokio_util::sync::CancellationToken::new();
    let on_stop = interrupted.clone();
    tokio::spawn(async move {
        stop.await;
        on_stop.cancel();
    });

    println!(
        "slotd demo: Kling simulator at {} (20 concurrent, time x{}), slotd at {base}",
        sim.base_url(),
        opts.time_scale
    );
    println!(
        "Runway simulator at {} ({} per model); runway-video pools runway:<model>, {} slots each",
        runway_sim.base_url(),
        runway::SLOTS_PER_MODEL,
        runway::SLOTS_PER_MODEL
    );
    println!(
        "fal simulator (Pika) at {} ({} concurrent); fal-video pools fal:<model id>, {} slots each",
        fal_sim.base_url(),
        pika::ACCOUNT_CONCURRENCY,
        pika::POOLS[0].1
    );
    println!(
        "backup Kling account at {} ({} concurrent)",
        backup.base_url(),
        accounts::BACKUP_SLOTS
    );
    println!(
        "pools: kling:video {} slots on two accounts ({} main + {} backup), kling:avatar 2 slots; {}\n",
        accounts::MAIN_VIDEO_SLOTS + accounts::BACKUP_SLOTS,
        accounts::MAIN_VIDEO_SLOTS,
        accounts::BACKUP_SLOTS,
        if opts.no_callbacks {
            "polling only"
        } else {
            "callbacks on, polling as the safety net"
        }
    );
    println!(
        "route {}: {} canonical shots ({} with a seed, which Kling does not take), ordered over {}; each Kling account's resource packs run out once the Kling tasks no longer need it",
        route::ROUTE,
        route::SHOTS,
        route::SEEDED,
        route::TARGETS
            .iter()
            .map(|(h, m)| format!("{h}/{m}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("console: {base}/ (API key {OPS_KEY} sees every tenant)\n");
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (tenant, ty, label, payload, units) in workload() {
        let key = key_of(tenant);
        let resp = client
            .post(format!("{base}/v1/tasks/{ty}"))
            .bearer_auth(key)
            .json(&json!({"payload": payload}))
            .send()
            .await?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or_default();
        if !status.is_success() {
            bail!("submitting {label:?} was refused ({status}): {body}");
        }
        let id = body["task_id"].as_str().unwrap_or_default().to_string();
        tasks.push(Submitted {
            id,
            ty,
            label: format!("{tenant:<9} {label}"),
            key,
            units,
        });
    }
    // Partway, Kling's resource packs run out (see `route.rs`).
    let watch_done = tokio_util::sync::CancellationToken::new();
    let packs = tokio::spawn(route::run_out_of_packs(
        client.clone(),
        base.clone(),
        OPS_KEY,
        [sim.base_url().to_string(), backup.base_url().to_string()],
        Duration::from_millis(((opts.time_scale * 1000.0) as u64).clamp(10, 250)),
        started,
        watch_done.clone(),
    ));

    let tty = std::io::stdout().is_terminal();
    let mut drawn = 0usize;
    let mut last_print = Instant::now() - Duration::from_secs(60);
    let views = loop {
        let mut views = Vec::new();
        for t in &tasks {
            views.push(get_json(&client, &format!("{base}/v1/tasks/{}", t.id), t.key).await?);
        }
        let pools = get_json(&client, &format!("{base}/v1/pools"), TENANTS[0].1).await?;
        let done = views.iter().all(|v| {
            matches!(
                v["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            )
        });
        if tty || last_print.elapsed() >= Duration::from_secs(5) || done {
            let mut lines = Vec::new();
            lines.push(format!("elapsed {:>5.1}s", started.elapsed().as_secs_f64()));
            let width = pools
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["name"].as_str())
                .map(str::len)
                .max()
                .unwrap_or(14);
            for p in pools.as_array().into_iter().flatten() {
                // A route's units wait in `route:NAME` until a target's pool binds them.
                if let Some(r) = p["name"]
                    .as_str()
                    .and_then(slotd_core::model::route_of_pool)
                {
                    lines.push(format!(
                        "  route {r:<width$} {:>2} units waiting for a target with room",
                        p["units"]["pending"].as_u64().unwrap_or(0)
                    ));
                    continue;
                }
                let (used, max) = (
                    p["used"].as_u64().unwrap_or(0),
                    p["max_slots"].as_u64().unwrap_or(0),
                );
                lines.push(format!(
                    "  pool {:<width$} {} {used:>2}/{max:<2} slots busy",
                    p["name"].as_str().unwrap_or("?"),
                    bar(used, max, 20)
                ));
            }
            for (t, v) in tasks.iter().zip(&views) {
                let (c, n) = (
                    v["completed"].as_u64().unwrap_or(0),
                    v["total"].as_u64().unwrap_or(u64::from(t.units)),
                );
                lines.push(format!(
                    "  {:<44} {} {c:>2}/{n:<2} {:<9} {}",
                    t.label,
                    bar(c, n, 24),
                    v["status"].as_str().unwrap_or("?"),
                    v["message"].as_str().unwrap_or("")
                ));
            }
            let mut out = std::io::stdout().lock();
            if tty && drawn > 0 {
                write!(out, "\x1b[{drawn}A")?;
            }
            for l in &lines {
                if tty {
                    writeln!(out, "\x1b[2K{l}")?;
                } else {
                    writeln!(out, "{l}")?;
                }
            }
            out.flush()?;
            drawn = lines.len();
            last_print = Instant::now();
        }
        if done {
            break views;
        }
        if interrupted.is_cancelled() {
            println!(
                "\ninterrupted; the work is safe in {} and resumes on the next `slotd serve` there",
                opts.dir.display()
            );
            break views;
        }
        tokio::time::sleep(Duration::from_millis(if tty { 250 } else { 1000 })).await;
    };
    let makespan = started.elapsed();
    watch_done.cancel();
    let packs = packs.await.unwrap_or_default();
    let mut usage = Vec::new();
    for (tenant, _) in TENANTS {
        usage.push(
            get_json(
                &client,
                &format!("{base}/v1/tenants/{tenant}/usage"),
                OPS_KEY,
            )
            .await?,
        );
    }
    let other_units = |ty: &str| -> u64 {
        tasks
            .iter()
            .filter(|t| t.ty == ty)
            .map(|t| u64::from(t.units))
            .sum()
    };
    let mut routed = match tasks.iter().find(|t| t.ty == route::ROUTE) {
        Some(t) => {
            route::outcome(
                &client,
                &base,
                t.key,
                &t.id,
                route::Sims {
                    kling: [&sim, &backup],
                    runway: &runway_sim,
                    fal: &fal_sim,
                },
                (other_units("runway_video"), other_units("fal_video")),
            )
            .await?
        }
        None => route::RouteOutcome::default(),
    };
    routed.packs = packs;
    summary(
        &opts,
        [&sim, &backup],
        &tasks,
        &views,
        &routed,
        makespan,
        objects_root.as_deref(),
    );
    let backup_stats = backup.stats();
    accounts::print(&sim.stats(), &backup_stats, &usage);
    let runway_stats = runway_sim.stats();
    println!("{}", runway::summary(&runway_stats));
    let pika_stats = fal_sim.stats();
    println!("{}", pika::summary(&pika_stats));
    println!("{}", route::summary(&routed));
    let pools = get_json(&client, &format!("{base}/v1/pools"), OPS_KEY).await?;
    for line in runway::quota_lines(&pools) {
        println!("{line}");
    }
    token.cancel();
    server.await.context("slotd task")??;
    sim.shutdown().await?;
    backup.shutdown().await?;
    runway_sim.shutdown().await?;
    fal_sim.shutdown().await?;
    Ok(DemoOutcome {
        tasks: views,
        runway: runway_stats,
        pika: pika_stats,
        backup: backup_stats,
        route: routed,
    })
}

fn summary(
    opts: &DemoOptions,
    [sim, backup]: [&SimHandle; 2],
    tasks: &[Submitted],
    views: &[Value],
    routed: &route::RouteOutcome,
    makespan: Duration,
    objects: Option<&Path>,
) {
    let stats = accounts::combined(&sim.stats(), &backup.stats());
    let mut jobs = sim.jobs();
    jobs.extend(backup.jobs());
    let slots = BTreeMap::from([
        (
            "kling:video".to_string(),
            accounts::MAIN_VIDEO_SLOTS + accounts::BACKUP_SLOTS,
        ),
        ("kling:avatar".to_string(), 2u32),
    ]);
    let figures = report::pool_figures(&jobs, &slots);
    println!("\n== summary");
    println!(
        "makespan {:.1}s real = {:.0}s of provider time (time x{})",
        makespan.as_secs_f64(),
        makespan.as_secs_f64() / opts.time_scale,
        opts.time_scale
    );
    for (pool, f) in &figures {
        let durations: Vec<f64> = jobs
            .iter()
            .filter(|j| report::pool_of_kind(&j.kind) == pool)
            .map(|j| j.planned_seconds)
            .collect();
        let ideal = report::ideal_fifo_makespan(&durations, slots.get(pool).copied().unwrap_or(1));
        println!(
            "  {pool:<13} {:>3} provider jobs | makespan {:>6.0}s vs ideal FIFO {:>6.0}s = {:.3}x | slot utilization {:>5.1}% (while a backlog waited: {:>5.1}%)",
            f.jobs,
            f.makespan,
            ideal,
            if ideal > 0.0 { f.makespan / ideal } else { 1.0 },
            f.utilization * 100.0,
            f.backlog_utilization * 100.0
        );
    }
    // Kling's requests are counted against Kling's units: its tasks' and the routed units it
    // served.
    let on_kling = |t: &&Submitted| matches!(t.ty, "video" | "avatar_clone");
    let routed_on_kling = |counts: &BTreeMap<String, u64>| -> u64 {
        counts
            .iter()
            .filter(|(t, _)| t.starts_with("kling-video/"))
            .map(|(_, n)| n)
            .sum()
    };
    let units: u64 = tasks
        .iter()
        .filter(on_kling)
        .map(|t| u64::from(t.units))
        .sum::<u64>()
        + routed_on_kling(&routed.served);
    let completed: u64 = tasks
        .iter()
        .zip(views)
        .filter(|(t, _)| on_kling(t))
        .map(|(_, v)| v["completed"].as_u64().unwrap_or(0))
        .sum::<u64>()
        + routed_on_kling(&routed.completed_by);
    println!(
        "provider requests (Kling): {} for {units} units ({:.2} per completed unit): {} creates, {} single queries, {} list queries, {} downloads; callbacks received: {}",
        stats.requests,
        if completed > 0 {
            stats.requests as f64 / completed as f64
        } else {
            0.0
        },
        stats.creates,
        stats.single_queries,
        stats.list_queries,
        stats.downloads,
        stats.callbacks_sent
    );
    println!(
        "1303 refusals: {} | validation refusals: {} | auth refusals: {} | 1102 refusals (packs exhausted): {}",
        stats.rate_limited_1303,
        stats.validation_refusals,
        stats.auth_refusals,
        stats.balance_refusals
    );
    let mut failures = Vec::new();
    for (t, v) in tasks.iter().zip(views) {
        for r in v["results"].as_array().into_iter().flatten() {
            if r["status"] == "failed" {
                failures.push(format!(
                    "  {} unit {}: {}",
                    t.label.trim(),
                    r["index"],
                    r["error"]["message"].as_str().unwrap_or("?")
                ));
            }
        }
    }
    println!("failures: {}", failures.len());
    for f in failures {
        println!("{f}");
    }
    match objects {
        Some(root) => println!("artifacts: {} (per tenant / task / unit)", root.display()),
        None => println!("artifacts: in the configured object store"),
    }
    println!(
        "database: {} (try `SLOTD_DATABASE_URL=sqlite://{} slotd serve` to inspect it through the API)",
        opts.dir.join("slotd.db").display(),
        opts.dir.join("slotd.db").display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo's whole mix, three providers, to the end: every task completes, Runway saw one
    /// create per shot and never more of our tasks at once than a model allows, fal one submit
    /// per Pika shot and never more of ours unfinished than the account runs. The `clip`
    /// route's shots all complete, each served by one of its targets with exactly one provider
    /// job; the ones Kling cannot make (a seed) are planned elsewhere; only routed shots meet
    /// Kling's empty packs, and each create refused for them (429/1102) is a failover.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_demo_runs_kling_runway_and_pika_side_by_side_to_the_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = DemoOptions {
            time_scale: 0.002,
            dir: dir.path().join("demo"),
            no_callbacks: false,
            seed: 7,
            failure_rate: 0.0,
        };
        let outcome = run(opts, std::future::pending())
            .await
            .expect("the demo runs");
        for t in &outcome.tasks {
            assert_eq!(t["status"], "completed", "{t}");
        }
        // The route: every shot completed on one of its targets, one job each.
        let routed = &outcome.route;
        assert_eq!(routed.units, u64::from(route::SHOTS), "{routed:?}");
        assert_eq!(routed.completed, routed.units, "{routed:?}");
        assert_eq!(
            routed.served.values().sum::<u64>(),
            routed.units,
            "{routed:?}"
        );
        assert!(routed.one_job_each(), "{routed:?}");
        let on = |handler: &str| -> u64 {
            routed
                .served
                .iter()
                .filter(|(t, _)| t.starts_with(&format!("{handler}/")))
                .map(|(_, n)| n)
                .sum()
        };
        let targets: Vec<String> = route::TARGETS
            .iter()
            .map(|(h, m)| format!("{h}/{m}"))
            .collect();
        assert!(
            routed.served.keys().all(|t| targets.contains(t)),
            "{routed:?}"
        );
        // Kling takes no seed: those shots were planned on Runway and Pika only.
        assert_eq!(
            routed.left_out.get("kling-video/kling-v1-6"),
            Some(&u64::from(route::SEEDED)),
            "{routed:?}"
        );
        // Only routed shots met Kling's empty packs, and each create Kling refused for them
        // (1102) sent its unit back to the route: every failover is one of those.
        let exhausted = routed
            .failovers
            .get("account_exhausted")
            .copied()
            .unwrap_or(0);
        assert_eq!(exhausted, routed.balance_refusals, "{routed:?}");
        assert_eq!(
            routed.failovers.values().sum::<u64>(),
            exhausted,
            "{routed:?}"
        );
        if routed.packs.ran_out_at.iter().all(Option::is_none) {
            assert_eq!(routed.balance_refusals, 0, "{routed:?}");
        }
        assert_eq!(
            routed.packs.topped_up_at, None,
            "a Kling task needed the packs: {routed:?}"
        );
        let line = route::summary(routed);
        assert!(
            line.contains(&format!("{0}/{0} routed units completed", route::SHOTS))
                && line.contains("every routed unit had exactly one provider job"),
            "{line}"
        );
        let runway_units: u32 = runway::workload().iter().map(|w| w.4).sum();
        let runway_units = u64::from(runway_units) + on(runway::HANDLER);
        assert_eq!(outcome.runway.creates, runway_units);
        assert_eq!(outcome.runway.succeeded, runway_units);
        for (model, m) in &outcome.runway.models {
            assert!(
                m.max_held_seen <= runway::SLOTS_PER_MODEL,
                "{model}: {} held at once",
                m.max_held_seen
            );
        }
        let pika_units: u32 = pika::workload().iter().map(|w| w.4).sum();
        let pika_units = u64::from(pika_units) + on(pika::HANDLER);
        let fal = &outcome.pika.accounts[slotd_sim::fal::ACCOUNT_DEFAULT];
        assert_eq!(fal.submits, pika_units);
        assert_eq!(fal.succeeded, pika_units);
        assert!(fal.max_unfinished <= u64::from(pika::ACCOUNT_CONCURRENCY));
        // The backup Kling account took video work, within its own limit.
        assert!(outcome.backup.creates > 0, "the backup account was used");
        assert!(outcome.backup.max_running <= accounts::BACKUP_SLOTS);
        let on_backup = outcome
            .tasks
            .iter()
            .flat_map(|t| t["results"].as_array().cloned().unwrap_or_default())
            .filter(|r| r["account"] == "backup")
            .count();
        assert_eq!(
            on_backup as u64, outcome.backup.creates,
            "units name their account"
        );
    }
}
