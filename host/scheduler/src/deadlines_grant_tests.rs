//! The deadline check at grant time ([`Scheduler::refuse_unreachable_at_grant`]): a unit stored
//! after the tick's sweep is looked at again just before its slot is granted. Called directly,
//! and through a whole tick (`run_once`) whose grant comes later than its sweep.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use slotd_core::clock::{Clock, DynClock, ManualClock};
use slotd_core::config::{Config, PoolConfig};
use slotd_core::model::UnitStatus;

use super::super::Scheduler;
use slotd_pools::pool_state::durations::class_of;
use slotd_units::services::Services;

/// A task of the fixture handler for the API's tenant, created as `POST /v1/tasks/fixture`
/// creates it (the lifecycle's `create_task`) from the request body's `payload`, `deadline`
/// (RFC 3339) and `deadline_policy`; the task id. The API's parsing is tested with the API.
pub(crate) async fn post(services: &Services, body: Value) -> String {
    let handler = services
        .registry
        .for_type("fixture")
        .expect("the fixture handler");
    let deadline_at = body["deadline"].as_str().map(|d| {
        chrono::DateTime::parse_from_rfc3339(d)
            .expect("an RFC 3339 deadline")
            .timestamp_millis()
    });
    let request = slotd_units::lifecycle::CreateRequest {
        payload: body["payload"].to_string(),
        idempotency_key: None,
        priority: 0,
        completion_webhook_url: None,
        terms: slotd_store::TaskTerms {
            deadline_at,
            start_by: None,
            best_effort: body["deadline_policy"] == "best_effort",
        },
    };
    let now = services.clock.now_ms();
    let created =
        slotd_units::lifecycle::create_task(services, &handler, "local", "fixture", request, now)
            .await
            .expect("created");
    created.task_id
}

/// A task of `task_type` for the API's tenant whose `count` units are accepted and then run
/// forever (the fixture's `idle`: no HTTP); the task id.
pub(crate) async fn idle_task(services: &Services, task_type: &str, count: u32) -> String {
    let handler = services
        .registry
        .for_type(task_type)
        .expect("the fixture handler");
    let request = slotd_units::lifecycle::CreateRequest {
        payload: json!({"count": count, "behavior": "idle"}).to_string(),
        idempotency_key: None,
        priority: 0,
        completion_webhook_url: None,
        terms: slotd_store::TaskTerms::default(),
    };
    let now = services.clock.now_ms();
    slotd_units::lifecycle::create_task(services, &handler, "local", task_type, request, now)
        .await
        .expect("created")
        .task_id
}

/// Services on a fresh SQLite file in `dir` with the fixture handler and a pool `fixture` of
/// ten slots, on a manual clock at 1,000,000 ms.
pub(crate) async fn build(dir: &Path) -> (Services, Arc<ManualClock>) {
    build_slots(dir, 10).await
}

/// [`build`] with a pool `fixture` of `slots` slots.
pub(crate) async fn build_slots(dir: &Path, slots: u32) -> (Services, Arc<ManualClock>) {
    build_with(dir, slots, |_| {}).await
}

/// [`build_slots`], the configuration changed by `tweak` last.
pub(crate) async fn build_with(
    dir: &Path,
    slots: u32,
    tweak: impl FnOnce(&mut Config),
) -> (Services, Arc<ManualClock>) {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugins dir");
    std::fs::copy(
        Path::new(slotd_testkit::BUILT_PLUGINS).join("fixture.wasm"),
        plugins.join("fixture.wasm"),
    )
    .expect("copy the fixture");
    let mut config = Config {
        database_url: format!("sqlite://{}", dir.join("grant.db").display()),
        plugins_dir: plugins,
        ..Config::default()
    };
    config
        .pools
        .insert("fixture".into(), PoolConfig::slots(slots));
    tweak(&mut config);
    let clock = ManualClock::new(1_000_000);
    let dyn_clock: DynClock = clock.clone();
    let services = slotd_units::assemble::build_with_clock(config, dyn_clock)
        .await
        .expect("build");
    (services, clock)
}

