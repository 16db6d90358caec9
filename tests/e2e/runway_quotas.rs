//! Runway's daily generation limit end to end (docs/accounts-deadlines-budgets.md "Quotas"):
//! the real Runway simulator with a shortened day (`--day-seconds`), the built `runway-video`
//! component, the real scheduler loops. A daily limit never fails a unit: slotd either counts
//! the creates itself (`[pools."NAME"] daily`) and closes the pool until its window frees one,
//! or takes the provider's 429 as a closure until the time it gives, probes once and goes on.

use std::time::Duration;

use serde_json::Value;
use slotd_core::config::{PoolConfig, Quota, Window};
use slotd_sim::runway::RunwayOptions;

use crate::runway::{POOL, Run, payload, results, sim_options, statuses};
use crate::support::*;

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

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0))
}

/// Creation times of the simulator's tasks, in real seconds from its first create, ascending.
fn created_secs(run: &Run) -> Vec<f64> {
    let scale = run.sim.stats().time_scale;
    let mut t: Vec<f64> = run.sim.jobs().iter().map(|j| j.created * scale).collect();
    t.sort_by(f64::total_cmp);
    let first = t.first().copied().unwrap_or(0.0);
    t.iter().map(|c| c - first).collect()
}

/// Runway allows 6 creates of the model per (40 s) day; slotd's pool of 5 knows it from
/// `[pools."runway:gen4_turbo"] daily = { limit = 6, window = "40s" }`. 10 shots: 6 are created
/// in the first window, the pool then shows itself closed until the window frees a create (and
/// the waiting units say so, with an ETA after that), the other 4 are created after it; none
/// fails and Runway refuses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_a_configured_daily_limit_holds_the_pool_until_the_day_frees_and_fails_nothing() {
    const DAY: f64 = 40.0;
    let opts = RunwayOptions {
        daily_limit: 6,
        day_seconds: Some(DAY),
        ..sim_options(7)
    };
    let run = Run::start(opts, |c, _| {
        c.pools.insert(
            POOL.into(),
            PoolConfig {
                daily: Some(Quota {
                    limit: 6,
                    window: Window::Rolling(Duration::from_secs_f64(DAY)),
                }),
                ..PoolConfig::default()
            },
        );
    })
    .await;
    let id = run.submit(payload("day", 10)).await;

    // The window fills: six created, the pool closed until the first of them leaves it.
    let pool = eventually(
        Duration::from_secs(30),
        "the pool closed by its quota",
        async || {
            let p = pool_view(&run).await;
            (p["closed_until"].as_i64().is_some() && p["quotas"][0]["remaining"] == 0).then_some(p)
        },
    )
    .await;
    let q = &pool["quotas"][0];
    assert_eq!(q["dimension"], "daily", "{pool}");
    assert_eq!(
        (q["limit"].as_u64(), q["used"].as_u64()),
        (Some(6), Some(6))
    );
    assert_eq!(q["source"], "config");
    let closed_until = pool["closed_until"].as_i64().unwrap_or(0);
    assert_eq!(q["resets_at"].as_i64(), Some(closed_until));
    assert!(closed_until > now_ms(), "{pool}");
    assert_eq!(run.sim.stats().creates, 6);

    // Once the six have ended, the four waiting say why and until when; the ETA is after it.
    let view = eventually(Duration::from_secs(30), "six done, four held", async || {
        let v = run.task(&id).await;
        let s = statuses(&v);
        (s.iter().filter(|s| *s == "completed").count() == 6).then_some(v)
    })
    .await;
    if now_ms() < closed_until - 2_000 {
        let held: Vec<&Value> = results(&view)
            .iter()
            .filter(|r| r["status"] == "pending")
            .collect();
        assert_eq!(held.len(), 4, "{view}");
        for r in &held {
            let reason = r["wait_reason"].as_str().unwrap_or_default();
            assert!(reason.starts_with("quota daily until "), "{r}");
        }
        let eta = view["estimated_completion_at"].as_i64().unwrap_or(0);
        assert!(
            eta > closed_until,
            "ETA {eta} before the reset {closed_until}: {view}"
        );
    }

    let views = run.wait_terminal(&[id], Duration::from_secs(90)).await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    let created = created_secs(&run);
    assert_eq!(created.len(), 10);
    assert!(
        created[5] < DAY && created[6] >= DAY,
        "6 in the first window, 4 after it: {created:?}"
    );
    let stats = run.sim.stats();
    assert_eq!(
        stats.daily_limit_refusals, 0,
        "slotd counted; Runway refused nothing"
    );
    assert_eq!(stats.creates, 10, "one create per unit");
    run.stop(&[(POOL, 5)]).await;
}

/// No `daily` configured: the 7th create of a 20 s day is refused (429 with `Retry-After`);
/// the handler reports `quota_exhausted`, slotd puts the unit back without spending its retry
/// budget, closes the pool until the provider's time (shown with Runway's words), sends one
/// probe then and goes on. All 10 complete with one refused create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_a_daily_limit_refusal_closes_the_pool_until_the_providers_time_and_fails_nothing() {
    const DAY: f64 = 20.0;
    let opts = RunwayOptions {
        daily_limit: 6,
        day_seconds: Some(DAY),
        daily_retry_after: true,
        ..sim_options(8)
    };
    let run = Run::start(opts, |c, _| {
        // Spent at once if a refusal cost retry budget.
        c.scheduler.retry_budget = 1;
    })
    .await;
    let id = run.submit(payload("refused", 10)).await;
    let pool = eventually(
        Duration::from_secs(30),
        "the pool closed by Runway",
        async || {
            let p = pool_view(&run).await;
            p["closure"].is_object().then_some(p)
        },
    )
    .await;
    let closure = &pool["closure"];
    assert_eq!(closure["code"], "quota_exhausted", "{pool}");
    assert_eq!(closure["basis"], "provider");
    assert!(
        closure["reason"]
            .as_str()
            .is_some_and(|r| r.contains("daily generation limit")),
        "{closure}"
    );
    assert_eq!(pool["closed_until"], closure["until"]);

    let views = run.wait_terminal(&[id], Duration::from_secs(90)).await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    let created = created_secs(&run);
    assert_eq!(created.len(), 10);
    assert!(created[5] < DAY && created[6] >= DAY, "{created:?}");
    let refused = run.sim.stats().daily_limit_refusals;
    assert!(
        (1..=2).contains(&refused),
        "one refused create per window at most, got {refused}"
    );
    assert!(pool_view(&run).await["closure"].is_null(), "open again");
    run.stop(&[(POOL, 5)]).await;
}
