//! The instance pool (`pool.rs`): the plugins' handlers run on it, a component that does not fit
//! a slot and calls that find it full run on demand (counted), a pooled slot shows a call
//! nothing of the call before it, and the memory cap holds on it.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use wasmtime::component::Component;
use wasmtime::{PoolingAllocatorMetrics, Store};

use super::cache::Artifact;
use super::engine::{CallState, Placed};
use super::pool::PoolSizing;
use super::{Allocator, BatchUnit, HandlerFault, Runtime, TickContext};
use slotd_core::config::{HandlerConfig, RuntimeLimits};
use slotd_core::model::{Outcome, Unit, UnitStatus};
use slotd_core::telemetry::Metrics;

fn built(name: &str) -> PathBuf {
    PathBuf::from(slotd_testkit::BUILT_PLUGINS).join(format!("{name}.wasm"))
}

/// Counter increments by `name{label=value,…}`.
#[derive(Clone, Default)]
struct Counters(Arc<Mutex<HashMap<String, u64>>>);

impl Counters {
    fn metrics(&self) -> Metrics {
        Metrics::new(Arc::new(self.clone()))
    }

    /// The fallbacks counted for `reason`, over every handler.
    fn fallbacks(&self, reason: &str) -> u64 {
        let wanted = format!("reason={reason}");
        self.0
            .lock()
            .iter()
            .filter(|(k, _)| k.starts_with("slotd_handler_fallbacks_total{") && k.contains(&wanted))
            .map(|(_, n)| n)
            .sum()
    }
}

struct Inc(Arc<Mutex<HashMap<String, u64>>>, String);

impl metrics::CounterFn for Inc {
    fn increment(&self, value: u64) {
        *self.0.lock().entry(self.1.clone()).or_default() += value;
    }
    fn absolute(&self, _: u64) {}
}

