//! slotd's benchmarks, one command: `cargo bench -p slotd` (docs/testing.md).
//!
//! Prints one table, each figure beside its target and the ratio, SQLite and PostgreSQL side by
//! side (PostgreSQL from `SLOTD_TEST_DATABASE_URL` or the local server, skipped when it does not
//! answer), and writes the same figures to `target/slotd-bench.json` as a list of
//! `{"name", "backend", "value", "unit", "target", "better"}` records. Asserts nothing about
//! time: a missed target is reported, not a failure.
//!
//! Groups, all by default, or named: `cargo bench -p slotd -- tick submit`:
//! `runtime` (handler call, cached reload, cold compile), `tick` (`run_once` at 10,000 units),
//! `submit` (durable `POST /v1/tasks`), `memory` (resident memory of a real `slotd serve`),
//! `kling` (slot fullness against the Kling simulator on a mix of shots, polling and callbacks,
//! embedded and in cluster mode), `sharing` (the same mix on an account other clients also
//! use: random refusals, another client's bursts, `kling_shared.rs`),
//! `prior` (a wrong duration prior), `shares` (a fixed split of one Kling account
//! against shares with borrowing, `shares.rs`), `eta` (the error of `estimated_completion_at` against the Kling simulator),
//! `routes` (routed shots over the Kling and fal simulators against the ideal FIFO makespan,
//! and the fill tick at 10,000 units pending on a route), `scale` (one API and 1–4 scheduler
//! processes over PostgreSQL and Redis against 10–100 simulated Kling accounts: per-unit costs
//! of the shared parts and throughput, `scale.rs`), `sse` (the CPU 1,000 idle live event
//! streams add to a real `slotd serve`, `sse.rs`).

mod cluster;
mod common;
mod eta;
mod kling;
mod kling_shared;
mod memory;
mod report;
mod routes;
mod runtime;
mod scale;
mod shares;
mod sse;
mod submit;
mod tick;

use std::path::PathBuf;

const GROUPS: &[&str] = &[
    "runtime", "tick", "submit", "memory", "kling", "sharing", "prior", "shares", "eta", "routes",
    "scale", "sse",
];

/// `target/` of this build: the bench runs from `target/release/deps/`.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            Some(exe.parent()?.parent()?.parent()?.to_path_buf())
        })
        .unwrap_or_else(|| PathBuf::from("target"))
}

fn main() {
    // cargo passes `--bench` (and libtest-style flags); the rest name groups.
    let asked: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    for a in &asked {
        if !GROUPS.contains(&a.as_str()) {
            eprintln!("unknown benchmark group {a:?}; expected some of {GROUPS:?}");
            std::process::exit(2);
        }
    }
    let wanted = |g: &str| asked.is_empty() || asked.iter().any(|a| a == g);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut report = report::Report::default();
    rt.block_on(async {
        if wanted("runtime") {
            runtime::run(&mut report).await;
        }
        if wanted("tick") {
            tick::run(&mut report).await;
        }
        if wanted("submit") {
            submit::run(&mut report).await;
        }
        if wanted("memory") {
            memory::run(&mut report).await;
        }
        if wanted("kling") {
            kling::run(&mut report).await;
        }
        if wanted("sharing") {
            kling_shared::run(&mut report, kling::shots(), kling::time_scale()).await;
        }
        if wanted("prior") {
            kling::run_prior(&mut report).await;
        }
        if wanted("shares") {
            shares::run(&mut report).await;
        }
        if wanted("eta") {
            eta::run(&mut report).await;
        }
        if wanted("routes") {
            routes::run(&mut report).await;
        }
        if wanted("sse") {
            sse::run(&mut report).await;
        }
        if wanted("scale") {
            scale::run(&mut report).await;
        }
        common::drop_schemas().await;
    });
    report.print();
    let json = target_dir().join("slotd-bench.json");
    match report.write_json(&json) {
        Ok(()) => println!("figures written to {}", json.display()),
        Err(e) => eprintln!("writing {}: {e}", json.display()),
    }
}
