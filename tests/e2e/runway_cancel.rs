//! Runway cancel end to end: the real simulator and `runway-video`, the real loops. A cancel
//! `DELETE`s the running tasks and frees each slot only once Runway no longer runs the task;
//! a unit whose create's outcome is unknown keeps its slot for the hold even when cancelled.

use std::time::Duration;

use slotd_core::config::PoolConfig;
use slotd_sim::runway::{RunwayJob, RunwayOptions};

use crate::runway::*;
use crate::support::*;

/// A pool of 2 on an account of 2 whose cancels take effect only 400 ms after the `DELETE`
/// (the task runs on and keeps its slot meanwhile): task A's two units run and its third
/// waits, task B waits behind it, A is cancelled. slotd sends the `DELETE`s, keeps asking
/// while Runway still runs the tasks, and frees each slot only once its task is gone: B's
/// k-th create comes at or after the k-th moment one of A's tasks left Runway, so the
/// account never holds more than 2 of our tasks. A slotd that freed a slot at the cancel
/// request, or at the first `DELETE`, would create B's tasks inside the lag and fail this.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_cancel_deletes_running_tasks_and_reuses_slots_only_after_they_ended() {
    const LAG_MS: u64 = 400;
    let opts = RunwayOptions {
        // Tasks of 1.6–4 s: long enough to cancel them while they run.
        time_scale: 0.05,
        concurrency: 2,
        cancel_lag_ms: LAG_MS,
        ..sim_options(2)
    };
    let run = Run::start(opts, |c, _| {
        c.pools.insert(POOL.into(), PoolConfig::slots(2));
    })
    .await;
    let a = run.submit(payload("a", 3)).await;
    let a_jobs: Vec<String> = eventually(
        Duration::from_secs(20),
        "A's two tasks at Runway",
        async || {
            let v = run.task(&a).await;
            let jobs: Vec<String> = results(&v)
                .iter()
                .filter(|r| r["status"] == "submitted")
                .filter_map(|r| r["provider_task_id"].as_str().map(str::to_string))
                .collect();
            (jobs.len() == 2).then_some(jobs)
        },
    )
    .await;
    let b = run.submit(payload("b", 2)).await;
    let view = run.cancel(&a).await;
    assert_eq!(view["cancel_requested"], true, "{view}");
    for job in run
        .sim
        .jobs()
        .iter()
        .filter(|j| a_jobs.contains(&j.task_id))
    {
        assert!(
            j_unfinished(job),
            "A's task ended before the cancel: {job:?}"
        );
    }

    let views = run
        .wait_terminal(&[a.clone(), b.clone()], Duration::from_secs(30))
        .await;
    assert_eq!(views[0]["status"], "cancelled", "{}", views[0]);
    assert_eq!(statuses(&views[0]), ["cancelled"; 3], "{}", views[0]);
    let with_job = results(&views[0])
        .iter()
        .filter(|r| r["provider_task_id"].is_string())
        .count();
    assert_eq!(with_job, 2, "the waiting unit never reached Runway");
    assert_eq!(views[1]["status"], "completed", "{}", views[1]);
    assert_eq!(check_stored_files(&run.services, &views[1..]).await, 2);

    // The slots: B's tasks reached Runway only as A's left it.
    let stats = run.sim.stats();
    let jobs = run.sim.jobs();
    let mut gone: Vec<f64> = Vec::new();
    for j in jobs.iter().filter(|j| a_jobs.contains(&j.task_id)) {
        assert_eq!(j.status, "CANCELLED", "{j:?}");
        assert!(j.cancel_requested.is_some(), "no DELETE for {j:?}");
        assert!(j.ended.is_none(), "{j:?}");
        gone.push(j.cancelled_at.expect("cancelled_at"));
    }
    gone.sort_by(f64::total_cmp);
    let b_jobs: Vec<&RunwayJob> = jobs
        .iter()
        .filter(|j| !a_jobs.contains(&j.task_id))
        .collect();
    assert_eq!(b_jobs.len(), 2);
    for (k, j) in b_jobs.iter().enumerate() {
        assert!(
            j.created >= gone[k],
            "B's task {k} was created at {} s, before A's task {k} left Runway at {} s: {jobs:?}",
            j.created,
            gone[k]
        );
    }
    assert!(
        stats.models[MODEL].max_held_seen <= 2,
        "Runway held {} of our tasks at once",
        stats.models[MODEL].max_held_seen
    );
    // The cancels: one per running task, asked again while Runway still ran it.
    assert_eq!(stats.creates, 4, "A's two and B's two");
    assert_eq!(
        stats.cancelled, 2,
        "both of A's running tasks were cancelled"
    );
    assert!(
        stats.deletes >= 4,
        "each of A's tasks was asked again while Runway still ran it: {} DELETEs",
        stats.deletes
    );
    never_throttled(&jobs);
    run.stop(&[]).await;
}

/// Whether Runway still runs (or queues) the task.
fn j_unfinished(job: &RunwayJob) -> bool {
    matches!(job.status.as_str(), "THROTTLED" | "PENDING" | "RUNNING")
}

