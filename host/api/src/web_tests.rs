//! The web-facing defaults (docs/trust-model.md), each shown by the attack or defect it stops:
//! the loopback rules (DNS rebinding, cross-site writes) through `router().oneshot`, the
//! per-tenant rate limit, SQLite busy and disk full as 503, and over a real socket the
//! header-read timeout and the bound on requests in flight.
//!
//! Real parts throughout: the SQLite store in a temp dir, the compiled fixture handler, the
//! listener `serve.rs` serves on (`socket.rs`).

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use serde_json::Value;

use super::test_harness::{self, Harness};
use slotd_core::config::{ApiKey, Config, RateLimit, Role, Secret};
use slotd_store::prelude::*;

mod socket;

const KEY_A: &str = "key-of-tenant-a";
const KEY_B: &str = "key-of-tenant-b";
const CREATE: &str = r#"{"payload":{"count":1}}"#;
/// How long a test waits for an effect before failing.
const DEADLINE: Duration = Duration::from_secs(10);

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    json: Value,
}

impl Reply {
    /// Assert a problem+json answer with this status; returns its `detail`.
    fn problem(&self, status: u16) -> String {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.json);
        assert_eq!(
            self.headers.get(header::CONTENT_TYPE).map(|v| v.as_bytes()),
            Some(&b"application/problem+json"[..])
        );
        assert_eq!(self.json["status"], status);
        self.json["detail"].as_str().unwrap_or("").to_string()
    }

    fn retry_after(&self) -> Option<u64> {
        self.headers
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
    }
}

/// The shared harness as the web rules see it: an API-only process.
async fn harness_with(mut config: Config) -> Harness {
    config.role = Role::Api;
    test_harness::harness_with(config).await
}

fn with_keys() -> Config {
    Config {
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
    }
}

impl Harness {
    /// Send a request with exactly these headers (nothing added).
    async fn send_raw(
        &self,
        method: &str,
        uri: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Reply {
        let mut req = Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let body = if body.is_empty() {
            Body::empty()
        } else {
            Body::from(body.to_string())
        };
        let req = match req.body(body) {
            Ok(r) => r,
            Err(e) => panic!("building {method} {uri}: {e}"),
        };
        let (status, headers, json) = self.call(req).await;
        Reply {
            status,
            headers,
            json,
        }
    }
}

const JSON: (&str, &str) = ("content-type", "application/json");

#[tokio::test]
async fn loopback_mode_answers_only_loopback_host_names() {
    let h = harness_with(Config::default()).await;
    for host in [
        "localhost",
        "localhost:8080",
        "127.0.0.1:8080",
        "[::1]:8080",
        "dash.localhost:8080",
    ] {
        for path in ["/v1/tasks", "/healthz", "/readyz", "/v1/pools"] {
            let r = h.send_raw("GET", path, &[("host", host)], "").await;
            assert_eq!(r.status, StatusCode::OK, "{host} {path}: {}", r.json);
        }
    }
    // A rebinding page's requests carry its own name: refused, naming the rule.
    for host in [
        "evil.example",
        "evil.example:8080",
        "localhost.evil.example",
    ] {
        for path in ["/v1/tasks", "/healthz", "/metrics", "/"] {
            let r = h.send_raw("GET", path, &[("host", host)], "").await;
            let detail = r.problem(421);
            assert!(detail.contains("loopback"), "{detail}");
        }
    }
    let r = h
        .send_raw(
            "POST",
            "/v1/tasks/fixture",
            &[("host", "evil.example"), JSON],
            CREATE,
        )
        .await;
    r.problem(421);
    assert_eq!(h.task_count(super::LOCAL_TENANT).await, 0);
}

#[tokio::test]
async fn loopback_mode_refuses_cross_site_writes() {
    let h = harness_with(Config::default()).await;
    let host = ("host", "127.0.0.1:8080");
    // What an HTML form can send: refused, nothing stored.
    for content_type in [
        "application/x-www-form-urlencoded",
        "text/plain",
        "multipart/form-data; boundary=x",
    ] {
        let r = h
            .send_raw(
                "POST",
                "/v1/tasks/fixture",
                &[host, ("content-type", content_type)],
                CREATE,
            )
            .await;
        let detail = r.problem(415);
        assert!(detail.contains("application/json"), "{detail}");
    }
    let r = h
        .send_raw("POST", "/v1/tasks/fixture", &[host], CREATE)
        .await;
    r.problem(415);
    // Even an empty form is a declared non-JSON body.
    let r = h
        .send_raw(
            "POST",
            "/v1/tasks/not-a-task/cancel",
            &[host, ("content-type", "application/x-www-form-urlencoded")],
            "",
        )
        .await;
    r.problem(415);
    assert_eq!(h.task_count(super::LOCAL_TENANT).await, 0);

    // A bodyless write from another site's page (a no-cors fetch) carries its Origin.
    let r = h
        .send_raw(
            "POST",
            "/v1/tasks/not-a-task/cancel",
            &[host, ("origin", "https://evil.example")],
            "",
        )
        .await;
    r.problem(403);

    // JSON, with parameters or a +json subtype, passes; so does a local tool's bodyless POST.
    for content_type in ["application/json", "application/json; charset=utf-8"] {
        let r = h
            .send_raw(
                "POST",
                "/v1/tasks/fixture",
                &[host, ("content-type", content_type)],
                CREATE,
            )
            .await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.json);
    }
    let r = h
        .send_raw(
            "POST",
            "/v1/tasks/not-a-task/cancel",
            &[host, ("origin", "http://localhost:8080")],
            "",
        )
        .await;
    r.problem(404);
    let r = h
        .send_raw("POST", "/v1/tasks/not-a-task/retry", &[host], "")
        .await;
    r.problem(404);
    assert_eq!(h.task_count(super::LOCAL_TENANT).await, 2);
}

