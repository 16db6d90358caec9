//! The deadline check at grant time ([`Scheduler::refuse_unreachable_at_grant`]): a unit stored
//! after the tick's sweep is looked at again just before its slot is granted.

use std::path::Path;

use serde_json::{Value, json};
use tower::ServiceExt;

use slotd_core::clock::{Clock, DynClock, ManualClock};
use slotd_core::config::{Config, PoolConfig};
use slotd_core::model::UnitStatus;

use super::super::Scheduler;
use crate::pool_state::durations::class_of;
use crate::services::Services;

/// `POST /v1/tasks/fixture` through the real router; the task id.
async fn post(services: &Services, body: Value) -> String {
    let req = axum::http::Request::builder()
        .method("POST")
        .uri("/v1/tasks/fixture")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .expect("request");
    let resp = crate::api::router(services.clone())
        .oneshot(req)
        .await
        .expect("router");
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .expect("body");
    let v: Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(status, 202, "{v}");
    v["task_id"].as_str().expect("task id").to_string()
}

#[tokio::test]
async fn a_unit_stored_after_the_sweep_is_refused_before_its_grant() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugins dir");
    std::fs::copy(
        Path::new(slotd_testkit::BUILT_PLUGINS).join("fixture.wasm"),
        plugins.join("fixture.wasm"),
    )
    .expect("copy the fixture");
    let mut config = Config {
        database_url: format!("sqlite://{}", dir.path().join("grant.db").display()),
        plugins_dir: plugins,
        ..Config::default()
    };
    config.pools.insert("fixture".into(), PoolConfig::slots(10));
    let clock = ManualClock::new(1_000_000);
    let dyn_clock: DynClock = clock.clone();
    let services = crate::app::build_with_clock(config, dyn_clock)
        .await
        .expect("build");
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
