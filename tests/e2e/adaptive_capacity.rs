//! Adaptive capacity: a provider whose real limit (the stub account's 6) is below the pool's
//! configured 20. Its over-capacity answers, repeated at that level, make it the pool's
//! ceiling; probes above it are refused and wait longer each time; the effective limit settles
//! at the provider's, shown by `GET /v1/pools`, and the refusals thin out to near zero while
//! every unit still completes.

use serde_json::json;

use crate::support::*;

const POOL: &str = "fixture";
const CONFIGURED: u32 = 20;
const PROVIDER_LIMIT: u32 = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_effective_limit_converges_under_the_providers_real_limit() {
    let m = Manual::start(CONFIGURED, PROVIDER_LIMIT).await;
    let mut tasks = Vec::new();
    for _ in 0..6 {
        tasks.push(m.submit(POOL, json!({"count": 40, "polls": 1})).await);
    }
    // (round, refusals so far, accepted creates so far, effective limit shown)
    let mut samples: Vec<(usize, u32, u32, u64)> = Vec::new();
    let mut round = 0;
    loop {
        let mut done = true;
        for t in &tasks {
            done &= m.task(t).await["status"] == "completed";
        }
        if done {
            break;
        }
        round += 1;
        assert!(round < 3_000, "not done after {round} rounds");
        m.round(&[POOL], 50).await;
        let (status, pools) = api_call(&m.services, "GET", "/v1/pools", None).await;
        assert_eq!(status, 200, "{pools}");
        let pool = pools
            .as_array()
            .and_then(|a| a.iter().find(|p| p["name"] == POOL))
            .cloned()
            .unwrap_or_default();
        assert_eq!(pool["max_slots"], CONFIGURED, "{pool}");
        let effective = pool["effective_max_slots"].as_u64().unwrap_or(u64::MAX);
        assert!((1..=u64::from(CONFIGURED)).contains(&effective), "{pool}");
        let stats = m.stub.stats();
        samples.push((round, stats.capacity_refusals, stats.creates, effective));
    }
    let stats = m.stub.stats();
    assert_eq!(stats.creates, 240, "one create per unit: {stats:?}");
    assert!(stats.capacity_refusals > 0, "the provider's limit was met");

    // Once learned, the effective limit stays at the provider's, or one above it while a
    // refusal is being counted.
    let Some(first) = samples.iter().position(|s| s.3 < u64::from(CONFIGURED)) else {
        panic!("no ceiling was learned: {samples:?}");
    };
    let after = &samples[first..];
    let highest = after.iter().map(|s| s.3).max().unwrap_or(0);
    assert!(
        highest <= u64::from(PROVIDER_LIMIT) + 1,
        "effective limit went up to {highest}"
    );
    // Once it is learned, the refusals are the probes above it (about one per
    // `capacity_probe_max`, rounds advancing the clock 50 ms) and the asks after them: never
    // one per round.
    let probe_max_ms = m.services.config.scheduler.capacity_probe_max.as_millis() as usize;
    let last = after.last().expect("samples");
    let refused = last.1 - samples[first].1;
    let created = last.2 - samples[first].2;
    let probes = after.len() * 50 / probe_max_ms.max(1) + 4;
    eprintln!(
        "adaptive capacity: {} refusals in all, {} before the ceiling was learned, {refused} \
         for {created} creates after it over {} rounds ({probes} probes at most), effective \
         limit at most {highest} after it",
        last.1,
        samples[first].1,
        after.len()
    );
    assert!(
        created > 100,
        "the run went on after the ceiling: {created}"
    );
    assert!(
        refused as usize * 3 <= after.len(),
        "{refused} refusals for {created} creates in {} rounds after the ceiling was learned",
        after.len()
    );
    m.check().await;
}
