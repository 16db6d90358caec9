//! The runtime against the real built fixture (`plugins/fixture`) and the stub provider: every
//! call, every fault kind, the sandbox (allowlist, secrets, memory, deadline) and loading.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{BatchUnit, Handler, HandlerFault, Registry, Runtime, TickContext};
use slotd_core::config::{HandlerConfig, RuntimeLimits, Secret};
use slotd_core::model::{Outcome, Unit, UnitStatus};
use slotd_testkit::stub::{StubHandle, StubOptions, StubProvider};

fn fixture_path() -> PathBuf {
    PathBuf::from(slotd_testkit::BUILT_PLUGINS).join("fixture.wasm")
}

fn fixture_config(base_url: &str, allowed: &[String]) -> BTreeMap<String, HandlerConfig> {
    let mut config = HandlerConfig::default();
    config
        .settings
        .insert("base_url".into(), base_url.to_string());
    config.allowed_hosts = allowed.to_vec();
    BTreeMap::from([("fixture".to_string(), config)])
}

async fn load(limits: RuntimeLimits, handlers: BTreeMap<String, HandlerConfig>) -> Arc<Handler> {
    let runtime = Runtime::new(limits, handlers).expect("runtime builds");
    runtime
        .load_file(&fixture_path())
        .await
        .expect("the fixture loads")
}

/// The fixture wired to a fresh stub provider.
async fn with_stub(limit: u32) -> (Arc<Handler>, StubHandle) {
    let stub = StubProvider::start(StubOptions { limit })
        .await
        .expect("stub starts");
    let handlers = fixture_config(stub.base_url(), &[stub.addr().to_string()]);
    (load(RuntimeLimits::default(), handlers).await, stub)
}

async fn spec(handler: &Handler, task_type: &str, payload: &str) -> String {
    let planned = handler
        .plan(task_type, payload)
        .await
        .expect("plan runs")
        .expect("payload accepted");
    planned[0].spec.clone()
}

