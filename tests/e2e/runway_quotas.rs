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

/// Another client of the same Runway key creates `n` gen4_turbo tasks (slotd never sees them).
async fn another_client_creates(run: &Run, n: usize) {
    let http = reqwest::Client::new();
    for i in 0..n {
        let r = http
            .post(format!("{}/v1/image_to_video", run.sim.base_url()))
            .bearer_auth(slotd_sim::runway::API_KEY_DEFAULT)
            .header("X-Runway-Version", "2024-11-06")
            .json(
                &serde_json::json!({"model": "gen4_turbo", "ratio": "1280:720",
                "duration": 5, "promptImage": format!("https://example.com/other/{i}.png")}),
            )
            .send()
            .await
            .expect("create");
        assert_eq!(r.status(), 200, "{:?}", r.text().await);
    }
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
    // The log counts a create at its grant, before the request leaves: the sixth may still be
    // on its way to Runway when the pool shows itself full.
    eventually(
        Duration::from_secs(10),
        "the six granted creates reached Runway",
        async || (run.sim.stats().creates == 6).then_some(()),
    )
    .await;

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

/// The account publishes less than slotd is configured for (contract 1.3 `provider.limits`:
/// Runway's `GET /v1/organization`): 2 concurrent generations of the model where tier 3 sizes
/// the pool at 5, and a daily limit of 6 of which another client of the same key has already
/// used 3. slotd reads the organization at start and again on its refresh period, shows both
/// limits as discovered, never runs more than 2 at once, and creates only the 3 the day has
/// left: of 5 shots 3 complete and 2 wait `pending` (the pool closed until the day frees a
/// create); none fails and Runway refuses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_discovered_limits_below_the_configuration_are_obeyed_and_shown() {
    let opts = RunwayOptions {
        model_concurrency: vec!["gen4_turbo=2".parse().expect("a model limit")],
        daily_limit: 6,
        day_seconds: Some(3_600.0),
        ..sim_options(11)
    };
    let run = Run::start(opts, |c, _| {
        if let Some(h) = c.handlers.get_mut(crate::runway::HANDLER) {
            h.settings.insert("read_organization".into(), "true".into());
        }
    })
    .await;
    // slotd's read at start comes first (under load the handler may load after the other
    // client's creates, and that one read would see them all, leaving no period read to show).
    eventually(
        Duration::from_secs(30),
        "slotd reads the organization at start",
        async || (run.sim.stats().organization_gets >= 1).then_some(()),
    )
    .await;
    // Another client of the key creates 3 tasks.
    another_client_creates(&run, 3).await;
    // slotd reads the organization again on its period and sees them.
    let pool = eventually(
        Duration::from_secs(30),
        "the pool shows the discovered limits and the other client's creates",
        async || {
            let p = pool_view(&run).await;
            let daily = p["quotas"]
                .as_array()
                .and_then(|q| q.iter().find(|q| q["dimension"] == "daily"))
                .cloned()?;
            (daily["used"] == 3).then_some(p)
        },
    )
    .await;
    assert_eq!(pool["max_slots"], 2, "{pool}");
    assert_eq!(pool["max_slots_source"], "discovered", "{pool}");
    let daily = &pool["quotas"][0];
    assert_eq!(daily["source"], "discovered", "{pool}");
    assert_eq!(daily["limit"], 6, "{pool}");
    assert_eq!(daily["remaining"], 3, "{pool}");

    let id = run.submit(payload("found", 5)).await;
    let view = eventually(
        Duration::from_secs(60),
        "3 shots completed and 2 wait for the day",
        async || {
            let v = run.task(&id).await;
            let s = statuses(&v);
            let done = s.iter().filter(|s| *s == "completed").count();
            let pending = s.iter().filter(|s| *s == "pending").count();
            (done == 3 && pending == 2).then_some(v)
        },
    )
    .await;
    for r in results(&view) {
        assert_ne!(r["status"], "failed", "{view}");
    }
    let waiting = pool_view(&run).await;
    assert!(waiting["closed_until"].is_i64(), "{waiting}");
    let stats = run.sim.stats();
    assert_eq!(stats.daily_limit_refusals, 0, "Runway refused nothing");
    assert_eq!(stats.creates, 6, "3 by the other client, 3 by slotd");
    // slotd's own tasks (the other client's 3 share the account's 2 runners) never overlap
    // more than 2 at Runway: each lives from its create to its end there.
    let ours: std::collections::HashSet<&str> = results(&view)
        .iter()
        .filter_map(|r| r["provider_task_id"].as_str())
        .collect();
    let jobs = run.sim.jobs();
    let mut edges: Vec<(f64, i32)> = jobs
        .iter()
        .filter(|j| ours.contains(j.task_id.as_str()))
        .flat_map(|j| [(j.created, 1), (j.ended.unwrap_or(f64::MAX), -1)])
        .collect();
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut at_once = 0;
    let mut most = 0;
    for (_, d) in edges {
        at_once += d;
        most = most.max(at_once);
    }
    assert_eq!(ours.len(), 3);
    assert!(most <= 2, "{most} of slotd's tasks at once at Runway");
    assert!(
        stats.organization_gets >= 2,
        "read at start and on the period"
    );
    run.stop(&[(POOL, 2)]).await;
}

