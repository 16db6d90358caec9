//! The `slotd` binary: parse the command line, set up tracing, call into the library.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use slotd_core::config::{Config, Role};

#[derive(Parser)]
#[command(
    name = "slotd",
    version,
    about = "Slot-based scheduler for provider-limited asynchronous jobs"
)]
struct Cli {
    /// Configuration file (default: $SLOTD_CONFIG, else built-in defaults).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the API and/or the scheduler.
    Serve {
        /// Which parts to run.
        #[arg(long, value_enum)]
        role: Option<Role>,
        /// Listen address (overrides SLOTD_LISTEN and the file).
        #[arg(long)]
        listen: Option<String>,
        /// Allow listening beyond loopback with no API keys configured.
        #[arg(long)]
        allow_unauthenticated: bool,
    },
    /// The main job end to end: the Kling simulator, embedded slotd, both Kling handlers, a
    /// realistic mix of tasks from several tenants, live progress and a summary.
    #[cfg(feature = "demo")]
    Demo(slotd::demo::DemoOptions),
    /// Apply database migrations and exit.
    Migrate,
    /// Print the API's OpenAPI 3.1 document (what `GET /openapi.json` serves; the repository's
    /// `openapi.json` is this output).
    Openapi,
    /// Audit a database (read-only) against slotd's invariants; exit status 1 on any finding.
    Check(CheckArgs),
    /// Handler tools.
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
    /// Provider simulators for tests, demos and benchmarks.
    #[cfg(feature = "demo")]
    Sim {
        #[command(subcommand)]
        command: SimCommand,
    },
    /// Act on a handler's rollout in progress: promote, rollback, pause or resume.
    Handler {
        /// Base URL of the slotd API.
        #[arg(long, env = "SLOTD_URL", default_value = "http://127.0.0.1:8080")]
        url: String,
        /// API key (Bearer): an admin key, or one allowed to publish this handler.
        #[arg(long, env = "SLOTD_API_KEY")]
        key: Option<String>,
        #[arg(value_parser = ["promote", "rollback", "pause", "resume"])]
        action: String,
        /// The handler.
        name: String,
    },
    /// Talk to a running slotd's API.
    Task {
        /// Base URL of the slotd API.
        #[arg(long, env = "SLOTD_URL", default_value = "http://127.0.0.1:8080")]
        url: String,
        /// API key (Bearer).
        #[arg(long, env = "SLOTD_API_KEY")]
        key: Option<String>,
        #[command(subcommand)]
        command: TaskCommand,
    },
}

#[derive(clap::Args)]
struct CheckArgs {
    /// Database to check (default: SLOTD_DATABASE_URL, else the configuration's).
    #[arg(long)]
    database: Option<String>,
    /// Also verify every completed unit's artifacts in the object store.
    #[arg(long)]
    objects: bool,
    /// Object store to verify (default: the configuration's `object_store`).
    #[arg(long, requires = "objects")]
    object_store: Option<String>,
    /// How long past its lease a `finalizing` unit may be before it is reported.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    finalize_grace: std::time::Duration,
}

