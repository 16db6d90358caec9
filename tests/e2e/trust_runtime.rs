//! The runtime side of the trust boundary, end to end: handler names belong to files (a copy of
//! kling-video under another name is refused, across a restart too; `file =`/`sha256 =` pin
//! the handler), a provider slow for several deadlines quarantines nothing and fails no unit,
//! and a unit past its `stage_deadline` whose job cannot be cancelled keeps its slot and is read
//! to its end (one with no job fails with that reason, `decide`'s tests; one whose handler can
//! cancel, `runway_cancel`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use slotd_core::config::Config;
use slotd_server::services::Services;
use slotd_sim::kling::SimHandle;

use crate::kling::{kling_config, sim_options, video_payload};
use crate::support::*;

/// An in-process slotd with its real loops and plugins watcher, over a directory the test owns
/// (so a second one can start over the same database and plugins).
struct Slotd {
    /// `slotd check` when the run is dropped (first field: it runs before the rest drops).
    _check: CheckOnDrop,
    base: String,
    client: reqwest::Client,
    services: Services,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Slotd {
    async fn start(dir: &Path, sim: &SimHandle, tweak: impl FnOnce(&mut Config)) -> Slotd {
        let mut config = kling_config(dir, sim, 4);
        tweak(&mut config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let services = slotd_server::app::build_with_clock(config, system_clock())
            .await
            .expect("build");
        let (stop, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(slotd_server::run_with(
            services.clone(),
            Some(listener),
            async move {
                rx.await.ok();
            },
        ));
        Slotd {
            _check: CheckOnDrop::for_services(&services),
            base: format!("http://{addr}"),
            client: reqwest::Client::new(),
            services,
            stop,
            server,
        }
    }

    async fn get(&self, path: &str) -> Value {
        self.client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json")
    }

    /// The path kling-video is served from now.
    fn kling_video_path(&self) -> Option<PathBuf> {
        self.services
            .registry
            .by_name("kling-video")
            .map(|h| h.path.clone())
    }

    /// `slotd check` on its database and objects, then stop.
    async fn shutdown(self) {
        services_check(&self.services).await;
        self.stop.send(()).ok();
        self.server
            .await
            .expect("join")
            .expect("slotd stopped cleanly");
    }
}

/// The `?all=true` entry of the file `name` in state `state`, once the registry lists it.
async fn version_entry(slotd: &Slotd, name: &str, state: &str) -> Value {
    eventually(
        Duration::from_secs(30),
        &format!("{name} listed as {state}"),
        async || {
            let all = slotd.get("/v1/handlers?all=true").await;
            all.as_array()?
                .iter()
                .find(|v| {
                    v["path"].as_str().is_some_and(|p| p.ends_with(name)) && v["state"] == state
                })
                .cloned()
        },
    )
    .await
}

/// Run `shots` video shots through the simulator and return the task's view once terminal.
async fn run_video(slotd: &Slotd, shots: usize, deadline: Duration) -> Value {
    let id = post_task(
        &slotd.client,
        &slotd.base,
        "video",
        json!({ "payload": video_payload(shots) }),
    )
    .await;
    eventually(deadline, "the video task terminal", async || {
        let v = slotd.get(&format!("/v1/tasks/{id}")).await;
        matches!(
            v["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        )
        .then_some(v)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_file_declaring_kling_video_is_refused_and_the_first_keeps_serving() {
    let sim = slotd_sim::kling::start(sim_options(81))
        .await
        .expect("simulator");
    let dir = tempfile::TempDir::new().expect("tmp");
    let first = Slotd::start(dir.path(), &sim, |_| {}).await;
    let owner = dir.path().join("plugins").join("kling-video.wasm");
    assert_eq!(first.kling_video_path(), Some(owner.clone()));

    // The same component under a name that sorts first, dropped in while slotd runs.
    let squatter = dir.path().join("plugins").join("aa-kling-video.wasm");
    std::fs::copy(built_plugin("kling-video"), &squatter).expect("copy");
    let refused = version_entry(&first, "aa-kling-video.wasm", "refused").await;
    let reason = refused["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&owner.display().to_string())
            && reason.contains(&squatter.display().to_string()),
        "the refusal names both files: {refused}"
    );
    assert_eq!(refused["name"], "kling-video", "{refused}");
    assert_eq!(first.kling_video_path(), Some(owner.clone()));
    let view = run_video(&first, 2, Duration::from_secs(60)).await;
    assert_eq!(view["status"], "completed", "{view}");
    first.shutdown().await;

    // A restart over the same database and plugins: the squatter still sorts first, and the
    // name still belongs to the file that first served it.
    let second = Slotd::start(dir.path(), &sim, |_| {}).await;
    assert_eq!(second.kling_video_path(), Some(owner.clone()));
    let refused = version_entry(&second, "aa-kling-video.wasm", "refused").await;
    assert!(
        refused["reason"]
            .as_str()
            .is_some_and(|r| r.contains(&owner.display().to_string())),
        "{refused}"
    );

    // Removing the owner frees the name: the squatter, written again, takes it.
    std::fs::remove_file(&owner).expect("remove the owner");
    eventually(
        Duration::from_secs(30),
        "kling-video unloaded",
        async || second.kling_video_path().is_none().then_some(()),
    )
    .await;
    std::fs::copy(
        built_plugin("kling-video"),
        dir.path().join("plugins").join("tmp"),
    )
    .expect("copy");
    let _ = std::fs::remove_file(&squatter);
    std::fs::rename(dir.path().join("plugins").join("tmp"), &squatter).expect("rename");
    eventually(
        Duration::from_secs(30),
        "the freed name taken",
        async || (second.kling_video_path() == Some(squatter.clone())).then_some(()),
    )
    .await;
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_handler_loads_only_from_its_file_and_content() {
    let sim = slotd_sim::kling::start(sim_options(82))
        .await
        .expect("simulator");
    let dir = tempfile::TempDir::new().expect("tmp");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugins");
    // Sorts after kling-video.wasm: first-come alone would pick the other file.
    let pinned = plugins.join("zz-kling-video.wasm");
    std::fs::copy(built_plugin("kling-video"), &pinned).expect("copy");
    let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
        std::fs::read(&pinned).expect("read"),
    ));

    let slotd = Slotd::start(dir.path(), &sim, |c| {
        let h = c.handlers.get_mut("kling-video").expect("configured");
        h.file = Some("zz-kling-video.wasm".into());
        h.sha256 = Some(sha.clone());
    })
    .await;
    assert_eq!(slotd.kling_video_path(), Some(pinned.clone()));
    let refused = version_entry(&slotd, "/kling-video.wasm", "refused").await;
    assert!(
        refused["reason"]
            .as_str()
            .is_some_and(|r| r.contains("handlers.kling-video.file")),
        "{refused}"
    );
    let view = run_video(&slotd, 1, Duration::from_secs(60)).await;
    assert_eq!(view["status"], "completed", "{view}");
    slotd.shutdown().await;

    // The wrong content pinned: nothing may serve kling-video.
    let other = tempfile::TempDir::new().expect("tmp");
    std::fs::create_dir_all(other.path().join("plugins")).expect("plugins");
    std::fs::copy(
        built_plugin("kling-video"),
        other.path().join("plugins").join("zz-kling-video.wasm"),
    )
    .expect("copy");
    let slotd = Slotd::start(other.path(), &sim, |c| {
        let h = c.handlers.get_mut("kling-video").expect("configured");
        h.file = Some("zz-kling-video.wasm".into());
        h.sha256 = Some("0".repeat(64));
    })
    .await;
    assert_eq!(slotd.kling_video_path(), None);
    let refused = version_entry(&slotd, "zz-kling-video.wasm", "refused").await;
    let reason = refused["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("handlers.kling-video.sha256") && reason.contains(&sha),
        "{refused}"
    );
    slotd.shutdown().await;
}

/// A Kling simulator whose first `slow` requests answer after `slow_ms`, then healthy, and a
/// slotd configured by `tweak` with a retry budget of 1 and quarantine after 2 crashes: a
/// 2-shot video must still complete.
async fn slow_provider_run(
    slow: u32,
    slow_ms: u64,
    tweak: impl FnOnce(&mut slotd_core::config::Config),
) -> (Slotd, slotd_sim::kling::SimHandle, Value, tempfile::TempDir) {
    let sim = slotd_sim::kling::start(slotd_sim::kling::SimOptions {
        slow_first: slow,
        slow_ms,
        ..sim_options(83)
    })
    .await
    .expect("simulator");
    let dir = tempfile::TempDir::new().expect("tmp");
    let slotd = Slotd::start(dir.path(), &sim, |c| {
        // Two crashing calls would quarantine, one charged fault would fail a unit.
        c.limits.quarantine_after = 2;
        c.scheduler.retry_budget = 1;
        tweak(c);
    })
    .await;
    let view = run_video(&slotd, 2, Duration::from_secs(90)).await;
    assert!(
        sim.stats().faults.slow >= u64::from(slow),
        "the simulator was slow {} times",
        sim.stats().faults.slow
    );
    assert_eq!(view["status"], "completed", "no unit failed: {view}");
    (slotd, sim, view, dir)
}

/// The per-request HTTP timeout is shorter than the call deadline (as by default): the handler
/// sees `timeout` errors, which spend no retry budget, so no unit fails for slowness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_timeouts_of_a_slow_provider_fail_no_unit() {
    let (slotd, _sim, view, _dir) = slow_provider_run(6, 1_000, |c| {
        c.limits.http_timeout = Duration::from_millis(200);
        c.limits.call_deadline = Duration::from_secs(2);
    })
    .await;
    let events = slotd
        .get(&format!(
            "/v1/tasks/{}/events",
            view["task_id"].as_str().unwrap_or_default()
        ))
        .await;
    assert!(
        events.to_string().contains("did not answer in time"),
        "timeouts were seen and forgiven: {events}"
    );
    slotd.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_slow_for_several_deadlines_quarantines_nothing_and_fails_no_unit() {
    // The first 6 requests answer after 1.5 s, past a 300 ms call deadline (the per-request
    // HTTP timeout stays 15 s, so the call is cut off while awaiting the provider); then the
    // simulator is healthy.
    let (slotd, _sim, _view, _dir) = slow_provider_run(6, 1_500, |c| {
        c.limits.call_deadline = Duration::from_millis(300);
    })
    .await;
    let metrics = slotd
        .client
        .get(format!("{}/metrics", slotd.base))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let deadlines = metrics
        .lines()
        .filter(|l| l.starts_with("slotd_handler_faults_total") && l.contains("provider_deadline"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>();
    // This server's own registry: each cut-off call waited on one of the 6 slow answers.
    assert!(
        (2.0..=6.0).contains(&deadlines),
        "several calls were cut off, at most one per slow answer: {deadlines}"
    );
    let versions = slotd.get("/v1/handlers?all=true").await;
    let quarantined: Vec<&Value> = versions
        .as_array()
        .expect("list")
        .iter()
        .filter(|v| v["state"] == "quarantined")
        .collect();
    assert!(quarantined.is_empty(), "{quarantined:?}");
    assert!(slotd.kling_video_path().is_some());
    slotd.shutdown().await;
}

/// The fixture's provider has no cancel: a job past the stage deadline is not abandoned (its
/// slot freed while the provider runs and bills it), it is read to its end and its output
/// stored. Before, the unit failed with `stage_deadline` at the deadline and its slot went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_stage_deadline_that_cannot_be_cancelled_is_read_to_its_end() {
    let m = Manual::start_with(5, 100, |c| {
        c.scheduler.stage_deadline = Duration::from_secs(600);
    })
    .await;
    // A provider job that answers "running" for a while.
    let id = m.submit("fixture", json!({"count": 1, "polls": 12})).await;
    m.round(&["fixture"], 10).await;
    m.round(&["fixture"], 10).await;
    let t = m.task(&id).await;
    assert_eq!(t["results"][0]["status"], "submitted", "{t}");
    // Nine minutes on: within the deadline, polled, running.
    m.round(&["fixture"], 9 * 60 * 1000).await;
    assert_eq!(m.task(&id).await["results"][0]["status"], "submitted");
    // Past ten minutes since the submit: the job still runs at the provider, so the unit
    // keeps its slot and is read on.
    m.round(&["fixture"], 2 * 60 * 1000).await;
    let t = m.task(&id).await;
    assert_eq!(t["results"][0]["status"], "submitted", "{t}");
    assert_eq!(m.services.slots.used("fixture").await.ok(), Some(1));
    let mut rounds = 0;
    while m.task(&id).await["status"] != "completed" {
        rounds += 1;
        assert!(
            rounds < 200,
            "the job was not read to its end: {}",
            m.task(&id).await
        );
        m.round(&["fixture"], 60 * 1000).await;
    }
    let t = m.task(&id).await;
    assert_eq!(t["results"][0]["status"], "completed", "{t}");
    assert!(t["results"][0]["error"].is_null(), "{t}");
    assert_eq!(m.services.slots.used("fixture").await.ok(), Some(0));
    assert_eq!(m.stub.stats().creates, 1, "one job, never made again");
    m.check().await;
}