fn unit(id: &str, task_type: &str, stage: &str, spec: &str) -> Unit {
    Unit {
        id: id.into(),
        task_id: "t1".into(),
        index: 0,
        tenant: "local".into(),
        task_type: task_type.into(),
        pool: "fixture".into(),
        stage: stage.into(),
        status: UnitStatus::Submitted,
        priority: 0,
        spec: spec.into(),
        state: "{}".into(),
        provider_job_id: None,
        submit_attempt: 0,
        attempts: 0,
        polls: 0,
        next_at: 0,
        submitted_at: Some(0),
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

fn ctx() -> TickContext {
    TickContext {
        pool: "fixture".into(),
        now_ms: 0,
        provider_callback_url: None,
        account: None,
    }
}

fn batch(units: &[Unit]) -> Vec<BatchUnit> {
    units
        .iter()
        .map(|u| BatchUnit {
            unit: u.clone(),
            in_doubt: false,
        })
        .collect()
}

/// Tick one unit with the given behavior payload; its single change's outcome.
async fn tick_one(handler: &Handler, payload: &str) -> Result<Outcome, HandlerFault> {
    let spec = spec(handler, "fixture", payload).await;
    let changes = handler
        .tick(&ctx(), &batch(&[unit("u1", "fixture", "main", &spec)]))
        .await?;
    assert_eq!(changes.len(), 1, "one change per unit: {changes:?}");
    Ok(changes[0].outcome.clone())
}

#[tokio::test]
async fn describe_declares_the_fixture() {
    let handler = load(RuntimeLimits::default(), BTreeMap::new()).await;
    let info = &handler.info;
    assert_eq!(
        (info.name.as_str(), info.version.as_str()),
        ("fixture", "1.0.0")
    );
    let types: Vec<&str> = info.task_types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(types, ["fixture", "fixture-b", "fixture-staged"]);
    let staged = info.stages("fixture-staged").expect("staged type");
    assert_eq!(
        staged.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["one", "two"]
    );
    assert_eq!(info.pools.len(), 2);
    assert!(info.pools.iter().all(|p| p.default_max_slots == 5));
    assert_eq!(handler.sha256.len(), 64);
}

#[tokio::test]
async fn plan_splits_payloads_and_names_bad_fields() {
    let handler = load(RuntimeLimits::default(), BTreeMap::new()).await;
    let units = handler
        .plan("fixture", r#"{"count": 3, "polls": 2}"#)
        .await
        .expect("plan runs")
        .expect("accepted");
    assert_eq!(units.len(), 3);
    let last: serde_json::Value = serde_json::from_str(&units[2].spec).expect("spec is JSON");
    assert_eq!(
        (last["index"].as_u64(), last["polls"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(last["behavior"], "succeed");

    let refused = |payload: &'static str| {
        let handler = handler.clone();
        async move {
            handler
                .plan("fixture", payload)
                .await
                .expect("plan runs")
                .expect_err("payload refused")
        }
    };
    let e = refused(r#"{"reject": "no thanks"}"#).await;
    assert_eq!(
        (e.field.as_deref(), e.message.as_str()),
        (Some("reject"), "no thanks")
    );
    let e = refused(r#"{"behavior": "x"}"#).await;
    assert_eq!(e.field.as_deref(), Some("behavior"));
    assert!(
        e.message.contains("unknown behavior \"x\""),
        "{}",
        e.message
    );
    let e = refused(r#"{"count": 0}"#).await;
    assert_eq!(e.field.as_deref(), Some("count"));
    let e = refused(r#"{"colour": "red"}"#).await;
    assert_eq!(e.field.as_deref(), Some("colour"));
}

#[tokio::test]
async fn succeed_path_runs_against_the_stub() {
    let (handler, stub) = with_stub(5).await;
    let spec = spec(&handler, "fixture", r#"{"polls": 1}"#).await;
    let mut u = unit("u1", "fixture", "main", &spec);

    let changes = handler
        .tick(&ctx(), &batch(&[u.clone()]))
        .await
        .expect("tick 1");
    let Outcome::Accepted { job_id } = &changes[0].outcome else {
        panic!("expected accepted, got {changes:?}");
    };
    u.provider_job_id = Some(job_id.clone());

    let changes = handler
        .tick(&ctx(), &batch(&[u.clone()]))
        .await
        .expect("tick 2");
    assert_eq!(changes[0].outcome, Outcome::Running { after_ms: None });

    let changes = handler
        .tick(&ctx(), &batch(&[u.clone()]))
        .await
        .expect("tick 3");
    let Outcome::Succeeded { result } = &changes[0].outcome else {
        panic!("expected succeeded, got {changes:?}");
    };
    let result_json: serde_json::Value = serde_json::from_str(result).expect("result JSON");
    assert_eq!(result_json["job"], job_id.as_str());
    u.result = Some(result.clone());
    u.status = UnitStatus::Succeeded;

    let done = handler.finalize(&ctx(), &u).await.expect("finalize");
    assert_eq!(done.artifacts.len(), 1);
    assert_eq!(done.artifacts[0].name, "out.bin");
    assert_eq!(
        Some(done.artifacts[0].url.as_str()),
        result_json["url"].as_str()
    );
    assert_eq!(done.result.as_deref(), Some(r#"{"finalized":true}"#));

    // An in-doubt unit whose job exists is adopted, not submitted twice.
    let mut again = unit("u1", "fixture", "main", &spec);
    again.provider_job_id = None;
    let in_doubt = [BatchUnit {
        unit: again,
        in_doubt: true,
    }];
    let changes = handler
        .tick(&ctx(), &in_doubt)
        .await
        .expect("in-doubt tick");
    assert_eq!(
        changes[0].outcome,
        Outcome::Accepted {
            job_id: job_id.clone()
        }
    );
    let stats = stub.stats();
    assert_eq!(stats.creates, 1);
    assert_eq!(stats.creates_by_key.get(&u.idempotency_key()), Some(&1));
}

#[tokio::test]
async fn batches_submit_and_the_stub_limit_rejects_for_capacity() {
    let (handler, stub) = with_stub(1).await;
    let spec = spec(&handler, "fixture", r#"{"polls": 0}"#).await;
    let units = [
        unit("a", "fixture", "main", &spec),
        unit("b", "fixture", "main", &spec),
    ];
    let changes = handler.tick(&ctx(), &batch(&units)).await.expect("tick");
    let kinds: Vec<&str> = changes.iter().map(|c| c.outcome.kind()).collect();
    assert_eq!(kinds, ["accepted", "capacity_rejected"]);
    assert_eq!(changes[1].unit_id, "b");
    assert_eq!(stub.stats().capacity_refusals, 1);
}

#[tokio::test]
async fn staged_units_move_to_the_next_stage() {
    let (handler, _stub) = with_stub(5).await;
    let spec = spec(&handler, "fixture-staged", r#"{"polls": 0}"#).await;
    let mut u = unit("s1", "fixture-staged", "one", &spec);
    let changes = handler
        .tick(&ctx(), &batch(&[u.clone()]))
        .await
        .expect("submit");
    let Outcome::Accepted { job_id } = changes[0].outcome.clone() else {
        panic!("expected accepted, got {changes:?}");
    };
    u.provider_job_id = Some(job_id.clone());
    let changes = handler.tick(&ctx(), &batch(&[u])).await.expect("poll");
    assert_eq!(
        changes[0].outcome,
        Outcome::NextStage {
            stage: "two".into()
        }
    );
    let state: serde_json::Value =
        serde_json::from_str(changes[0].state.as_deref().expect("state set")).expect("JSON");
    assert_eq!(state["first_job"], job_id.as_str());
}

#[tokio::test]
async fn a_failing_job_fails_with_its_code_and_illegal_is_returned_as_is() {
    let (handler, _stub) = with_stub(5).await;
    let spec = spec(
        &handler,
        "fixture",
        r#"{"behavior": "fail", "polls": 0, "code": "E7", "message": "bad prompt"}"#,
    )
    .await;
    let mut u = unit("f1", "fixture", "main", &spec);
    let changes = handler
        .tick(&ctx(), &batch(&[u.clone()]))
        .await
        .expect("submit");
    let Outcome::Accepted { job_id } = changes[0].outcome.clone() else {
        panic!("expected accepted, got {changes:?}");
    };
    u.provider_job_id = Some(job_id);
    let changes = handler.tick(&ctx(), &batch(&[u])).await.expect("poll");
    let Outcome::Fail { error } = &changes[0].outcome else {
        panic!("expected fail, got {changes:?}");
    };
    assert_eq!(
        (error.code.as_deref(), error.message.as_str()),
        (Some("E7"), "bad prompt")
    );

    let outcome = tick_one(&handler, r#"{"behavior": "illegal"}"#)
        .await
        .expect("tick");
    assert_eq!(
        outcome,
        Outcome::NextStage {
            stage: "no-such-stage".into()
        }
    );
}

#[tokio::test]
async fn a_trap_is_a_trap_fault_with_the_panic_message() {
    let handler = load(RuntimeLimits::default(), BTreeMap::new()).await;
    let fault = tick_one(&handler, r#"{"behavior": "trap"}"#)
        .await
        .expect_err("a trapping tick faults");
    let HandlerFault::Trap(message) = &fault else {
        panic!("expected a trap, got {fault:?}");
    };
    assert!(message.contains("trap requested"), "{message}");
    // The handler still serves after a trap: nothing survives in a fresh store.
    assert!(handler.plan("fixture", "{}").await.is_ok());
}

#[tokio::test]
async fn an_endless_loop_is_cut_off_by_the_deadline() {
    let limits = RuntimeLimits {
        call_deadline: Duration::from_secs(1),
        ..RuntimeLimits::default()
    };
    let handler = load(limits, BTreeMap::new()).await;
    let started = Instant::now();
    let fault = tick_one(&handler, r#"{"behavior": "loop"}"#)
        .await
        .expect_err("a looping tick faults");
    assert_eq!(fault, HandlerFault::Deadline(Duration::from_secs(1)));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_memory_bomb_traps_at_the_cap() {
    let limits = RuntimeLimits {
        memory_bytes: 16 * 1024 * 1024,
        ..RuntimeLimits::default()
    };
    let handler = load(limits, BTreeMap::new()).await;
    let fault = tick_one(&handler, r#"{"behavior": "alloc"}"#)
        .await
        .expect_err("an allocating tick faults");
    let HandlerFault::ResourceCap(message) = &fault else {
        panic!("expected the memory cap, got {fault:?}");
    };
    assert!(
        message.contains("memory cap of 16 MiB exceeded"),
        "{message}"
    );
    assert!(fault.is_crash());
}

#[tokio::test]
async fn hosts_outside_the_allowlist_are_denied() {
    let (handler, _stub) = with_stub(5).await;
    let outcome = tick_one(&handler, r#"{"behavior": "forbidden"}"#)
        .await
        .expect("tick");
    let Outcome::Fail { error } = outcome else {
        panic!("expected fail, got {outcome:?}");
    };
    assert!(
        error
            .message
            .contains("denied: forbidden.invalid is not in handlers.fixture.allowed_hosts"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn secrets_are_unreadable_but_usable_for_signing() {
    let mut handlers = fixture_config("http://provider.example", &[]);
    let fixture = handlers.get_mut("fixture").expect("fixture config");
    fixture
        .secrets
        .insert("secret_key".into(), Secret::new("sk-123"));
    fixture
        .secrets
        .insert("other_secret".into(), Secret::new("os-456"));
    let handler = load(RuntimeLimits::default(), handlers).await;
    let outcome = tick_one(&handler, r#"{"behavior": "peek"}"#)
        .await
        .expect("tick");
    let Outcome::Fail { error } = outcome else {
        panic!("expected fail, got {outcome:?}");
    };
    let seen = error.message;
    assert!(
        seen.contains("base_url=Some(http://provider.example)"),
        "{seen}"
    );
    assert!(seen.contains("secret_key=None"), "{seen}");
    assert!(seen.contains("other_secret=None"), "{seen}");
    assert!(
        !seen.contains("sk-123") && !seen.contains("os-456"),
        "{seen}"
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(b"sk-123").expect("hmac key");
    mac.update(b"x");
    let expected = hex::encode(mac.finalize().into_bytes());
    assert!(seen.contains(&format!("hmac=ok:{expected}")), "{seen}");
    assert!(
        seen.contains("missing=err:no secret \"no_such_secret\""),
        "{seen}"
    );
}

#[tokio::test]
async fn bad_files_are_refused_with_clear_messages() {
    let runtime = Runtime::new(RuntimeLimits::default(), BTreeMap::new()).expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "garbage.wasm",
            b"definitely not wasm".to_vec(),
            "not a WebAssembly file",
        ),
        (
            "core.wasm",
            wat::parse_str("(module)").expect("core module"),
            "core WebAssembly module, not a component",
        ),
        (
            "empty.wasm",
            wat::parse_str("(component)").expect("empty component"),
            "does not export the handler interface",
        ),
        (
            "v2.wasm",
            wat::parse_str(
                r#"(component (instance $i) (export "slotd:handler/handler@2.0.0" (instance $i)))"#,
            )
            .expect("v2 component"),
            "slotd:handler/handler@2.0.0, an incompatible major version; this host accepts slotd:handler/handler@1.x",
        ),
    ];
    for (name, bytes, expected) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).expect("write test file");
        let err = runtime.load_file(&path).await.expect_err("refused");
        let text = format!("{err:#}");
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains(expected), "{name}: {text}");
    }
}

#[tokio::test]
async fn registry_loads_a_directory_and_refuses_conflicts() {
    let runtime = Runtime::new(RuntimeLimits::default(), BTreeMap::new()).expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::copy(fixture_path(), dir.path().join("a-fixture.wasm")).expect("copy fixture");
    std::fs::write(dir.path().join("b-garbage.wasm"), b"nope").expect("write garbage");
    std::fs::write(dir.path().join("notes.txt"), b"ignored").expect("write txt");

    let registry = Registry::new();
    let summary = registry.load_dir(&runtime, dir.path()).await;
    assert_eq!(summary.loaded.len(), 1, "{summary:?}");
    assert_eq!(summary.loaded[0].1, "fixture");
    assert_eq!(summary.refused.len(), 1, "{summary:?}");
    assert!(summary.refused[0].1.contains("b-garbage.wasm"));
    assert!(registry.for_type("fixture-b").is_some());

    // Another handler claiming the fixture's task types is refused; the fixture keeps serving.
    let copy = runtime
        .load_file(&fixture_path())
        .await
        .expect("loads again");
    let mut info = copy.info.clone();
    info.name = "impostor".into();
    let copy = Arc::try_unwrap(copy).expect("sole owner");
    let err = registry
        .insert(Arc::new(copy.with_info(info)))
        .expect_err("conflict refused");
    assert!(
        err.contains("already served by handler \"fixture\""),
        "{err}"
    );
    assert_eq!(
        registry.for_type("fixture").map(|h| h.info.name.clone()),
        Some("fixture".to_string())
    );
}

/// `plugins/sdk` carries its own copy of the contract so it builds outside this repository; the
/// copy must be the contract the host implements.
#[test]
fn the_sdks_copy_of_the_contract_is_the_contract() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let read = |path: &str| {
        std::fs::read_to_string(repo.join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
    };
    assert!(
        read("wit/handler.wit") == read("plugins/sdk/wit/handler.wit"),
        "plugins/sdk/wit/handler.wit differs from wit/handler.wit: copy the contract into the \
         SDK (cp wit/handler.wit plugins/sdk/wit/handler.wit)"
    );
}