/// A unit whose create answer was lost (Runway made the task, and it runs) keeps its slot for
/// the outcome-unknown hold (the model's longest run) so that the phantom task cannot push the
/// next create into `THROTTLED`; cancelling its task must not shorten that. Pool of 1 on an
/// account of 1: A's create answer is lost, B waits, A is cancelled while the phantom runs.
/// A ends `cancelled` only when the hold has passed, and B's create reaches Runway only after
/// the phantom has ended: the account never holds 2 of our tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_a_cancelled_outcome_unknown_unit_keeps_its_slot_for_the_hold() {
    let opts = RunwayOptions {
        concurrency: 1,
        lost_answer_rate: 1.0,
        ..sim_options(6)
    };
    let run = Run::start(opts, |c, _| {
        c.pools.insert(POOL.into(), PoolConfig::slots(1));
        // The hold: 600 s × 0.002 = 1.2 s, longer than the phantom's 0.3–0.8 s.
        let h = c.handlers.get_mut(HANDLER).expect("handler config");
        h.settings
            .insert("expected_duration_scale".into(), "0.002".into());
    })
    .await;
    let a = run.submit(payload("phantom", 1)).await;
    eventually(Duration::from_secs(20), "A's lost create", async || {
        (run.sim.stats().faults.lost_answers == 1).then_some(())
    })
    .await;
    run.sim.set_lost_answer_rate(0.0);
    let b = run.submit(payload("after-phantom", 1)).await;
    // A holds its slot: B is not created while the phantom runs.
    eventually(Duration::from_secs(20), "A held", async || {
        let v = run.task(&a).await;
        results(&v)[0]["error"]["code"]
            .as_str()
            .is_some_and(|c| c == "timeout")
            .then_some(())
    })
    .await;
    run.cancel(&a).await;
    let views = run
        .wait_terminal(&[a.clone(), b.clone()], Duration::from_secs(20))
        .await;
    assert_eq!(views[0]["status"], "cancelled", "{}", views[0]);
    assert_eq!(views[1]["status"], "completed", "{}", views[1]);
    let jobs = run.sim.jobs();
    assert_eq!(jobs.len(), 2, "A's phantom and B's task: {jobs:?}");
    let phantom_end = jobs[0].ended.expect("the phantom ran to its end");
    assert!(
        jobs[1].created >= phantom_end,
        "B's task was created at {} s while A's phantom ran until {phantom_end} s",
        jobs[1].created
    );
    assert_eq!(run.sim.stats().models[MODEL].max_held_seen, 1);
    never_throttled(&jobs);
    run.stop(&[]).await;
}

/// Units past their `stage_deadline` whose Runway tasks still run are given up, not abandoned:
/// slotd `DELETE`s each task (Runway's cancel takes effect 300 ms later) and keeps the slot
/// until Runway no longer runs it, then fails the unit with `stage_deadline`. Every task slotd
/// made is cancelled at Runway, none is left running, and Runway never held more than the
/// pool's two at once. Before, the deadline failed the unit and freed its slot at once while
/// the task ran on (billed, counted against the account, never fetched), and the next unit's
/// create joined it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_units_past_the_stage_deadline_are_cancelled_at_runway_before_their_slots_free() {
    const SHOTS: usize = 4;
    let opts = RunwayOptions {
        // Every task in the long tail: 6–12 s here, past the 3 s stage deadline.
        time_scale: 0.02,
        long_tail_rate: 1.0,
        concurrency: 2,
        cancel_lag_ms: 300,
        ..sim_options(5)
    };
    let run = Run::start(opts, |c, _| {
        c.pools.insert(POOL.into(), PoolConfig::slots(2));
        c.scheduler.stage_deadline = Duration::from_secs(3);
    })
    .await;
    let id = run.submit(payload("late", SHOTS)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    let units = results(&views[0]);
    for u in units {
        assert_eq!(u["status"], "failed", "{u}");
        assert_eq!(u["error"]["code"], "stage_deadline", "{u}");
    }
    let jobs = run.sim.jobs();
    assert_eq!(jobs.len(), SHOTS, "one Runway task per unit");
    let running: Vec<&RunwayJob> = jobs.iter().filter(|j| j_unfinished(j)).collect();
    assert!(
        running.is_empty(),
        "tasks left running at Runway: {running:?}"
    );
    for j in &jobs {
        assert!(
            j.cancel_requested.is_some() && j.cancelled_at.is_some(),
            "a task slotd gave up on was not cancelled: {j:?}"
        );
    }
    // At no moment did Runway hold more than 2 of them: each from its create to its end.
    let mut moments: Vec<(f64, i32)> = Vec::new();
    for j in &jobs {
        moments.push((j.created, 1));
        moments.push((j.cancelled_at.or(j.ended).unwrap_or(f64::MAX), -1));
    }
    moments.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut most) = (0, 0);
    for (_, d) in moments {
        now += d;
        most = most.max(now);
    }
    assert!(most <= 2, "Runway held {most} of our tasks at once");
    run.stop(&[]).await;
}
