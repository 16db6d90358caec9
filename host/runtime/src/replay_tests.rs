//! Record and replay with the built Kling handler against the real simulator: each flow
//! (success, 1303, failure, in-doubt adoption) is recorded live through `[handlers.X] record`
//! and replayed offline; the replay must see the same requests and return the same changes,
//! and report the guest's instruction count. The committed recordings under
//! `tests/recordings/` (Kling's from here, Runway's from the end-to-end suite) replay too.
//! With `SLOTD_WRITE_RECORDINGS=1` the live recordings are written there (how the committed
//! ones were made).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use super::kling_tests::{built, config, drive, sim, specs, tick, unit};
use super::replay::replay;
use super::tape::{self, REDACTED};
use super::{Handler, Runtime};
use slotd_core::config::RuntimeLimits;
use slotd_core::model::{Outcome, UnitStatus};
use slotd_sim::kling::{SimHandle, SimOptions};

/// `<repo>/tests/recordings`.
fn committed() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join("tests")
        .join("recordings")
}

/// kling-video loaded with its calls recorded into `dir`.
async fn recorded_video(sim: &SimHandle, dir: &Path) -> Arc<Handler> {
    let mut c = config(sim, "SK");
    c.record = Some(dir.to_path_buf());
    let runtime = Runtime::new(
        RuntimeLimits::default(),
        BTreeMap::from([("kling-video".to_string(), c)]),
    )
    .expect("runtime builds");
    runtime
        .load_file(&built("kling_video.wasm"))
        .await
        .expect("kling-video loads")
}

/// Replay `dir/kling-video.jsonl`, assert it matches, and keep it under `name` if asked to.
async fn replays_as_recorded(dir: &Path, name: &str) -> u64 {
    let recording = dir.join("kling-video.jsonl");
    let text = std::fs::read_to_string(&recording).expect("the recording was written");
    assert!(!text.contains("\"SK\""), "the secret leaked into {text}");
    for record in tape::read(&recording).expect("the recording parses") {
        for x in &record.exchanges {
            for (h, v) in &x.request.headers {
                if h.eq_ignore_ascii_case("authorization") {
                    assert_eq!(v, REDACTED, "the JWT is redacted");
                }
            }
        }
    }
    let report = replay(&built("kling_video.wasm"), &recording)
        .await
        .expect("the replay runs");
    assert!(!report.calls.is_empty());
    for c in &report.calls {
        assert!(c.differences.is_empty(), "{name}: {:?}", c.differences);
        assert!(c.skipped.is_some() || c.fuel > 0, "fuel is counted: {c:?}");
    }
    if std::env::var_os("SLOTD_WRITE_RECORDINGS").is_some() {
        let out = committed().join("kling");
        std::fs::create_dir_all(&out).expect("create tests/recordings/kling");
        std::fs::copy(&recording, out.join(format!("{name}.jsonl"))).expect("copy recording");
    }
    report.calls.iter().map(|c| c.fuel).max().unwrap_or(0)
}

#[tokio::test]
async fn success_flow_records_and_replays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sim(SimOptions::default()).await;
    let video = recorded_video(&sim, dir.path()).await;
    let specs = specs(&video, "video", &json!({"shots": [{"prompt": "a"}]})).await;
    let mut units = vec![unit("s0", "video", "video", &specs[0])];
    drive(&video, &mut units).await;
    assert_eq!(units[0].status, UnitStatus::Succeeded);
    let fuel = replays_as_recorded(dir.path(), "success").await;
    assert!(fuel > 1_000, "a tick costs guest instructions: {fuel}");
}

#[tokio::test]
async fn capacity_rejection_records_and_replays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sim(SimOptions {
        concurrency: 1,
        ..SimOptions::default()
    })
    .await;
    let video = recorded_video(&sim, dir.path()).await;
    let specs = specs(
        &video,
        "video",
        &json!({"shots": [{"prompt": "a"}, {"prompt": "b"}]}),
    )
    .await;
    let units = [
        (unit("c0", "video", "video", &specs[0]), false),
        (unit("c1", "video", "video", &specs[1]), false),
    ];
    let outcomes = tick(&video, &units).await;
    assert!(
        outcomes
            .iter()
            .any(|o| matches!(o, Outcome::CapacityRejected { .. }))
    );
    replays_as_recorded(dir.path(), "capacity-1303").await;
}

#[tokio::test]
async fn failure_records_and_replays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sim(SimOptions {
        failure_after_accept_rate: 1.0,
        ..SimOptions::default()
    })
    .await;
    let video = recorded_video(&sim, dir.path()).await;
    let specs = specs(&video, "video", &json!({"shots": [{"prompt": "a"}]})).await;
    let mut units = vec![unit("f0", "video", "video", &specs[0])];
    drive(&video, &mut units).await;
    assert_eq!(units[0].status, UnitStatus::Failed);
    replays_as_recorded(dir.path(), "failure").await;
}