#[cfg(feature = "demo")]
#[derive(Subcommand)]
enum SimCommand {
    /// A Kling-compatible simulator (JWT auth, real paths and envelopes, 1303 at the limit).
    Kling(slotd_sim::kling::SimOptions),
    /// A Runway-compatible simulator (bearer key, per-model concurrency with THROTTLED tasks,
    /// signed expiring output links, daily limit 429).
    Runway(slotd_sim::runway::RunwayOptions),
    /// A fal-compatible queue simulator serving Pika's models (Key auth, per-account
    /// concurrency with IN_QUEUE requests, signed webhooks, CDN files, request history).
    Fal(slotd_sim::fal::FalOptions),
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Start a handler project: a crate on slotd-sdk (vendored, so it builds anywhere) that
    /// speaks the stub provider, with unit tests and a README; prints the next commands.
    New {
        /// The handler's name, also its task type and pool: `[a-z][a-z0-9-]*`, at most 64.
        name: String,
        /// Where to create NAME/ (created if missing); an existing NAME/ is never touched.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
    /// Validate a handler component offline: print what it declares and every problem found
    /// (non-zero exit when slotd would refuse it). Run it before dropping a file in plugins/.
    Check { file: PathBuf },
    /// Publish a handler component to a running slotd (`POST /v1/handlers`) as a release
    /// every process of the cluster runs, then wait until each has loaded it.
    Publish {
        file: PathBuf,
        /// Base URL of the slotd API.
        #[arg(long, env = "SLOTD_URL", default_value = "http://127.0.0.1:8080")]
        url: String,
        /// API key (Bearer): an admin key, or one allowed to publish this handler.
        #[arg(long, env = "SLOTD_API_KEY")]
        key: Option<String>,
        /// How long to wait for every process to load it.
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        wait: std::time::Duration,
        /// Do not wait for the processes.
        #[arg(long)]
        no_wait: bool,
        /// This release reads the job state of the releases before it: their provider jobs
        /// move to it at once instead of finishing on the release that created them.
        #[arg(long)]
        takes_over: bool,
        /// Roll it out in stages, judged on provider outcomes: shares of new units in percent,
        /// ending at 100 (e.g. `10,25,100`).
        #[arg(long)]
        rollout: Option<String>,
        /// With --rollout: follow the rollout until it is promoted (or rolled back: exit 1).
        #[arg(long, requires = "rollout")]
        watch: bool,
        /// With --rollout: candidate units that must end in a stage before it is judged
        /// (default 20).
        #[arg(long, requires = "rollout")]
        min_units: Option<u32>,
    },
    /// Run a handler offline against a recording (`[handlers.X] record = "DIR"` writes one):
    /// print what every call returns and its guest instruction count (fuel); fail on any
    /// difference from the recorded requests or changes.
    Replay {
        file: PathBuf,
        recording: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum TaskCommand {
    /// Submit a task: `slotd task submit video '{"shots":[…]}'` (or `@file.json`).
    Submit {
        task_type: String,
        payload: String,
        #[arg(long)]
        idempotency_key: Option<String>,
        #[arg(long, default_value_t = 0)]
        priority: i32,
    },
    /// Show a task.
    Get { id: String },
    /// Follow a task's progress live until it ends (exit status 1 unless it completed).
    Watch { id: String },
    /// List tasks.
    List {
        #[arg(long)]
        r#type: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
}

fn init_tracing(json: bool) {
    init_tracing_with(json, "info,wasmtime=warn,cranelift=warn,sqlx=warn");
}

fn init_tracing_with(json: bool, default: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("SLOTD_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutdown requested");
}

async fn task_command(url: &str, key: Option<&str>, cmd: TaskCommand) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let base = url.trim_end_matches('/');
    let auth = |rb: reqwest::RequestBuilder| match key {
        Some(k) => rb.bearer_auth(k),
        None => rb,
    };
    if let TaskCommand::Watch { id } = &cmd {
        use std::io::IsTerminal;
        let redraw = std::io::stdout().is_terminal();
        let status = slotd::watch::watch(base, key, id, &mut std::io::stdout(), redraw).await?;
        if status != "completed" {
            anyhow::bail!("task {id} ended {status}");
        }
        return Ok(());
    }
    let resp = match cmd {
        TaskCommand::Watch { .. } => unreachable!("handled above"),
        TaskCommand::Submit {
            task_type,
            payload,
            idempotency_key,
            priority,
        } => {
            let text = match payload.strip_prefix('@') {
                Some(path) => std::fs::read_to_string(path)
                    .with_context(|| format!("reading payload file {path}"))?,
                None => payload,
            };
            let payload: serde_json::Value =
                serde_json::from_str(&text).context("the payload is not valid JSON")?;
            let body = serde_json::json!({
                "payload": payload,
                "idempotency_key": idempotency_key,
                "priority": priority,
            });
            auth(
                client
                    .post(format!("{base}/v1/tasks/{task_type}"))
                    .json(&body),
            )
            .send()
            .await
        }
        TaskCommand::Get { id } => {
            auth(client.get(format!("{base}/v1/tasks/{id}")))
                .send()
                .await
        }
        TaskCommand::List { r#type, limit } => {
            let mut q = vec![("limit", limit.to_string())];
            if let Some(t) = r#type {
                q.push(("type", t));
            }
            auth(client.get(format!("{base}/v1/tasks")).query(&q))
                .send()
                .await
        }
    }
    .with_context(|| format!("calling slotd at {base}"))?;
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    let pretty = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or(text);
    println!("{pretty}");
    if !status.is_success() {
        anyhow::bail!("slotd answered {status}");
    }
    Ok(())
}

/// `slotd plugin check FILE.wasm`: validate a component offline as the host would before
/// loading it; print what it declares, every problem, and notes. Fails when there are problems.
async fn plugin_check(file: PathBuf) -> anyhow::Result<()> {
    let config = Config::default();
    let runtime = slotd_runtime::Runtime::new(config.limits, Default::default())?;
    let report = slotd_runtime::check_file(&runtime, &file).await;
    let sha = report.sha256.as_deref().unwrap_or("unreadable");
    match &report.info {
        Some(info) => {
            println!(
                "{}: handler {} {} (sha256 {sha})",
                file.display(),
                info.name,
                info.version
            );
            if let Some(contract) = &report.contract {
                let features = report.features.unwrap_or_default();
                let mut used = Vec::new();
                if features.cancel {
                    used.push("cancel");
                }
                if features.routing {
                    used.push("routing");
                }
                if features.costs {
                    used.push("costs");
                }
                println!(
                    "  speaks slotd:handler@{contract}{}",
                    if used.is_empty() {
                        String::new()
                    } else {
                        format!(" with {}", used.join(", "))
                    }
                );
            }
            for t in &info.task_types {
                let stages: Vec<String> = t
                    .stages
                    .iter()
                    .map(|s| {
                        if s.alt_pools.is_empty() {
                            format!("{} on pool {}", s.name, s.pool)
                        } else {
                            format!(
                                "{} on pool {} (or {})",
                                s.name,
                                s.pool,
                                s.alt_pools.join(", ")
                            )
                        }
                    })
                    .collect();
                println!("  task type {}: {}", t.name, stages.join(", then "));
            }
            for p in &info.pools {
                println!(
                    "  proposes pool {} with {} slots",
                    p.name, p.default_max_slots
                );
            }
        }
        None => println!("{}: (sha256 {sha})", file.display()),
    }
    for note in &report.notes {
        println!("  note: {note}");
    }
    for problem in &report.problems {
        println!("  problem: {problem}");
    }
    if report.problems.is_empty() {
        println!("ok: slotd would load this handler");
        Ok(())
    } else {
        anyhow::bail!(
            "{}: {} problem(s); slotd would refuse this file",
            file.display(),
            report.problems.len()
        )
    }
}

/// `slotd plugin replay`: replay, print every call, fail on a difference.
async fn plugin_replay(file: &Path, recording: &Path, json: bool) -> anyhow::Result<()> {
    let report = slotd_runtime::replay::replay(file, recording).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for c in &report.calls {
            match &c.skipped {
                Some(why) => println!("line {} {}: skipped ({why})", c.line, c.function),
                None => println!(
                    "line {} {}: {} request(s), fuel {}, {}\n  {}",
                    c.line,
                    c.function,
                    c.requests,
                    c.fuel,
                    if c.differences.is_empty() {
                        "same as recorded"
                    } else {
                        "DIFFERS"
                    },
                    c.output
                ),
            }
            for d in &c.differences {
                println!("  difference: {d}");
            }
        }
    }
    let differing = report.differing();
    if differing > 0 {
        anyhow::bail!(
            "{differing} of {} call(s) differ from the recording {}",
            report.calls.len(),
            recording.display()
        );
    }
    println!("ok: {} call(s) replayed as recorded", report.calls.len());
    Ok(())
}

/// `slotd check`: print every finding, then a summary; an error (exit status 1) if any.
async fn check(config: Config, args: CheckArgs) -> anyhow::Result<()> {
    let now = slotd_core::clock::Clock::now_ms(&slotd_core::clock::SystemClock);
    let mut opts = slotd_server::check::CheckOptions::for_config(&config, now);
    if let Some(url) = args.database {
        opts.database_url = url;
    }
    opts.objects = args
        .objects
        .then(|| args.object_store.unwrap_or(config.object_store));
    opts.finalize_grace = args.finalize_grace;
    let report = slotd_server::check::run(&opts).await?;
    for finding in &report.findings {
        println!("{finding}");
    }
    let also = if report.checked.is_empty() {
        String::new()
    } else {
        format!(" (also checked: {})", report.checked.join(", "))
    };
    println!(
        "checked {} tasks, {} units, {} events, {} artifacts{also}: {} finding(s)",
        report.tasks,
        report.units,
        report.events,
        report.objects,
        report.findings.len()
    );
    if report.findings.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("{} finding(s)", report.findings.len())
    }
}

