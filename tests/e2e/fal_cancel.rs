//! fal's cancel and the lost submit answer end to end. fal cancels only requests still
//! `IN_QUEUE`; a running one goes on (and is billed) until fal reports its end, so its slot
//! stays held until then. fal has no idempotency key: a submit whose answer was lost is never
//! sent again while its outcome is unknown; `fal-video` finds the request it made in fal's
//! request history and carries on with it. The fal key stays out of the guest, the recording
//! and the task views.

use std::time::Duration;

use slotd_sim::fal::{ACCOUNT_DEFAULT, FalOptions, KeySpec};

use crate::fal::*;
use crate::support::*;

/// The account runs one request at once; the pool holds three slots, so fal runs one shot and
/// queues two. Cancelling the task removes the two queued requests at fal (confirmed, no
/// webhook) and frees their slots at once; the running one cannot be cancelled at fal, so its
/// slot stays held while fal runs it and is freed when fal reports the end. The task ends
/// `cancelled`; fal ran exactly one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fal_cancel_frees_queued_requests_at_once_and_running_ones_at_their_end() {
    let opts = FalOptions {
        concurrency: 1,
        // Slower: the running shot lasts seconds, long enough to look at it.
        time_scale: 0.1,
        ..sim_options()
    };
    let run = Run::start(opts, |c, _| {
        if let Some(p) = c.pools.get_mut(POOL) {
            p.max_slots = Some(3);
        }
    })
    .await;
    let id = run.submit(payload("cancel", 3)).await;
    eventually(
        Duration::from_secs(60),
        "one running and two queued at fal",
        async || {
            let jobs = run.sim.jobs();
            let running = jobs.iter().filter(|j| j.status == "IN_PROGRESS").count();
            let queued = jobs.iter().filter(|j| j.status == "IN_QUEUE").count();
            (running == 1 && queued == 2).then_some(())
        },
    )
    .await;
    let running = run
        .sim
        .jobs()
        .into_iter()
        .find(|j| j.status == "IN_PROGRESS")
        .expect("running job");
    run.cancel(&id).await;

    // The queued two are cancelled at fal and their slots freed while the third still runs.
    eventually(
        Duration::from_secs(30),
        "queued requests cancelled at fal",
        async || {
            let pool = run.pool().await;
            let stats = run.sim.stats();
            let still_running = run
                .sim
                .jobs()
                .iter()
                .any(|j| j.request_id == running.request_id && j.status == "IN_PROGRESS");
            (stats.cancelled == 2 && pool["used"] == 1 && still_running).then_some(())
        },
    )
    .await;
    let view = run.task(&id).await;
    let statuses: Vec<&str> = results(&view)
        .iter()
        .filter_map(|r| r["status"].as_str())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == "cancelled").count(),
        2,
        "{view}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == "submitted").count(),
        1,
        "the running one keeps its slot: {view}"
    );

    let views = run.wait_terminal(&[id], Duration::from_secs(120)).await;
    assert_eq!(views[0]["status"], "cancelled", "{}", views[0]);
    let pool = run.pool().await;
    assert_eq!(pool["used"], 0, "{pool}");
    let stats = run.sim.stats();
    assert_eq!(stats.accounts[ACCOUNT_DEFAULT].submits, 3);
    assert_eq!(stats.accounts[ACCOUNT_DEFAULT].completed, 3, "{stats:?}");
    let ran: Vec<_> = run
        .sim
        .jobs()
        .into_iter()
        .filter(|j| j.started.is_some())
        .collect();
    assert_eq!(
        ran.len(),
        1,
        "fal ran only the one that had started: {ran:?}"
    );
    run.stop().await.shutdown().await.expect("sim stop");
}

/// Every submit answer is lost (the request is created at fal, slotd sees a 502 or a cut
/// connection). slotd never submits again while the outcome is unknown: fal sees exactly one
/// request per shot, `fal-video` finds each in fal's request history once it has finished,
/// and the shots complete with fal's files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fal_a_lost_submit_answer_is_resolved_without_a_second_paid_request() {
    let opts = FalOptions {
        lost_answer_rate: 1.0,
        ..sim_options()
    };
    let run = Run::start(opts, |_, _| {}).await;
    let id = run.submit(payload("lost", 3)).await;
    eventually(Duration::from_secs(60), "three lost answers", async || {
        (run.sim.stats().faults.lost_answers == 3).then_some(())
    })
    .await;
    run.sim.set_lost_answer_rate(0.0);
    let views = run.wait_terminal(&[id], Duration::from_secs(120)).await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    let stats = run.sim.stats();
    assert_eq!(
        stats.accounts[ACCOUNT_DEFAULT].submits, 3,
        "one paid request per shot: {stats:?}"
    );
    assert!(
        stats.history_reads > 0,
        "found through the history: {stats:?}"
    );
    let jobs = run.sim.jobs();
    for r in results(&views[0]) {
        let job = r["provider_task_id"].as_str().expect("request id");
        assert!(
            jobs.iter().any(|j| j.request_id == job && j.lost_answer),
            "unit ran as the request whose answer was lost: {r}"
        );
    }
    assert_eq!(check_stored_files(&run.services, &views).await, 3);
    run.stop().await.shutdown().await.expect("sim stop");
}

/// A fal key of the real form (`<key id>:<secret>`), found nowhere else.
const KEY: &str = "5b0c2a34-9f0e-4c52-9d5e-7d3e8c1a2b4f:f3d9c0a8e7b6a5f4e3d2c1b0a9f8e7d6";

/// The key is a secret the host inserts (`Authorization: Key …`): fal accepted every request,
/// yet the recording of every call (its inputs, settings and each exchange as the guest
/// handed it to the host) holds neither the key nor its secret half, and neither appears in
/// the task views.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fal_the_key_stays_out_of_the_guest_the_recording_and_the_views() {
    let opts = FalOptions {
        keys: vec![KeySpec::new(ACCOUNT_DEFAULT, KEY)],
        ..sim_options()
    };
    let run = Run::start(opts, |c, dir| {
        let h = c.handlers.get_mut(HANDLER).expect("handler");
        h.secrets
            .insert("api_key".into(), slotd_core::config::Secret::new(KEY));
        h.record = Some(dir.join("recordings"));
    })
    .await;
    let id = run.submit(payload("key", 2)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(120))
        .await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    let stats = run.sim.stats();
    assert_eq!(
        stats.auth_refusals, 0,
        "fal accepted the host's key: {stats:?}"
    );
    let secret_half = KEY.split(':').nth(1).expect("secret");
    let recording = std::fs::read_to_string(run.dir().join(format!("recordings/{HANDLER}.jsonl")))
        .expect("recording");
    assert!(
        recording.contains("/requests/"),
        "the recording holds the polls"
    );
    let with_units = run.get(&format!("/v1/tasks/{id}?units=true")).await;
    for (what, text) in [
        ("the recording", recording),
        ("the task view", with_units.to_string()),
    ] {
        assert!(!text.contains(KEY), "the key leaked into {what}");
        assert!(
            !text.contains(secret_half),
            "the key's secret leaked into {what}"
        );
    }
    run.stop().await.shutdown().await.expect("sim stop");
}
