//! Finalization at the trust boundary, through the real scheduler,
//! the real fixture handler and real HTTP servers on loopback:
//!
//! - a redirect from an allowlisted file server to a host outside the allowlist is refused
//!   before anything is sent there, for the host's artifact downloads and for a handler's own
//!   `send` (which sees the 3xx answer itself);
//! - a download that outlasts several lease periods keeps its lease (renewed while it streams),
//!   is never claimed by a second finalizer, and stores exactly one object;
//! - an object store that cannot be written for a while: the finalization attempts are spent,
//!   the unit stays `succeeded` with its provider result and the reason, the task reads
//!   `failed`; once writable, a retry stores it with no second provider job.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Path as UrlPath;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use serde_json::{Value, json};
use slotd_core::clock::Clock;
use slotd_core::config::Config;
use tokio::sync::mpsc;

use crate::support::*;

/// Serve `app` on `127.0.0.1:0` for the rest of the test.
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a test server");
    let addr = listener.local_addr().expect("test server address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// A server that answers every request with a small body and counts what it received: the
/// address a redirect must never reach.
async fn counting_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    let app = Router::new().fallback(move || {
        seen.fetch_add(1, Ordering::SeqCst);
        async { "bytes from a host outside the allowlist" }
    });
    (serve(app).await, hits)
}

/// An allowlisted server that answers `/files/{id}` and `/bounce` with a 302 to `target`.
async fn bouncer(target: SocketAddr) -> SocketAddr {
    let found =
        move |to: String| (StatusCode::FOUND, [(header::LOCATION, to)], "moved").into_response();
    let app = Router::new()
        .route(
            "/files/{id}",
            get(move |UrlPath(id): UrlPath<String>| async move {
                found(format!("http://{target}/files/{id}"))
            }),
        )
        .route(
            "/bounce",
            get(move || async move { found(format!("http://{target}/stolen")) }),
        );
    serve(app).await
}

/// Add `addr` to the fixture handler's allowlist.
fn allow(c: &mut Config, addr: SocketAddr) {
    if let Some(h) = c.handlers.get_mut("fixture") {
        h.allowed_hosts.push(addr.to_string());
    }
}

/// Drive ticks (no finalization) until the task's only unit is `succeeded`.
async fn until_succeeded(m: &Manual, id: &str) {
    for _ in 0..50 {
        m.clock.advance(50);
        let now = m.clock.as_ref().now_ms();
        m.scheduler
            .run_once("fixture", now)
            .await
            .expect("run_once");
        if m.task(id).await["results"][0]["status"] == "succeeded" {
            return;
        }
    }
    panic!("unit of task {id} never succeeded at the provider");
}

