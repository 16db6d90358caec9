//! Hot reload end to end: a real slotd (real loops, real clock, the plugins watcher) with the
//! fixture against the stub provider, its file replaced, broken, removed and put back while
//! work is in flight; and a bad release quarantined with the previous version restored.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use slotd_server::services::Services;
use slotd_testkit::stub::{StubHandle, StubOptions, StubProvider};

use crate::support::*;

/// A running slotd with the watcher on, and its plugins directory.
struct Live {
    /// `slotd check` when the run is dropped (first field: it runs before the rest drops).
    _check: CheckOnDrop,
    services: Services,
    plugins: PathBuf,
    stub: StubHandle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl Live {
    async fn start(tweak: impl FnOnce(&mut slotd_core::config::Config)) -> Live {
        let dir = tempfile::TempDir::new().expect("tmp");
        let stub = StubProvider::start(StubOptions { limit: 1000 })
            .await
            .expect("stub");
        let mut config = test_config(dir.path(), &stub, 50);
        tweak(&mut config);
        let plugins = config.plugins_dir.clone();
        let services = slotd_server::app::build_with_clock(config, system_clock())
            .await
            .expect("build");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(slotd_server::run_with(services.clone(), None, async move {
            rx.await.ok();
        }));
        Live {
            _check: CheckOnDrop::for_services(&services),
            services,
            plugins,
            stub,
            stop: Some(tx),
            server: Some(server),
            _dir: dir,
        }
    }

    async fn submit(&self, payload: Value) -> String {
        let (status, body) = api_call(
            &self.services,
            "POST",
            "/v1/tasks/fixture",
            Some(json!({ "payload": payload })),
        )
        .await;
        assert_eq!(status, 202, "{body}");
        body["task_id"].as_str().expect("task_id").to_string()
    }

    async fn status(&self, id: &str) -> Value {
        api_call(&self.services, "GET", &format!("/v1/tasks/{id}"), None)
            .await
            .1
    }

    async fn handlers(&self, all: bool) -> Value {
        let path = if all {
            "/v1/handlers?all=true"
        } else {
            "/v1/handlers"
        };
        api_call(&self.services, "GET", path, None).await.1
    }

    async fn active_version(&self) -> Option<String> {
        self.handlers(false).await.as_array().and_then(|a| {
            a.iter()
                .find(|h| h["name"] == "fixture")
                .and_then(|h| h["version"].as_str().map(String::from))
        })
    }

    async fn wait_version(&self, want: Option<&str>) {
        eventually(
            Duration::from_secs(60),
            &format!("fixture version {want:?}"),
            async || (self.active_version().await.as_deref() == want).then_some(()),
        )
        .await;
    }

    async fn wait_done(&self, ids: &[String], timeout: Duration) {
        eventually(timeout, "every task completed", async || {
            for id in ids {
                let t = self.status(id).await;
                assert_ne!(t["status"], "failed", "a unit failed: {t}");
                if t["status"] != "completed" {
                    return None;
                }
            }
            Some(())
        })
        .await;
    }

    /// `slotd check` on its database and objects, then stop.
    async fn stop(mut self) {
        assert_services_check_clean(&self.services).await;
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(s) = self.server.take() {
            s.await.expect("join").expect("slotd stopped cleanly");
        }
    }
}

/// Replace `to` the way installers do: write a hidden temp file, rename it into place.
fn install(from: &Path, to: &Path) {
    let tmp = to.with_file_name(format!(
        ".{}.tmp",
        to.file_name().expect("file name").to_string_lossy()
    ));
    std::fs::copy(from, &tmp).expect("copy to temp");
    std::fs::rename(&tmp, to).expect("rename into place");
}

/// Units of `task` at the provider now (`submitted` with a job id), from the database.
async fn at_provider(services: &Services, task: &str) -> Vec<String> {
    services
        .store
        .task_units(task)
        .await
        .expect("units")
        .into_iter()
        .filter(|u| u.status == slotd_core::model::UnitStatus::Submitted)
        .filter(|u| u.provider_job_id.is_some())
        .map(|u| u.id)
        .collect()
}

/// No unit of `ids` met a handler fault or any other error, by the database's event log.
async fn assert_no_faults(services: &Services, ids: &[String]) {
    for id in ids {
        for e in services.store.unit_events(id).await.expect("events") {
            let detail = e.detail.as_deref().unwrap_or_default();
            assert!(!detail.contains("handler fault"), "a fault: {e:?}");
            assert_eq!(e.error, None, "an error: {e:?}");
        }
    }
}

/// 200 units of load and, before each of 20 replacements, a carrier task whose jobs are
/// running at the provider when the file is swapped (the stub holds running jobs running
/// across the swap, so this does not depend on the machine's speed): each swap overlaps units
/// in flight, the new version picks them up where the old one left them, and nothing faults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_units_survive_twenty_replacements() {
    let live = Live::start(|_| {}).await;
    let target = live.plugins.join("fixture.wasm");
    let versions = [built_plugin("fixture-next"), built_plugin("fixture")];
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(live.submit(json!({"count": 50, "polls": 3})).await);
    }
    for i in 0..20 {
        let (file, want) = if i % 2 == 0 {
            (&versions[0], "2.0.0")
        } else {
            (&versions[1], "1.0.0")
        };
        // Jobs at the provider before the swap.
        let carrier = live.submit(json!({"count": 3, "polls": 10})).await;
        ids.push(carrier.clone());
        let before = eventually(
            Duration::from_secs(60),
            "carrier jobs running",
            async || {
                let running = at_provider(&live.services, &carrier).await;
                (!running.is_empty()).then_some(running)
            },
        )
        .await;
        live.stub.hold_jobs(true);
        install(file, &target);
        live.wait_version(Some(want)).await;
        let after = at_provider(&live.services, &carrier).await;
        live.stub.hold_jobs(false);
        assert!(
            before.iter().any(|u| after.contains(u)),
            "swap {i}: no unit submitted under the old version was still in flight under {want}"
        );
    }
    live.wait_done(&ids, Duration::from_secs(120)).await;
    for id in &ids[..4] {
        let t = live.status(id).await;
        assert_eq!(t["completed"], 50, "{t}");
    }
    assert_no_faults(&live.services, &ids).await;
    assert_eq!(live.active_version().await.as_deref(), Some("1.0.0"));
    let all = live.handlers(true).await;
    let seen: Vec<&str> = all
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|r| r["version"].as_str())
        .collect();
    assert!(seen.contains(&"2.0.0") && seen.contains(&"1.0.0"), "{all}");
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_files_are_refused_with_the_reason_and_the_running_version_keeps_serving() {
    let live = Live::start(|_| {}).await;
    let target = live.plugins.join("fixture.wasm");
    let good = std::fs::read(built_plugin("fixture")).expect("fixture bytes");
    let other_major = wat::parse_str(
        r#"(component (instance $i) (export "slotd:handler/handler@2.0.0" (instance $i)))"#,
    )
    .expect("v2 component");
    let cases: [(Vec<u8>, &str); 3] = [
        (b"definitely not wasm".to_vec(), "not a WebAssembly file"),
        (
            good[..good.len() / 2].to_vec(),
            "not a valid WebAssembly component",
        ),
        (other_major, "incompatible major version"),
    ];
    for (bytes, reason) in cases {
        let tmp = live.plugins.join(".incoming.tmp");
        std::fs::write(&tmp, &bytes).expect("write");
        std::fs::rename(&tmp, &target).expect("rename");
        eventually(Duration::from_secs(60), reason, async || {
            let all = live.handlers(true).await;
            all.as_array()?
                .iter()
                .any(|r| {
                    r["state"] == "refused"
                        && r["reason"].as_str().is_some_and(|s| s.contains(reason))
                })
                .then_some(())
        })
        .await;
        // Still served by the good version: a task runs to completion.
        assert_eq!(live.active_version().await.as_deref(), Some("1.0.0"));
        let id = live.submit(json!({"count": 2})).await;
        live.wait_done(&[id], Duration::from_secs(60)).await;
    }
    let history = api_call(&live.services, "GET", "/v1/handlers/history", None)
        .await
        .1;
    let refused = history
        .as_array()
        .expect("array")
        .iter()
        .filter(|r| r["state"] == "refused")
        .count();
    assert!(refused >= 3, "the database keeps every refusal: {history}");
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_handler_units_wait_and_complete_when_it_returns() {
    // One slot for ten units of twenty polls each: most are still pending when the file goes.
    let live = Live::start(|c| {
        c.pools
            .insert("fixture".into(), slotd_core::config::PoolConfig::slots(1));
    })
    .await;
    let target = live.plugins.join("fixture.wasm");
    let id = live.submit(json!({"count": 10, "polls": 20})).await;
    std::fs::remove_file(&target).expect("remove");
    live.wait_version(None).await;
    let (status, _) = api_call(
        &live.services,
        "POST",
        "/v1/tasks/fixture",
        Some(json!({"payload": {}})),
    )
    .await;
    assert_eq!(
        status, 404,
        "no handler serves the type while its file is gone"
    );
    let waiting = live.status(&id).await;
    assert_ne!(waiting["status"], "completed", "{waiting}");
    assert_ne!(waiting["status"], "failed", "{waiting}");
    install(&built_plugin("fixture"), &target);
    live.wait_version(Some("1.0.0")).await;
    live.wait_done(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    assert_eq!(live.status(&id).await["completed"], 10);
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k_traps_in_a_row_quarantine_the_release_and_the_previous_serves_again() {
    let live = Live::start(|c| c.limits.quarantine_after = 3).await;
    let target = live.plugins.join("fixture.wasm");
    install(&built_plugin("fixture-next"), &target);
    live.wait_version(Some("2.0.0")).await;
    let id = live
        .submit(json!({"count": 1, "behavior": "trap-in-next"}))
        .await;
    live.wait_version(Some("1.0.0")).await;
    live.wait_done(&[id], Duration::from_secs(60)).await;
    let all = live.handlers(true).await;
    let quarantined = all
        .as_array()
        .expect("array")
        .iter()
        .find(|r| r["version"] == "2.0.0")
        .cloned()
        .unwrap_or_default();
    assert_eq!(quarantined["state"], "quarantined", "{all}");
    assert!(
        quarantined["reason"]
            .as_str()
            .is_some_and(|r| r.contains("3 consecutive")),
        "{quarantined}"
    );
    live.stop().await;
}

/// The same with the real provider path: 200 shots in flight against the Kling simulator while
/// `kling-video.wasm` is replaced 20 times by two real versions (1.0.0 and 1.1.0 of the same
/// handler): no unit fails, every shot is created once, and the last version serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_shots_against_the_simulator_survive_twenty_replacements() {
    use crate::kling::{Run, sim_options, video_payload};
    let run = Run::start(sim_options(41), 18, false).await;
    let target = run.services.config.plugins_dir.join("kling-video.wasm");
    let versions = [
        built_plugin("kling-video-next"),
        built_plugin("kling-video"),
    ];
    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.push(run.submit("video", video_payload(20)).await);
    }
    let version = async || -> Option<String> {
        let v: Value = run
            .client
            .get(format!("{}/v1/handlers", run.base))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        v.as_array()?.iter().find(|h| h["name"] == "kling-video")?["version"]
            .as_str()
            .map(String::from)
    };
    for i in 0..20 {
        let (file, want) = if i % 2 == 0 {
            (&versions[0], "1.1.0")
        } else {
            (&versions[1], "1.0.0")
        };
        install(file, &target);
        eventually(
            Duration::from_secs(60),
            &format!("kling-video {want}"),
            async || (version().await.as_deref() == Some(want)).then_some(()),
        )
        .await;
    }
    let views = run.wait_terminal(&ids, Duration::from_secs(180)).await;
    for v in &views {
        assert_eq!(v["status"], "completed", "{v}");
    }
    assert_eq!(version().await.as_deref(), Some("1.0.0"));
    let stats = run.sim.stats();
    assert_eq!(stats.creates, 200, "every shot created once");
    assert!(stats.creates_by_external_id.values().all(|&n| n == 1));
    assert!(stats.max_running <= 18);
    assert_eq!(
        stats.rate_limited_1303, 0,
        "a submit met the account's limit of 20"
    );
    run.stop().await;
}
