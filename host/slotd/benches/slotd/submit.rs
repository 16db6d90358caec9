//! Durable `POST /v1/tasks` through the real router (docs/testing.md): 16 clients at a time, each
//! answered only once its task is committed. Throughput and p99 latency per backend, on the
//! current schema and on the one before the lean-write migrations (`previous_schema/`), in
//! alternating rounds of one run; with `SLOTD_BENCH_BASELINE`, an earlier build's figures
//! beside them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tower::ServiceExt;

use crate::common::{Compared, baseline_value, fixture_config, median_f64, ms};
use crate::report::{Better, Report, Target};

const TASKS: usize = 10_000;
const CLIENTS: usize = 16;

/// One measurement on a fresh database at `url` (put back to the previous schema first with
/// `previous`): durable creates a second and the p99 latency in ms.
async fn throughput(url: &str, previous: bool) -> (f64, f64) {
    let dir = tempfile::TempDir::new().expect("tmp");
    let services = slotd_server::app::build(fixture_config(dir.path(), 5, url))
        .await
        .expect("build");
    if previous {
        crate::common::as_previous_schema(url).await;
    }
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
    (TASKS as f64 / wall.as_secs_f64(), ms(p99))
}

/// The machine's durable commit on PostgreSQL at `url`, in ms: the median of 200 commits of
/// one row each, on one connection, between the submit runs. A submit's batch waits for one
/// such log flush, so this says how much of a run's pace the disk set.
async fn pg_commit_ms(url: &str) -> f64 {
    let pool = sqlx::PgPool::connect(url).await.expect("pg");
    sqlx::query("CREATE TABLE IF NOT EXISTS bench_commits (n BIGINT)")
        .execute(&pool)
        .await
        .expect("commit table");
    let mut times = Vec::with_capacity(200);
    for n in 0..200_i64 {
        let t = Instant::now();
        sqlx::query("INSERT INTO bench_commits (n) VALUES ($1)")
            .bind(n)
            .execute(&pool)
            .await
            .expect("commit");
        times.push(ms(t.elapsed()));
    }
    pool.close().await;
    median_f64(times)
}

/// The figures of one backend over the rounds.
#[derive(Default)]
struct Sides {
    per_s: Compared,
    p99_ms: Compared,
    commit_ms: Vec<f64>,
}

pub async fn run(report: &mut Report) {
    let dir = tempfile::TempDir::new().expect("tmp");
    let rounds = crate::common::rounds(3);
    let baseline = crate::common::baseline_bench();
    let mut sides: Vec<(&'static str, Sides)> = Vec::new();
    for round in 0..rounds {
        let earlier = match baseline.as_deref() {
            Some(exe) => crate::common::run_baseline(exe, "submit").await,
            None => None,
        };
        for (backend, url) in crate::common::backends(dir.path()).await {
            let i = match sides.iter().position(|(b, _)| *b == backend) {
                Some(i) => i,
                None => {
                    sides.push((backend, Sides::default()));
                    sides.len() - 1
                }
            };
            let (_, fresh) = crate::common::fresh(dir.path(), backend).await;
            // The side measured first changes each round.
            let order = if round % 2 == 0 {
                [(true, url), (false, fresh)]
            } else {
                [(false, url), (true, fresh)]
            };
            for (previous, url) in order {
                eprintln!(
                    "submit: {backend}, {TASKS} tasks from {CLIENTS} clients{}, round {}…",
                    if previous { ", previous schema" } else { "" },
                    round + 1
                );
                let (per_s, p99) = throughput(&url, previous).await;
                eprintln!("  {per_s:.0}/s, p99 {p99:.1} ms");
                sides[i].1.per_s.push(previous, per_s);
                sides[i].1.p99_ms.push(previous, p99);
            }
            if backend == "postgres" {
                let (_, url) = crate::common::fresh(dir.path(), backend).await;
                let commit = pg_commit_ms(&url).await;
                eprintln!("  a lone durable commit: {commit:.2} ms");
                sides[i].1.commit_ms.push(commit);
            }
            if let Some(f) = earlier.as_deref() {
                let side = &mut sides[i].1;
                for (name, c) in [
                    ("submit_per_s", &mut side.per_s),
                    ("submit_p99_ms", &mut side.p99_ms),
                ] {
                    if let Some(v) = baseline_value(f, name, backend) {
                        eprintln!("  baseline build: {name} {v:.1}");
                        c.baseline.push(v);
                    }
                }
            }
        }
    }
    for (backend, side) in &sides {
        side.per_s.report(
            report,
            "submit_per_s",
            backend,
            "1/s",
            Target::AtLeast(5000.0),
        );
        side.p99_ms
            .report(report, "submit_p99_ms", backend, "ms", Target::AtMost(25.0));
        if !side.commit_ms.is_empty() {
            report.add(
                "submit_lone_commit_ms",
                backend,
                median_f64(side.commit_ms.clone()),
                "ms",
                Target::None(Better::Lower),
            );
        }
    }
}