/// Files under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifact_redirect_outside_the_allowlist_is_refused() {
    let (outside, outside_hits) = counting_server().await;
    let allowed = bouncer(outside).await;
    let m = Manual::start_with(1, 5, |c| {
        allow(c, allowed);
        c.scheduler.finalize_attempts = 1;
    })
    .await;
    m.stub.set_files_base(Some(format!("http://{allowed}")));
    let id = m
        .submit("fixture", json!({"behavior": "succeed", "polls": 0}))
        .await;
    m.run_until(&["fixture"], 50, async |m| {
        let v = m.task(&id).await;
        v["status"] == "failed" || v["status"] == "completed"
    })
    .await;

    assert_eq!(
        outside_hits.load(Ordering::SeqCst),
        0,
        "the host outside the allowlist received a request"
    );
    let view = m.task(&id).await;
    assert_eq!(view["status"], "failed", "{view}");
    assert_eq!(view["error"]["code"], "finalize", "{view}");
    let message = view["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!(
            "host {outside} is not in handlers.fixture.allowed_hosts"
        )),
        "the error names the refused host: {message}"
    );
    // The provider's result is kept: a retry may store it once the allowlist is fixed.
    assert_eq!(view["results"][0]["status"], "succeeded", "{view}");
    m.check().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_send_sees_the_redirect_and_does_not_follow_it() {
    let (outside, outside_hits) = counting_server().await;
    let allowed = bouncer(outside).await;
    let m = Manual::start_with(1, 5, |c| allow(c, allowed)).await;
    let url = format!("http://{allowed}/bounce");
    let id = m
        .submit("fixture", json!({"behavior": "fetch", "url": url}))
        .await;
    m.run_until(&["fixture"], 20, async |m| {
        m.task(&id).await["status"] == "failed"
    })
    .await;
    let view = m.task(&id).await;
    let error = &view["results"][0]["error"];
    assert_eq!(error["code"], "fetched", "{view}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("status 302"), "{message}");
    assert_eq!(outside_hits.load(Ordering::SeqCst), 0);
    m.check().await;
}

/// The file server of the slow download: the first request streams whatever the test sends
/// on the channel, ending when the test drops its sender; later requests answer 503.
fn trickling_server(body: mpsc::Receiver<Bytes>, hits: Arc<AtomicUsize>) -> Router {
    let body = Arc::new(parking_lot::Mutex::new(Some(body)));
    Router::new().route(
        "/files/{id}",
        get(move || {
            hits.fetch_add(1, Ordering::SeqCst);
            let taken = body.lock().take();
            async move {
                let Some(rx) = taken else {
                    return (StatusCode::SERVICE_UNAVAILABLE, "already served").into_response();
                };
                let stream = futures::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
                });
                Response::new(Body::from_stream(stream))
            }
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_download_keeps_its_lease_and_stores_once() {
    const LEASE_MS: i64 = 300;
    let (chunks, body) = mpsc::channel::<Bytes>(16);
    let hits = Arc::new(AtomicUsize::new(0));
    let files = serve(trickling_server(body, hits.clone())).await;
    let m = Manual::start_with(1, 5, |c| {
        allow(c, files);
        c.scheduler.finalize_lease = Duration::from_millis(LEASE_MS as u64);
        c.scheduler.artifact_timeout = Duration::from_secs(60);
    })
    .await;
    m.stub.set_files_base(Some(format!("http://{files}")));
    let id = m
        .submit("fixture", json!({"behavior": "succeed", "polls": 0}))
        .await;
    until_succeeded(&m, &id).await;

    let report = m
        .scheduler
        .finalize_once(m.clock.as_ref().now_ms())
        .await
        .expect("finalize_once");
    assert_eq!(report.started, 1);
    eventually(
        Duration::from_secs(10),
        "the download to start",
        async || (hits.load(Ordering::SeqCst) == 1).then_some(()),
    )
    .await;

    // Five steps of 200 ms on the injected clock: more than three lease periods. After each,
    // wait for a renewal (the test signal), then a second finalizer must find nothing to claim.
    let mut renewals = m.scheduler.finalize_renewals();
    let mut sent = Vec::new();
    for step in 0..5u8 {
        let chunk = Bytes::from(vec![step; 1000]);
        sent.extend_from_slice(&chunk);
        chunks
            .send(chunk)
            .await
            .expect("the download is still reading");
        m.clock.advance(LEASE_MS * 2 / 3);
        let seen = *renewals.borrow_and_update();
        tokio::time::timeout(Duration::from_secs(10), renewals.wait_for(|n| *n > seen))
            .await
            .expect("a lease renewal within 10 s")
            .expect("the scheduler is alive");
        let again = m
            .scheduler
            .finalize_once(m.clock.as_ref().now_ms())
            .await
            .expect("finalize_once");
        assert_eq!(
            again.started, 0,
            "a second finalizer claimed the unit while it was downloading (step {step})"
        );
    }
    drop(chunks);
    m.scheduler.finalize_idle().await;

    let view = m.task(&id).await;
    assert_eq!(view["status"], "completed", "{view}");
    assert_eq!(view["results"][0]["bytes"], sent.len());
    assert_eq!(hits.load(Ordering::SeqCst), 1, "downloaded exactly once");
    let stored = files_under(&m._dir.path().join("objects"));
    assert_eq!(stored.len(), 1, "one object: {stored:?}");
    assert_eq!(std::fs::read(&stored[0]).expect("object"), sent);
    m.check().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwritable_object_store_then_retry_stores_without_a_new_job() {
    unwritable_object_store_then_retry_on(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwritable_object_store_then_retry_stores_without_a_new_job_postgres() {
    let schema = crate::pg::PgSchema::create().await;
    unwritable_object_store_then_retry_on(Some(schema.url())).await;
}

async fn unwritable_object_store_then_retry_on(database_url: Option<String>) {
    let m = Manual::start_with(1, 5, |c| {
        if let Some(url) = database_url {
            c.database_url = url;
        }
        c.scheduler.finalize_attempts = 2;
    })
    .await;
    // Tests run as root, where permissions do not stop writes: the store's directory becomes a
    // regular file, so nothing can be created under it.
    let objects = m._dir.path().join("objects");
    std::fs::remove_dir_all(&objects).expect("remove the objects dir");
    std::fs::write(&objects, b"not a directory").expect("a file in its place");

    let id = m
        .submit("fixture", json!({"behavior": "succeed", "polls": 0}))
        .await;
    m.run_until(&["fixture"], 100, async |m| {
        let v = m.task(&id).await;
        v["status"] == "failed" || v["status"] == "completed"
    })
    .await;
    let view = m.task(&id).await;
    assert_eq!(view["status"], "failed", "{view}");
    let unit = &view["results"][0];
    assert_eq!(
        unit["status"], "succeeded",
        "the provider result is kept: {view}"
    );
    assert!(unit["url"].is_string(), "{view}");
    assert!(unit["provider_task_id"].is_string(), "{view}");
    assert_eq!(view["error"]["code"], "finalize", "{view}");
    let message = view["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("gave up after 2 attempts"), "{message}");
    assert!(message.contains("object store"), "{message}");
    assert!(
        view["message"]
            .as_str()
            .unwrap_or_default()
            .contains("1 not stored"),
        "{view}"
    );

    // Parked: more rounds claim nothing (no further download from the provider).
    let downloads = m.stub.stats().downloads;
    assert_eq!(downloads, 2, "one download per attempt");
    for _ in 0..5 {
        m.round(&["fixture"], 60_000).await;
    }
    assert_eq!(m.stub.stats().downloads, downloads);
    assert_eq!(m.task(&id).await["status"], "failed");

    // The store is writable again; the client retries.
    std::fs::remove_file(&objects).expect("remove the file");
    std::fs::create_dir(&objects).expect("the objects dir again");
    let (status, body) = api_call(
        &m.services,
        "POST",
        &format!("/v1/tasks/{id}/retry"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["retried"], 1, "{body}");
    m.run_until(&["fixture"], 20, async |m| {
        m.task(&id).await["status"] == "completed"
    })
    .await;

    let view = m.task(&id).await;
    let unit = &view["results"][0];
    let job = unit["provider_task_id"].as_str().unwrap_or_default();
    let stats = m.stub.stats();
    assert_eq!(stats.creates, 1, "no second provider job: {stats:?}");
    let want = slotd_testkit::stub::file_bytes(job);
    let key = unit["object_key"].as_str().unwrap_or_default();
    assert_eq!(
        std::fs::read(objects.join(key)).expect("stored object"),
        want
    );
    assert_eq!(view["error"], Value::Null, "{view}");
    m.check().await;
}
