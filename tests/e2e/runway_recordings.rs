//! The Runway flows recorded through the real scheduler (`[handlers.runway-video] record`)
//! and replayed offline; the committed ones under `tests/recordings/runway/` are made here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use slotd_core::config::PoolConfig;
use slotd_sim::runway::RunwayOptions;

use crate::runway::*;
use crate::support::*;

/// `<repo>/tests/recordings/runway`.
fn committed_recordings() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/recordings/runway")
}

/// [`Run::start`] with every `runway-video` call recorded into the run's `recordings/`.
async fn recorded_run(opts: RunwayOptions, slots: u32) -> Run {
    Run::start(opts, |c, dir| {
        c.pools.insert(POOL.into(), PoolConfig::slots(slots));
        let h = c.handlers.get_mut(HANDLER).expect("handler config");
        h.record = Some(dir.join("recordings"));
    })
    .await
}

/// One shot to completion: create, polls, finalize.
async fn success_flow() -> (&'static str, Run) {
    let run = recorded_run(sim_options(10), 1).await;
    let id = run.submit(payload("success", 1)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(20))
        .await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    ("success", run)
}

/// Four shots on a pool of 2 over an account of 2: batches of two, and no task ever waits
/// `THROTTLED`.
async fn throttled_free_flow() -> (&'static str, Run) {
    let opts = RunwayOptions {
        concurrency: 2,
        ..sim_options(11)
    };
    let run = recorded_run(opts, 2).await;
    let id = run.submit(payload("throttled-free", 4)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(20))
        .await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    never_throttled(&run.sim.jobs());
    ("throttled-free", run)
}

/// Two shots on a pool of 2 over an account of 1 (a misconfigured pool): the second task
/// waits `THROTTLED` (the handler warns), and both still complete.
async fn throttled_flow() -> (&'static str, Run) {
    let opts = RunwayOptions {
        concurrency: 1,
        ..sim_options(12)
    };
    let run = recorded_run(opts, 2).await;
    let id = run.submit(payload("throttled", 2)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(20))
        .await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    assert_eq!(run.sim.stats().models[MODEL].max_held_seen, 2);
    ("throttled", run)
}

/// One shot that Runway accepts and then fails with a `failureCode`.
async fn failure_flow() -> (&'static str, Run) {
    let opts = RunwayOptions {
        failure_after_accept_rate: 1.0,
        ..sim_options(13)
    };
    let run = recorded_run(opts, 1).await;
    let id = run.submit(payload("failure", 1)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(20))
        .await;
    let r = &results(&views[0])[0];
    assert_eq!(r["status"], "failed", "{r}");
    let code = run.sim.jobs()[0]
        .failure_code
        .clone()
        .expect("a drawn failure");
    assert_eq!(r["error"]["code"], code.as_str(), "{r}");
    ("failure", run)
}

/// One shot whose create answer is lost (Runway made the task): the handler never creates
/// it again, holds the slot for the model's longest run (600 s, scaled to 0.6 s here), then
/// fails the unit `submission_unknown`.
async fn outcome_unknown_flow() -> (&'static str, Run) {
    let opts = RunwayOptions {
        lost_answer_rate: 1.0,
        time_scale: 0.001,
        ..sim_options(14)
    };
    let run = recorded_run(opts, 1).await;
    let id = run.submit(payload("outcome-unknown", 1)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(20))
        .await;
    let r = &results(&views[0])[0];
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(r["error"]["code"], "submission_unknown", "{r}");
    let stats = run.sim.stats();
    assert_eq!(
        (stats.requests, stats.creates, stats.faults.lost_answers),
        (1, 1, 1),
        "one create, made at Runway, its answer lost, never sent again"
    );
    ("outcome-unknown", run)
}

/// One shot cancelled while it runs: `DELETE`, then the task read back gone.
async fn cancel_flow() -> (&'static str, Run) {
    let opts = RunwayOptions {
        time_scale: 0.05,
        ..sim_options(15)
    };
    let run = recorded_run(opts, 1).await;
    let id = run.submit(payload("cancel", 1)).await;
    eventually(Duration::from_secs(20), "the task at Runway", async || {
        results(&run.task(&id).await)[0]["provider_task_id"]
            .is_string()
            .then_some(())
    })
    .await;
    run.cancel(&id).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(20))
        .await;
    assert_eq!(views[0]["status"], "cancelled", "{}", views[0]);
    assert_eq!(run.sim.stats().cancelled, 1);
    ("cancel", run)
}

/// The Runway flows, each in a slotd of its own with `[handlers.runway-video] record` set:
/// success, a THROTTLED-free run of batches, a THROTTLED run, a failure after acceptance, an
/// outcome-unknown create (lost answer) and a cancel. Each recording replays offline exactly
/// as recorded, with the guest's instruction count reported. With `SLOTD_WRITE_RECORDINGS=1`
/// they are written to `tests/recordings/runway/` (how the committed ones were made; those
/// replay in `slotd`'s `committed_recordings_replay`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_flows_record_and_replay() {
    let flows = futures::join!(
        success_flow(),
        throttled_free_flow(),
        throttled_flow(),
        failure_flow(),
        outcome_unknown_flow(),
        cancel_flow(),
    );
    let flows = [flows.0, flows.1, flows.2, flows.3, flows.4, flows.5];
    let write = std::env::var_os("SLOTD_WRITE_RECORDINGS").is_some();
    let wasm = built_plugin("runway_video");
    for (name, run) in flows {
        let recording = run.dir().join(format!("recordings/{HANDLER}.jsonl"));
        let report = slotd_runtime::replay::replay(&wasm, &recording)
            .await
            .unwrap_or_else(|e| panic!("{name}: the replay runs: {e:#}"));
        assert!(!report.calls.is_empty(), "{name}: nothing recorded");
        for c in &report.calls {
            assert!(c.differences.is_empty(), "{name}: {:?}", c.differences);
            assert!(c.skipped.is_some() || c.fuel > 0, "{name}: fuel: {c:?}");
        }
        if write {
            let out = committed_recordings();
            std::fs::create_dir_all(&out).expect("create tests/recordings/runway");
            std::fs::copy(&recording, out.join(format!("{name}.jsonl")))
                .expect("copy the recording");
        }
        run.stop(&[]).await;
    }
}
