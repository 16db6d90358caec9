//! HTTP-level tests of the API through `router(...).oneshot(...)`: real routing, extractors,
//! layers and problem+json bodies, against a store and slots shared with the test so effects
//! can be checked directly.
//!
//! The store is the real SQLite store in a temp dir ("database down" closes its pool) and the
//! handler is the real compiled fixture component.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::router;
use super::test_harness::{Harness, harness_with};
use slotd_coord::slots::SlotStore;
use slotd_core::config::{ApiKey, Config, Secret};
use slotd_core::model::UnitStatus;
use slotd_store::prelude::*;
use slotd_store::{Field, NewTask, NewUnit, UnitUpdate};
use slotd_units::services::Services;

#[path = "tests_lifecycle.rs"]
mod lifecycle;

const KEY_A: &str = "key-of-tenant-a";
const KEY_B: &str = "key-of-tenant-b";
const FIXTURE_POOL: &str = "fixture";

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    json: Value,
}

impl Reply {
    fn content_type(&self) -> &str {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// Assert a problem+json answer with this status, returning the body.
    fn problem(&self, status: u16) -> &Value {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.json);
        assert_eq!(self.content_type(), "application/problem+json");
        assert_eq!(self.json["status"], status);
        assert!(self.json["type"].is_string() && self.json["title"].is_string());
        &self.json
    }
}

/// Two tenants, `a` and `b`, with API keys.
async fn harness() -> Harness {
    let config = Config {
        api_keys: vec![
            ApiKey {
                key: Secret::new(KEY_A),
                tenant: "a".into(),
                admin: false,
                publish: Vec::new(),
            },
            ApiKey {
                key: Secret::new(KEY_B),
                tenant: "b".into(),
                admin: false,
                publish: Vec::new(),
            },
        ],
        ..Config::default()
    };
    harness_with(config).await
}

impl Harness {
    async fn send(&self, method: &str, uri: &str, key: Option<&str>, body: Option<&str>) -> Reply {
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(k) = key {
            req = req.header(header::AUTHORIZATION, format!("Bearer {k}"));
        }
        if body.is_some() {
            req = req.header(header::CONTENT_TYPE, "application/json");
        }
        let req = match req.body(body.map_or_else(Body::empty, |b| Body::from(b.to_string()))) {
            Ok(r) => r,
            Err(e) => panic!("building request {method} {uri}: {e}"),
        };
        let (status, headers, json) = self.call(req).await;
        Reply {
            status,
            headers,
            json,
        }
    }

    /// Store a task of `tenant` with `units` pending units directly (no `plan`).
    async fn seed(&self, tenant: &str, units: usize) -> String {
        let id = uuid::Uuid::now_v7().to_string();
        let task = NewTask {
            id: id.clone(),
            tenant: tenant.into(),
            task_type: "fixture".into(),
            payload: json!({ "count": units }).to_string(),
            idempotency_key: None,
            priority: 0,
            completion_webhook_url: None,
            units: (0..units)
                .map(|_| NewUnit {
                    id: uuid::Uuid::now_v7().to_string(),
                    pool: FIXTURE_POOL.into(),
                    stage: "main".into(),
                    spec: "{}".into(),
                    state: "{}".into(),
                    routes: None,
                    routing: None,
                    cost_estimate: None,
                    planned_release: None,
                })
                .collect(),
            now: 1_000_000,
            terms: Default::default(),
        };
        if let Err(e) = self.store.task_create(task).await {
            panic!("seeding a task: {e}");
        }
        id
    }

    async fn unit_ids(&self, task_id: &str) -> Vec<String> {
        match self.store.task_units(task_id).await {
            Ok(units) => units.into_iter().map(|u| u.id).collect(),
            Err(e) => panic!("reading units: {e}"),
        }
    }
}

#[tokio::test]
async fn probes() {
    let h = harness().await;
    let r = h.send("GET", "/healthz", None, None).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = h.send("GET", "/readyz", None, None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json["status"], "ready");

    h.store.close().await;
    let r = h.send("GET", "/readyz", None, None).await;
    r.problem(503);
    assert_eq!(
        r.headers.get(header::RETRY_AFTER).map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    let r = h.send("GET", "/healthz", None, None).await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "liveness does not depend on the database"
    );

    // No recorder installed in tests: /metrics says so rather than rendering nothing.
    h.send("GET", "/metrics", None, None).await.problem(404);
}

