//! The sandbox of docs/handlers.md and the reload machinery, each proven against the real built
//! fixture: the guest CPU budget, the per-request HTTP timeout seen as an ordinary error, the
//! wall deadline over awaited HTTP, the response-size cap, configuration isolation between
//! handlers, `whsec_` signing keys, quarantine with rollback, and the disk cache.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::registry::PathOutcome;
use super::{BatchUnit, Handler, HandlerFault, Registry, Runtime, TickContext, VersionState};
use slotd_core::config::{HandlerConfig, RuntimeLimits, Secret};
use slotd_core::model::{Outcome, Unit, UnitStatus};

fn built(name: &str) -> PathBuf {
    PathBuf::from(slotd_testkit::BUILT_PLUGINS).join(format!("{name}.wasm"))
}

fn fixture_only(config: HandlerConfig) -> BTreeMap<String, HandlerConfig> {
    BTreeMap::from([("fixture".to_string(), config)])
}

async fn load(limits: RuntimeLimits, handlers: BTreeMap<String, HandlerConfig>) -> Arc<Handler> {
    let runtime = Runtime::new(limits, handlers).expect("runtime builds");
    runtime
        .load_file(&built("fixture"))
        .await
        .expect("the fixture loads")
}

fn unit(spec: &str) -> Unit {
    Unit {
        id: "u1".into(),
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

/// Plan `payload` and tick its first unit once.
async fn tick(handler: &Handler, payload: serde_json::Value) -> Result<Outcome, HandlerFault> {
    let planned = handler
        .plan("fixture", &payload.to_string())
        .await
        .expect("plan runs")
        .expect("payload accepted");
    let ctx = TickContext {
        pool: "fixture".into(),
        now_ms: 1,
        provider_callback_url: None,
        account: None,
    };
    let batch = [BatchUnit {
        unit: unit(&planned[0].spec),
        in_doubt: false,
    }];
    let mut changes = handler.tick(&ctx, &batch).await?;
    assert_eq!(changes.len(), 1, "one change per unit");
    Ok(changes.remove(0).outcome)
}

/// The `fail` message a `fetch`/`peek` unit reports.
fn reported(outcome: Outcome) -> String {
    match outcome {
        Outcome::Fail { error } => error.message,
        other => panic!("expected a fail carrying the report, got {other:?}"),
    }
}

/// A provider stand-in: `/slow` never answers within a test, `/big` answers 64 KiB.
async fn odd_server() -> std::net::SocketAddr {
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(600)).await;
                "late"
            }),
        )
        .route("/big", get(|| async { vec![b'x'; 64 * 1024] }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

fn allowing(addr: std::net::SocketAddr) -> HandlerConfig {
    HandlerConfig {
        allowed_hosts: vec![addr.to_string()],
        ..HandlerConfig::default()
    }
}

#[tokio::test]
async fn a_spinning_guest_is_cut_off_by_its_cpu_budget_before_the_deadline() {
    let limits = RuntimeLimits {
        cpu_budget: Duration::from_millis(200),
        call_deadline: Duration::from_secs(120),
        ..RuntimeLimits::default()
    };
    let handler = load(limits, BTreeMap::new()).await;
    let started = Instant::now();
    let fault = tick(&handler, serde_json::json!({"behavior": "loop"}))
        .await
        .expect_err("a loop faults");
    assert_eq!(fault, HandlerFault::CpuBudget(Duration::from_millis(200)));
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "cut off by the CPU budget, not the 120 s deadline"
    );
}

#[tokio::test]
async fn a_slow_request_times_out_as_an_ordinary_error() {
    let addr = odd_server().await;
    let handler = load(RuntimeLimits::default(), fixture_only(allowing(addr))).await;
    let outcome = tick(
        &handler,
        serde_json::json!({"behavior": "fetch", "url": format!("http://{addr}/slow"), "timeout_ms": 200}),
    )
    .await
    .expect("the call itself succeeds: the handler saw the timeout and answered");
    assert_eq!(reported(outcome), "timeout");
}

#[tokio::test]
async fn the_wall_deadline_covers_awaited_http() {
    let addr = odd_server().await;
    let limits = RuntimeLimits {
        call_deadline: Duration::from_millis(500),
        http_timeout: Duration::from_secs(600),
        ..RuntimeLimits::default()
    };
    let handler = load(limits, fixture_only(allowing(addr))).await;
    let fault = tick(
        &handler,
        serde_json::json!({"behavior": "fetch", "url": format!("http://{addr}/slow")}),
    )
    .await
    .expect_err("the call runs past its deadline while awaiting HTTP");
    // Cut off while awaiting the provider: the provider's slowness, not a guest crash.
    assert_eq!(
        fault,
        HandlerFault::ProviderDeadline(Duration::from_millis(500))
    );
    assert!(!fault.is_crash());
    assert_eq!(handler.consecutive_faults(), 0, "slowness does not count");
}

#[tokio::test]
async fn responses_over_the_size_cap_are_refused() {
    let addr = odd_server().await;
    let limits = RuntimeLimits {
        http_max_response_bytes: 1024,
        ..RuntimeLimits::default()
    };
    let handler = load(limits, fixture_only(allowing(addr))).await;
    let big = serde_json::json!({"behavior": "fetch", "url": format!("http://{addr}/big")});
    let outcome = tick(&handler, big).await.expect("tick");
    assert_eq!(reported(outcome), "too-large: 1024");
}

#[tokio::test]
async fn another_handlers_configuration_is_invisible() {
    let mut other = HandlerConfig::default();
    other
        .settings
        .insert("base_url".into(), "http://kling.example".into());
    other
        .settings
        .insert("other_secret".into(), "plain-but-not-yours".into());
    other
        .secrets
        .insert("secret_key".into(), Secret::new("kling-sk"));
    // The fixture has no configuration at all; kling-video has plenty.
    let handlers = BTreeMap::from([("kling-video".to_string(), other)]);
    let handler = load(RuntimeLimits::default(), handlers).await;
    let seen = reported(
        tick(&handler, serde_json::json!({"behavior": "peek"}))
            .await
            .expect("tick"),
    );
    assert!(seen.contains("base_url=None"), "{seen}");
    assert!(seen.contains("other_secret=None"), "{seen}");
    assert!(
        seen.contains("hmac=err:no secret \"secret_key\""),
        "another handler's secret must not sign: {seen}"
    );
    assert!(!seen.contains("kling"), "{seen}");
}

#[tokio::test]
async fn whsec_secrets_sign_with_their_decoded_key() {
    let mut config = HandlerConfig::default();
    // base64("hello") = "aGVsbG8="
    config
        .secrets
        .insert("secret_key".into(), Secret::new("whsec_aGVsbG8="));
    let handler = load(RuntimeLimits::default(), fixture_only(config)).await;
    let seen = reported(
        tick(&handler, serde_json::json!({"behavior": "peek"}))
            .await
            .expect("tick"),
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(b"hello").expect("key");
    mac.update(b"x");
    let expected = hex::encode(mac.finalize().into_bytes());
    assert!(seen.contains(&format!("hmac=ok:{expected}")), "{seen}");
}

#[tokio::test]
async fn k_crashes_in_a_row_quarantine_the_version_and_restore_the_previous() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let limits = RuntimeLimits {
        quarantine_after: 3,
        ..RuntimeLimits::default()
    };
    let runtime = Runtime::new(limits, BTreeMap::new()).expect("runtime");
    let mut tripped = runtime.take_tripped().expect("the quarantine stream");
    let registry = Registry::new();
    let path = dir.path().join("fixture.wasm");
    std::fs::copy(built("fixture"), &path).expect("copy v1");
    let loaded = registry.load_path(&runtime, &path).await;
    assert!(matches!(loaded, PathOutcome::Loaded { ref version, .. } if version == "1.0.0"));
    std::fs::copy(built("fixture_next"), &path).expect("copy v2");
    let loaded = registry.load_path(&runtime, &path).await;
    assert!(matches!(loaded, PathOutcome::Loaded { ref version, .. } if version == "2.0.0"));

    let bad = registry.for_type("fixture").expect("v2 serves");
    for _ in 0..3 {
        let fault = tick(&bad, serde_json::json!({"behavior": "trap-in-next"}))
            .await
            .expect_err("2.0.0 traps");
        assert!(matches!(fault, HandlerFault::Trap(_)), "{fault:?}");
    }
    let t = tokio::time::timeout(Duration::from_secs(10), tripped.recv())
        .await
        .expect("tripped after K faults")
        .expect("stream open");
    assert_eq!((t.name.as_str(), t.count), ("fixture", 3));
    assert_eq!(registry.quarantine(&t).await.as_deref(), Some("1.0.0"));

    let good = registry.for_type("fixture").expect("a version serves");
    assert_eq!(good.info.version, "1.0.0");
    // 1.0.0 treats the unit as an ordinary job (it then wants a provider, which this test
    // has none of): whatever it answers, it does not trap.
    let answer = tick(&good, serde_json::json!({"behavior": "trap-in-next"})).await;
    assert!(!matches!(answer, Err(HandlerFault::Trap(_))), "{answer:?}");
    let states: Vec<(String, VersionState)> = registry
        .versions()
        .into_iter()
        .map(|r| (r.version.unwrap_or_default(), r.state))
        .collect();
    assert!(
        states.contains(&("2.0.0".into(), VersionState::Quarantined)),
        "{states:?}"
    );
    assert!(
        states.contains(&("1.0.0".into(), VersionState::Active)),
        "{states:?}"
    );
    // The quarantined content is not loaded again, even when written anew.
    std::fs::copy(built("fixture"), &path).expect("copy v1");
    let _ = registry.load_path(&runtime, &path).await;
    std::fs::copy(built("fixture_next"), &path).expect("copy v2 again");
    let again = registry.load_path(&runtime, &path).await;
    assert!(
        matches!(&again, PathOutcome::Refused(r) if r.contains("quarantined")),
        "{again:?}"
    );
    assert_eq!(
        registry.for_type("fixture").expect("serving").info.version,
        "1.0.0"
    );
}

#[tokio::test]
async fn compiled_code_is_cached_on_disk_across_runtimes() {
    let cache = tempfile::TempDir::new().expect("tmp");
    let first = Runtime::with_cache_dir(
        RuntimeLimits::default(),
        BTreeMap::new(),
        Some(cache.path()),
    )
    .expect("runtime");
    let h = first.load_file(&built("fixture")).await.expect("loads");
    let entry = first.disk_cache().expect("a disk cache").entry(&h.sha256);
    assert!(entry.is_file(), "compiling writes the entry");
    let written = std::fs::metadata(&entry)
        .and_then(|m| m.modified())
        .expect("mtime");
    drop(first);
    let second = Runtime::with_cache_dir(
        RuntimeLimits::default(),
        BTreeMap::new(),
        Some(cache.path()),
    )
    .expect("runtime");
    let h2 = second
        .load_file(&built("fixture"))
        .await
        .expect("loads from the cache");
    assert_eq!(h2.info.version, "1.0.0");
    assert!(h2.plan("fixture", "{}").await.expect("plan runs").is_ok());
    let after = std::fs::metadata(&entry)
        .and_then(|m| m.modified())
        .expect("mtime");
    assert_eq!(
        written, after,
        "a cache hit does not compile and write again"
    );
}

/// Instantiate a hand-written component in a store set up exactly as a handler call's, with a
/// memory cap of `memory_mb`, on the engine its code is placed on (these components, with their
/// many memories or huge tables, do not fit a pool slot: on demand), and classify how it failed
/// as a handler call would.
async fn instantiate_odd(memory_mb: usize, wat: &str) -> Result<(), HandlerFault> {
    let limits = RuntimeLimits {
        memory_bytes: memory_mb * 1024 * 1024,
        ..RuntimeLimits::default()
    };
    let runtime = Runtime::new(limits.clone(), BTreeMap::new()).expect("runtime");
    let bytes = wat::parse_str(wat).expect("the test component parses");
    let code = runtime
        .shared
        .engine
        .precompile_component(&bytes)
        .expect("the test component compiles");
    let component = runtime
        .shared
        .place(super::cache::Artifact::Bytes(&code))
        .expect("the test component is placed on an engine")
        .component;
    let name: Arc<str> = Arc::from("odd");
    let config = Arc::new(HandlerConfig::default());
    let mut store = runtime.shared.new_store_on(
        component.engine(),
        &name,
        &config,
        Instant::now() + Duration::from_secs(30),
    );
    match runtime
        .shared
        .linker_for(&component)
        .instantiate_async(&mut store, &component)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) => Err(super::handler::instantiate_fault(e, &limits, store.data())),
    }
}

