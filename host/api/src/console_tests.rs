//! The operator console's API through `router().oneshot`: admin callers, what a tenant may
//! not see (the attack first), the pool timeline and the webhook deliveries list, and the
//! page itself. Real SQLite store, real compiled fixture handler (see `test_harness.rs`).

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::{Value, json};

use super::test_harness::{Harness, harness_with};
use slotd_core::config::{ApiKey, Config, Secret};
use slotd_core::model::UnitStatus;
use slotd_store::prelude::*;
use slotd_store::{Field, NewDelivery, NewTask, NewUnit, UnitUpdate};

const KEY_A: &str = "key-of-tenant-a";
const KEY_B: &str = "key-of-tenant-b";
const KEY_OPS: &str = "key-of-the-operators";
const POOL: &str = "fixture";
/// The harness's manual clock.
const NOW: i64 = 1_000_000;

/// Tenants `a` and `b`, and `ops` whose key is an admin's.
async fn harness() -> Harness {
    let key = |k: &str, tenant: &str, admin: bool| ApiKey {
        key: Secret::new(k),
        tenant: tenant.into(),
        admin,
        publish: Vec::new(),
    };
    harness_with(Config {
        api_keys: vec![
            key(KEY_A, "a", false),
            key(KEY_B, "b", false),
            key(KEY_OPS, "ops", true),
        ],
        ..Config::default()
    })
    .await
}

async fn send(h: &Harness, method: &str, uri: &str, key: Option<&str>) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(k) = key {
        req = req.header(header::AUTHORIZATION, format!("Bearer {k}"));
    }
    if method == "POST" {
        req = req.header(header::CONTENT_TYPE, "application/json");
    }
    let body = if method == "POST" {
        Body::from("{}")
    } else {
        Body::empty()
    };
    let req = match req.body(body) {
        Ok(r) => r,
        Err(e) => panic!("building {method} {uri}: {e}"),
    };
    let (status, headers, json) = h.call(req).await;
    if !status.is_success() {
        assert_eq!(
            headers.get(header::CONTENT_TYPE).map(|v| v.as_bytes()),
            Some(&b"application/problem+json"[..]),
            "{method} {uri}: errors are problem+json"
        );
    }
    (status, json)
}

async fn get(h: &Harness, uri: &str, key: &str) -> (StatusCode, Value) {
    send(h, "GET", uri, Some(key)).await
}

/// Store a task of `tenant` with `units` pending units in the fixture pool; returns its id
/// and its unit ids.
async fn seed(h: &Harness, tenant: &str, units: usize) -> (String, Vec<String>) {
    let id = uuid::Uuid::now_v7().to_string();
    let unit_ids: Vec<String> = (0..units)
        .map(|_| uuid::Uuid::now_v7().to_string())
        .collect();
    let task = NewTask {
        id: id.clone(),
        tenant: tenant.into(),
        task_type: "fixture".into(),
        payload: json!({ "count": units }).to_string(),
        idempotency_key: None,
        priority: 0,
        completion_webhook_url: Some("https://example.com/hook".into()),
        units: unit_ids
            .iter()
            .map(|u| NewUnit {
                id: u.clone(),
                pool: POOL.into(),
                stage: "main".into(),
                spec: "{}".into(),
                state: "{}".into(),
                routes: None,
                routing: None,
                cost_estimate: None,
                planned_release: None,
            })
            .collect(),
        now: NOW - 500_000,
        terms: Default::default(),
    };
    if let Err(e) = h.store.task_create(task).await {
        panic!("seeding a task: {e}");
    }
    (id, unit_ids)
}

async fn submit(h: &Harness, ids: &[String], at: i64) {
    match h.store.unit_mark_submitted(ids, at, at, None).await {
        Ok(moved) => assert_eq!(moved.len(), ids.len()),
        Err(e) => panic!("marking submitted: {e}"),
    }
}