#[tokio::test]
async fn database_down_is_503_with_retry_after() {
    let h = harness().await;
    let id = h.seed("a", 1).await;
    h.store.close().await;
    let r = h
        .send("GET", &format!("/v1/tasks/{id}"), Some(KEY_A), None)
        .await;
    let body = r.problem(503);
    assert!(
        !body["detail"].as_str().unwrap_or("").contains("test"),
        "internal cause must not leak: {body}"
    );
    assert!(r.headers.contains_key(header::RETRY_AFTER));
    h.send("GET", "/v1/tasks", Some(KEY_A), None)
        .await
        .problem(503);
}

#[tokio::test]
async fn missing_or_wrong_key_is_401() {
    let h = harness().await;
    for key in [None, Some("not-a-configured-key"), Some("key-of-tenant-")] {
        let r = h.send("GET", "/v1/tasks", key, None).await;
        r.problem(401);
        let challenge = r.headers.get(header::WWW_AUTHENTICATE);
        assert!(
            challenge.is_some_and(|v| v.as_bytes().starts_with(b"Bearer")),
            "401 must carry a Bearer challenge"
        );
    }
    let r = h
        .send("POST", "/v1/tasks/fixture", None, Some(r#"{"payload":{}}"#))
        .await;
    r.problem(401);
    assert_eq!(h.task_count("a").await, 0);
    assert_eq!(
        h.send("GET", "/v1/tasks", Some(KEY_A), None).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn without_keys_everyone_is_the_local_tenant() {
    let h = harness_with(Config::default()).await;
    let id = h.seed(super::LOCAL_TENANT, 1).await;
    let r = h.send("GET", &format!("/v1/tasks/{id}"), None, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["task_id"], id.as_str());
}

#[tokio::test]
async fn bad_create_requests_are_4xx_and_store_nothing() {
    let h = harness().await;
    let post = |path: &'static str, body: &'static str| {
        let h = &h;
        async move { h.send("POST", path, Some(KEY_A), Some(body)).await }
    };
    let r = post("/v1/tasks/fixture", r#"{"payload": {"count": 2"#).await;
    let body = r.problem(400);
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or("")
            .contains("not valid JSON"),
        "{body}"
    );
    let r = post("/v1/tasks/fixture", r#"{"payload": {}, "priorty": 3}"#).await;
    assert_eq!(r.problem(400)["field"], "priorty");
    let r = post("/v1/tasks/fixture", r#"{"payload": {}, "priority": 5000}"#).await;
    assert_eq!(r.problem(422)["field"], "priority");
    let r = post("/v1/tasks/no-such-type", r#"{"payload": {}}"#).await;
    let body = r.problem(404);
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or("")
            .contains("no-such-type")
    );
    assert_eq!(h.task_count("a").await, 0);
}

#[tokio::test]
async fn oversized_body_is_413_problem() {
    let h = harness_with(Config {
        max_body_bytes: 256,
        ..Config::default()
    })
    .await;
    let big = json!({ "payload": { "text": "x".repeat(1024) } }).to_string();
    let r = h.send("POST", "/v1/tasks/fixture", None, Some(&big)).await;
    let body = r.problem(413);
    assert!(
        body["detail"].as_str().unwrap_or("").contains("256"),
        "{body}"
    );
    assert_eq!(h.task_count(super::LOCAL_TENANT).await, 0);
}

/// With the runtime stub, every `plan` is a handler fault: 503, nothing stored, no internals.
/// After the runtime merge this uses a fixture behaviour that traps in `plan` if there is one.
#[tokio::test]
async fn handler_fault_in_plan_is_502_not_retried_and_stores_nothing() {
    let h = harness().await;
    let r = h
        .send(
            "POST",
            "/v1/tasks/fixture",
            Some(KEY_A),
            Some(r#"{"payload": {"count": 1, "behavior": "plan-trap"}}"#),
        )
        .await;
    let body = r.problem(502);
    assert_eq!(body["type"], "urn:slotd:problem:handler-fault", "{body}");
    let detail = body["detail"].as_str().unwrap_or("");
    assert!(
        detail.contains("trap") && detail.contains("not worth retrying"),
        "the answer says what failed and that retrying will not help: {body}"
    );
    assert!(
        !detail.contains("runtime") && !detail.contains("wasm"),
        "fault details stay in the log: {body}"
    );
    assert!(
        r.headers.get(header::RETRY_AFTER).is_none(),
        "a crash on this payload invites no retry"
    );
    assert_eq!(h.task_count("a").await, 0);
    // The same handler still plans other payloads.
    let ok = h
        .send(
            "POST",
            "/v1/tasks/fixture",
            Some(KEY_A),
            Some(r#"{"payload": {"count": 1}}"#),
        )
        .await;
    assert_eq!(ok.status, StatusCode::ACCEPTED, "{}", ok.json);
}

#[tokio::test]
async fn reading_a_task_and_tenant_isolation() {
    let h = harness().await;
    let id = h.seed("a", 3).await;
    let units = h.unit_ids(&id).await;
    let update = UnitUpdate {
        provider_job_id: Field::Set("job-0".into()),
        result: Some(r#"{"object_key":"a/t/0/video.mp4","bytes":3,"sha256":"00"}"#.into()),
        ..Default::default()
    };
    h.drive(&units[0], UnitStatus::Completed, update).await;

    let r = h
        .send("GET", &format!("/v1/tasks/{id}"), Some(KEY_A), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let j = &r.json;
    assert_eq!(j["task_id"], id.as_str());
    assert_eq!(j["type"], "fixture");
    assert_eq!(j["status"], "running");
    assert_eq!(
        (j["completed"].as_u64(), j["total"].as_u64()),
        (Some(1), Some(3))
    );
    assert_eq!(j["message"], "1/3 completed, 2 waiting");
    assert_eq!(j["results"][0]["object_key"], "a/t/0/video.mp4");
    assert_eq!(j["results"][0]["provider_task_id"], "job-0");
    assert_eq!(j["results"][1]["status"], "pending");
    assert!(j.get("units").is_none());

    let r = h
        .send(
            "GET",
            &format!("/v1/tasks/{id}?units=true"),
            Some(KEY_A),
            None,
        )
        .await;
    assert_eq!(r.json["units"].as_array().map(Vec::len), Some(3));
    h.send(
        "GET",
        &format!("/v1/tasks/{id}?units=maybe"),
        Some(KEY_A),
        None,
    )
    .await
    .problem(400);

    // Tenant b sees nothing of a's task, whatever it tries.
    for (method, path) in [
        ("GET", format!("/v1/tasks/{id}")),
        ("GET", format!("/v1/tasks/{id}/events")),
        ("POST", format!("/v1/tasks/{id}/cancel")),
        ("POST", format!("/v1/tasks/{id}/retry")),
    ] {
        h.send(method, &path, Some(KEY_B), None).await.problem(404);
    }
    let r = h.send("GET", "/v1/tasks", Some(KEY_B), None).await;
    assert_eq!(r.json["tasks"], json!([]));
    h.send("GET", "/v1/tasks/not-a-task", Some(KEY_A), None)
        .await
        .problem(404);
}

#[tokio::test]
async fn list_pages_with_a_cursor() {
    let h = harness().await;
    let mut created = Vec::new();
    for _ in 0..5 {
        created.push(h.seed("a", 1).await);
    }
    h.seed("b", 1).await;

    let mut seen = Vec::new();
    let mut uri = "/v1/tasks?limit=2".to_string();
    for _ in 0..10 {
        let r = h.send("GET", &uri, Some(KEY_A), None).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json);
        let page = r.json["tasks"].as_array().cloned().unwrap_or_default();
        assert!(page.len() <= 2);
        seen.extend(
            page.iter()
                .filter_map(|t| t["task_id"].as_str().map(str::to_string)),
        );
        match r.json["next_cursor"].as_str() {
            Some(c) => uri = format!("/v1/tasks?limit=2&cursor={c}"),
            None => break,
        }
    }
    created.reverse();
    assert_eq!(seen, created, "every task of a, newest first, once");

    let r = h
        .send(
            "GET",
            "/v1/tasks?status=pending&type=fixture",
            Some(KEY_A),
            None,
        )
        .await;
    assert_eq!(r.json["tasks"].as_array().map(Vec::len), Some(5));
    let r = h
        .send("GET", "/v1/tasks?status=failed", Some(KEY_A), None)
        .await;
    assert_eq!(r.json["tasks"], json!([]));

    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("status=done", "status"),
        ("cursor=abc", "cursor"),
        ("colour=red", "colour"),
    ] {
        let r = h
            .send("GET", &format!("/v1/tasks?{query}"), Some(KEY_A), None)
            .await;
        assert_eq!(r.problem(400)["field"], field, "for ?{query}");
    }
}

/// Cancel ends the pending units at once; the submitted one keeps its slot (its provider job
/// still runs) and waits, which the view says; a second cancel changes nothing.
#[tokio::test]
async fn pools_and_handlers() {
    let mut config = Config::default();
    config.pools.insert(
        FIXTURE_POOL.into(),
        slotd_core::config::PoolConfig::slots(7),
    );
    let h = harness_with(config).await;
    let id = h.seed(super::LOCAL_TENANT, 2).await;
    let units = h.unit_ids(&id).await;
    if let Err(e) = h
        .store
        .unit_mark_submitted(&units[..1], 1_000_001, 1_000_001, None)
        .await
    {
        panic!("marking submitted: {e}");
    }
    let held = [slotd_coord::slots::holder(&units[0], 1_000_001)];
    if let Err(e) = h.slots.acquire(FIXTURE_POOL, &held, 7).await {
        panic!("acquiring: {e}");
    }

    let r = h.send("GET", "/v1/pools", None, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let pools = r.json.as_array().cloned().unwrap_or_default();
    let pool = pools
        .iter()
        .find(|p| p["name"] == FIXTURE_POOL)
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(pool["max_slots"], 7, "the operator's setting wins: {pool}");
    assert_eq!(pool["used"], 1);
    assert_eq!(pool["units"]["pending"], 1);
    assert_eq!(pool["units"]["submitted"], 1);
    assert_eq!(pool["units"]["failed"], 0);
    let types = pool["task_types"].as_array().cloned().unwrap_or_default();
    assert!(types.contains(&json!("fixture")), "{pool}");

    let r = h.send("GET", "/v1/handlers", None, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let handler = &r.json[0];
    assert_eq!(handler["name"], "fixture");
    assert!(handler["version"].is_string());
    assert_eq!(handler["sha256"].as_str().map(str::len), Some(64));
    assert_eq!(handler["task_types"][0]["name"], "fixture");
    assert_eq!(handler["task_types"][0]["stages"][0]["pool"], FIXTURE_POOL);
    // The fixture binds the core world of 1.4.0: no extension, no costs, no provider.
    assert_eq!(handler["contract"], "1.5.0", "{handler}");
    assert_eq!(
        handler["features"],
        json!({"cancel": false, "routing": false, "costs": false, "provider": false, "routes": false})
    );
}

#[tokio::test]
async fn unknown_routes_and_methods_are_problems() {
    let h = harness().await;
    h.send("GET", "/v2/nothing", Some(KEY_A), None)
        .await
        .problem(404);
    h.send("DELETE", "/v1/tasks", Some(KEY_A), None)
        .await
        .problem(405);
}

// ---------------------------------------------------------------------------------------------
// Need a real `plan` (the runtime branch and the fixture component).
// ---------------------------------------------------------------------------------------------

/// Every instance records into its own registry: requests served by one never show in
/// another's `/metrics`, though both live in this process.
#[tokio::test]
async fn metrics_render_in_prometheus_text_per_instance() {
    let h = harness().await;
    let with_registry = |services: &Services| {
        let (metrics, handle) = slotd_units::assemble::metrics_registry();
        let services = Services {
            hot: std::sync::Arc::new(slotd_coord::hot::HotStatus::disabled()),
            keyspace: None,
            metrics,
            prometheus: Some(handle),
            capacity: Default::default(),
            accounts: Default::default(),
            closures: Default::default(),
            ..services.clone()
        };
        router(services)
    };
    let (busy, idle) = (with_registry(&h.services), with_registry(&h.services));
    let get = async |app: &Router, uri: &str| {
        let req = Request::builder()
            .uri(uri)
            .body(Body::empty())
            .unwrap_or_else(|e| panic!("building request: {e}"));
        match app.clone().oneshot(req).await {
            Ok(r) => r,
            Err(e) => match e {},
        }
    };
    for _ in 0..3 {
        assert_eq!(get(&busy, "/healthz").await.status(), StatusCode::OK);
    }
    let text = async |app: &Router| {
        let response = get(app, "/metrics").await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response
                .headers()
                .get(header::CONTENT_TYPE)
                .map(|v| v.as_bytes()),
            Some(&b"text/plain; version=0.0.4"[..])
        );
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap_or_else(|e| panic!("reading /metrics: {e}"));
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let health = |t: &str| -> f64 {
        t.lines()
            .filter(|l| {
                l.starts_with("slotd_api_requests_total") && l.contains("route=\"/healthz\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let busy_text = text(&busy).await;
    assert_eq!(health(&busy_text), 3.0, "{busy_text}");
    let idle_text = text(&idle).await;
    assert_eq!(health(&idle_text), 0.0, "{idle_text}");
}

/// `GET /v1/tasks/{id}` tells where a waiting task stands and, once the pool has seen jobs end,
/// when it should end: 2 slots busy for 9 s more, 4 units ahead, then the task's 2, each taking
/// the observed 10 s.
#[tokio::test]
async fn a_task_view_gives_its_queue_position_and_an_estimate() {
    let mut config = Config::default();
    config.pools.insert(
        FIXTURE_POOL.into(),
        slotd_core::config::PoolConfig::slots(2),
    );
    let h = harness_with(config).await;
    let now = h.services.clock.now_ms();
    let first = h.seed("local", 6).await;
    let second = h.seed("local", 2).await;
    let running: Vec<String> = h.unit_ids(&first).await.into_iter().take(2).collect();
    if let Err(e) = h
        .store
        .unit_mark_submitted(&running, now - 1000, now + 60_000, None)
        .await
    {
        panic!("marking submitted: {e}");
    }

    // No job has ended yet: a place in the queue, no estimate.
    let r = h
        .send("GET", &format!("/v1/tasks/{second}"), None, None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["queue_position"], 4);
    assert!(
        r.json.get("estimated_completion_at").is_none(),
        "{}",
        r.json
    );

    for _ in 0..4 {
        h.services
            .durations
            .observe(FIXTURE_POOL, "fixture/main", 10_000);
    }
    let r = h
        .send("GET", &format!("/v1/tasks/{second}"), None, None)
        .await;
    // Slots free at +9 s; the 4 ahead start at 9, 9, 19, 19 s; the task's last unit at 29 s.
    assert_eq!(
        r.json["estimated_completion_at"],
        now + 39_000,
        "{}",
        r.json
    );
    // The same with the unit records.
    let r = h
        .send("GET", &format!("/v1/tasks/{second}?units=true"), None, None)
        .await;
    assert_eq!(r.json["estimated_completion_at"], now + 39_000);
    assert_eq!(r.json["units"].as_array().map(Vec::len), Some(2));
    // The first task is next (its own units ahead of its later ones do not count).
    let r = h
        .send("GET", &format!("/v1/tasks/{first}"), None, None)
        .await;
    assert_eq!(r.json["queue_position"], 0);
    // Slots free at +9 s: its 4 waiting units run 9–19 s and 19–29 s.
    assert_eq!(r.json["estimated_completion_at"], now + 29_000);

    // A finished task has neither.
    let r = h
        .send(
            "POST",
            &format!("/v1/tasks/{second}/cancel"),
            None,
            Some("{}"),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let r = h
        .send("GET", &format!("/v1/tasks/{second}"), None, None)
        .await;
    assert_eq!(r.json["status"], "cancelled");
    assert!(r.json.get("queue_position").is_none(), "{}", r.json);
    assert!(
        r.json.get("estimated_completion_at").is_none(),
        "{}",
        r.json
    );
}
