//! `POST /v1/handlers` and the release listings, over the real router, the real SQLite store
//! and the real built components: who may publish what, what a refusal says (and that it
//! stores nothing), and what a process loads from a published release.

use std::path::Path;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::{Value, json};

use super::test_harness::{Harness, harness_with};
use slotd_core::config::{ApiKey, Config, Secret};
use slotd_store::prelude::*;

const ADMIN: &str = "key-of-the-operators";
const RUNWAY_TEAM: &str = "key-of-the-runway-team";
const PLAIN: &str = "key-of-a-product-team";

fn key(k: &str, tenant: &str, admin: bool, publish: &[&str]) -> ApiKey {
    ApiKey {
        key: Secret::new(k),
        tenant: tenant.into(),
        admin,
        publish: publish.iter().map(|s| s.to_string()).collect(),
    }
}

async fn harness() -> Harness {
    harness_with(Config {
        api_keys: vec![
            key(ADMIN, "ops", true, &[]),
            key(RUNWAY_TEAM, "runway-team", false, &["runway-video"]),
            key(PLAIN, "product", false, &[]),
        ],
        ..Config::default()
    })
    .await
}

fn built(name: &str) -> Vec<u8> {
    let path = slotd_testkit::built_handler(name)
        .unwrap_or_else(|| panic!("{name} is built by slotd-handlers"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

async fn publish(h: &Harness, k: &str, bytes: Vec<u8>) -> (StatusCode, Value) {
    let req = Request::builder()
        .method("POST")
        .uri("/v1/handlers")
        .header(header::AUTHORIZATION, format!("Bearer {k}"))
        .header(header::CONTENT_TYPE, "application/wasm")
        .body(Body::from(bytes))
        .unwrap_or_else(|e| panic!("request: {e}"));
    let (status, _, json) = h.call(req).await;
    (status, json)
}

async fn get(h: &Harness, uri: &str) -> Value {
    let req = Request::builder()
        .uri(uri)
        .header(header::AUTHORIZATION, format!("Bearer {PLAIN}"))
        .body(Body::empty())
        .unwrap_or_else(|e| panic!("request: {e}"));
    let (status, _, json) = h.call(req).await;
    assert_eq!(status, 200, "{uri}: {json}");
    json
}

async fn releases(h: &Harness) -> usize {
    match h.store.release_list(None).await {
        Ok(list) => list.len(),
        Err(e) => panic!("listing releases: {e}"),
    }
}

#[tokio::test]
async fn only_a_key_allowed_a_handler_name_publishes_it() {
    let h = harness().await;
    // A key with no publish rights is refused before the file is even compiled.
    let (status, body) = publish(&h, PLAIN, built("runway-video")).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("publish")),
        "{body}"
    );
    // The Runway team's key cannot publish Kling's handler: the refusal names both.
    let (status, body) = publish(&h, RUNWAY_TEAM, built("kling-video")).await;
    assert_eq!(status, 403, "{body}");
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("kling-video") && detail.contains("runway-video"),
        "{body}"
    );
    assert_eq!(releases(&h).await, 0, "a refusal stores nothing");
    // Its own handler it can.
    let (status, body) = publish(&h, RUNWAY_TEAM, built("runway-video")).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["published"], "new");
    assert_eq!(body["release"]["name"], "runway-video");
    assert_eq!(body["release"]["published_by"], "tenant:runway-team");
    // An admin key publishes any handler.
    let (status, body) = publish(&h, ADMIN, built("kling-video")).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(releases(&h).await, 2);
}

#[tokio::test]
async fn a_refused_file_names_the_reason_and_changes_nothing() {
    let h = harness().await;
    let (status, body) = publish(&h, ADMIN, b"not a component at all".to_vec()).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("not a WebAssembly file")),
        "{body}"
    );
    // Over [limits] handler_file_mb (1 MiB here is below the built handler).
    let mut small = Config {
        api_keys: vec![key(ADMIN, "ops", true, &[])],
        ..Config::default()
    };
    small.limits.handler_file_bytes = 1024 * 1024;
    let tight = harness_with(small).await;
    let big = vec![0u8; 1024 * 1024 + 1];
    let (status, body) = publish(&tight, ADMIN, big).await;
    assert_eq!(status, 413, "{body}");

    // Another build was published as kling-video 1.0.0 before (stored directly here): the
    // real 1.0.0 build is refused with 409, naming the release that has the version.
    let other = h
        .store
        .release_put(&slotd_store::NewRelease {
            name: "kling-video".into(),
            version: "1.0.0".into(),
            contract: "1.5.0".into(),
            bytes: b"\0asm another build of 1.0.0".to_vec(),
            published_by: "tenant:ops".into(),
            takes_over: false,
            current: true,
            now: 1_000_000,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let slotd_store::Published::New(other) = other else {
        panic!("{other:?}");
    };
    let (status, body) = publish(&h, ADMIN, built("kling-video")).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["detail"].as_str().is_some_and(|d| d.contains(&other)),
        "{body}"
    );
    // A file published before is no error: it is made current again.
    let (status, first) = publish(&h, ADMIN, built("runway-video")).await;
    assert_eq!(status, 201, "{first}");
    let (status, again) = publish(&h, ADMIN, built("runway-video")).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["published"], "already");
    assert_eq!(releases(&h).await, 2, "each file stored once");
}

