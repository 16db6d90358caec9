//! Cancel and provider slots: a cancelled unit whose job is at the provider keeps its slot until
//! the job ends (the provider keeps running it whatever slotd decides), then ends `cancelled`
//! with no finalization, and is never submitted again. Freeing the slot at once would let the
//! next submit meet the provider's limit (Kling 1303).

use std::time::Duration;

use serde_json::{Value, json};

use crate::kling::{Run, sim_options, video_payload};
use crate::support::*;

const POOL: &str = "fixture";

/// The statuses of a task's units, by index.
fn statuses(view: &Value) -> Vec<String> {
    view["results"]
        .as_array()
        .map(|r| {
            r.iter()
                .map(|u| u["status"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}

async fn cancel(m: &Manual, id: &str) -> Value {
    let (status, view) =
        api_call(&m.services, "POST", &format!("/v1/tasks/{id}/cancel"), None).await;
    assert_eq!(status, 200, "cancel answered {status}: {view}");
    view
}

/// Scheduler driven by hand (manual clock, fixture handler, stub provider whose account takes
/// 6, two more than the pool of 4, so a slot freed too early shows as a fifth job in flight
/// rather than as a refusal the stub makes for slotd): task A fills the pool, is cancelled
/// while its jobs run, and task B waits. A's slots stay held until the stub says each job
/// ended (one of them fails there), never more than 4 jobs run, and A ends `cancelled`
/// without a download.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_units_hold_their_slots_until_the_jobs_end() {
    let m = Manual::start(4, 6).await;
    let a = m.submit(POOL, json!({"count": 3, "polls": 3})).await;
    let a_fail = m
        .submit(POOL, json!({"count": 1, "polls": 4, "behavior": "fail"}))
        .await;
    m.round(&[POOL], 10).await;
    assert_eq!(m.stub.stats().in_flight, 4, "A's four jobs run at the stub");

    let view = cancel(&m, &a).await;
    cancel(&m, &a_fail).await;
    assert_eq!(statuses(&view), ["submitted"; 3], "{view}");
    assert_eq!(view["cancel_requested"], true, "{view}");
    assert_eq!(view["status"], "running", "{view}");
    assert!(
        view["message"].as_str().is_some_and(
            |s| s.contains("cancelling: 3 units waiting for their provider jobs to end")
        ),
        "{view}"
    );
    assert_eq!(m.services.slots.used(POOL).await.ok(), Some(4));
    // A second cancel changes nothing.
    let again = cancel(&m, &a).await;
    assert_eq!(statuses(&again), ["submitted"; 3], "{again}");

    let b = m.submit(POOL, json!({"count": 4, "polls": 0})).await;
    let mut rounds = 0;
    loop {
        let ta = m.task(&a).await;
        let tf = m.task(&a_fail).await;
        let tb = m.task(&b).await;
        let stats = m.stub.stats();
        assert_eq!(
            stats.capacity_refusals, 0,
            "a submit met the account's limit"
        );
        assert!(stats.in_flight <= 4, "{} jobs in flight", stats.in_flight);
        let waiting = statuses(&ta)
            .iter()
            .chain(&statuses(&tf))
            .filter(|s| *s == "submitted")
            .count();
        for s in statuses(&ta).iter().chain(&statuses(&tf)) {
            assert!(
                s == "submitted" || s == "cancelled",
                "a cancelled task's unit went {s}: {ta} {tf}"
            );
        }
        let b_holding = statuses(&tb).iter().filter(|s| *s == "submitted").count();
        assert!(
            waiting + b_holding <= 4,
            "{waiting} cancelled units wait and {b_holding} of B hold slots: more than the pool"
        );
        if waiting == 0 {
            break;
        }
        rounds += 1;
        assert!(rounds < 200, "A's jobs never ended: {ta}");
        m.round(&[POOL], 50).await;
    }
    for id in [&a, &a_fail] {
        let t = m.task(id).await;
        assert_eq!(t["status"], "cancelled", "{t}");
        assert_eq!(t["cancel_requested"], true, "{t}");
        for r in t["results"].as_array().expect("results") {
            assert!(
                r.get("artifacts").is_none(),
                "a cancelled unit was finalized: {r}"
            );
            assert!(r["provider_task_id"].is_string(), "{r}");
        }
    }

    m.run_until(&[POOL], 200, async |m| {
        m.task(&b).await["status"] == "completed"
    })
    .await;
    let stats = m.stub.stats();
    assert_eq!(stats.capacity_refusals, 0);
    assert!(stats.max_in_flight <= 4, "{}", stats.max_in_flight);
    assert_eq!(
        stats.creates, 8,
        "A's four and B's four, nothing resubmitted"
    );
    assert!(
        stats.creates_by_key.values().all(|&n| n == 1),
        "a key was created twice"
    );
    assert_eq!(stats.downloads, 4, "B's four; nothing of A was downloaded");
    assert_eq!(
        m.services.slots.used(POOL).await.ok(),
        Some(0),
        "no slot leaked"
    );
    m.check().await;
}

/// A cancelled unit that was marked submitted but has no provider job recorded (in doubt: a
/// crash or fault between the marker and the provider's answer) is never handed to the handler
/// again, whose in-doubt resolution submits when its lookup finds nothing: it ends `cancelled`
/// once the call that marked it is past its deadline, and the provider sees no create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_doubt_cancelled_unit_is_never_submitted() {
    let m = Manual::start(2, 2).await;
    let a = m.submit(POOL, json!({"count": 1, "polls": 0})).await;
    let (_, units) = api_call(
        &m.services,
        "GET",
        &format!("/v1/tasks/{a}?units=true"),
        None,
    )
    .await;
    let unit_id = units["units"][0]["id"]
        .as_str()
        .expect("unit id")
        .to_string();
    let now = slotd_core::clock::Clock::now_ms(m.clock.as_ref());
    // The marker of a call that never answered (the scheduler died in it).
    // The service holds no unit write: the dead scheduler's marker is written through a store
    // of its own on the same database.
    let marked = slotd_store::open(&m.services.config.database_url)
        .await
        .expect("the store, with its unit writes")
        .unit_mark_submitted(std::slice::from_ref(&unit_id), now, now, None)
        .await
        .expect("mark submitted");
    assert_eq!(marked.len(), 1);
    m.services
        .slots
        .acquire(POOL, std::slice::from_ref(&unit_id), 2)
        .await
        .expect("slot");

    let view = cancel(&m, &a).await;
    assert_eq!(statuses(&view), ["submitted"], "{view}");
    // Within the marking call's deadline the unit waits; past it, it ends without a create.
    m.round(&[POOL], 100).await;
    assert_eq!(statuses(&m.task(&a).await), ["submitted"]);
    m.run_until(&[POOL], 100, async |m| {
        m.task(&a).await["status"] == "cancelled"
    })
    .await;
    let stats = m.stub.stats();
    assert_eq!(stats.creates, 0, "a cancelled unit was submitted");
    assert_eq!(m.services.slots.used(POOL).await.ok(), Some(0));
    m.check().await;
}

/// The real Kling simulator and kling-video handler, real loops, pool = account limit (20):
/// task A fills the pool, is cancelled while its jobs run, and task B is submitted at once.
/// The simulator never answers 1303, never runs more than 20, and A ends `cancelled`.
async fn cancel_then_fill_against_the_simulator(callbacks: bool) {
    let mut opts = sim_options(21);
    // Jobs of 0.6 to 2.4 s: long enough to cancel them while they run.
    opts.time_scale = 0.02;
    let run = Run::start(opts, 20, callbacks).await;
    let a = run.submit("video", video_payload(20)).await;
    eventually(
        Duration::from_secs(30),
        "A's 20 jobs at the simulator",
        async || {
            let v = run.task(&a).await;
            let results = v["results"].as_array()?;
            results
                .iter()
                .all(|r| r["status"] == "submitted" && r["provider_task_id"].is_string())
                .then_some(())
        },
    )
    .await;
    let r = run
        .client
        .post(format!("{}/v1/tasks/{a}/cancel", run.base))
        .send()
        .await
        .expect("cancel");
    assert_eq!(r.status(), 200);
    let b = run.submit("video", video_payload(20)).await;

    let views = run
        .wait_terminal(&[a.clone(), b.clone()], Duration::from_secs(120))
        .await;
    assert_eq!(views[0]["status"], "cancelled", "{}", views[0]);
    assert!(
        statuses(&views[0]).iter().all(|s| s == "cancelled"),
        "{}",
        views[0]
    );
    assert_eq!(views[1]["status"], "completed", "{}", views[1]);
    let stats = run.sim.stats();
    assert_eq!(
        stats.rate_limited_1303, 0,
        "a submit met the account's limit"
    );
    assert!(
        stats.max_running <= 20,
        "simulator saw {} at once",
        stats.max_running
    );
    assert_eq!(stats.creates, 40, "A's 20 and B's 20, nothing resubmitted");
    if callbacks {
        assert!(stats.callbacks_sent > 0);
    }
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_then_fill_kling_polling() {
    cancel_then_fill_against_the_simulator(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_then_fill_kling_callbacks() {
    cancel_then_fill_against_the_simulator(true).await;
}
