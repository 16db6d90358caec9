//! The fal (Pika) flows recorded through the real scheduler (`[handlers.fal-video] record`)
//! and replayed offline; the committed ones under `tests/recordings/fal/` are made here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use slotd_sim::fal::FalOptions;

use crate::fal::*;
use crate::support::*;

/// `<repo>/tests/recordings/fal`.
fn committed_recordings() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/recordings/fal")
}

/// [`Run::start`] with every `fal-video` call recorded into the run's `recordings/`, the pool
/// at `slots`.
async fn recorded_run(opts: FalOptions, slots: u32) -> Run {
    Run::start(opts, |c, dir| {
        if let Some(p) = c.pools.get_mut(POOL) {
            p.max_slots = Some(slots);
        }
        let h = c.handlers.get_mut(HANDLER).expect("handler config");
        h.record = Some(dir.join("recordings"));
    })
    .await
}

/// Two shots to completion: submits, status reads, results, finalize.
async fn success_flow() -> (&'static str, Run) {
    let run = recorded_run(sim_options(), 2).await;
    let id = run.submit(payload("success", 2)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    ("success", run)
}

/// Three shots on a pool of 3 over an account that runs 1: fal holds two `IN_QUEUE`, the
/// handler says so, and all complete.
async fn queued_flow() -> (&'static str, Run) {
    let opts = FalOptions {
        concurrency: 1,
        ..sim_options()
    };
    let run = recorded_run(opts, 3).await;
    let id = run.submit(payload("queued", 3)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    ("queued", run)
}

/// One shot whose submit answer is lost: never submitted again, found in fal's history.
async fn lost_answer_flow() -> (&'static str, Run) {
    let opts = FalOptions {
        lost_answer_rate: 1.0,
        ..sim_options()
    };
    let run = recorded_run(opts, 1).await;
    let id = run.submit(payload("lost", 1)).await;
    eventually(Duration::from_secs(30), "the lost answer", async || {
        (run.sim.stats().faults.lost_answers == 1).then_some(())
    })
    .await;
    run.sim.set_lost_answer_rate(0.0);
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    assert_eq!(run.sim.stats().submits, 1, "never submitted twice");
    ("lost-answer", run)
}

/// The fal flows, each in a slotd of its own with `[handlers.fal-video] record` set: success,
/// jobs held in fal's queue, a lost submit answer. Each recording replays offline exactly as
/// recorded. With `SLOTD_WRITE_RECORDINGS=1` they are written to `tests/recordings/fal/` (how
/// the committed ones were made; those replay in `slotd-runtime`'s
/// `committed_recordings_replay`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fal_flows_record_and_replay() {
    let flows = futures::join!(success_flow(), queued_flow(), lost_answer_flow());
    let flows = [flows.0, flows.1, flows.2];
    let write = std::env::var_os("SLOTD_WRITE_RECORDINGS").is_some();
    let wasm = built_plugin("fal_video");
    for (name, run) in flows {
        let recording = run.dir().join(format!("recordings/{HANDLER}.jsonl"));
        let report = slotd_runtime::replay::replay(&wasm, &recording)
            .await
            .unwrap_or_else(|e| panic!("{name}: the replay runs: {e:#}"));
        assert!(!report.calls.is_empty(), "{name}: nothing recorded");
        for c in &report.calls {
            assert!(c.differences.is_empty(), "{name}: {:?}", c.differences);
        }
        if write {
            let out = committed_recordings();
            std::fs::create_dir_all(&out).expect("create tests/recordings/fal");
            std::fs::copy(&recording, out.join(format!("{name}.jsonl")))
                .expect("copy the recording");
        }
        run.stop().await.shutdown().await.expect("sim stop");
    }
}