#[tokio::test]
async fn a_published_release_is_listed_and_loaded_by_a_process_that_follows() {
    let h = harness().await;
    let (status, body) = publish(&h, ADMIN, built("kling-video")).await;
    assert_eq!(status, 201, "{body}");
    let sha = body["release"]["sha256"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    let list = get(&h, "/v1/handlers/releases").await;
    assert_eq!(list["releases"][0]["sha256"], sha.as_str(), "{list}");
    assert_eq!(list["releases"][0]["current"], true, "{list}");
    assert_eq!(
        list["processes"].as_array().map(Vec::len),
        Some(0),
        "{list}"
    );

    // This process's follower looks: it loads the release and says so.
    let look = h
        .services
        .follower
        .look(&h.services.runtime, &h.services.registry)
        .await
        .unwrap_or_else(|e| panic!("look: {e:#}"));
    assert_eq!(
        look.loaded,
        [("kling-video".to_string(), "1.0.0".to_string())]
    );
    let serving = h.services.registry.by_name("kling-video").expect("serving");
    assert_eq!(serving.sha256, sha);
    assert_eq!(serving.path, Path::new("releases").join(&sha));

    let one = get(&h, "/v1/handlers/kling-video/releases").await;
    let words = &one["releases"][0]["processes"];
    assert_eq!(words[0]["state"], "loaded", "{one}");
    assert_eq!(
        words[0]["process"],
        h.services.follower.process().id.as_str()
    );
    assert_eq!(one["processes"].as_array().map(Vec::len), Some(1), "{one}");
    let none = get(&h, "/v1/handlers/fal-video/releases").await;
    assert_eq!(none["releases"], Value::Array(vec![]), "{none}");
}

#[tokio::test]
async fn a_process_that_cannot_load_a_release_says_why_and_keeps_what_it_had() {
    // This process pins kling-video to a file of its plugins directory: a release published
    // by a tenant is refused here.
    let mut config = Config::default();
    config.handlers.insert(
        "kling-video".into(),
        slotd_core::config::HandlerConfig {
            file: Some("kling-video.wasm".into()),
            ..Default::default()
        },
    );
    let h = harness_with(config).await;
    let bytes = built("kling-video");
    let published = h
        .store
        .release_put(&slotd_store::NewRelease {
            name: "kling-video".into(),
            version: "1.0.0".into(),
            contract: "1.5.0".into(),
            bytes,
            published_by: "tenant:ops".into(),
            takes_over: false,
            current: true,
            now: 1_000_000,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let slotd_store::Published::New(sha) = published else {
        panic!("{published:?}");
    };
    let before: Vec<String> = h
        .services
        .registry
        .all()
        .iter()
        .map(|x| x.sha256.clone())
        .collect();
    let look = |h: &Harness| {
        let (f, rt, reg) = (
            h.services.follower.clone(),
            h.services.runtime.clone(),
            h.services.registry.clone(),
        );
        async move { f.look(&rt, &reg).await.unwrap_or_else(|e| panic!("{e:#}")) }
    };
    let first = look(&h).await;
    assert_eq!(first.failed.len(), 1, "{first:?}");
    assert!(first.failed[0].1.contains("pinned"), "{first:?}");
    let after: Vec<String> = h
        .services
        .registry
        .all()
        .iter()
        .map(|x| x.sha256.clone())
        .collect();
    assert_eq!(before, after, "what served still serves");
    // The same bytes are not tried again; the refusal is this process's word on the release.
    assert_eq!(look(&h).await.failed.len(), 0);
    let list = get(&h, "/v1/handlers/kling-video/releases").await;
    let word = &list["releases"][0]["processes"][0];
    assert_eq!(list["releases"][0]["sha256"], sha.as_str());
    assert_eq!(word["state"], "failed", "{list}");
    assert!(
        word["reason"]
            .as_str()
            .is_some_and(|r| r.contains("pinned")),
        "{list}"
    );
}

async fn publish_with(h: &Harness, k: &str, query: &str, bytes: Vec<u8>) -> (StatusCode, Value) {
    let req = Request::builder()
        .method("POST")
        .uri(format!("/v1/handlers{query}"))
        .header(header::AUTHORIZATION, format!("Bearer {k}"))
        .header(header::CONTENT_TYPE, "application/wasm")
        .body(Body::from(bytes))
        .unwrap_or_else(|e| panic!("request: {e}"));
    let (status, _, json) = h.call(req).await;
    (status, json)
}

async fn act(h: &Harness, k: &str, name: &str, action: &str) -> (StatusCode, Value) {
    let req = Request::builder()
        .method("POST")
        .uri(format!("/v1/handlers/{name}/rollout"))
        .header(header::AUTHORIZATION, format!("Bearer {k}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(format!(r#"{{"action":"{action}"}}"#)))
        .unwrap_or_else(|e| panic!("request: {e}"));
    let (status, _, json) = h.call(req).await;
    (status, json)
}

#[tokio::test]
async fn a_rollout_starts_against_the_current_release_and_a_person_can_steer_it() {
    let h = harness().await;
    let next = || built("kling-video-next");
    // Nothing to roll out against yet.
    let (status, body) = publish_with(&h, ADMIN, "?rollout=10,100", next()).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(releases(&h).await, 0, "a refusal stores nothing");
    let (status, body) = publish(&h, ADMIN, built("kling-video")).await;
    assert_eq!(status, 201, "{body}");
    // Stages that are not a rollout name the field.
    for bad in ["?rollout=50,10,100", "?rollout=10,50", "?rollout=0,100"] {
        let (status, body) = publish_with(&h, ADMIN, bad, next()).await;
        assert_eq!(
            (status.as_u16(), &body["field"]),
            (422, &json!("rollout")),
            "{bad}: {body}"
        );
    }
    let (status, body) = publish_with(&h, ADMIN, "?rollout=10,100&min_units=5", next()).await;
    assert_eq!(status, 201, "{body}");
    let rollout = &body["rollout"];
    assert_eq!(rollout["state"], "running", "{body}");
    assert_eq!(rollout["stages"], json!([10, 100]));
    assert_eq!(rollout["min_units"], 5);
    // The candidate is not current: the incumbent still is.
    let list = get(&h, "/v1/handlers/kling-video/releases").await;
    let current: Vec<&str> = list["releases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["current"] == true)
        .filter_map(|r| r["version"].as_str())
        .collect();
    assert_eq!(current, ["1.0.0"], "{list}");
    assert_eq!(
        list["rollouts"][0]["events"][0]["state"], "running",
        "{list}"
    );
    // A second rollout of the same handler waits for this one.
    let other = built("kling-video-misclassified");
    let (status, body) = publish_with(&h, ADMIN, "?rollout=10,100", other).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("in progress")),
        "{body}"
    );
    assert_eq!(releases(&h).await, 2, "the refused file was not stored");

    // Steering: another team's key may not; pause, pause again (409), resume, roll back.
    let (status, _) = act(&h, RUNWAY_TEAM, "kling-video", "pause").await;
    assert_eq!(status, 403);
    let (status, r) = act(&h, ADMIN, "kling-video", "pause").await;
    assert_eq!(
        (status.as_u16(), &r["state"]),
        (200, &json!("paused")),
        "{r}"
    );
    let (status, _) = act(&h, ADMIN, "kling-video", "pause").await;
    assert_eq!(status, 409);
    let (status, r) = act(&h, ADMIN, "kling-video", "resume").await;
    assert_eq!(
        (status.as_u16(), &r["state"]),
        (200, &json!("running")),
        "{r}"
    );
    let (status, r) = act(&h, ADMIN, "kling-video", "rollback").await;
    assert_eq!(
        (status.as_u16(), &r["state"]),
        (200, &json!("rolled_back")),
        "{r}"
    );
    let (status, _) = act(&h, ADMIN, "kling-video", "promote").await;
    assert_eq!(status, 404, "no rollout in progress any more");
    let list = get(&h, "/v1/handlers/kling-video/releases").await;
    let steps: Vec<&str> = list["rollouts"][0]["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["state"].as_str())
        .collect();
    assert_eq!(
        steps,
        ["running", "paused", "running", "rolled_back"],
        "{list}"
    );
}