async fn main_inner(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve {
            role,
            listen,
            allow_unauthenticated,
        } => {
            let mut config = Config::load(cli.config.as_deref())?;
            init_tracing(config.log_json);
            if let Some(r) = role {
                config.role = r;
            }
            if let Some(l) = listen {
                config.listen = l
                    .parse()
                    .with_context(|| format!("--listen: {l:?} is not an address"))?;
            }
            config.allow_unauthenticated |= allow_unauthenticated;
            slotd_server::run(config, shutdown_signal()).await
        }
        #[cfg(feature = "demo")]
        Command::Demo(opts) => {
            // The demo draws progress bars on stdout: only warnings go to the log.
            if std::env::var_os("SLOTD_LOG").is_none() {
                init_tracing_with(false, "warn");
            } else {
                init_tracing(false);
            }
            slotd::demo::run(opts, shutdown_signal()).await.map(|_| ())
        }
        Command::Openapi => {
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            out.write_all(slotd_server::api::openapi_json_text().as_bytes())
                .and_then(|()| out.flush())
                .context("writing the OpenAPI document to stdout")
        }
        Command::Migrate => {
            let config = Config::load(cli.config.as_deref())?;
            init_tracing(config.log_json);
            slotd_store::open(&config.database_url).await?;
            println!(
                "migrations applied to {}",
                slotd_core::redact::redact_url(&config.database_url)
            );
            Ok(())
        }
        Command::Check(args) => {
            let config = Config::load(cli.config.as_deref())?;
            check(config, args).await
        }
        Command::Plugin {
            command: PluginCommand::New { name, dir },
        } => {
            let project = slotd::scaffold::create(&name, &dir)?;
            print!("{}", project.next_steps());
            Ok(())
        }
        Command::Plugin {
            command: PluginCommand::Check { file },
        } => {
            init_tracing(false);
            plugin_check(file).await
        }
        Command::Plugin {
            command:
                PluginCommand::Publish {
                    file,
                    url,
                    key,
                    wait,
                    no_wait,
                    takes_over,
                    rollout,
                    watch,
                    min_units,
                },
        } => {
            let opts = slotd::publish::PublishOptions {
                url: &url,
                key: key.as_deref(),
                wait: (!no_wait).then_some(wait),
                takes_over,
                rollout: rollout.as_deref(),
                watch,
                min_units,
            };
            slotd::publish::publish(&file, &opts).await.map(|_| ())
        }
        Command::Plugin {
            command:
                PluginCommand::Replay {
                    file,
                    recording,
                    json,
                },
        } => {
            init_tracing(false);
            plugin_replay(&file, &recording, json).await
        }
        #[cfg(feature = "demo")]
        Command::Sim {
            command: SimCommand::Kling(opts),
        } => {
            init_tracing(false);
            slotd_sim::kling::serve(opts, shutdown_signal()).await
        }
        #[cfg(feature = "demo")]
        Command::Sim {
            command: SimCommand::Runway(opts),
        } => {
            init_tracing(false);
            slotd_sim::runway::serve(opts, shutdown_signal()).await
        }
        #[cfg(feature = "demo")]
        Command::Sim {
            command: SimCommand::Fal(opts),
        } => {
            init_tracing(false);
            slotd_sim::fal::serve(opts, shutdown_signal()).await
        }
        Command::Task { url, key, command } => task_command(&url, key.as_deref(), command).await,
        Command::Handler {
            url,
            key,
            action,
            name,
        } => slotd::publish::rollout_action(&url, key.as_deref(), &name, &action).await,
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match main_inner(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("slotd: {e:#}");
            ExitCode::FAILURE
        }
    }
}