#[tokio::test]
async fn a_unit_stored_after_the_sweep_is_refused_before_its_grant() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let (services, clock) = build(dir.path()).await;
    let sched = Scheduler::new(services.clone());
    // Ten seconds from the clock's now.
    let deadline = "1970-01-01T00:16:50Z";
    let unit = json!({"count": 1, "behavior": "quick"});
    let refused = post(&services, json!({"payload": unit, "deadline": deadline})).await;
    let kept = post(
        &services,
        json!({"payload": unit, "deadline": deadline, "deadline_policy": "best_effort"}),
    )
    .await;
    let plain = post(&services, json!({"payload": unit})).await;
    let types = vec!["fixture".to_string()];
    let now = clock.now_ms();
    let mut pending = services
        .store
        .unit_list_fill("fixture", &types, now, 10, &[])
        .await
        .expect("pending");
    assert_eq!(pending.len(), 3);

    // Nothing known about how long jobs take: nothing is refused on a guess.
    let mut unknown = pending.clone();
    sched
        .refuse_unreachable_at_grant("fixture", &mut unknown, now, None)
        .await
        .expect("check without durations");
    assert_eq!(unknown.len(), 3);

    // Jobs of this class take a minute at the 95th percentile: none started now ends in 10 s.
    for u in &pending {
        services
            .durations
            .state("fixture", &class_of(u), 30_000, 60_000);
    }
    sched
        .refuse_unreachable_at_grant("fixture", &mut pending, now, None)
        .await
        .expect("check");
    let left: Vec<&str> = pending.iter().map(|u| u.task_id.as_str()).collect();
    assert!(!left.contains(&refused.as_str()), "{left:?}");
    assert!(
        left.contains(&kept.as_str()),
        "best effort goes on: {left:?}"
    );
    assert!(
        left.contains(&plain.as_str()),
        "no deadline, no check: {left:?}"
    );
    let units = services.store.task_units(&refused).await.expect("units");
    assert_eq!(units.len(), 1);
    assert_eq!(units[0].status, UnitStatus::Failed);
    let error = units[0].error.clone().unwrap_or_default();
    assert!(error.contains("deadline_unreachable"), "{error}");
    assert!(
        error.contains("p95 duration"),
        "the numbers are given: {error}"
    );
    for id in [&kept, &plain] {
        let units = services.store.task_units(id).await.expect("units");
        assert_eq!(units[0].status, UnitStatus::Pending, "{id}");
    }
}

/// Through a whole tick: its sweep projects at the tick's start, its grant at the clock's
/// instant when the fill gets there. Here the clock has moved 20 s past the tick's start (a
/// sweep that took that long, or a unit the sweep never saw): a refuse-policy unit whose
/// deadline a start at the tick's start could still meet (p95 of about 60 s, deadline 70 s
/// away) but a start 20 s later cannot is failed at the grant, never marked nor handed to the
/// handler, and holds no slot; a best-effort unit in the same place is granted and submitted.
#[tokio::test]
async fn a_tick_whose_grant_comes_after_its_sweep_refuses_what_the_sweep_let_through() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let (services, clock) = build(dir.path()).await;
    let sched = Scheduler::new(services.clone());
    let start = clock.now_ms();
    // 70 s after the tick's start (1,070,000 ms).
    let deadline = "1970-01-01T00:17:50Z";
    let unit = json!({"count": 1, "behavior": "quick"});
    let refused = post(&services, json!({"payload": unit, "deadline": deadline})).await;
    let kept = post(
        &services,
        json!({"payload": unit, "deadline": deadline, "deadline_policy": "best_effort"}),
    )
    .await;
    let types = vec!["fixture".to_string()];
    let pending = services
        .store
        .unit_list_fill("fixture", &types, start, 10, &[])
        .await
        .expect("pending");
    assert_eq!(pending.len(), 2);
    for u in &pending {
        services
            .durations
            .state("fixture", &class_of(u), 30_000, 60_000);
    }

    // The tick starts at `start`; by its grant the clock reads 20 s later.
    clock.advance(20_000);
    let report = sched.run_once("fixture", start).await.expect("tick");
    assert_eq!(
        report.claimed, 1,
        "only the best-effort unit is granted: {report:?}"
    );
    assert_eq!(report.accepted, 1, "{report:?}");

    let r = services.store.task_units(&refused).await.expect("units");
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].status, UnitStatus::Failed, "{:?}", r[0]);
    let error = r[0].error.clone().unwrap_or_default();
    assert!(error.contains("deadline_unreachable"), "{error}");
    // Projected from the grant's instant, not the sweep's (which would say 00:16:40).
    assert!(
        error.contains("(start 1970-01-01T00:17:00.000Z"),
        "judged at the grant: {error}"
    );
    assert_eq!(r[0].provider_job_id, None, "{:?}", r[0]);
    assert_eq!(r[0].submitted_at, None, "never marked: {:?}", r[0]);
    let events = services.store.unit_events(&refused).await.expect("events");
    assert!(
        events.iter().all(|e| e.to_status != "submitted"),
        "no submit marker: {events:?}"
    );

    let k = services.store.task_units(&kept).await.expect("units");
    assert_eq!(k[0].status, UnitStatus::Submitted, "{:?}", k[0]);
    assert!(
        k[0].provider_job_id
            .as_deref()
            .is_some_and(|j| j.starts_with("quick-")),
        "the handler created it: {:?}",
        k[0]
    );
    // One slot held: the best-effort unit's.
    assert_eq!(services.slots.used("fixture").await.expect("slots"), 1);
}
