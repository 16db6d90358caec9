//! slotd-demo: `slotd demo`, slotd's main job, end to end, on one machine with nothing to
//! install. The `slotd` binary runs it through its default `demo` feature (`slotd::demo`); a
//! release build leaves it out, with the simulators and the built handlers it needs.
//!
//! Starts the Kling simulator (two accounts: 20 and 10 concurrent tasks, time compressed), an embedded
//! slotd (SQLite, in-process slots, local object store) with the Kling handlers, submits a
//! realistic mix from several tenants (a long video task, short ones, avatar clones, Runway and
//! Pika shots, and shots on the `clip` route that Kling, Runway and Pika all serve), shows live
//! progress per task and per pool, and ends with a summary measured against the ideal.

mod accounts;
mod pika;
mod progress;
pub mod report;
mod route;
mod runway;
mod summary;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use slotd_core::config::{ApiKey, Config, HandlerConfig, SchedulerConfig, Secret};
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
        let src = slotd_handlers::built_handler(name).with_context(|| {
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
    // kling:video's capacity is its accounts', kling:avatar's its share of the main one (see
    // `accounts.rs`).
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
            publish: Vec::new(),
        })
        .chain([ApiKey {
            key: Secret::new(OPS_KEY),
            tenant: "ops".into(),
            admin: true,
            publish: Vec::new(),
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
    /// The main Kling account's jobs (both pools share it).
    pub main_jobs: Vec<slotd_sim::kling::SimJob>,
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
    let sims = Simulators::start(&opts).await?;
    let slotd = Embedded::start(&opts, &sims, plugins).await?;
    let interrupted = tokio_util::sync::CancellationToken::new();
    let on_stop = interrupted.clone();
    tokio::spawn(async move {
        stop.await;
        on_stop.cancel();
    });

    banner(&opts, &sims, &slotd.base);
    let client = reqwest::Client::new();
    let started = Instant::now();
    let tasks = submit(&client, &slotd.base).await?;
    // Partway, Kling's resource packs run out (see `route.rs`).
    let watch_done = tokio_util::sync::CancellationToken::new();
    let packs = tokio::spawn(route::run_out_of_packs(
        client.clone(),
        slotd.base.clone(),
        OPS_KEY,
        [
            sims.kling.base_url().to_string(),
            sims.backup.base_url().to_string(),
        ],
        Duration::from_millis(((opts.time_scale * 1000.0) as u64).clamp(10, 250)),
        started,
        watch_done.clone(),
    ));
    let watch = progress::Watch {
        client: &client,
        base: &slotd.base,
        tasks: &tasks,
        started,
        interrupted: &interrupted,
        dir: &opts.dir,
    };
    let views = watch.until_done().await?;
    let makespan = started.elapsed();
    watch_done.cancel();
    let packs = packs.await.unwrap_or_default();
    let ended = Ended {
        tasks,
        views,
        makespan,
        packs,
    };
    let outcome = finish(&opts, &client, &slotd, &sims, ended).await?;
    slotd.stop().await?;
    sims.shutdown().await?;
    Ok(outcome)
}

/// The simulated providers of the demo: two Kling accounts, Runway and fal (Pika).
struct Simulators {
    kling: SimHandle,
    backup: SimHandle,
    runway: slotd_sim::runway::RunwaySimHandle,
    fal: slotd_sim::fal::FalSimHandle,
}

impl Simulators {
    async fn start(opts: &DemoOptions) -> anyhow::Result<Self> {
        let kling = slotd_sim::kling::start(SimOptions {
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
        let runway = runway::start(opts.time_scale, opts.seed).await?;
        let fal = pika::start(opts.time_scale, opts.seed).await?;
        Ok(Self {
            kling,
            backup,
            runway,
            fal,
        })
    }

    async fn shutdown(self) -> anyhow::Result<()> {
        self.kling.shutdown().await?;
        self.backup.shutdown().await?;
        self.runway.shutdown().await?;
        self.fal.shutdown().await?;
        Ok(())
    }
}

/// The embedded slotd the demo submits to, serving on a loopback port of its own.
struct Embedded {
    base: String,
    /// Where the local object store keeps the artifacts.
    objects_root: Option<PathBuf>,
    token: tokio_util::sync::CancellationToken,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Embedded {
    async fn start(
        opts: &DemoOptions,
        sims: &Simulators,
        plugins: PathBuf,
    ) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let base = format!("http://{addr}");
        let public = (!opts.no_callbacks).then(|| base.clone());
        let mut config = demo_config(opts, &sims.kling, plugins, public);
        accounts::configure(&mut config, &sims.backup)?;
        runway::configure(&mut config, &sims.runway, opts.time_scale);
        pika::configure(&mut config, &sims.fal, opts.time_scale);
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
        Ok(Self {
            base,
            objects_root,
            token,
            server,
        })
    }

    async fn stop(self) -> anyhow::Result<()> {
        self.token.cancel();
        self.server.await.context("slotd task")?
    }
}

/// What the demo prints before submitting: where everything runs and how the pools are set.
fn banner(opts: &DemoOptions, sims: &Simulators, base: &str) {
    println!(
        "slotd demo: Kling simulator at {} (20 concurrent, time x{}), slotd at {base}",
        sims.kling.base_url(),
        opts.time_scale
    );
    println!(
        "Runway simulator at {} ({} per model); runway-video pools runway:<model>, {} slots each",
        sims.runway.base_url(),
        runway::SLOTS_PER_MODEL,
        runway::SLOTS_PER_MODEL
    );
    println!(
        "fal simulator (Pika) at {} ({} concurrent); fal-video pools fal:<model id>, one provider account of {} over them",
        sims.fal.base_url(),
        pika::ACCOUNT_CONCURRENCY,
        pika::ACCOUNT_CONCURRENCY
    );
    println!(
        "backup Kling account at {} ({} concurrent)",
        sims.backup.base_url(),
        accounts::BACKUP_SLOTS
    );
    println!(
        "pools: kling:video on two accounts (main {} + backup {}), kling:avatar on main; main is one provider account over both (video min {} max {}, avatars min {} max {}): idle slots are borrowed; {}\n",
        accounts::MAIN_SLOTS,
        accounts::BACKUP_SLOTS,
        accounts::VIDEO_SHARE.0,
        accounts::VIDEO_SHARE.1,
        accounts::AVATAR_SHARE.0,
        accounts::AVATAR_SHARE.1,
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
}

/// Submit the whole workload, each task with its tenant's key.
async fn submit(client: &reqwest::Client, base: &str) -> anyhow::Result<Vec<Submitted>> {
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
    Ok(tasks)
}

/// The submitted tasks once they ended (or the demo was interrupted).
struct Ended {
    tasks: Vec<Submitted>,
    /// Each task's last view (`GET /v1/tasks/{id}`), in `tasks`' order.
    views: Vec<Value>,
    makespan: Duration,
    packs: route::Packs,
}

/// Read the tenants' usage and the route's outcome, print the summary, and say how it went.
async fn finish(
    opts: &DemoOptions,
    client: &reqwest::Client,
    slotd: &Embedded,
    sims: &Simulators,
    ended: Ended,
) -> anyhow::Result<DemoOutcome> {
    let base = &slotd.base;
    let mut usage = Vec::new();
    for (tenant, _) in TENANTS {
        usage.push(
            get_json(
                client,
                &format!("{base}/v1/tenants/{tenant}/usage"),
                OPS_KEY,
            )
            .await?,
        );
    }
    let mut routed = routed_outcome(client, base, sims, &ended.tasks).await?;
    routed.packs = ended.packs;
    summary::print(
        opts,
        [&sims.kling, &sims.backup],
        &ended,
        &routed,
        slotd.objects_root.as_deref(),
    );
    let backup_stats = sims.backup.stats();
    accounts::print(
        &sims.kling.stats(),
        &backup_stats,
        &sims.kling.jobs(),
        &usage,
    );
    let runway_stats = sims.runway.stats();
    println!("{}", runway::summary(&runway_stats));
    let pika_stats = sims.fal.stats();
    println!("{}", pika::summary(&pika_stats));
    println!("{}", route::summary(&routed));
    let pools = get_json(client, &format!("{base}/v1/pools"), OPS_KEY).await?;
    for line in runway::quota_lines(&pools) {
        println!("{line}");
    }
    Ok(DemoOutcome {
        tasks: ended.views,
        runway: runway_stats,
        pika: pika_stats,
        backup: backup_stats,
        main_jobs: sims.kling.jobs(),
        route: routed,
    })
}

/// How the `clip` route's task went, counted in the simulators' job lists.
async fn routed_outcome(
    client: &reqwest::Client,
    base: &str,
    sims: &Simulators,
    tasks: &[Submitted],
) -> anyhow::Result<route::RouteOutcome> {
    let other_units = |ty: &str| -> u64 {
        tasks
            .iter()
            .filter(|t| t.ty == ty)
            .map(|t| u64::from(t.units))
            .sum()
    };
    let Some(t) = tasks.iter().find(|t| t.ty == route::ROUTE) else {
        return Ok(route::RouteOutcome::default());
    };
    route::outcome(
        client,
        base,
        t.key,
        &t.id,
        route::Sims {
            kling: [&sims.kling, &sims.backup],
            runway: &sims.runway,
            fal: &sims.fal,
        },
        (other_units("runway_video"), other_units("fal_video")),
    )
    .await
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
        assert_the_route(&outcome.route);
        assert_runway_and_pika(&outcome);
        assert_the_backup_account(&outcome);
        assert_the_shared_account(&outcome);
    }

    fn assert_the_shared_account(outcome: &DemoOutcome) {
        // The main Kling account held both pools within its limit and each within its share.
        let (video, avatar, both) = accounts::shared_peaks(&outcome.main_jobs);
        assert!(
            both <= accounts::MAIN_SLOTS as usize,
            "{both} at once on main"
        );
        assert!(video <= accounts::VIDEO_SHARE.1 as usize, "video {video}");
        assert!(
            avatar <= accounts::AVATAR_SHARE.1 as usize,
            "avatars {avatar}"
        );
        assert!(avatar > 0 && video > 0, "both pools ran on main");
    }

    /// The routed units a target of `handler` served.
    fn served_on(routed: &route::RouteOutcome, handler: &str) -> u64 {
        routed
            .served
            .iter()
            .filter(|(t, _)| t.starts_with(&format!("{handler}/")))
            .map(|(_, n)| n)
            .sum()
    }

    fn assert_the_route(routed: &route::RouteOutcome) {
        // The route: every shot completed on one of its targets, one job each.
        assert_eq!(routed.units, u64::from(route::SHOTS), "{routed:?}");
        assert_eq!(routed.completed, routed.units, "{routed:?}");
        assert_eq!(
            routed.served.values().sum::<u64>(),
            routed.units,
            "{routed:?}"
        );
        assert!(routed.one_job_each(), "{routed:?}");
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
    }

    fn assert_runway_and_pika(outcome: &DemoOutcome) {
        let routed = &outcome.route;
        let on = |handler: &str| served_on(routed, handler);
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
    }

    fn assert_the_backup_account(outcome: &DemoOutcome) {
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
