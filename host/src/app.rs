//! Assembling slotd from its configuration and running it until shutdown.
//!
//! [`build`] opens the store, the slots and the runtime, loads the handlers and returns the
//! shared [`Services`]; [`run_with`] serves the API and/or runs the scheduler on them until the
//! shutdown future resolves, then stops accepting, stops ticking and drains finalizations.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use anyhow::Context;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::clock::{DynClock, SystemClock};
use crate::config::Config;
use crate::runtime::{Registry, Runtime};
use crate::scheduler::Scheduler;
use crate::services::Services;
use crate::slots::local::LocalSlots;
use crate::wake::Wake;

/// The process-wide Prometheus recorder (a recorder can be installed once per process; tests
/// that start several slotd instances in one process share it).
pub fn metrics_handle() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let buckets = [
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0, 60.0, 300.0, 900.0,
            ];
            PrometheusBuilder::new()
                .set_buckets(&buckets)
                .ok()
                .and_then(|b| b.install_recorder().ok())
        })
        .clone()
}

/// Open everything the configuration names and load the handlers.
pub async fn build(config: Config) -> anyhow::Result<Services> {
    build_with_clock(config, Arc::new(SystemClock)).await
}

/// [`build`] with an injected clock (tests).
pub async fn build_with_clock(config: Config, clock: DynClock) -> anyhow::Result<Services> {
    let store = crate::store::open(&config.database_url)
        .await
        .with_context(|| format!("opening the database {}", config.database_url))?;
    if let Some(url) = &config.redis_url {
        // The Redis slot store arrives with scale-out; refuse rather than silently run with
        // in-process slots that other instances would not see.
        anyhow::bail!(
            "redis_url {url:?}: Redis slots are not supported by this build; unset SLOTD_REDIS_URL"
        );
    }
    let slots = Arc::new(LocalSlots::new());
    let cache_dir = crate::runtime::cache_dir_for(&config);
    let runtime = Runtime::with_cache_dir(
        config.limits.clone(),
        config.handlers.clone(),
        cache_dir.as_deref(),
    )
    .context("starting the wasm engine")?;
    let registry = Arc::new(Registry::new());
    registry.attach_history(store.clone());
    if config.plugins_dir.is_dir() {
        // Each load and refusal is logged (and journaled) by the registry.
        registry.load_dir(&runtime, &config.plugins_dir).await;
    } else {
        tracing::warn!(dir = %config.plugins_dir.display(), "plugins directory does not exist; no handlers loaded");
    }
    let objects = crate::objects::Objects::open(&config.object_store)?;
    Ok(Services {
        config: Arc::new(config),
        store,
        slots,
        runtime,
        registry,
        wake: Wake::new(),
        clock,
        objects,
        metrics: metrics_handle(),
    })
}

/// Build and run until `shutdown` resolves, listening on the configured address.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    config.check_exposure()?;
    let role = config.role;
    let listen = config.listen;
    let services = build(config).await?;
    let listener = if role.runs_api() {
        Some(
            TcpListener::bind(listen)
                .await
                .with_context(|| format!("listening on {listen}"))?,
        )
    } else {
        None
    };
    run_with(services, listener, shutdown).await
}

/// Run the API (when given a listener) and the scheduler (when the role says so) on `services`.
pub async fn run_with(
    services: Services,
    listener: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let token = CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        shutdown.await;
        trigger.cancel();
    });

    let scheduler = services
        .config
        .role
        .runs_scheduler()
        .then(|| Scheduler::new(services.clone()));
    let sched_task = scheduler.map(|s| tokio::spawn(s.run(token.clone())));
    // Hot reload (SPEC section 7): keep the handlers in step with the plugins directory.
    let watcher = if services.config.plugins_dir.is_dir() {
        crate::runtime::Watcher::spawn(
            services.runtime.clone(),
            services.registry.clone(),
            &services.config.plugins_dir,
            crate::runtime::WatcherOptions::default(),
            token.clone(),
        )
        .map_err(|e| tracing::warn!("hot reload is off: {e:#}"))
        .ok()
    } else {
        None
    };

    if let Some(listener) = listener {
        let addr = listener.local_addr().ok();
        tracing::info!(?addr, "API listening");
        let app = crate::api::router(services.clone());
        let stop = token.clone();
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
            .context("serving the API")?;
    } else {
        token.cancelled().await;
    }
    if let Some(t) = sched_task {
        t.await.context("scheduler task")?;
    }
    if let Some(w) = watcher {
        w.task.await.context("plugins watcher task")?;
    }
    tracing::info!("slotd stopped");
    Ok(())
}
