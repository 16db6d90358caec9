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
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugins dir");
    let built = Path::new(env!("SLOTD_BUILT_PLUGINS")).join("fixture.wasm");
    std::fs::copy(built, plugins.join("fixture.wasm")).expect("copy fixture");
    let mut c = Config {
        database_url: format!("sqlite://{}", dir.join("bench.db").display()),
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

async fn run_once_in_flight(units: u32) {
    let dir = tempfile::TempDir::new().expect("tmp");
    let clock = ManualClock::new(1_000_000);
    let dyn_clock: DynClock = clock.clone();
    let services = slotd::app::build_with_clock(config(dir.path(), units), dyn_clock)
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
        "run_once, {units:>6} units in flight: fill tick {:>8.2} ms | poll tick {:>8.2} ms (handler call {:>8.2} ms, host work {:>8.2} ms) | nothing due {:>6.2} ms",
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

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        handler_call_overhead().await;
        run_once_in_flight(1_000).await;
        run_once_in_flight(10_000).await;
    });
}
