//! Runway's rate limit end to end (issue 59): Runway answers 429 both for a per-period rate
//! limit and for its daily generation limit, and only the second is a quota. The real Runway
//! simulator answers a fifth of creates 429 "Too many requests" at random, with the day far
//! from spent (`--create-429-rate`); the built `runway-video` component asks
//! `GET /v1/organization` what the 429 was, finds the day's generations well below the limit
//! and reports a pace signal, not a closure. The pool keeps working at the default retry
//! budget: every shot completes, the pool never shows a closure, and Runway never had more of
//! our tasks at once than the pool's slots.

use std::time::Duration;

use serde_json::Value;
use slotd_core::config::PoolConfig;
use slotd_sim::runway::RunwayOptions;

use crate::runway::{HANDLER, MODEL, POOL, Run, never_throttled, payload, results, sim_options};
use crate::support::*;

/// The pool's slots, and the simulated account's concurrency for the model.
const SLOTS: u32 = 3;
const SHOTS: usize = 12;

/// `GET /v1/pools`' entry for the Runway pool.
async fn pool_view(run: &Run) -> Value {
    let pools = get_json(&run.client, &format!("{}/v1/pools", run.base))
        .await
        .unwrap_or_default();
    pools
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == POOL))
        .cloned()
        .unwrap_or_default()
}

/// A dozen shots on a pool of 3 while Runway answers a fifth of creates with its rate-limit
/// 429 (the daily limit, a million, never near). The pool has the discovered daily window the
/// issue's pool had (`read_organization`); before the fix the first 429 closed it until that
/// window freed its oldest create (`quota_exhausted`, basis `window`), here 864 s away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_rate_limit_429s_at_random_pace_the_pool_and_close_nothing() {
    let opts = RunwayOptions {
        create_429_rate: 0.2,
        model_concurrency: vec![format!("{MODEL}={SLOTS}").parse().expect("a model limit")],
        ..sim_options(59)
    };
    let run = Run::start(opts, |c, _| {
        c.pools.insert(POOL.into(), PoolConfig::slots(SLOTS));
        if let Some(h) = c.handlers.get_mut(HANDLER) {
            h.settings.insert("read_organization".into(), "true".into());
        }
    })
    .await;
    // The organization's daily window is known before the first create, as it was for the
    // issue's pool.
    eventually(
        Duration::from_secs(30),
        "the discovered daily window on the pool",
        async || {
            let p = pool_view(&run).await;
            let found = p["quotas"]
                .as_array()
                .is_some_and(|q| q.iter().any(|q| q["source"] == "discovered"));
            found.then_some(())
        },
    )
    .await;

    let id = run.submit(payload("rate-limited", SHOTS)).await;
    // Watch the pool the whole run: a closure, even a short one, is the bug.
    let view = eventually(
        Duration::from_secs(90),
        "every shot completed",
        async || {
            let p = pool_view(&run).await;
            assert!(
                p["closure"].is_null() && p["closed_until"].is_null(),
                "a rate-limit 429 closed the pool: {p}"
            );
            let v = run.task(&id).await;
            matches!(
                v["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            )
            .then_some(v)
        },
    )
    .await;
    assert_eq!(view["status"], "completed", "{view}");
    for r in results(&view) {
        assert_eq!(r["status"], "completed", "{r}");
    }

    let stats = run.sim.stats();
    let m = &stats.models[MODEL];
    let refused = stats.faults.rate_limited_creates;
    assert!(
        refused >= 2,
        "rate-limit 429s were injected: {refused} of {} creates",
        stats.creates + refused
    );
    assert_eq!(stats.daily_limit_refusals, 0, "the day was never spent");
    assert_eq!(stats.creates, SHOTS as u64, "a refused create made nothing");
    assert!(
        stats.organization_gets >= 2,
        "the handler asked the organization about a 429 (beyond the start's read): {}",
        stats.organization_gets
    );
    assert!(
        m.max_held_seen <= SLOTS,
        "Runway saw {} of our tasks unfinished at once",
        m.max_held_seen
    );
    never_throttled(&run.sim.jobs());
    eprintln!(
        "{SHOTS} shots: {refused} creates answered 429 (rate limit), {} organization reads, \
         at most {} at Runway at once",
        stats.organization_gets, m.max_held_seen
    );
    run.stop(&[]).await;
}