impl metrics::Recorder for Counters {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        metrics::Counter::from_arc(Arc::new(Inc(self.0.clone(), name)))
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// The default pool, with `f` applied.
fn plan(f: impl FnOnce(&mut PoolSizing)) -> PoolSizing {
    let mut plan = PoolSizing::for_limits(&RuntimeLimits::default(), 4 << 30);
    f(&mut plan);
    plan
}

fn pool_metrics(runtime: &Runtime) -> PoolingAllocatorMetrics {
    runtime
        .shared
        .engine
        .pooling_allocator_metrics()
        .expect("the runtime's engine pools")
}

fn context() -> TickContext {
    TickContext {
        pool: "fixture".into(),
        now_ms: 1,
        provider_callback_url: None,
        account: None,
    }
}

fn unit(id: &str, spec: &str) -> Unit {
    Unit {
        id: id.into(),
        task_id: "t1".into(),
        index: 0,
        tenant: "local".into(),
        task_type: "fixture".into(),
        pool: "fixture".into(),
        stage: "main".into(),
        status: UnitStatus::Submitted,
        priority: 0,
        spec: spec.into(),
        state: "{}".into(),
        provider_job_id: None,
        submit_attempt: 1,
        attempts: 0,
        polls: 0,
        next_at: 0,
        submitted_at: Some(1),
        error: None,
        result: None,
        cost: None,
        cancel_requested_at: None,
        routes: None,
        routing: None,
        terms: Default::default(),
        releases: Default::default(),
        created_at: 0,
        updated_at: 0,
    }
}

/// Plan `payload` with the fixture and tick its first unit once.
async fn tick(
    handler: &super::Handler,
    payload: serde_json::Value,
) -> Result<Outcome, HandlerFault> {
    let planned = handler
        .plan("fixture", &payload.to_string())
        .await
        .expect("plan runs")
        .expect("payload accepted");
    let batch = [BatchUnit {
        unit: unit("u1", &planned[0].spec),
        in_doubt: false,
    }];
    let mut changes = handler.tick(&context(), &batch).await?;
    assert_eq!(changes.len(), 1, "one change per unit");
    Ok(changes.remove(0).outcome)
}

#[tokio::test]
async fn the_plugins_handlers_run_on_the_pool() {
    let counters = Counters::default();
    let runtime = Runtime::with_pool(
        RuntimeLimits::default(),
        BTreeMap::new(),
        None,
        counters.metrics(),
        plan(|_| {}),
    )
    .expect("runtime");
    let mut loaded = Vec::new();
    let dir = std::fs::read_dir(slotd_testkit::BUILT_PLUGINS).expect("the built plugins");
    for entry in dir {
        let path = entry.expect("a directory entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("wasm") {
            continue;
        }
        let handler = runtime
            .load_file(&path)
            .await
            .unwrap_or_else(|e| panic!("{} loads: {e:#}", path.display()));
        assert_eq!(
            handler.allocator(),
            Allocator::Pooling,
            "{} fits a pool slot",
            path.display()
        );
        loaded.push(handler.info.name.clone());
    }
    for name in ["fixture", "kling-video", "runway-video", "fal-video"] {
        assert!(loaded.iter().any(|n| n == name), "{name} among {loaded:?}");
    }
    assert_eq!(counters.fallbacks("does_not_fit"), 0);

    // Calls take their instances from the pool and give them back.
    let fixture = runtime.load_file(&built("fixture")).await.expect("fixture");
    for _ in 0..3 {
        fixture.tick(&context(), &[]).await.expect("an empty tick");
    }
    let metrics = pool_metrics(&runtime);
    assert_eq!(
        metrics.component_instances(),
        0,
        "every call's instance is back"
    );
    assert!(
        metrics.unused_warm_memories() >= 1,
        "the calls' memories came from the pool"
    );
    assert_eq!(counters.fallbacks("pool_full"), 0);
}

#[tokio::test]
async fn a_component_too_big_for_a_slot_runs_on_demand_and_is_counted() {
    // Pooled memories of one page: the fixture's initial memory is larger.
    let squeezed = plan(|p| p.memory_bytes = 64 * 1024);
    let cache = tempfile::TempDir::new().expect("tmp");
    let counters = Counters::default();
    let runtime = Runtime::with_pool(
        RuntimeLimits::default(),
        BTreeMap::new(),
        Some(cache.path()),
        counters.metrics(),
        squeezed.clone(),
    )
    .expect("runtime");
    let handler = runtime.load_file(&built("fixture")).await.expect("loads");
    assert_eq!(handler.allocator(), Allocator::OnDemand);
    assert_eq!(counters.fallbacks("does_not_fit"), 1);
    let outcome = tick(&handler, serde_json::json!({"behavior": "idle"}))
        .await
        .expect("the call runs on demand");
    assert!(matches!(outcome, Outcome::Accepted { .. }), "{outcome:?}");
    assert_eq!(
        pool_metrics(&runtime).unused_warm_memories(),
        0,
        "nothing of the call came from the pool"
    );
    assert_eq!(counters.fallbacks("pool_full"), 0, "not a full pool");

    // The cached code is placed anew by the next runtime: still on demand, the entry kept.
    let entry = runtime.disk_cache().expect("cache").entry(&handler.sha256);
    let written = std::fs::metadata(&entry)
        .and_then(|m| m.modified())
        .expect("the entry is written");
    let again = Runtime::with_pool(
        RuntimeLimits::default(),
        BTreeMap::new(),
        Some(cache.path()),
        counters.metrics(),
        squeezed,
    )
    .expect("runtime");
    let reloaded = again.load_file(&built("fixture")).await.expect("loads");
    assert_eq!(reloaded.allocator(), Allocator::OnDemand);
    assert_eq!(counters.fallbacks("does_not_fit"), 2);
    let after = std::fs::metadata(&entry)
        .and_then(|m| m.modified())
        .expect("the entry is kept");
    assert_eq!(written, after, "a misfit is not a damaged entry");

    // `plugin check` says so.
    let report = super::check_file(&again, &built("fixture")).await;
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("does not fit the instance pool")),
        "{:?}",
        report.notes
    );
}

