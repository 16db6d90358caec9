//! The core path: units flow through a small pool without ever exceeding it.

use std::time::Duration;

use serde_json::json;

use crate::support::*;

async fn all_completed(m: &Manual, ids: &[String]) -> bool {
    for id in ids {
        if m.task(id).await["status"] != "completed" {
            return false;
        }
    }
    true
}

/// 100 units through a pool of 5 slots, scheduler driven by hand with a manual clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_units_through_five_slots() {
    hundred_units_through_five_slots_on(None).await;
}

/// The same scheduler path on PostgreSQL (a fresh schema).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_units_through_five_slots_postgres() {
    let schema = crate::pg::PgSchema::create().await;
    hundred_units_through_five_slots_on(Some(schema.url())).await;
}

/// The test itself, on the harness's SQLite file or the given database.
async fn hundred_units_through_five_slots_on(database_url: Option<String>) {
    let m = Manual::start_with(5, 100, |c| {
        if let Some(url) = database_url {
            c.database_url = url;
        }
    })
    .await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(m.submit("fixture", json!({"count": 25, "polls": 2})).await);
    }
    let rounds = m
        .run_until(&["fixture"], 500, async |m| all_completed(m, &ids).await)
        .await;
    let stats = m.stub.stats();
    assert!(
        stats.max_in_flight <= 5,
        "provider saw {} in flight",
        stats.max_in_flight
    );
    assert_eq!(
        stats.max_in_flight, 5,
        "the pool should have been used fully"
    );
    assert_eq!(stats.creates, 100);
    assert!(
        stats.creates_by_key.values().all(|&n| n == 1),
        "a key was created twice"
    );
    assert_eq!(stats.capacity_refusals, 0);
    assert_eq!(stats.duplicate_creates, 0, "a key was sent twice");
    for id in &ids {
        let t = m.task(id).await;
        assert_eq!(t["completed"], 25);
        assert_eq!(t["total"], 25);
        let results = t["results"].as_array().expect("results");
        assert_eq!(results.len(), 25);
        for r in results {
            assert_eq!(r["status"], "completed");
            assert!(r["provider_task_id"].is_string(), "{r}");
            assert!(
                r["artifacts"].as_array().is_some_and(|a| !a.is_empty()),
                "{r}"
            );
        }
    }
    assert_eq!(
        m.services.slots.used("fixture").await.ok(),
        Some(0),
        "no slot leaked"
    );
    // 100 units, 5 at a time, each needing submit + 2 polls: at least 60 rounds are needed.
    assert!(
        rounds >= 60,
        "finished in {rounds} rounds: too fast to be real"
    );
    m.check().await;
}

/// The same through the real server and the real tick loop (real clock, early wake-ups).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_units_real_server() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stub =
        slotd_testkit::stub::StubProvider::start(slotd_testkit::stub::StubOptions { limit: 100 })
            .await
            .expect("stub");
    let config = test_config(dir.path(), &stub, 5);
    let services = slotd_server::app::build_with_clock(config, system_clock())
        .await
        .expect("build");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(slotd_server::run_with(
        services.clone(),
        Some(listener),
        async move {
            stop_rx.await.ok();
        },
    ));
    let client = reqwest::Client::new();
    let base = format!("http://{addr}");
    let mut ids = Vec::new();
    for i in 0..4 {
        let r = client
            .post(format!("{base}/v1/tasks/fixture"))
            .json(
                &json!({"payload": {"count": 25, "polls": 1}, "idempotency_key": format!("k{i}")}),
            )
            .send()
            .await
            .expect("post");
        assert_eq!(r.status(), 202);
        let v: serde_json::Value = r.json().await.expect("json");
        ids.push(v["task_id"].as_str().expect("id").to_string());
    }
    wait_all_completed(&client, &base, &ids, Duration::from_secs(60)).await;
    let stats = stub.stats();
    assert!(
        stats.max_in_flight <= 5,
        "provider saw {} in flight",
        stats.max_in_flight
    );
    assert_eq!(stats.creates, 100);
    assert!(stats.creates_by_key.values().all(|&n| n == 1));
    assert_eq!(stats.duplicate_creates, 0, "a key was sent twice");
    let pools: serde_json::Value = client
        .get(format!("{base}/v1/pools"))
        .send()
        .await
        .expect("pools")
        .json()
        .await
        .expect("json");
    let fixture = pools
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "fixture"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(fixture["used"], 0, "{pools}");
    assert_services_check_clean(&services).await;
    stop_tx.send(()).ok();
    server.await.expect("join").expect("server stopped cleanly");
}

