//! Bad input over real HTTP: every client mistake gets the right status and problem+json, and
//! nothing is stored by a refused request.

use serde_json::{Value, json};
use slotd_core::config::{ApiKey, Secret};

use crate::support::*;

struct Server {
    base: String,
    client: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    services: slotd_server::services::Services,
    _stub: slotd_testkit::stub::StubHandle,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            s.send(()).ok();
        }
    }
}

async fn server() -> Server {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stub =
        slotd_testkit::stub::StubProvider::start(slotd_testkit::stub::StubOptions { limit: 10 })
            .await
            .expect("stub");
    let mut config = test_config(dir.path(), &stub, 5);
    config.api_keys = vec![
        ApiKey {
            key: Secret::new("key-tenant-a"),
            tenant: "a".into(),
            admin: false,
            publish: Vec::new(),
        },
        ApiKey {
            key: Secret::new("key-tenant-b"),
            tenant: "b".into(),
            admin: false,
            publish: Vec::new(),
        },
    ];
    config.max_body_bytes = 64 * 1024;
    let services = slotd_server::app::build_with_clock(config, system_clock())
        .await
        .expect("build");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(slotd_server::run_with(
        services.clone(),
        Some(listener),
        async move {
            rx.await.ok();
        },
    ));
    Server {
        base: format!("http://{addr}"),
        client: reqwest::Client::new(),
        stop: Some(tx),
        services,
        _stub: stub,
        _dir: dir,
    }
}

impl Server {
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        key: Option<&str>,
        body: Option<String>,
    ) -> (u16, String, Value) {
        let request = || {
            let mut rb = self
                .client
                .request(method.clone(), format!("{}{path}", self.base))
                .header("content-type", "application/json");
            if let Some(k) = key {
                rb = rb.bearer_auth(k);
            }
            if let Some(b) = &body {
                rb = rb.body(b.clone());
            }
            rb
        };
        let resp = match request().send().await {
            Ok(resp) => resp,
            // A pooled connection the server closed (after the 413, which closes its
            // connection) fails before any answer: a read is simply asked again.
            Err(e) if method == reqwest::Method::GET && e.is_request() => {
                request().send().await.expect("send")
            }
            Err(e) => panic!("send: {e:?}"),
        };
        let status = resp.status().as_u16();
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let text = resp.text().await.unwrap_or_default();
        (
            status,
            ct,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn task_count(&self, key: &str) -> usize {
        let (_, _, v) = self
            .send(reqwest::Method::GET, "/v1/tasks?limit=500", Some(key), None)
            .await;
        v["tasks"].as_array().map_or(0, Vec::len)
    }

    /// `slotd check` on the server's database: no finding, and what it read.
    async fn check(&self) -> slotd_server::check::Report {
        services_check(&self.services).await
    }
}

const A: Option<&str> = Some("key-tenant-a");
const B: Option<&str> = Some("key-tenant-b");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_mistakes_get_clear_answers_and_store_nothing() {
    let s = server().await;
    use reqwest::Method;
    let post = |body: &str| Some(body.to_string());

    // 401: no key, wrong key.
    let (st, ct, _) = s.send(Method::GET, "/v1/tasks", None, None).await;
    assert_eq!(st, 401);
    assert!(ct.starts_with("application/problem+json"), "{ct}");
    let (st, _, _) = s
        .send(Method::GET, "/v1/tasks", Some("not-a-key-at-all"), None)
        .await;
    assert_eq!(st, 401);

    // 400: malformed JSON.
    let (st, ct, body) = s
        .send(Method::POST, "/v1/tasks/fixture", A, post("{\"payload\": "))
        .await;
    assert_eq!(st, 400, "{body}");
    assert!(ct.starts_with("application/problem+json"));
    // 404: unknown task type.
    let (st, _, body) = s
        .send(
            Method::POST,
            "/v1/tasks/no-such-type",
            A,
            post(r#"{"payload":{}}"#),
        )
        .await;
    assert_eq!(st, 404, "{body}");
    // 422: the handler's plan refuses, with its message.
    let (st, _, body) = s
        .send(
            Method::POST,
            "/v1/tasks/fixture",
            A,
            post(r#"{"payload":{"reject":"no thanks"}}"#),
        )
        .await;
    assert_eq!(st, 422, "{body}");
    assert!(body.to_string().contains("no thanks"), "{body}");
    // 413: oversized body.
    // The server answers 413 from the length alone and closes the connection; a client still
    // writing the body may see the close before the answer, so it asks again (a few times).
    let big = json!({"payload": {"pad": "x".repeat(200 * 1024)}}).to_string();
    let mut answered = None;
    for _ in 0..5 {
        let sent = s
            .client
            .post(format!("{}/v1/tasks/fixture", s.base))
            .header("content-type", "application/json")
            .bearer_auth(A.unwrap_or_default())
            .body(big.clone())
            .send()
            .await;
        if let Ok(resp) = sent {
            answered = Some(resp.status().as_u16());
            break;
        }
    }
    assert_eq!(answered, Some(413), "an oversized body is refused with 413");
    assert_eq!(
        s.task_count("key-tenant-a").await,
        0,
        "a refused request stored something"
    );
    let stored = s.check().await;
    assert_eq!(
        (stored.tasks, stored.units),
        (0, 0),
        "a refused request stored something"
    );

    // A good one, then another tenant cannot see it.
    let (st, _, body) = s
        .send(
            Method::POST,
            "/v1/tasks/fixture",
            A,
            post(r#"{"payload":{"count":2}}"#),
        )
        .await;
    assert_eq!(st, 202, "{body}");
    let id = body["task_id"].as_str().expect("id").to_string();
    let (st, _, _) = s
        .send(Method::GET, &format!("/v1/tasks/{id}"), A, None)
        .await;
    assert_eq!(st, 200);
    let (st, _, body) = s
        .send(Method::GET, &format!("/v1/tasks/{id}"), B, None)
        .await;
    assert_eq!(st, 404, "{body}");
    let (st, _, _) = s
        .send(Method::POST, &format!("/v1/tasks/{id}/cancel"), B, None)
        .await;
    assert_eq!(st, 404);
    assert_eq!(s.task_count("key-tenant-b").await, 0);
    assert_eq!(s.check().await.units, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_is_served_and_reads_the_api() {
    let s = server().await;
    let resp = s
        .client
        .get(format!("{}/", s.base))
        .send()
        .await
        .expect("get /");
    assert_eq!(resp.status(), 200);
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(ct.starts_with("text/html"), "{ct}");
    let page = resp.text().await.expect("body");
    let mut script = String::new();
    for name in ["core.js", "pools.js", "app.js"] {
        assert!(
            page.contains(&format!("/console/{name}")),
            "the console loads {name}"
        );
        let part = s
            .client
            .get(format!("{}/console/{name}", s.base))
            .send()
            .await
            .expect("get a console script")
            .text()
            .await
            .expect("script");
        script.push_str(&part);
    }
    for path in ["/v1/pools", "/v1/handlers", "/v1/tasks", "/v1/webhooks"] {
        assert!(script.contains(path), "the console must read {path}");
    }
    s.check().await;
}
