//! Baseline figures for the core: the cost of one `run_once` with 1,000 and 10,000 units in
//! flight in one pool, and the overhead of one handler call (fresh store + call, no I/O).
//!
//! Run: `cargo bench -p slotd --bench core`. Prints figures; asserts nothing about time.
//! Uses the real SQLite store and the real compiled fixture handler (behavior `idle`: accepts and
//! reports running without any HTTP), so what is measured is the host's work plus the guest's.

use std::path::Path;

use std::time::{Duration, Instant};

use slotd::clock::{Clock, DynClock, ManualClock};
use slotd::config::{Config, PoolConfig};
use slotd::runtime::TickContext;
use slotd::scheduler::Scheduler;
use tower::ServiceExt;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn config(dir: &Path, slots: u32) -> Config {
    config_on(
        dir,
        slots,
        &format!("sqlite://{}", dir.join("bench.db").display()),
    )
}

fn config_on(dir: &Path, slots: u32, database_url: &str) -> Config {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugins dir");
    let built = Path::new(env!("SLOTD_BUILT_PLUGINS")).join("fixture.wasm");
    std::fs::copy(built, plugins.join("fixture.wasm")).expect("copy fixture");
    let mut c = Config {
        database_url: database_url.to_string(),
        plugins_dir: plugins,
        ..Config::default()
    };
    c.scheduler.max_batch = 20_000;
    c.max_units_per_task = 1000;
    c.pools
        .insert("fixture".into(), PoolConfig { max_slots: slots });
    c
}

async fn submit(services: &slotd::services::Services, count: u32) {
    let body = serde_json::json!({"payload": {"count": count, "behavior": "idle"}}).to_string();
    let req = axum::http::Request::builder()
        .method("POST")
        .uri("/v1/tasks/fixture")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body))
        .expect("request");
    let resp = slotd::api::router(services.clone())
        .oneshot(req)
        .await
        .expect("router");
    assert_eq!(resp.status().as_u16(), 202, "submit failed");
}

async fn run_once_in_flight(label: &str, database_url: Option<&str>, units: u32) {
    let dir = tempfile::TempDir::new().expect("tmp");
    let url = database_url
        .map(String::from)
        .unwrap_or_else(|| format!("sqlite://{}", dir.path().join("bench.db").display()));
    let clock = ManualClock::new(1_000_000);
    let dyn_clock: DynClock = clock.clone();
    let services = slotd::app::build_with_clock(config_on(dir.path(), units, &url), dyn_clock)
        .await
        .expect("build");
    let mut left = units;
    while left > 0 {
        let n = left.min(1000);
        submit(&services, n).await;
        left -= n;
    }
    let sched = Scheduler::new(services.clone());
    let t = Instant::now();
    let fill = sched
        .run_once("fixture", clock.now_ms())
        .await
        .expect("fill tick");
    let fill_time = t.elapsed();
    assert_eq!(fill.claimed as u32, units, "every unit should be in flight");

    // Steady state: every unit due for a poll, the handler says "running".
    let handler = services
        .registry
        .for_type("fixture")
        .expect("fixture loaded");
    let mut totals = Vec::new();
    let mut idle_totals = Vec::new();
    for _ in 0..5 {
        clock.advance(60_000);
        let t = Instant::now();
        let r = sched
            .run_once("fixture", clock.now_ms())
            .await
            .expect("poll tick");
        totals.push(t.elapsed());
        assert_eq!(r.polled as u32, units);
        // A tick with nothing due: the fixed cost of looking.
        let t = Instant::now();
        sched
            .run_once("fixture", clock.now_ms())
            .await
            .expect("idle tick");
        idle_totals.push(t.elapsed());
    }
    // The handler's share: the same batch through the same call, measured alone.
    let units_now = services
        .store
        .unit_list_due("fixture", &["fixture".into()], i64::MAX, 20_000)
        .await
        .expect("due");
    let batch: Vec<slotd::runtime::BatchUnit> = units_now
        .into_iter()
        .map(|unit| slotd::runtime::BatchUnit {
            unit,
            in_doubt: false,
        })
        .collect();
    let ctx = TickContext {
        pool: "fixture".into(),
        now_ms: 0,
        callback_url: None,
    };
    let mut calls = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        handler.tick(&ctx, &batch).await.expect("tick call");
        calls.push(t.elapsed());
    }
    let total = median(totals);
    let call = median(calls);
    println!(
        "run_once on {label:<10}, {units:>6} units in flight: fill tick {:>8.2} ms | poll tick {:>8.2} ms (handler call {:>8.2} ms, host work {:>8.2} ms) | nothing due {:>6.2} ms",
        fill_time.as_secs_f64() * 1e3,
        total.as_secs_f64() * 1e3,
        call.as_secs_f64() * 1e3,
        total.saturating_sub(call).as_secs_f64() * 1e3,
        median(idle_totals).as_secs_f64() * 1e3,
    );
}

