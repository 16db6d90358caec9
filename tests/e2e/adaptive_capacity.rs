//! Adaptive capacity: a provider whose real limit (the stub account's 6) is below the pool's
//! configured 20. Its over-capacity answers lower the pool's effective limit (multiplicative
//! decrease), accepted submits raise it one slot per window (additive increase); the effective
//! limit settles under the provider's, shown by `GET /v1/pools`, and the refusals thin out to
//! near zero while every unit still completes.

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

    // After the first refusal the effective limit stays under the configured one and never
    // climbs far past the provider's.
    let first = samples
        .iter()
        .position(|s| s.1 > 0)
        .expect("a refusal was seen");
    let after = &samples[first..];
    let highest = after.iter().map(|s| s.3).max().unwrap_or(0);
    assert!(
        highest <= u64::from(PROVIDER_LIMIT) + 1,
        "effective limit went up to {highest}"
    );
    // Refusals thin out: in the second half of the run, at most one in twenty creates.
    let mid = &after[after.len() / 2];
    let last = after.last().expect("samples");
    let refused = last.1 - mid.1;
    let created = last.2 - mid.2;
    eprintln!(
        "adaptive capacity: {} refusals in all, {refused} for {created} creates in the second \
         half, effective limit at most {highest} after the first refusal",
        last.1
    );
    assert!(created > 50, "the second half still submitted: {created}");
    assert!(
        refused * 20 <= created,
        "{refused} refusals for {created} creates in the second half"
    );
    // Without adaptation every tick with free configured slots would have met the limit.
    let ticks_after = after.len() as u32;
    assert!(
        last.1 * 4 < ticks_after,
        "{} refusals in {ticks_after} rounds",
        last.1
    );
    m.check().await;
}
