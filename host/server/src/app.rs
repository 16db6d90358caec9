//! Running slotd until shutdown: [`build`] (from slotd-units' `assemble`) opens the store, the
//! slots and the runtime, loads the handlers and returns the shared [`Services`]; [`run_with`]
//! serves the API and/or runs the scheduler on them until the shutdown future resolves, then
//! stops accepting, stops ticking and drains finalizations.

use std::future::Future;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use slotd_core::config::Config;
use slotd_scheduler::Scheduler;
use slotd_units::services::Services;

pub use slotd_units::assemble::{build, build_with_clock, metrics_registry};

/// Build and run until `shutdown` resolves, listening on the configured address.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    config.check_exposure()?;
    let listen = config.listen;
    let services = build(config).await?;
    // A scheduler-only process listens too, for probes and metrics only.
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    run_with(services, Some(listener), shutdown).await
}

/// Run the API (when given a listener; only the probes for the `scheduler` role) and the
/// scheduler (when the role says so) on `services`.
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
    // Hot reload (docs/handlers.md): keep the handlers in step with the plugins directory.
    let watcher = if services.config.plugins_dir.is_dir() {
        slotd_runtime::Watcher::spawn(
            services.runtime.clone(),
            services.registry.clone(),
            &services.config.plugins_dir,
            slotd_runtime::WatcherOptions::default(),
            token.clone(),
        )
        .map_err(|e| tracing::warn!("hot reload is off: {e:#}"))
        .ok()
    } else {
        None
    };

    // Releases (docs/handlers.md): follow what is published anywhere in the cluster. An API
    // process relays the cluster's wakes for its follower; a scheduler's relay does it too.
    let follower = tokio::spawn(services.follower.clone().run(
        services.runtime.clone(),
        services.registry.clone(),
        services.wake.listener(slotd_coord::wake::WakeKey::Releases),
        slotd_runtime::follow::FOLLOW_INTERVAL,
        token.clone(),
    ));
    if !services.config.role.runs_scheduler()
        && let Some(keys) = services.keyspace.clone()
    {
        tokio::spawn(services.wake.clone().relay(keys, token.clone()));
    }

    if let Some(listener) = listener {
        let addr = listener.local_addr().ok();
        tracing::info!(?addr, "API listening");
        let app = if services.config.role.runs_api() {
            slotd_api::router(services.clone())
        } else {
            slotd_api::probe_router(services.clone())
        };
        slotd_api::serve::serve(
            listener,
            app,
            services.config.api.header_read_timeout,
            token.clone(),
        )
        .await;
    } else {
        token.cancelled().await;
    }
    if let Some(t) = sched_task {
        t.await.context("scheduler task")?;
    }
    follower.await.context("release follower task")?;
    if let Some(w) = watcher {
        w.task.await.context("plugins watcher task")?;
    }
    tracing::info!("slotd stopped");
    Ok(())
}
