//! Handler costs (docs/testing.md): one call (fresh store + instantiate + an empty `tick`, no I/O)
//! on the instance pool and on wasmtime's on-demand allocator (where a handler that does not fit
//! the pool runs), a load from the compiled cache, and a cold compile of the Kling video handler.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use slotd_core::config::RuntimeLimits;
use slotd_runtime::{Allocator, Runtime, TickContext};

use crate::common::{median, ms};
use crate::report::{Better, Report, Target};

/// Mean µs of an empty `tick` of the fixture on `rt`, which must place it on `allocator`.
async fn call_us(rt: &Runtime, allocator: Allocator) -> f64 {
    let built = Path::new(slotd_testkit::BUILT_PLUGINS);
    let fixture = rt
        .load_file(&built.join("fixture.wasm"))
        .await
        .expect("fixture loads");
    assert_eq!(fixture.allocator(), allocator, "the fixture's allocator");
    let ctx = TickContext {
        pool: "fixture".into(),
        now_ms: 0,
        provider_callback_url: None,
        account: None,
    };
    for _ in 0..100 {
        fixture.tick(&ctx, &[]).await.expect("warm-up");
    }
    let n = 2000u32;
    let t = Instant::now();
    for _ in 0..n {
        fixture.tick(&ctx, &[]).await.expect("call");
    }
    (t.elapsed() / n).as_secs_f64() * 1e6
}

pub async fn run(report: &mut Report) {
    let built = Path::new(slotd_testkit::BUILT_PLUGINS);
    let pooled = Runtime::new(RuntimeLimits::default(), BTreeMap::new()).expect("runtime");
    report.add(
        "handler_call_us",
        "-",
        call_us(&pooled, Allocator::Pooling).await,
        "µs",
        Target::AtMost(15.0),
    );
    drop(pooled);
    // The fallback path: the same calls on wasmtime's on-demand allocator.
    let on_demand = Runtime::on_demand(RuntimeLimits::default(), BTreeMap::new()).expect("runtime");
    report.add(
        "handler_call_on_demand_us",
        "-",
        call_us(&on_demand, Allocator::OnDemand).await,
        "µs",
        Target::None(Better::Lower),
    );
    drop(on_demand);

    let file = built.join("kling_video.wasm");
    let cache = tempfile::TempDir::new().expect("tmp");
    let mut cold = Vec::new();
    for _ in 0..2 {
        let empty = tempfile::TempDir::new().expect("tmp");
        let rt = Runtime::with_cache_dir(
            RuntimeLimits::default(),
            BTreeMap::new(),
            Some(empty.path()),
        )
        .expect("runtime");
        let t = Instant::now();
        rt.load_file(&file).await.expect("loads");
        cold.push(t.elapsed());
    }
    let warm = Runtime::with_cache_dir(
        RuntimeLimits::default(),
        BTreeMap::new(),
        Some(cache.path()),
    )
    .expect("runtime");
    warm.load_file(&file).await.expect("fills the cache");
    let mut cached = Vec::new();
    for _ in 0..10 {
        // A new runtime (as after a restart) on the filled cache.
        let rt = Runtime::with_cache_dir(
            RuntimeLimits::default(),
            BTreeMap::new(),
            Some(cache.path()),
        )
        .expect("runtime");
        let t = Instant::now();
        rt.load_file(&file).await.expect("loads");
        cached.push(t.elapsed());
    }
    report.add(
        "reload_cached_ms",
        "-",
        ms(median(cached)),
        "ms",
        Target::AtMost(100.0),
    );
    report.add(
        "cold_compile_ms",
        "-",
        ms(median(cold)),
        "ms",
        Target::AtMost(2000.0),
    );
}