#[tokio::test]
async fn callbacks_are_exempt_from_the_loopback_rules() {
    let h = harness_with(Config::default()).await;
    // A provider reaches the callback through the public URL, with its own Host and
    // whatever Content-Type it likes; whatever answers, it is not the loopback rules'.
    for content_type in ["application/json", "text/plain"] {
        let r = h
            .send_raw(
                "POST",
                "/v1/callbacks/fixture",
                &[
                    ("host", "slotd.example.com"),
                    ("content-type", content_type),
                    ("origin", "https://provider.example"),
                ],
                r#"{"task_id":"x"}"#,
            )
            .await;
        assert!(
            ![421, 415, 403].contains(&r.status.as_u16()),
            "{content_type}: {} {}",
            r.status,
            r.json
        );
    }
}

#[tokio::test]
async fn with_keys_host_and_content_type_keep_todays_rules() {
    let h = harness_with(with_keys()).await;
    let auth = ("authorization", "Bearer key-of-tenant-a");
    let r = h
        .send_raw(
            "GET",
            "/v1/tasks",
            &[("host", "slotd.example.com"), auth],
            "",
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    // A non-JSON body is a body that is not JSON: 400 from the request parser, as today.
    let r = h
        .send_raw(
            "POST",
            "/v1/tasks/fixture",
            &[
                ("host", "slotd.example.com"),
                auth,
                ("content-type", "text/plain"),
            ],
            "payload=1",
        )
        .await;
    r.problem(400);
    let r = h
        .send_raw(
            "POST",
            "/v1/tasks/fixture",
            &[
                ("host", "slotd.example.com"),
                auth,
                ("content-type", "text/plain"),
            ],
            CREATE,
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.json);
}

#[tokio::test]
async fn each_tenant_has_its_own_rate_limit() {
    let mut config = with_keys();
    // Three at once, then one every 1000 s: the test never waits for a refill.
    config.api.rate_limit = Some(RateLimit {
        per_second: 0.001,
        burst: 3,
    });
    let h = harness_with(config).await;
    let a = [("authorization", "Bearer key-of-tenant-a")];
    for _ in 0..3 {
        let r = h.send_raw("GET", "/v1/tasks", &a, "").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    }
    let r = h.send_raw("GET", "/v1/tasks", &a, "").await;
    let detail = r.problem(429);
    assert!(detail.contains("rate limit"), "{detail}");
    let wait = r.retry_after().unwrap_or(0);
    assert!((900..=1000).contains(&wait), "Retry-After {wait}");
    // Writes count too and store nothing when refused.
    let r = h
        .send_raw("POST", "/v1/tasks/fixture", &[a[0], JSON], CREATE)
        .await;
    r.problem(429);
    assert_eq!(h.task_count("a").await, 0);

    // Another tenant is unaffected; probes are never limited.
    let b = [("authorization", "Bearer key-of-tenant-b")];
    let r = h.send_raw("GET", "/v1/tasks", &b, "").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    for _ in 0..5 {
        let r = h.send_raw("GET", "/healthz", &a, "").await;
        assert_eq!(r.status, StatusCode::OK);
    }
    // A wrong key is not charged to anyone: 401 as before.
    let r = h
        .send_raw(
            "GET",
            "/v1/tasks",
            &[("authorization", "Bearer nope-nope-nope")],
            "",
        )
        .await;
    r.problem(401);
}

#[tokio::test]
async fn loopback_mode_is_not_rate_limited() {
    let mut config = Config::default();
    config.api.rate_limit = Some(RateLimit {
        per_second: 0.001,
        burst: 1,
    });
    let h = harness_with(config).await;
    for _ in 0..10 {
        let r = h.send_raw("GET", "/v1/tasks", &[], "").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    }
}

/// What the store itself says when it is asked to write a task of `units` units directly.
async fn store_write_error(h: &Harness, units: usize) -> String {
    let task = slotd_store::NewTask {
        id: uuid::Uuid::now_v7().to_string(),
        tenant: super::LOCAL_TENANT.into(),
        task_type: "fixture".into(),
        payload: "{}".into(),
        idempotency_key: None,
        priority: 0,
        completion_webhook_url: None,
        units: (0..units)
            .map(|_| slotd_store::NewUnit {
                id: uuid::Uuid::now_v7().to_string(),
                pool: "fixture".into(),
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
    match h.store.task_create(task).await {
        Err(slotd_store::StoreError::Unavailable(reason)) => reason,
        other => panic!("expected StoreError::Unavailable, got {other:?}"),
    }
}

/// The writer connection of the harness's store (its pragmas are per connection).
fn writer(h: &Harness) -> &sqlx::SqlitePool {
    h.store.writer_for_tests()
}

#[tokio::test]
async fn sqlite_disk_full_is_503_with_retry_after() {
    let h = harness_with(Config::default()).await;
    let pages: i64 = match sqlx::query_scalar("PRAGMA page_count")
        .fetch_one(writer(&h))
        .await
    {
        Ok(n) => n,
        Err(e) => panic!("page_count: {e}"),
    };
    // The file may not grow: the next write that needs a page is SQLITE_FULL.
    if let Err(e) = sqlx::query(&format!("PRAGMA max_page_count = {pages}"))
        .execute(writer(&h))
        .await
    {
        panic!("max_page_count: {e}");
    }
    // 500 units: far more rows than the pages the file has room for.
    let big = r#"{"payload":{"count":500}}"#;
    let r = h.send_raw("POST", "/v1/tasks/fixture", &[JSON], big).await;
    let detail = r.problem(503);
    assert_eq!(r.retry_after(), Some(1));
    assert!(
        !detail.contains("full"),
        "no internals in the answer: {detail}"
    );
    // It was the disk-full condition (SQLITE_FULL, 13) that the store reported as unavailable.
    let reason = store_write_error(&h, 500).await;
    assert!(reason.contains("code: 13"), "{reason}");

    // Room again: the same request is accepted.
    if let Err(e) = sqlx::query("PRAGMA max_page_count = 1073741823")
        .execute(writer(&h))
        .await
    {
        panic!("max_page_count: {e}");
    }
    let r = h.send_raw("POST", "/v1/tasks/fixture", &[JSON], big).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.json);
}

#[tokio::test]
async fn sqlite_busy_is_503_with_retry_after() {
    use sqlx::Connection;
    let h = harness_with(Config::default()).await;
    // Another process holds the write lock; the store waits 50 ms for it, then gives up.
    if let Err(e) = sqlx::query("PRAGMA busy_timeout = 50")
        .execute(writer(&h))
        .await
    {
        panic!("busy_timeout: {e}");
    }
    let url = format!("sqlite://{}", h._dir.path().join("api.db").display());
    let mut other = match sqlx::SqliteConnection::connect(&url).await {
        Ok(c) => c,
        Err(e) => panic!("second connection: {e}"),
    };
    if let Err(e) = sqlx::query("BEGIN EXCLUSIVE").execute(&mut other).await {
        panic!("taking the lock: {e}");
    }
    let r = h
        .send_raw("POST", "/v1/tasks/fixture", &[JSON], CREATE)
        .await;
    r.problem(503);
    assert_eq!(r.retry_after(), Some(1));
    let reason = store_write_error(&h, 1).await;
    assert!(reason.contains("code: 5"), "SQLITE_BUSY: {reason}");

    if let Err(e) = sqlx::query("COMMIT").execute(&mut other).await {
        panic!("releasing the lock: {e}");
    }
    let r = h
        .send_raw("POST", "/v1/tasks/fixture", &[JSON], CREATE)
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.json);
}
