//! Durable `POST /v1/tasks` through the real router (docs/testing.md): 16 clients at a time, each
//! answered only once its task is committed. Throughput and p99 latency per backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tower::ServiceExt;

use crate::common::{fixture_config, ms};
use crate::report::{Report, Target};

const TASKS: usize = 10_000;
const CLIENTS: usize = 16;

async fn throughput(report: &mut Report, backend: &str, url: &str) {
    let dir = tempfile::TempDir::new().expect("tmp");
    let services = slotd_server::app::build(fixture_config(dir.path(), 5, url))
        .await
        .expect("build");
    let app = slotd_server::api::router(services.clone());
    let latencies = Arc::new(parking_lot::Mutex::new(Vec::with_capacity(TASKS)));
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (app, latencies, next) = (app.clone(), latencies.clone(), next.clone());
        clients.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < TASKS {
                let req = axum::http::Request::builder()
                    .method("POST")
                    .uri("/v1/tasks/fixture")
                    .header("content-type", "application/json")
                    .body(axum::body::Body::from(
                        r#"{"payload": {"count": 1, "behavior": "idle"}}"#,
                    ))
                    .expect("request");
                let t = Instant::now();
                let resp = app.clone().oneshot(req).await.expect("router");
                assert_eq!(resp.status().as_u16(), 202, "submit refused");
                latencies.lock().push(t.elapsed());
            }
        }));
    }
    for c in clients {
        c.await.expect("client");
    }
    let wall = started.elapsed();
    let mut l: Vec<Duration> = latencies.lock().clone();
    l.sort();
    let p99 = l[(l.len() * 99 / 100).min(l.len() - 1)];
    // Every answered task is really there.
    let stored: u64 = services
        .store
        .unit_count_by_pool()
        .await
        .expect("counts")
        .iter()
        .map(|c| c.count)
        .sum();
    assert_eq!(stored, TASKS as u64, "every accepted task is stored");
    report.add(
        "submit_per_s",
        backend,
        TASKS as f64 / wall.as_secs_f64(),
        "1/s",
        Target::AtLeast(5000.0),
    );
    report.add(
        "submit_p99_ms",
        backend,
        ms(p99),
        "ms",
        Target::AtMost(25.0),
    );
}

pub async fn run(report: &mut Report) {
    let dir = tempfile::TempDir::new().expect("tmp");
    for (backend, url) in crate::common::backends(dir.path()).await {
        eprintln!("submit: {backend}, {TASKS} tasks from {CLIENTS} clients…");
        throughput(report, backend, &url).await;
    }
}