/// A provider stand-in whose `/meet` answers only once `n` requests wait at once: every call
/// awaiting it holds its instances until all `n` are live together.
async fn meeting_server(n: usize) -> std::net::SocketAddr {
    use axum::routing::get;
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let app = axum::Router::new().route(
        "/meet",
        get(move || {
            let barrier = barrier.clone();
            async move {
                barrier.wait().await;
                "met"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

#[tokio::test]
async fn calls_beyond_the_pool_run_on_demand_and_all_succeed() {
    const CALLS: usize = 6;
    let addr = meeting_server(CALLS).await;
    let config = HandlerConfig {
        allowed_hosts: vec![addr.to_string()],
        ..HandlerConfig::default()
    };
    let counters = Counters::default();
    let runtime = Runtime::with_pool(
        RuntimeLimits::default(),
        BTreeMap::from([("fixture".to_string(), config)]),
        None,
        counters.metrics(),
        plan(|p| p.calls = 2),
    )
    .expect("runtime");
    let handler = runtime.load_file(&built("fixture")).await.expect("loads");
    assert_eq!(handler.allocator(), Allocator::Pooling);
    let payload = serde_json::json!({"behavior": "fetch", "url": format!("http://{addr}/meet")});
    let planned = handler
        .plan("fixture", &payload.to_string())
        .await
        .expect("plan runs")
        .expect("payload accepted");
    let batch = [BatchUnit {
        unit: unit("u1", &planned[0].spec),
        in_doubt: false,
    }];
    let ctx = context();
    let calls = (0..CALLS).map(|_| handler.tick(&ctx, &batch));
    let answers = tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(calls))
        .await
        .expect("all the calls met at the provider");
    for answer in answers {
        let changes = answer.expect("no call fails");
        match &changes[..] {
            [change] => match &change.outcome {
                Outcome::Fail { error } => assert_eq!(error.message, "status 200 with 3 bytes"),
                other => panic!("the fixture reports what it fetched, got {other:?}"),
            },
            other => panic!("one change per unit, got {other:?}"),
        }
    }
    // No call lets go of its instances before all six are live: two held the pool, the four
    // others ran on demand, each counted.
    assert_eq!(counters.fallbacks("pool_full"), (CALLS - 2) as u64);
    assert_eq!(pool_metrics(&runtime).component_instances(), 0);
    // With the pool free again, calls take it again.
    handler.tick(&context(), &[]).await.expect("an empty tick");
    assert_eq!(counters.fallbacks("pool_full"), (CALLS - 2) as u64);
}

/// Compile `wat` for `runtime` and place it as a handler's code would be.
fn place(runtime: &Runtime, wat: &str) -> Placed {
    let bytes = wat::parse_str(wat).expect("the test component parses");
    let code = runtime
        .shared
        .engine
        .precompile_component(&bytes)
        .expect("the test component compiles");
    runtime
        .shared
        .place(Artifact::Bytes(&code))
        .expect("the test component is placed")
}

fn store_for(runtime: &Runtime, component: &Component) -> Store<CallState> {
    runtime.shared.new_store_on(
        component.engine(),
        &Arc::from("odd"),
        &Arc::new(HandlerConfig::default()),
        Instant::now() + Duration::from_secs(30),
    )
}

/// One memory of 64 pages (4 MiB) with "abcd" at 1024; `scribble` overwrites that, a word at
/// 2048 (reset in place when the slot is returned) and at 3 MiB (released to the OS), and
/// grows the memory by a page.
const SCRIBBLER: &str = r#"
(component
  (core module $m
    (memory 64)
    (data (i32.const 1024) "abcd")
    (func (export "near") (result i32) (i32.load (i32.const 2048)))
    (func (export "far") (result i32) (i32.load (i32.const 3145728)))
    (func (export "data") (result i32) (i32.load (i32.const 1024)))
    (func (export "size") (result i32) (memory.size))
    (func (export "scribble")
      (i32.store (i32.const 2048) (i32.const 0x5ca1ab1e))
      (i32.store (i32.const 3145728) (i32.const 0x5ca1ab1e))
      (i32.store (i32.const 1024) (i32.const 0x5ca1ab1e))
      (drop (memory.grow (i32.const 1)))
      (i32.store (i32.const 4194304) (i32.const 0x5ca1ab1e))))
  (core instance $i (instantiate $m))
  (func (export "near") (result u32) (canon lift (core func $i "near")))
  (func (export "far") (result u32) (canon lift (core func $i "far")))
  (func (export "data") (result u32) (canon lift (core func $i "data")))
  (func (export "size") (result u32) (canon lift (core func $i "size")))
  (func (export "scribble") (canon lift (core func $i "scribble"))))
"#;

/// What one store sees of the scribbler's memory: (near, far, data, pages).
async fn look(store: &mut Store<CallState>, instance: &wasmtime::component::Instance) -> [u32; 4] {
    let mut seen = [0; 4];
    for (slot, name) in seen.iter_mut().zip(["near", "far", "data", "size"]) {
        let f = instance
            .get_typed_func::<(), (u32,)>(&mut *store, name)
            .expect("the export");
        *slot = f.call_async(&mut *store, ()).await.expect("the call").0;
    }
    seen
}

#[tokio::test]
async fn a_pooled_slot_shows_a_call_nothing_of_the_call_before() {
    let runtime = Runtime::with_pool(
        RuntimeLimits::default(),
        BTreeMap::new(),
        None,
        Default::default(),
        plan(|_| {}),
    )
    .expect("runtime");
    let placed = place(&runtime, SCRIBBLER);
    assert!(placed.misfit.is_none(), "{:?}", placed.misfit);
    let linker = runtime.shared.linker_for(&placed.component);
    let pristine = [0, 0, u32::from_le_bytes(*b"abcd"), 64];
    for call in 0..3 {
        let mut store = store_for(&runtime, &placed.component);
        let instance = linker
            .instantiate_async(&mut store, &placed.component)
            .await
            .expect("instantiates");
        assert_eq!(look(&mut store, &instance).await, pristine, "call {call}");
        let scribble = instance
            .get_typed_func::<(), ()>(&mut store, "scribble")
            .expect("scribble");
        scribble
            .call_async(&mut store, ())
            .await
            .expect("scribbles");
        assert_eq!(
            look(&mut store, &instance).await,
            [0x5ca1ab1e, 0x5ca1ab1e, 0x5ca1ab1e, 65],
            "the scribbles land in call {call}"
        );
        drop(store);
        // One warm slot: every call after the first reused the scribbled one.
        assert_eq!(pool_metrics(&runtime).unused_warm_memories(), 1);
    }
}

#[tokio::test]
async fn the_memory_cap_holds_on_the_pool() {
    // One memory of one page grown to 5 MiB under a 4 MiB cap: it fits a slot (64 pages), the
    // call's cap refuses the growth.
    let limits = RuntimeLimits {
        memory_bytes: 4 * 1024 * 1024,
        ..RuntimeLimits::default()
    };
    let runtime = Runtime::with_pool(
        limits.clone(),
        BTreeMap::new(),
        None,
        Default::default(),
        PoolSizing::for_limits(&limits, 4 << 30),
    )
    .expect("runtime");
    let grower = r#"
        (component
          (core module $m
            (memory 1)
            (func $grow (drop (memory.grow (i32.const 80))))
            (start $grow))
          (core instance (instantiate $m)))
    "#;
    let placed = place(&runtime, grower);
    assert!(placed.misfit.is_none(), "{:?}", placed.misfit);
    let mut store = store_for(&runtime, &placed.component);
    let err = runtime
        .shared
        .linker_for(&placed.component)
        .instantiate_async(&mut store, &placed.component)
        .await
        .expect_err("the growth passes the cap");
    let fault = super::handler::instantiate_fault(err, &limits, store.data());
    match fault {
        HandlerFault::ResourceCap(message) => assert!(
            message.contains("memory cap of 4 MiB exceeded by a linear memory"),
            "{message}"
        ),
        other => panic!("expected the cap, got {other:?}"),
    }
}

#[test]
fn both_engines_share_one_compile_configuration() {
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let shared =
        super::engine::Shared::new(RuntimeLimits::default(), BTreeMap::new(), tx).expect("engines");
    assert!(!wasmtime::Engine::same(&shared.engine, &shared.on_demand));
    let dir = tempfile::TempDir::new().expect("tmp");
    let pooled = super::DiskCache::open(dir.path(), &shared.engine).expect("cache");
    let on_demand = super::DiskCache::open(dir.path(), &shared.on_demand).expect("cache");
    assert_eq!(
        pooled.entry("x"),
        on_demand.entry("x"),
        "one cache entry serves both engines"
    );
    let code = shared
        .engine
        .precompile_component(b"(component)")
        .expect("compiles");
    for engine in [&shared.engine, &shared.on_demand] {
        Artifact::Bytes(&code)
            .deserialize(engine)
            .expect("the code maps on either engine");
    }
}

#[tokio::test]
async fn a_full_pool_runs_every_call_on_demand_exports_included() {
    // A pool of one call, its permit held here: every call finds the pool full. `describe`,
    // the 1.1+ exports read at load (`features`, `routes.models`) and `plan` with its
    // `costs.estimate` all run on the on-demand copy.
    let counters = Counters::default();
    let full = Runtime::with_pool(
        RuntimeLimits::default(),
        BTreeMap::new(),
        None,
        counters.metrics(),
        plan(|p| p.calls = 1),
    )
    .expect("runtime");
    let _held = full
        .shared
        .pool
        .as_ref()
        .and_then(|p| p.try_enter())
        .expect("the pool's one permit");
    let roomy = Runtime::new(RuntimeLimits::default(), BTreeMap::new()).expect("runtime");
    let on_full = full.load_file(&built("kling_video")).await.expect("loads");
    let pooled = roomy.load_file(&built("kling_video")).await.expect("loads");
    assert_eq!(
        on_full.allocator(),
        Allocator::Pooling,
        "it fits, the pool is full"
    );
    let loading = counters.fallbacks("pool_full");
    assert!(loading >= 3, "describe, features, models: {loading}");
    assert_eq!(on_full.features, pooled.features);
    assert!(on_full.features.costs, "{:?}", on_full.features);
    assert_eq!(on_full.route_models, pooled.route_models);
    let payload = super::kling_tests::video_payload().to_string();
    let costs = |h: Arc<super::Handler>| {
        let payload = payload.clone();
        async move {
            h.plan("video", &payload)
                .await
                .expect("plan runs")
                .expect("payload accepted")
                .into_iter()
                .map(|u| u.cost)
                .collect::<Vec<_>>()
        }
    };
    let got = costs(on_full).await;
    assert_eq!(got, costs(pooled).await);
    assert_eq!(got, [Some(1.0), Some(1.0), Some(7.0)]);
    assert_eq!(
        counters.fallbacks("pool_full"),
        loading + 2,
        "plan and its estimate"
    );
    assert_eq!(counters.fallbacks("does_not_fit"), 0);
}