/// Higher priority fills first; tenants round-robin within a priority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_goes_first() {
    let m = Manual::start(2, 100).await;
    let low = m.submit("fixture", json!({"count": 4, "polls": 5})).await;
    let (status, body) = api_call(
        &m.services,
        "POST",
        "/v1/tasks/fixture",
        Some(json!({"payload": {"count": 2, "polls": 5}, "priority": 10})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let high = body["task_id"].as_str().expect("id").to_string();
    m.round(&["fixture"], 10).await;
    let h = m.task(&high).await;
    let l = m.task(&low).await;
    let running = |t: &serde_json::Value| {
        t["results"].as_array().map_or(0, |r| {
            r.iter().filter(|u| u["status"] == "submitted").count()
        })
    };
    assert_eq!(running(&h), 2, "{h}");
    assert_eq!(running(&l), 0, "{l}");
    m.check().await;
}

/// Fair share at the scheduler (docs/unit-journey.md): two tenants on one slot. The big tenant submits
/// first, six units; the small one then three. Round-robin across tenants interleaves them
/// (big, small, big, small, …) until the small one runs out; FIFO alone, or "each tenant's
/// first unit, then FIFO", would both give another order (the pool remembers whom it served
/// last, `pool_tenant_served`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_share_one_slot_round_robin() {
    two_tenants_share_one_slot_on(None).await;
}

/// The same on PostgreSQL (a fresh schema).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_share_one_slot_round_robin_postgres() {
    let schema = crate::pg::PgSchema::create().await;
    two_tenants_share_one_slot_on(Some(schema.url())).await;
}

async fn two_tenants_share_one_slot_on(database_url: Option<String>) {
    use slotd_core::config::{ApiKey, Secret};
    let m = Manual::start_with(1, 100, |c| {
        if let Some(url) = database_url {
            c.database_url = url;
        }
        c.api_keys = vec![
            ApiKey {
                key: Secret::new("key-big"),
                tenant: "big".into(),
                admin: false,
                publish: Vec::new(),
            },
            ApiKey {
                key: Secret::new("key-small"),
                tenant: "small".into(),
                admin: false,
                publish: Vec::new(),
            },
        ];
    })
    .await;
    let big = m.submit_as("key-big", "fixture", json!({"count": 6})).await;
    let small = m
        .submit_as("key-small", "fixture", json!({"count": 3}))
        .await;
    let store = m.services.store.clone();
    let all_done = async |ids: [&String; 2]| {
        for id in ids {
            let units = store.task_units(id).await.expect("units");
            if units
                .iter()
                .any(|u| u.status != slotd_core::model::UnitStatus::Completed)
            {
                return false;
            }
        }
        true
    };
    m.run_until(&["fixture"], 300, async |_| all_done([&big, &small]).await)
        .await;
    // The order the units were marked submitted in, from the global event log.
    let mut marks = Vec::new();
    for (tenant, id) in [("big", &big), ("small", &small)] {
        for e in store.unit_events(id).await.expect("events") {
            if e.from_status.as_deref() == Some("pending") && e.to_status == "submitted" {
                marks.push((e.id, tenant));
            }
        }
    }
    marks.sort();
    let order: Vec<&str> = marks.iter().map(|(_, t)| *t).collect();
    assert_eq!(
        order,
        [
            "big", "small", "big", "small", "big", "small", "big", "big", "big"
        ],
        "one slot shared round-robin across tenants"
    );
    assert_eq!(m.stub.stats().max_in_flight, 1);
    m.check().await;
}