async fn end(h: &Harness, unit: &str, to: UnitStatus, at: i64, detail: Option<&str>) {
    let u = UnitUpdate {
        unit_id: unit.into(),
        from: Some(UnitStatus::Submitted),
        to: Some(to),
        detail: detail.map(String::from),
        error: if to == UnitStatus::Failed {
            Field::Set(r#"{"code":"1201","message":"bad prompt"}"#.to_string())
        } else {
            Field::Keep
        },
        ..UnitUpdate::default()
    };
    match h.store.unit_apply(&[u], at, None).await {
        Ok(r) => assert_eq!(r.applied.len(), 1, "{r:?}"),
        Err(e) => panic!("ending {unit}: {e}"),
    }
}

async fn enqueue(h: &Harness, task_id: &str, tenant: &str, at: i64) {
    let d = NewDelivery {
        id: format!("msg_{task_id}"),
        task_id: task_id.into(),
        tenant: tenant.into(),
        url: "https://example.com/hook".into(),
        event: "task.failed".into(),
        payload: "{}".into(),
        now: at,
    };
    if let Err(e) = h.store.webhook_enqueue(&d).await {
        panic!("queueing a delivery: {e}");
    }
}

fn task_ids(list: &Value) -> Vec<String> {
    list["tasks"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t["task_id"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The attack, written first: tenant B holds a valid key and A's task id (ids leak: logs,
/// URLs, screenshots) and tries every route that reads or acts on a task, and every new
/// console endpoint.
#[tokio::test]
async fn tenant_b_cannot_read_list_cancel_or_retry_tenant_a_tasks() {
    let h = harness().await;
    let (a_task, a_units) = seed(&h, "a", 2).await;
    let (b_task, _) = seed(&h, "b", 1).await;
    submit(&h, &a_units, NOW - 60_000).await;
    end(&h, &a_units[0], UnitStatus::Failed, NOW - 30_000, None).await;
    enqueue(&h, &a_task, "a", NOW - 20_000).await;

    for path in [
        format!("/v1/tasks/{a_task}"),
        format!("/v1/tasks/{a_task}?units=true"),
        format!("/v1/tasks/{a_task}/events"),
        format!("/v1/tasks/{a_task}/webhooks"),
    ] {
        let (status, body) = get(&h, &path, KEY_B).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
    }
    for action in ["cancel", "retry"] {
        let path = format!("/v1/tasks/{a_task}/{action}");
        let (status, body) = send(&h, "POST", &path, Some(KEY_B)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
    }
    let still = match h.store.task_get("a", &a_task).await {
        Ok(Some(t)) => t,
        other => panic!("A's task: {other:?}"),
    };
    assert!(
        still.cancel_requested_at.is_none(),
        "B's cancel changed A's task"
    );
    assert_eq!(still.counts.failed, 1, "B's retry changed A's task");

    // Lists: only B's own, and asking for A's is refused naming the rule.
    let (status, list) = get(&h, "/v1/tasks", KEY_B).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(task_ids(&list), [b_task.as_str()]);
    for path in ["/v1/tasks?tenant=a", "/v1/webhooks?tenant=a"] {
        let (status, body) = get(&h, path, KEY_B).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        let detail = body["detail"].as_str().unwrap_or("");
        assert!(detail.contains("admin"), "{path}: {detail}");
    }
    let (status, own) = get(&h, "/v1/tasks?tenant=b", KEY_B).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(task_ids(&own), [b_task.as_str()]);
    let (_, hooks) = get(&h, "/v1/webhooks", KEY_B).await;
    assert_eq!(hooks["deliveries"], json!([]));

    // The timeline shows A's slot use (the pool is shared) but nothing that names it.
    let (status, timeline) = get(&h, "/v1/pools/fixture/timeline", KEY_B).await;
    assert_eq!(status, StatusCode::OK, "{timeline}");
    assert_eq!(timeline["intervals"].as_array().map(Vec::len), Some(2));
    let text = timeline.to_string();
    for secret in [&a_task, &a_units[0], &a_units[1], &"\"a\"".to_string()] {
        assert!(
            !text.contains(secret.as_str()),
            "B's timeline shows {secret}: {text}"
        );
    }
    for i in timeline["intervals"].as_array().into_iter().flatten() {
        assert_eq!(i["task_id"], Value::Null);
        assert_eq!(i["unit_id"], Value::Null);
        assert_eq!(i["tenant"], Value::Null);
    }
    // A sees its own intervals named.
    let (_, mine) = get(&h, "/v1/pools/fixture/timeline", KEY_A).await;
    assert!(mine.to_string().contains(&a_task));
}

#[tokio::test]
async fn an_admin_lists_reads_cancels_and_retries_every_tenants_tasks() {
    let h = harness().await;
    let (a_task, a_units) = seed(&h, "a", 2).await;
    let (b_task, _) = seed(&h, "b", 1).await;
    submit(&h, &a_units[..1], NOW - 60_000).await;
    end(&h, &a_units[0], UnitStatus::Failed, NOW - 30_000, None).await;
    enqueue(&h, &a_task, "a", NOW - 20_000).await;
    enqueue(&h, &b_task, "b", NOW - 10_000).await;

    let (_, who) = get(&h, "/v1/me", KEY_OPS).await;
    assert_eq!(who, json!({ "tenant": "ops", "admin": true }));
    let (_, who) = get(&h, "/v1/me", KEY_A).await;
    assert_eq!(who, json!({ "tenant": "a", "admin": false }));

    let (status, all) = get(&h, "/v1/tasks", KEY_OPS).await;
    assert_eq!(status, StatusCode::OK, "{all}");
    assert_eq!(task_ids(&all), [b_task.clone(), a_task.clone()]);
    assert_eq!(all["tasks"][0]["tenant"], "b");
    let (_, only_a) = get(&h, "/v1/tasks?tenant=a", KEY_OPS).await;
    assert_eq!(task_ids(&only_a), [a_task.as_str()]);
    let (_, none) = get(&h, "/v1/tasks?tenant=nobody", KEY_OPS).await;
    assert_eq!(task_ids(&none), Vec::<String>::new());

    let (status, view) = get(&h, &format!("/v1/tasks/{a_task}?units=true"), KEY_OPS).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["tenant"], "a");
    assert_eq!(view["units"].as_array().map(Vec::len), Some(2));
    let (status, events) = get(&h, &format!("/v1/tasks/{a_task}/events"), KEY_OPS).await;
    assert_eq!(status, StatusCode::OK);
    assert!(events["events"].as_array().is_some_and(|e| !e.is_empty()));
    let (status, _) = get(&h, &format!("/v1/tasks/{a_task}/webhooks"), KEY_OPS).await;
    assert_eq!(status, StatusCode::OK);

    let (status, retried) = send(
        &h,
        "POST",
        &format!("/v1/tasks/{a_task}/retry"),
        Some(KEY_OPS),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    assert_eq!(retried["retried"], 1);
    let (status, cancelled) = send(
        &h,
        "POST",
        &format!("/v1/tasks/{a_task}/cancel"),
        Some(KEY_OPS),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    // A missing task is still a 404 for an admin.
    let (status, _) = get(&h, "/v1/tasks/no-such-task", KEY_OPS).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (_, hooks) = get(&h, "/v1/webhooks", KEY_OPS).await;
    let tenants: Vec<&str> = hooks["deliveries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["tenant"].as_str())
        .collect();
    assert_eq!(tenants, ["b", "a"], "newest first, every tenant");
    let (_, a_hooks) = get(&h, "/v1/webhooks?tenant=a&status=pending", KEY_OPS).await;
    assert_eq!(a_hooks["deliveries"][0]["task_id"], a_task.as_str());
    assert_eq!(a_hooks["deliveries"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn without_keys_the_local_caller_is_an_admin() {
    let h = harness_with(Config::default()).await;
    let (status, who) = send(&h, "GET", "/v1/me", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(who, json!({ "tenant": super::LOCAL_TENANT, "admin": true }));
}

#[tokio::test]
async fn the_timeline_puts_overlapping_holds_in_different_lanes() {
    let h = harness().await;
    let (task, units) = seed(&h, "a", 4).await;
    // u0 and u1 overlap; u2 starts when u0 ended (its lane is free again); u3 is refused
    // (over capacity) and then holds a slot until now.
    submit(&h, &units[..2], NOW - 150_000).await;
    end(&h, &units[0], UnitStatus::Succeeded, NOW - 120_000, None).await;
    submit(&h, &units[2..3], NOW - 120_000).await;
    submit(&h, &units[3..4], NOW - 110_000).await;
    let over = "provider over capacity; back to pending";
    end(
        &h,
        &units[3],
        UnitStatus::Pending,
        NOW - 109_000,
        Some(over),
    )
    .await;
    end(&h, &units[1], UnitStatus::Failed, NOW - 60_000, None).await;
    end(&h, &units[2], UnitStatus::Succeeded, NOW - 30_000, None).await;
    submit(&h, &units[3..4], NOW - 20_000).await;

    let (status, t) = get(&h, "/v1/pools/fixture/timeline?minutes=5", KEY_A).await;
    assert_eq!(status, StatusCode::OK, "{t}");
    assert_eq!(t["minutes"], 5);
    assert_eq!(t["since_ms"], NOW - 300_000);
    assert_eq!(t["now_ms"], NOW);
    assert_eq!(t["truncated"], false);
    let intervals = t["intervals"].as_array().cloned().unwrap_or_default();
    let lane_of = |unit: &str, start: i64| {
        intervals
            .iter()
            .find(|i| i["unit_id"] == unit && i["start_ms"] == start)
            .map(|i| {
                (
                    i["slot"].as_u64(),
                    i["end_ms"].clone(),
                    i["outcome"].clone(),
                )
            })
            .unwrap_or_else(|| panic!("no interval of {unit} from {start}: {t}"))
    };
    assert_eq!(intervals.len(), 5, "{t}");
    let (l0, _, o0) = lane_of(&units[0], NOW - 150_000);
    let (l1, _, _) = lane_of(&units[1], NOW - 150_000);
    let (l2, _, _) = lane_of(&units[2], NOW - 120_000);
    let (_, _, refused) = lane_of(&units[3], NOW - 110_000);
    let (_, open_end, open_outcome) = lane_of(&units[3], NOW - 20_000);
    assert_ne!(l0, l1, "overlapping holds share no lane");
    assert_eq!(l2, l0, "the lowest free lane is taken");
    assert_eq!(o0, "ended");
    assert_eq!(refused, "over_capacity");
    assert_eq!((open_end, open_outcome), (Value::Null, Value::Null));
    assert_eq!(intervals[0]["task_id"], task.as_str());
    let per_minute = t["per_minute"].as_array().cloned().unwrap_or_default();
    let total = |k: &str| per_minute.iter().filter_map(|m| m[k].as_u64()).sum::<u64>();
    assert_eq!((total("ended"), total("over_capacity")), (3, 1));
    assert_eq!(t["latency"]["p95_ms"], 90_000, "u1 held its slot 90 s");
    assert_eq!(t["latency"]["p50_ms"], 90_000, "30 s, 90 s, 90 s");
    assert!(t["max_slots"].as_u64().is_some(), "{t}");

    // Defaults and bad values, each naming the parameter.
    let (_, d) = get(&h, "/v1/pools/fixture/timeline", KEY_A).await;
    assert_eq!(d["minutes"], 10);
    for (query, field) in [
        ("minutes=0", "minutes"),
        ("minutes=61", "minutes"),
        ("minutes=ten", "minutes"),
        ("minutes=-1", "minutes"),
        ("window=5", "window"),
    ] {
        let (status, body) = get(&h, &format!("/v1/pools/fixture/timeline?{query}"), KEY_A).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(body["field"], field, "{query}: {body}");
    }
    let (status, _) = get(&h, "/v1/pools/no-such-pool/timeline", KEY_A).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn bad_list_queries_name_the_parameter() {
    let h = harness().await;
    for (path, field) in [
        ("/v1/webhooks?status=sent", "status"),
        ("/v1/webhooks?limit=0", "limit"),
        ("/v1/webhooks?limit=501", "limit"),
        ("/v1/webhooks?tenants=a", "tenants"),
        ("/v1/tasks?tenants=a", "tenants"),
    ] {
        let (status, body) = get(&h, path, KEY_OPS).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert_eq!(body["field"], field, "{path}: {body}");
    }
    let (status, _) = send(&h, "GET", "/v1/webhooks", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// A unit update guarded on `from`, applied or the test fails.
async fn apply(h: &Harness, u: UnitUpdate, at: i64) {
    let id = u.unit_id.clone();
    match h.store.unit_apply(&[u], at, None).await {
        Ok(r) => assert_eq!(r.applied.len(), 1, "{id}: {r:?}"),
        Err(e) => panic!("updating {id}: {e}"),
    }
}

/// The `clip` route's options for one unit: the fixture (pool `fixture`) first, then Kling
/// (not loaded here); `bound` and Kling's refusal as given.
fn clip_routing(bound: Option<usize>, kling_refused: Option<&str>) -> String {
    let plan = |pool: &str| {
        json!({"task_type": "fixture", "stage": "main", "pool": pool, "spec": "{}", "state": "{}",
               "estimate": 1.0})
    };
    let mut kling = json!({"handler": "kling-video", "model": "kling-v1-6",
                           "plan": plan("kling:video")});
    if let Some(message) = kling_refused {
        kling["refused"] = json!({"reason": "account_exhausted", "message": message,
                                  "at": NOW - 100_000, "until": NOW + 60_000});
    }
    let mut routing = json!({"route": "clip", "options": [
        {"handler": "fixture", "model": "fx-1", "plan": plan(POOL)}, kling]});
    if let Some(b) = bound {
        routing["bound"] = json!(b);
    }
    routing.to_string()
}

/// What the console's routes page and a routed task's page read: `GET /v1/routes` (policy,
/// units waiting, per target its state, pools with room, refusals by reason with the last
/// one's words) and, per result, the target that served the unit and its cost. A routed task
/// stored as the scheduler leaves it: one unit bound to Kling, refused (packs exhausted), back
/// on the route, then bound to the fixture and done with a cost; one still waiting.
#[tokio::test]
async fn the_console_reads_routes_and_which_target_served_each_routed_unit() {
    let mut config = Config {
        api_keys: vec![
            ApiKey {
                key: Secret::new(KEY_A),
                tenant: "a".into(),
                admin: false,
                publish: Vec::new(),
            },
            ApiKey {
                key: Secret::new(KEY_OPS),
                tenant: "ops".into(),
                admin: true,
                publish: Vec::new(),
            },
        ],
        ..Config::default()
    };
    config.routes.insert(
        "clip".into(),
        slotd_core::config::RouteConfig {
            policy: slotd_core::config::RoutePolicy::Ordered,
            targets: [("fixture", "fx-1"), ("kling-video", "kling-v1-6")]
                .into_iter()
                .map(|(handler, model)| slotd_core::config::RouteTarget {
                    handler: handler.into(),
                    model: model.into(),
                    weight: None,
                })
                .collect(),
        },
    );
    let h = harness_with(config).await;
    let id = uuid::Uuid::now_v7().to_string();
    let units: Vec<String> = (0..2).map(|_| uuid::Uuid::now_v7().to_string()).collect();
    let task = NewTask {
        id: id.clone(),
        tenant: "a".into(),
        task_type: "clip".into(),
        payload: json!({"shots": []}).to_string(),
        idempotency_key: None,
        priority: 0,
        completion_webhook_url: None,
        units: units
            .iter()
            .map(|u| NewUnit {
                id: u.clone(),
                pool: "route:clip".into(),
                stage: "route".into(),
                spec: "{}".into(),
                state: "{}".into(),
                routes: None,
                routing: Some(clip_routing(None, None)),
                cost_estimate: None,
                planned_release: None,
            })
            .collect(),
        now: NOW - 500_000,
        terms: Default::default(),
    };
    if let Err(e) = h.store.task_create(task).await {
        panic!("storing the routed task: {e}");
    }
    let exhausted = "kling 1102: resource pack exhausted: 0 units left, the task needs 1";
    let u0 = &units[0];
    // Bound to Kling, submitted, refused before any job existed: back to the route.
    apply(
        &h,
        UnitUpdate {
            unit_id: u0.clone(),
            from: Some(UnitStatus::Pending),
            pool: Some("kling:video".into()),
            stage: Some("main".into()),
            routing: Some(clip_routing(Some(1), None)),
            detail: Some("route clip: bound to kling-video/kling-v1-6 in pool kling:video".into()),
            ..UnitUpdate::default()
        },
        NOW - 200_000,
    )
    .await;
    submit(&h, std::slice::from_ref(u0), NOW - 200_000).await;
    apply(
        &h,
        UnitUpdate {
            unit_id: u0.clone(),
            from: Some(UnitStatus::Submitted),
            to: Some(UnitStatus::Pending),
            pool: Some("route:clip".into()),
            stage: Some("route".into()),
            routing: Some(clip_routing(None, Some(exhausted))),
            submitted_at: Field::Clear,
            detail: Some(format!(
                "route clip: kling-video/kling-v1-6 refused it (account_exhausted: {exhausted}); back to the route"
            )),
            ..UnitUpdate::default()
        },
        NOW - 100_000,
    )
    .await;
    // Bound to the fixture, and done there at a cost.
    apply(
        &h,
        UnitUpdate {
            unit_id: u0.clone(),
            from: Some(UnitStatus::Pending),
            pool: Some(POOL.into()),
            stage: Some("main".into()),
            routing: Some(clip_routing(Some(0), Some(exhausted))),
            detail: Some("route clip: bound to fixture/fx-1 in pool fixture".into()),
            ..UnitUpdate::default()
        },
        NOW - 90_000,
    )
    .await;
    submit(&h, std::slice::from_ref(u0), NOW - 90_000).await;
    apply(
        &h,
        UnitUpdate {
            unit_id: u0.clone(),
            from: Some(UnitStatus::Submitted),
            to: Some(UnitStatus::Succeeded),
            provider_job_id: Field::Set("job-1".into()),
            cost: Some("1.5".into()),
            ..UnitUpdate::default()
        },
        NOW - 30_000,
    )
    .await;

    // The routes page.
    let (status, routes) = get(&h, "/v1/routes", KEY_A).await;
    assert_eq!(status, StatusCode::OK, "{routes}");
    assert_eq!(routes.as_array().map(Vec::len), Some(1), "{routes}");
    let clip = &routes[0];
    assert_eq!(clip["name"], "clip");
    assert_eq!(clip["policy"], "ordered");
    assert_eq!(clip["pending"], 1, "one unit waits on the route: {clip}");
    let targets = clip["targets"].as_array().cloned().unwrap_or_default();
    let labels: Vec<String> = targets
        .iter()
        .map(|t| {
            format!(
                "{}/{}",
                t["handler"].as_str().unwrap_or("?"),
                t["model"].as_str().unwrap_or("?")
            )
        })
        .collect();
    assert_eq!(
        labels,
        ["fixture/fx-1", "kling-video/kling-v1-6"],
        "in the route's order"
    );
    let kling = &targets[1];
    assert_eq!(kling["state"], "handler not loaded", "{kling}");
    assert_eq!(
        kling["pools"],
        json!([]),
        "no pool of an unloaded handler: {kling}"
    );
    assert_eq!(kling["free"], 0);
    assert_eq!(
        kling["recent_refusals"],
        json!({"account_exhausted": 1}),
        "{kling}"
    );
    // The provider's words may quote another tenant's request: an admin's only.
    assert!(kling["last_refusal"].is_null(), "{kling}");
    let (_, as_admin) = get(&h, "/v1/routes", KEY_OPS).await;
    let last = as_admin[0]["targets"][1]["last_refusal"]
        .as_str()
        .unwrap_or_default();
    assert!(
        last.contains("1102") && last.contains("back to the route"),
        "{as_admin}"
    );
    // The fixture names its pool with its room; it serves no routes (contract before 1.5)
    // or not this model: either way not `ready`, which the page shows as a warning.
    let fixture = &targets[0];
    assert_ne!(fixture["state"], "ready", "{fixture}");
    assert_eq!(fixture["pools"][0]["name"], POOL, "{fixture}");
    assert!(
        fixture["pools"][0]["effective_max_slots"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{fixture}"
    );
    assert_eq!(fixture["recent_refusals"], json!({}), "{fixture}");

    // A routed task's page: per result, the target that served it, who refused it, its cost.
    let (status, view) = get(&h, &format!("/v1/tasks/{id}?units=true"), KEY_A).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    let results = view["results"].as_array().cloned().unwrap_or_default();
    let of = |unit: &str| {
        let index = view["units"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|u| u["id"] == unit)
            .map(|u| u["index"].clone())
            .unwrap_or_else(|| panic!("no unit {unit}: {view}"));
        results
            .iter()
            .find(|r| r["index"] == index)
            .cloned()
            .unwrap_or_else(|| panic!("no result of {unit}: {view}"))
    };
    let served = of(u0);
    assert_eq!(served["route"]["route"], "clip", "{served}");
    assert_eq!(served["route"]["handler"], "fixture", "{served}");
    assert_eq!(served["route"]["model"], "fx-1", "{served}");
    assert_eq!(served["route"]["pool"], POOL, "{served}");
    assert_eq!(
        served["route"]["refused"][0]["handler"], "kling-video",
        "{served}"
    );
    assert_eq!(
        served["route"]["refused"][0]["reason"], "account_exhausted",
        "{served}"
    );
    assert_eq!(
        served["route"]["refused"][0]["message"], exhausted,
        "{served}"
    );
    assert_eq!(served["cost"], 1.5, "{served}");
    let waiting = of(&units[1]);
    assert_eq!(
        waiting["route"],
        json!({"route": "clip"}),
        "not bound yet: {waiting}"
    );
    assert_eq!(waiting["status"], "pending");
    assert_eq!(view["cost"], 1.5, "the task's cost sums its units': {view}");

    // The events a unit's timeline shows name each bind and the refusal.
    let (_, events) = get(&h, &format!("/v1/tasks/{id}/events"), KEY_A).await;
    let details: Vec<&str> = events["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["unit_id"] == u0.as_str())
        .filter_map(|e| e["detail"].as_str())
        .collect();
    assert!(
        details
            .iter()
            .any(|d| d.contains("refused it (account_exhausted"))
            && details.iter().any(|d| d.contains("bound to fixture/fx-1")),
        "{details:?}"
    );
}

#[tokio::test]
async fn the_console_is_served_with_a_strict_content_security_policy() {
    let h = harness_with(Config::default()).await;
    for (path, kind) in [
        ("/", "text/html"),
        ("/console/core.js", "text/javascript"),
        ("/console/pools.js", "text/javascript"),
        ("/console/app.js", "text/javascript"),
        ("/console/app.css", "text/css"),
    ] {
        let req = match Request::builder().uri(path).body(Body::empty()) {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        };
        let (status, headers, body) = h.call(req).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        let ct = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        assert!(ct.starts_with(kind), "{path}: {ct}");
        if path == "/" {
            let csp = headers
                .get(header::CONTENT_SECURITY_POLICY)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            assert!(csp.contains("script-src 'self'"), "{csp}");
            assert!(!csp.contains("unsafe-inline"), "{csp}");
            assert!(
                body.as_str()
                    .is_some_and(|b| b.contains("/console/core.js"))
            );
            assert!(
                body.as_str()
                    .is_some_and(|b| b.contains(r##"href="#/routes""##)),
                "the menu links the routes page"
            );
        }
        if path == "/console/pools.js" {
            let source = body.as_str().unwrap_or_default();
            assert!(
                source.contains(r#"api("/v1/routes")"#),
                "the routes page reads GET /v1/routes"
            );
        }
    }
}