async fn handler_call_overhead() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let services = slotd::app::build(config(dir.path(), 5))
        .await
        .expect("build");
    let handler = services
        .registry
        .for_type("fixture")
        .expect("fixture loaded");
    let ctx = TickContext {
        pool: "fixture".into(),
        now_ms: 0,
        callback_url: None,
    };
    for _ in 0..100 {
        handler.tick(&ctx, &[]).await.expect("warm-up");
    }
    let n = 2000u32;
    let t = Instant::now();
    for _ in 0..n {
        handler.tick(&ctx, &[]).await.expect("call");
    }
    let per = t.elapsed() / n;
    println!(
        "handler call (fresh store + instantiate + empty tick, no I/O): {:>8.1} µs",
        per.as_secs_f64() * 1e6
    );
    let t = Instant::now();
    for _ in 0..200 {
        handler
            .plan("fixture", r#"{"count": 1}"#)
            .await
            .expect("plan")
            .expect("accepted");
    }
    println!(
        "handler call (plan of a one-unit payload):                     {:>8.1} µs",
        (t.elapsed() / 200).as_secs_f64() * 1e6
    );
}

/// A fresh PostgreSQL schema for one run (`SLOTD_TEST_DATABASE_URL` or the local server).
async fn pg_schema_url() -> Option<String> {
    let base = std::env::var("SLOTD_TEST_DATABASE_URL").ok();
    let candidates: Vec<String> = match base {
        Some(b) => vec![b],
        None => ["root", "postgres"]
            .iter()
            .map(|u| format!("postgres://{u}@127.0.0.1:5432/test"))
            .collect(),
    };
    for url in candidates {
        let Ok(pool) = sqlx::PgPool::connect(&url).await else {
            continue;
        };
        let name = format!("bench_{}", uuid::Uuid::new_v4().simple());
        let ok = sqlx::query(&format!("CREATE SCHEMA {name}"))
            .execute(&pool)
            .await
            .is_ok();
        pool.close().await;
        if ok {
            let sep = if url.contains('?') { '&' } else { '?' };
            return Some(format!("{url}{sep}options[search_path]={name}"));
        }
    }
    None
}

/// `POST /v1/tasks` through the real router, durable, 16 at a time: throughput and p99.
async fn post_throughput(label: &str, database_url: &str) {
    let dir = tempfile::TempDir::new().expect("tmp");
    let services = slotd::app::build(config_on(dir.path(), 5, database_url))
        .await
        .expect("build");
    let app = slotd::api::router(services.clone());
    let n: usize = 4000;
    let concurrency = 16;
    let started = Instant::now();
    let latencies = std::sync::Arc::new(parking_lot::Mutex::new(Vec::with_capacity(n)));
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (app, latencies, next) = (app.clone(), latencies.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
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
                assert_eq!(resp.status().as_u16(), 202);
                latencies.lock().push(t.elapsed());
            }
        }));
    }
    for w in workers {
        w.await.expect("worker");
    }
    let wall = started.elapsed();
    let mut l = latencies.lock().clone();
    l.sort();
    let p99 = l[(l.len() * 99 / 100).min(l.len() - 1)];
    println!(
        "POST /v1/tasks on {label:<10}: {:>7.0} per second, p50 {:>6.2} ms, p99 {:>6.2} ms ({n} tasks, {concurrency} at a time)",
        n as f64 / wall.as_secs_f64(),
        median(l.clone()).as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        handler_call_overhead().await;
        run_once_in_flight("sqlite", None, 1_000).await;
        run_once_in_flight("sqlite", None, 10_000).await;
        let pg = pg_schema_url().await;
        match &pg {
            Some(url) => run_once_in_flight("postgresql", Some(url), 1_000).await,
            None => println!("PostgreSQL not reachable: skipping its figures"),
        }
        if let Some(url) = pg_schema_url().await {
            run_once_in_flight("postgresql", Some(&url), 10_000).await;
        }
        let sqlite_dir = tempfile::TempDir::new().expect("tmp");
        post_throughput(
            "sqlite",
            &format!("sqlite://{}", sqlite_dir.path().join("post.db").display()),
        )
        .await;
        if let Some(url) = pg_schema_url().await {
            post_throughput("postgresql", &url).await;
        }
    });
}
