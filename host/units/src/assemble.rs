//! Assembling the [`Services`] from the configuration: open the store, the slots and the
//! runtime, load the handlers, seed the budgets. Built once per instance (by `slotd serve`
//! through slotd-server's `app`, or by a test) and passed down.

use std::sync::Arc;

use anyhow::Context;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::provider_callback_token::ProviderCallbackKey;
use crate::services::Services;
use slotd_coord::hot::HotStatus;
use slotd_coord::keyspace::Keyspace;
use slotd_coord::slots::DynSlots;
use slotd_coord::slots::local::LocalSlots;
use slotd_coord::slots::redis::RedisSlots;
use slotd_coord::wake::Wake;
use slotd_core::clock::{DynClock, SystemClock};
use slotd_core::config::Config;
use slotd_core::telemetry::Metrics;
use slotd_runtime::{Registry, Runtime};

/// A new metrics registry for one instance, and what renders it for `/metrics`. Each
/// instance has its own (several instances in one process, as in the test suites, never see
/// each other's counts); a task drains its histograms every few seconds, as an installed
/// Prometheus recorder would.
pub fn metrics_registry() -> (Metrics, PrometheusHandle) {
    let buckets = [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        60.0, 300.0, 900.0, 1800.0, 3600.0,
    ];
    let builder = PrometheusBuilder::new();
    // The buckets are constants and not empty: setting them cannot fail.
    let builder = match builder.set_buckets(&buckets) {
        Ok(b) => b,
        Err(_) => PrometheusBuilder::new(),
    };
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        let upkeep = handle.clone();
        rt.spawn(async move {
            let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                upkeep.run_upkeep();
            }
        });
    }
    (Metrics::new(Arc::new(recorder)), handle)
}

/// Open everything the configuration names and load the handlers.
pub async fn build(config: Config) -> anyhow::Result<Services> {
    build_with_clock(config, Arc::new(SystemClock)).await
}

/// [`build`] with an injected clock (tests).
pub async fn build_with_clock(mut config: Config, clock: DynClock) -> anyhow::Result<Services> {
    config.finish();
    config.check_secrets()?;
    if config.webhooks.secret.is_none() {
        tracing::info!(
            "[webhooks] secret is not set: completion webhooks are sent unsigned (no webhook-signature)"
        );
    }
    let (metrics, prometheus) = metrics_registry();
    let store = slotd_store::open(&config.database_url)
        .await
        .with_context(|| {
            format!(
                "opening the database {}",
                slotd_core::redact::redact_url(&config.database_url)
            )
        })?;
    // The unit writes go to the lifecycle alone; the rest of the service gets the store
    // without them (docs/architecture.md, "One writer of units").
    let units = crate::lifecycle::UnitWriter::start(store.clone(), metrics.clone());
    let store: slotd_store::DynServiceStore = store;
    // With Redis: shared slots, pool leases and hot snapshots. Redis need not answer yet (it
    // holds nothing the database cannot rebuild); the scheduler waits for it.
    let keyspace = match &config.redis_url {
        Some(url) => Some(Arc::new(Keyspace::new(url, &config.redis_prefix)?)),
        None => None,
    };
    let slots: DynSlots = match &keyspace {
        Some(keys) => {
            if let Err(e) = keys.ping().await {
                tracing::warn!(error = %e, "Redis does not answer yet; scheduling waits for it");
            }
            Arc::new(RedisSlots::new(keys.clone()))
        }
        None => Arc::new(LocalSlots::new()),
    };
    let hot = Arc::new(HotStatus::new(keyspace.clone(), metrics.clone()));
    let cache_dir = slotd_runtime::cache_dir_for(&config);
    let runtime = Runtime::for_instance(
        config.limits.clone(),
        config.handlers.clone(),
        cache_dir.as_deref(),
        metrics.clone(),
    )
    .context("starting the wasm engine")?;
    let wake = match &keyspace {
        Some(keys) => Wake::clustered(keys.clone(), metrics.clone()),
        None => Wake::new(),
    };
    let registry = Arc::new(Registry::new());
    registry.attach_metrics(metrics.clone());
    let releases_woken = wake.clone();
    registry.attach_release_hook(move || releases_woken.wake(slotd_coord::wake::WakeKey::Releases));
    registry.attach_history(store.clone());
    registry.restore_owners().await;
    if config.plugins_dir.is_dir() {
        // Each load and refusal is logged (and journaled) by the registry.
        registry.load_dir(&runtime, &config.plugins_dir).await;
    } else {
        tracing::warn!(dir = %config.plugins_dir.display(), "plugins directory does not exist; no handlers loaded");
    }
    // Then what was published (the cluster's releases, this directory's among them).
    let follower = slotd_runtime::Follower::new(
        store.clone(),
        slotd_runtime::ProcessId::this(role_name(config.role)),
    );
    if let Err(e) = follower.look(&runtime, &registry).await {
        tracing::warn!(error = %e, "could not read the handler releases; serving the plugins directory only until they can be read");
    }
    // Tenants' minimums must fit in the pools the loaded handlers size.
    let limits = slotd_pools::pool_state::pool_limits(&config, &registry);
    for (name, limit) in &limits {
        config.check_minimums(name, limit.max_slots)?;
    }
    check_shared_accounts(&config, &limits)?;
    let objects = slotd_objects::Objects::open(&config.object_store)?;
    let provider_callback_key = ProviderCallbackKey::load(&store, clock.now_ms())
        .await
        .context("reading the callback key from the database")?;
    seed_budgets(&config, &store, clock.now_ms()).await?;
    let capacity = Arc::new(slotd_pools::pool_state::Capacity::new(
        slotd_pools::pool_state::capacity::Policy::from_config(&config.scheduler),
    ));
    let services = Services {
        config: Arc::new(config),
        units,
        store,
        slots,
        runtime,
        registry,
        wake,
        clock,
        objects,
        hot,
        keyspace,
        provider_callback_key,
        capacity,
        accounts: Arc::new(slotd_pools::pool_state::AccountHealth::recording(
            metrics.clone(),
        )),
        closures: Arc::new(slotd_pools::pool_state::Closures::recording(
            metrics.clone(),
        )),
        durations: Arc::new(slotd_pools::pool_state::durations::Durations::recording(
            metrics.clone(),
        )),
        metrics,
        prometheus: Some(prometheus),
        discovered: Default::default(),
        events: Default::default(),
        job_lookups: Default::default(),
        follower,
    };
    // Units held back by a budget the file may have just raised are due again.
    for (tenant, t) in &services.config.tenants {
        if t.budget.is_some() {
            crate::lifecycle::release_holds(&services, tenant, services.clock.now_ms())
                .await
                .with_context(|| format!("releasing the units tenants.{tenant}.budget held"))?;
        }
    }
    Ok(services)
}