/// A component whose one core module has `body` (memories, tables, a start function).
fn component_with(body: &str) -> String {
    format!("(component (core module $m {body}) (core instance (instantiate $m)))")
}

fn resource_cap(answer: Result<(), HandlerFault>) -> String {
    match answer {
        Err(HandlerFault::ResourceCap(message)) => message,
        other => panic!("expected the call cut at the store's cap, got {other:?}"),
    }
}

#[tokio::test]
async fn many_memories_together_are_cut_at_the_cap() {
    // Five memories of 1 MiB: each under a 4 MiB cap, together over it.
    let memories = "(memory 16) ".repeat(5);
    let message = resource_cap(instantiate_odd(4, &component_with(&memories)).await);
    assert!(
        message.contains("memory cap of 4 MiB exceeded by a linear memory"),
        "{message}"
    );
    // Four fit.
    let memories = "(memory 16) ".repeat(4);
    instantiate_odd(4, &component_with(&memories))
        .await
        .expect("4 MiB in four memories fits a 4 MiB cap");
}

#[tokio::test]
async fn a_swarm_of_empty_memories_is_cut_at_the_count() {
    // Empty memories cost no bytes but each reserves address space.
    let memories = "(memory 0) ".repeat(40);
    let message = resource_cap(instantiate_odd(4, &component_with(&memories)).await);
    assert!(message.contains("memory count too high"), "{message}");
    assert!(message.contains("16 memories"), "{message}");
}

#[tokio::test]
async fn a_large_table_is_cut_at_the_cap() {
    // A million elements: 8 MB of table against a 4 MiB cap.
    let message =
        resource_cap(instantiate_odd(4, &component_with("(table 1000000 funcref)")).await);
    assert!(
        message.contains("by a table of 1000000 elements"),
        "{message}"
    );
}

#[tokio::test]
async fn growing_several_memories_is_cut_at_the_cap() {
    // Four memories of one page, each grown by 20 pages (1.3 MiB each) in the start function:
    // the fourth growth passes 4 MiB and traps.
    let body = r#"
        (memory $a 1) (memory $b 1) (memory $c 1) (memory $d 1)
        (func $grow
            (drop (memory.grow $a (i32.const 20)))
            (drop (memory.grow $b (i32.const 20)))
            (drop (memory.grow $c (i32.const 20)))
            (drop (memory.grow $d (i32.const 20))))
        (start $grow)
    "#;
    let message = resource_cap(instantiate_odd(4, &component_with(body)).await);
    assert!(
        message.contains("memory cap of 4 MiB exceeded by a linear memory"),
        "{message}"
    );
}
