//! The API test harness shared by `tests.rs` and `web_tests.rs`: the real router over the
//! real SQLite store in a temp dir, in-process slots, and the real compiled fixture handler.

use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;

use super::router;
use slotd_coord::slots::local::LocalSlots;
use slotd_coord::wake::Wake;
use slotd_core::clock::ManualClock;
use slotd_core::config::Config;
use slotd_core::model::UnitStatus;
use slotd_runtime::{Handler, Registry, Runtime};
use slotd_store::UnitUpdate;
use slotd_store::prelude::*;
use slotd_store::sqlite::SqliteStore;
use slotd_units::services::Services;

/// Everything a test needs: the app and direct handles on what it changes.
pub(super) struct Harness {
    pub app: Router,
    pub services: Services,
    pub store: Arc<SqliteStore>,
    pub slots: Arc<LocalSlots>,
    pub wake: Arc<Wake>,
    pub _dir: tempfile::TempDir,
}

/// The store under test: SQLite in a temp dir, migrated.
pub(super) async fn test_store(dir: &Path) -> Arc<SqliteStore> {
    let url = format!("sqlite://{}", dir.join("api.db").display());
    let store = match SqliteStore::connect(&url).await {
        Ok(s) => s,
        Err(e) => panic!("opening {url}: {e:#}"),
    };
    if let Err(e) = store.migrate().await {
        panic!("migrating: {e}");
    }
    Arc::new(store)
}

/// The real fixture component: task type `fixture`, one stage on pool `fixture`.
pub(super) async fn fixture_handler(runtime: &Runtime) -> Arc<Handler> {
    let path = Path::new(slotd_testkit::BUILT_PLUGINS).join("fixture.wasm");
    match runtime.load_file(&path).await {
        Ok(h) => h,
        Err(e) => panic!("{e:#}"),
    }
}

pub(super) async fn harness_with(mut config: Config) -> Harness {
    let dir = match tempfile::TempDir::new() {
        Ok(d) => d,
        Err(e) => panic!("temp dir: {e}"),
    };
    // No plugins directory: the fixture is registered directly, and nothing is watched.
    config.plugins_dir = dir.path().join("no-plugins");
    let store = test_store(dir.path()).await;
    let objects = match slotd_objects::Objects::open(&format!(
        "file://{}",
        dir.path().join("objects").display()
    )) {
        Ok(o) => o,
        Err(e) => panic!("object store: {e:#}"),
    };
    let slots = Arc::new(LocalSlots::new());
    let runtime = match Runtime::new(config.limits.clone(), config.handlers.clone()) {
        Ok(r) => r,
        Err(e) => panic!("building the runtime: {e:#}"),
    };
    let registry = Arc::new(Registry::new());
    if let Err(e) = registry.insert(fixture_handler(&runtime).await) {
        panic!("registering the fixture handler: {e}");
    }
    let wake = Wake::new();
    let services = Services {
        config: Arc::new(config),
        store: store.clone(),
        slots: slots.clone(),
        runtime,
        registry,
        wake: wake.clone(),
        clock: ManualClock::new(1_000_000),
        objects,
        hot: std::sync::Arc::new(slotd_coord::hot::HotStatus::disabled()),
        keyspace: None,
        provider_callback_key: slotd_units::provider_callback_token::ProviderCallbackKey::random(),
        metrics: Default::default(),
        prometheus: None,
        capacity: Default::default(),
        accounts: Default::default(),
        closures: Default::default(),
        durations: Default::default(),
        discovered: Default::default(),
        units: slotd_units::lifecycle::UnitWriter::start(store.clone(), Default::default()),
        events: Default::default(),
        job_lookups: Default::default(),
        follower: slotd_runtime::Follower::new(
            store.clone(),
            slotd_runtime::ProcessId::this("all"),
        ),
    };
    Harness {
        app: router(services.clone()),
        services,
        store,
        slots,
        wake,
        _dir: dir,
    }
}

impl Harness {
    /// Run one request through the router: status, headers, and the body as JSON (a
    /// non-JSON body as a JSON string).
    pub async fn call(&self, req: Request<Body>) -> (StatusCode, HeaderMap, Value) {
        let what = format!("{} {}", req.method(), req.uri());
        let response = match self.app.clone().oneshot(req).await {
            Ok(r) => r,
            Err(e) => match e {},
        };
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = match axum::body::to_bytes(response.into_body(), usize::MAX).await {
            Ok(b) => b,
            Err(e) => panic!("reading the response of {what}: {e}"),
        };
        let json = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, headers, json)
    }

    /// How many tasks `tenant` has (at most 500).
    pub async fn task_count(&self, tenant: &str) -> usize {
        let filter = slotd_store::TaskFilter {
            limit: 500,
            ..Default::default()
        };
        match self.store.task_list(tenant, &filter).await {
            Ok(page) => page.tasks.len(),
            Err(e) => panic!("listing tasks: {e}"),
        }
    }
}

impl Harness {
    /// Move a pending unit to `to` along legal moves only (the store refuses any other), the
    /// last step carrying `last`'s fields (result, error, job id, …).
    pub async fn drive(&self, unit_id: &str, to: UnitStatus, last: UnitUpdate) {
        use UnitStatus::*;
        let path: &[UnitStatus] = match to {
            Completed => &[Submitted, Succeeded, Finalizing, Completed],
            Failed => &[Submitted, Failed],
            Succeeded => &[Submitted, Succeeded],
            other => panic!("drive: no path to {other} in the tests"),
        };
        let mut from = Pending;
        for (i, step) in path.iter().enumerate() {
            let mut u = if i + 1 == path.len() {
                last.clone()
            } else {
                UnitUpdate::default()
            };
            u.unit_id = unit_id.to_string();
            u.from = Some(from);
            u.to = Some(*step);
            match self.store.unit_apply(&[u], 1_000_001, None).await {
                Ok(r) if r.applied.len() == 1 => {}
                Ok(r) => panic!("drive {unit_id} {from} -> {step}: {r:?}"),
                Err(e) => panic!("drive {unit_id} {from} -> {step}: {e}"),
            }
            from = *step;
        }
    }
}
