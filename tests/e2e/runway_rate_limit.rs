//! Runway's rate limit end to end (docs/accounts-deadlines-budgets.md, "Quotas"): Runway answers 429 both for a per-period rate
//! limit and for its daily generation limit, and only the second is a quota. The real Runway
//! simulator answers a fifth of creates 429 "Too many requests" at random, with the day far
//! from spent (`--create-429-rate`); the built `runway-video` component asks
//! `GET /v1/organization` what the 429 was, finds the day's generations well below the limit
//! and reports a pace signal, not a closure. The pool keeps working at the default retry
//! budget: every shot completes, the pool never shows a closure, and Runway never had more of
//! our tasks at once than the pool's slots. And the daily limit itself, when Runway gives no
//! time: the closure lasts no longer than the evidence supports (a probe's rest while slotd's
//! own window has room, not that window's 24 hours).

use std::time::Duration;

use serde_json::Value;
use slotd_core::config::{PoolConfig, Quota, Window};
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

/// Another client of the key creates `n` tasks of the model (slotd never sees them).
async fn another_client_creates(run: &Run, n: usize) {
    let http = reqwest::Client::new();
    for i in 0..n {
        let r = http
            .post(format!("{}/v1/image_to_video", run.sim.base_url()))
            .bearer_auth(slotd_sim::runway::API_KEY_DEFAULT)
            .header("X-Runway-Version", "2024-11-06")
            .json(
                &serde_json::json!({"model": MODEL, "ratio": "1280:720", "duration": 5,
                "promptImage": format!("https://example.com/other/{i}.png")}),
            )
            .send()
            .await
            .expect("create");
        assert_eq!(r.status(), 200, "{:?}", r.text().await);
    }
}

/// The daily limit itself, with no time to go by: the account allows 3 generations a (10 s)
/// day and another client of the key has used them, while slotd is configured for 1,000 a
/// day and counts 1 of its own. Runway's 429 (no `Retry-After`) is the daily limit on
/// Runway's figures, so the pool closes; but slotd's own window has room, so it says nothing
/// about when Runway's day frees one: the closure is a probe's short rest, repeated (doubling)
/// until Runway takes a create, never "until slotd's oldest create leaves its 24 hours".
/// All 3 shots complete once Runway's day frees, with no retry budget spent on the refusals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_a_daily_limit_without_a_time_closes_the_pool_no_longer_than_the_evidence() {
    const DAY: f64 = 10.0;
    let opts = RunwayOptions {
        daily_limit: 3,
        day_seconds: Some(DAY),
        ..sim_options(60)
    };
    let run = Run::start(opts, |c, _| {
        c.pools.insert(
            POOL.into(),
            PoolConfig {
                max_slots: Some(SLOTS),
                daily: Some(Quota {
                    limit: 1_000,
                    window: Window::Rolling(Duration::from_secs(86_400)),
                }),
                ..PoolConfig::default()
            },
        );
        // Spent at once if a refusal cost retry budget.
        c.scheduler.retry_budget = 1;
    })
    .await;
    another_client_creates(&run, 3).await;
    let id = run.submit(payload("day-spent", 3)).await;
    let pool = eventually(
        Duration::from_secs(30),
        "the pool closed by Runway's daily limit",
        async || {
            let p = pool_view(&run).await;
            p["closure"].is_object().then_some(p)
        },
    )
    .await;
    let closure = &pool["closure"];
    assert_eq!(closure["code"], "quota_exhausted", "{pool}");
    assert!(
        closure["reason"]
            .as_str()
            .is_some_and(|r| r.contains("3 of 3")),
        "Runway's figures in the reason: {closure}"
    );
    let (since, until) = (
        closure["since"].as_i64().unwrap_or(0),
        closure["until"].as_i64().unwrap_or(i64::MAX),
    );
    assert!(
        until - since < (DAY * 1000.0) as i64,
        "closed for {} ms on a window with room (1 of 1,000): {pool}",
        until - since
    );
    assert_ne!(closure["basis"], "window", "{pool}");

    let views = run.wait_terminal(&[id], Duration::from_secs(60)).await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    let stats = run.sim.stats();
    assert!(stats.daily_limit_refusals >= 1, "{stats:?}");
    assert_eq!(stats.creates, 6, "3 by the other client, 3 by slotd");
    assert!(pool_view(&run).await["closure"].is_null(), "open again");
    eprintln!(
        "Runway's day spent: {} refused creates (probes), first closure {} ms ({})",
        stats.daily_limit_refusals,
        until - since,
        closure["basis"]
    );
    run.stop(&[]).await;
}
