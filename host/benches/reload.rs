//! Hot-reload costs for the Kling handlers: a cold compile against a load from the on-disk
//! compiled cache, and the overhead of one handler call (fresh store, instantiate, `plan`).
//!
//! `cargo bench -p slotd --bench reload`

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use slotd::config::RuntimeLimits;
use slotd::runtime::Runtime;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let built = Path::new(env!("SLOTD_BUILT_PLUGINS"));
    for name in ["kling_video", "kling_avatar", "fixture"] {
        let file = built.join(format!("{name}.wasm"));
        let cache = tempfile::TempDir::new().expect("tmp");
        let mut cold = Vec::new();
        let mut cached = Vec::new();
        for _ in 0..5 {
            // A fresh cache directory each time: a true cold compile.
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
        for _ in 0..10 {
            // A new runtime (as after a restart) on the filled cache directory.
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
        println!(
            "{name:>13}: cold compile + describe {:>9.2?}   cached load + describe {:>9.2?}",
            median(cold),
            median(cached)
        );
    }

    let rt = Runtime::new(RuntimeLimits::default(), BTreeMap::new()).expect("runtime");
    let fixture = rt
        .load_file(&built.join("fixture.wasm"))
        .await
        .expect("fixture loads");
    let mut calls = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        let _ = fixture.plan("fixture", "{}").await.expect("plan runs");
        calls.push(t.elapsed());
    }
    println!(
        "handler call overhead (fresh store + instantiate + plan of the fixture): median {:.2?}",
        median(calls)
    );
}