#[tokio::test]
async fn in_doubt_adoption_records_and_replays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sim(SimOptions::default()).await;
    let video = recorded_video(&sim, dir.path()).await;
    let specs = specs(&video, "video", &json!({"shots": [{"prompt": "a"}]})).await;
    let u = unit("d0", "video", "video", &specs[0]);
    // The first submit reaches the provider, but its job id is "lost": the next call sees the
    // unit in doubt and must find the job by key instead of submitting again.
    let first = tick(&video, &[(u.clone(), false)]).await;
    assert!(matches!(first[0], Outcome::Accepted { .. }), "{first:?}");
    let second = tick(&video, &[(u, true)]).await;
    assert!(
        !matches!(second[0], Outcome::CapacityRejected { .. }),
        "{second:?}"
    );
    assert_eq!(sim.jobs().len(), 1, "not resubmitted");
    replays_as_recorded(dir.path(), "in-doubt").await;
}

/// `<repo>/tests/fixtures/contract-1.0/<file>`: Kling components built against 1.0.0.
fn contract_1_0(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/contract-1.0")
        .join(file)
}

#[tokio::test]
async fn components_built_against_1_0_load_and_work_beside_1_2() {
    let sim = sim(SimOptions::default()).await;
    let runtime = Runtime::new(
        RuntimeLimits::default(),
        BTreeMap::from([
            ("kling-video".to_string(), config(&sim, "SK")),
            ("kling-avatar".to_string(), config(&sim, "SK")),
        ]),
    )
    .expect("runtime builds");
    let old = runtime
        .load_file(&contract_1_0("kling-video.wasm"))
        .await
        .expect("the 1.0.0 kling-video loads");
    assert_eq!(old.contract, "1.0.0");
    assert_eq!(old.features, super::Features::default());
    let current = runtime
        .load_file(&built("kling_avatar.wasm"))
        .await
        .expect("today's kling-avatar loads");
    assert_eq!(current.contract, "1.5.0");
    let old_avatar = runtime
        .load_file(&contract_1_0("kling-avatar.wasm"))
        .await
        .expect("the 1.0.0 kling-avatar loads");
    assert_eq!(old_avatar.contract, "1.0.0");
    // The old component serves a unit to success against the provider.
    let specs = specs(&old, "video", &json!({"shots": [{"prompt": "a"}]})).await;
    let mut units = vec![unit("o0", "video", "video", &specs[0])];
    drive(&old, &mut units).await;
    assert_eq!(units[0].status, UnitStatus::Succeeded, "{units:?}");
    // And it replays the Kling recordings exactly as today's build does.
    let report = replay(
        &contract_1_0("kling-video.wasm"),
        &committed().join("kling/capacity-1303.jsonl"),
    )
    .await
    .expect("replay runs");
    assert_eq!(report.differing(), 0, "{report:?}");
}

/// Every committed recording replays with today's build of its handler: the Kling flows
/// (made by the tests above), the Runway and fal flows (made by the end-to-end tests
/// `runway_flows_record_and_replay` and `fal_flows_record_and_replay`, through the real
/// scheduler).
#[tokio::test]
async fn committed_recordings_replay() {
    let dir = committed();
    for (provider, flows) in [
        (
            "kling",
            &["success", "capacity-1303", "failure", "in-doubt"][..],
        ),
        (
            "runway",
            &[
                "success",
                "throttled-free",
                "throttled",
                "failure",
                "outcome-unknown",
                "cancel",
            ][..],
        ),
        ("fal", &["success", "queued", "lost-answer"][..]),
    ] {
        let Ok(entries) = std::fs::read_dir(dir.join(provider)) else {
            panic!("{} is missing", dir.join(provider).display());
        };
        let mut replayed = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "jsonl") {
                continue;
            }
            let records = tape::read(&path).expect("recording parses");
            let wasm = built(&format!("{}.wasm", records[0].handler.replace('-', "_")));
            let report = replay(&wasm, &path).await.expect("replay runs");
            assert_eq!(report.differing(), 0, "{}: {report:?}", path.display());
            replayed.extend(path.file_stem().map(|s| s.to_string_lossy().into_owned()));
        }
        for flow in flows {
            assert!(
                replayed.iter().any(|r| r == flow),
                "{provider}/{flow}.jsonl did not replay: {replayed:?}"
            );
        }
    }
}

/// A handler changed to mis-classify an answer fails its replay, naming both outcomes:
/// `plugins/kling-video-misclassified` is kling-video with Kling's 1303 classified as a
/// permanent failure, replayed against the committed 1303 recording.
#[tokio::test]
async fn a_handler_that_misclassifies_an_answer_fails_its_replay() {
    let recording = committed().join("kling/capacity-1303.jsonl");
    let report = replay(&built("kling_video_misclassified.wasm"), &recording)
        .await
        .expect("replay runs");
    assert_eq!(report.differing(), 1, "{report:?}");
    let why = report.calls[0].differences.join("; ");
    assert!(
        why.contains("capacity_rejected") && why.contains("\"fail\""),
        "{why}"
    );
    // The same recording replays cleanly against the real handler.
    let good = replay(&built("kling_video.wasm"), &recording)
        .await
        .expect("replay runs");
    assert_eq!(good.differing(), 0, "{good:?}");
}