/// How a role is named in a process's words on releases.
fn role_name(role: slotd_core::config::Role) -> &'static str {
    use slotd_core::config::Role;
    match role {
        Role::Api => "api",
        Role::Scheduler => "scheduler",
        Role::All => "all",
    }
}

/// Write `[tenants.NAME] budget` into the database, where every instance reads budgets from.
/// A budget last set through the API is kept (`RecordWrite::budget_set`).
async fn seed_budgets(
    config: &Config,
    store: &slotd_store::DynServiceStore,
    now: i64,
) -> anyhow::Result<()> {
    for (tenant, t) in &config.tenants {
        let Some(b) = &t.budget else { continue };
        store
            .budget_set(&slotd_store::Budget {
                tenant: tenant.clone(),
                limit: b.limit,
                period_ms: b.period_ms(),
                source: "config".into(),
                updated_at: now,
            })
            .await
            .with_context(|| format!("writing tenants.{tenant}.budget to the database"))?;
    }
    // A tenant whose section (or budget) left the file loses the budget the file gave it.
    let keep: Vec<String> = config
        .tenants
        .iter()
        .filter(|(_, t)| t.budget.is_some())
        .map(|(name, _)| name.clone())
        .collect();
    for tenant in store
        .budget_prune_config(&keep)
        .await
        .context("removing budgets the configuration no longer sets")?
    {
        tracing::info!(tenant = %tenant, "budget removed: the configuration no longer sets it");
    }
    Ok(())
}

/// Each share of a `[provider_accounts]` entry must name a slot set its pool's handler has:
/// the handler's named account (`account = "…"`), or its implicit one when it has no
/// `[[handlers.NAME.accounts]]`. A pool no loaded handler serves yet is only warned about: its
/// handler may be published later.
fn check_shared_accounts(
    config: &Config,
    limits: &std::collections::BTreeMap<String, slotd_pools::pool_state::PoolLimit>,
) -> anyhow::Result<()> {
    for (name, a) in &config.provider_accounts {
        for (pool, share) in &a.pools {
            let at = format!("provider_accounts.{name}.pools.{pool:?}");
            let Some(limit) = limits.get(pool).filter(|l| !l.handlers.is_empty()) else {
                tracing::warn!(provider_account = %name, pool = %pool, "no loaded handler serves this pool yet; its share applies once one does");
                continue;
            };
            let named: Vec<&str> = limit
                .accounts
                .iter()
                .filter_map(|x| x.name.as_deref())
                .collect();
            let handler = limit.handlers.join(", ");
            match (&share.account, named.is_empty()) {
                (Some(acc), true) => anyhow::bail!(
                    "{at}.account: the pool's handler {handler} has no [[handlers.{handler}.accounts]], so no account {acc:?}; leave account out for its implicit account"
                ),
                (Some(acc), false) if !named.contains(&acc.as_str()) => anyhow::bail!(
                    "{at}.account: handler {handler} has no account {acc:?} (its accounts: {})",
                    named.join(", ")
                ),
                (None, false) => anyhow::bail!(
                    "{at}: the pool draws on handler {handler}'s accounts {}; name the one on this provider account with account = \"…\"",
                    named.join(", ")
                ),
                _ => {}
            }
        }
    }
    Ok(())
}