/// A handler that can publish limits is read as soon as it is loaded or replaced, not on the
/// next refresh period (here an hour away): another client's 3 creates show on the pool right
/// after `runway-video.wasm` is replaced in `plugins/` (the same component with a custom
/// section added, so a new file to the watcher).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_limits_are_read_again_when_the_handler_is_replaced() {
    let opts = RunwayOptions {
        daily_limit: 6,
        day_seconds: Some(3_600.0),
        ..sim_options(12)
    };
    let run = Run::start(opts, |c, _| {
        c.scheduler.limits_refresh = Duration::from_secs(3_600);
        if let Some(h) = c.handlers.get_mut(crate::runway::HANDLER) {
            h.settings.insert("read_organization".into(), "true".into());
        }
    })
    .await;
    let daily_used = async |run: &Run| {
        let p = pool_view(run).await;
        p["quotas"]
            .as_array()
            .and_then(|q| q.iter().find(|q| q["dimension"] == "daily"))
            .map(|d| (d["source"].clone(), d["used"].clone()))
    };
    eventually(Duration::from_secs(30), "read at start", async || {
        (daily_used(&run).await == Some(("discovered".into(), 0.into()))).then_some(())
    })
    .await;
    another_client_creates(&run, 3).await;
    let file = run.services.config.plugins_dir.join("runway-video.wasm");
    let mut bytes = std::fs::read(&file).expect("the handler's file");
    // A custom section (id 0): size 12, name "slotd-test" (10), payload "x".
    bytes.extend_from_slice(&[0x00, 0x0c, 0x0a]);
    bytes.extend_from_slice(b"slotd-testx");
    let staged = file.with_extension("wasm.tmp");
    std::fs::write(&staged, &bytes).expect("write");
    std::fs::rename(&staged, &file).expect("replace");
    eventually(
        Duration::from_secs(30),
        "the replaced handler is read at once",
        async || (daily_used(&run).await == Some(("discovered".into(), 3.into()))).then_some(()),
    )
    .await;
    // The replaced handler serves: a shot goes through within what the day has left.
    let id = run.submit(payload("replaced", 1)).await;
    eventually(Duration::from_secs(60), "the shot completes", async || {
        let v = run.task(&id).await;
        (statuses(&v) == ["completed"]).then_some(())
    })
    .await;
    run.stop(&[(POOL, 5)]).await;
}

/// Runway's day is shorter than slotd was told (12 s where the handler says 40 s): slotd's own
/// log would keep the pool closed for 40 s after its sixth create, but the organization read
/// says how many Runway still counts, and a lower count than the log is believed: the oldest
/// creates leave the log and the pool opens when Runway's day frees them, without a refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_a_shorter_day_at_the_provider_frees_the_pool_when_the_provider_does() {
    const TOLD: f64 = 40.0;
    const REAL: f64 = 12.0;
    let opts = RunwayOptions {
        daily_limit: 6,
        day_seconds: Some(REAL),
        ..sim_options(13)
    };
    let run = Run::start(opts, |c, _| {
        c.scheduler.limits_refresh = Duration::from_millis(500);
        if let Some(h) = c.handlers.get_mut(crate::runway::HANDLER) {
            h.settings.insert("read_organization".into(), "true".into());
            h.settings.insert("day_secs".into(), TOLD.to_string());
        }
    })
    .await;
    let id = run.submit(payload("short-day", 10)).await;
    let views = run.wait_terminal(&[id], Duration::from_secs(90)).await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    let created = created_secs(&run);
    assert_eq!(created.len(), 10);
    assert!(
        created[5] < REAL && created[6] >= REAL - 0.5 && created[6] < TOLD - 10.0,
        "6 in Runway's first day, the 7th once Runway's day freed it, long before slotd's \
         own {TOLD} s: {created:?}"
    );
    let stats = run.sim.stats();
    assert_eq!(stats.daily_limit_refusals, 0, "Runway refused nothing");
    assert_eq!(stats.creates, 10, "one create per unit");
    println!(
        "a {REAL} s day at Runway where {TOLD} s was assumed: the 7th create {:.1} s after the \
         first",
        created[6]
    );
    run.stop(&[(POOL, 5)]).await;
}
