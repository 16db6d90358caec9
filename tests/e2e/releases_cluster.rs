//! Handler releases across a cluster (docs/handlers.md, "Releases"): two API and two
//! scheduler processes of the real binary, PostgreSQL and Redis, each process with its own
//! empty plugins directory, against the Kling simulator. A handler published once, with the
//! real `slotd plugin publish`, runs in every process; nothing is copied between machines.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::scale_cluster::{Cluster, ClusterOptions};
use crate::support::*;

/// `GET {base}/v1/handlers/releases` of the first API process.
async fn releases(c: &Cluster) -> Value {
    get_json(&c.client, &format!("{}/v1/handlers/releases", c.api.base))
        .await
        .expect("the release list")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_published_once_runs_in_every_process() {
    let opts = ClusterOptions {
        apis: 2,
        own_plugins: true,
        ..ClusterOptions::new(2, 41)
    };
    let mut c = Cluster::start_with(opts).await;
    // Four processes follow the releases, and none serves Kling: nothing is published yet.
    let list = eventually(
        Duration::from_secs(30),
        "four processes looked",
        async || {
            let list = releases(&c).await;
            (list["processes"].as_array()?.len() == 4).then_some(list)
        },
    )
    .await;
    assert_eq!(list["releases"], Value::Array(vec![]), "{list}");
    let refused = c
        .client
        .post(format!("{}/v1/tasks/video", c.api.base))
        .json(&serde_json::json!({"payload": crate::kling::video_payload(1)}))
        .send()
        .await
        .expect("submit");
    assert_eq!(refused.status(), 404, "no process has a handler yet");

    // Published once, through the first API process, with the real command: it returns when
    // all four processes run it.
    let file = built_plugin("kling-video");
    let out = Command::new(env!("CARGO_BIN_EXE_slotd"))
        .args(["plugin", "publish"])
        .arg(&file)
        .args(["--url", &c.api.base, "--wait", "60s"])
        .env_remove("SLOTD_API_KEY")
        .output()
        .expect("slotd plugin publish");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "publish failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("published kling-video 1.0.0"), "{stdout}");
    assert!(stdout.contains("4/4 processes run it"), "{stdout}");

    let list = releases(&c).await;
    let release = &list["releases"][0];
    assert_eq!(release["name"], "kling-video", "{list}");
    assert_eq!(release["current"], true, "{list}");
    let words = release["processes"].as_array().expect("words");
    assert_eq!(words.len(), 4, "{list}");
    assert!(words.iter().all(|w| w["state"] == "loaded"), "{list}");
    let roles: Vec<&str> = words.iter().filter_map(|w| w["role"].as_str()).collect();
    assert_eq!(roles.iter().filter(|r| **r == "api").count(), 2, "{list}");
    assert_eq!(
        roles.iter().filter(|r| **r == "scheduler").count(),
        2,
        "{list}"
    );

    // 40 shots, half through each API process, planned and run by the published handler.
    let mut ids = c.submit_videos(1, 20).await;
    let second = c
        .client
        .post(format!("{}/v1/tasks/video", c.more_apis[0].base))
        .json(&serde_json::json!({"payload": crate::kling::video_payload(20)}))
        .send()
        .await
        .expect("submit");
    assert_eq!(second.status(), 202);
    let second: Value = second.json().await.expect("json");
    ids.push(second["task_id"].as_str().expect("id").to_string());
    c.wait_completed(&ids).await;
    c.assert_clean(40).await;

    // A process started now loads the current release before it serves: its first word,
    // written while it started, is already "loaded".
    c.add_scheduler().await;
    let list = releases(&c).await;
    let words = list["releases"][0]["processes"].as_array().expect("words");
    assert_eq!(words.len(), 5, "{list}");
    assert!(words.iter().all(|w| w["state"] == "loaded"), "{list}");

    // Nothing was copied into any process's plugins directory.
    for entry in std::fs::read_dir(c.dir.path()).expect("the cluster's directory") {
        let path = entry.expect("entry").path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if name.is_some_and(|n| n.starts_with("plugins-")) {
            let files = std::fs::read_dir(&path).expect("plugins").count();
            assert_eq!(files, 0, "{} holds {files} files", path.display());
        }
    }
}

/// Publish `file` through `base` (no key: the loopback cluster's single caller) with
/// `slotd plugin publish`, waiting until every process runs it; its sha256.
fn publish(base: &str, file: &std::path::Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_slotd"))
        .args(["plugin", "publish"])
        .arg(file)
        .args(["--url", base, "--wait", "60s"])
        .env_remove("SLOTD_API_KEY")
        .output()
        .expect("slotd plugin publish");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "publish failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("processes run it"), "{stdout}");
    let bytes = std::fs::read(file).expect("the built handler");
    hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes))
}

/// Requests the Kling simulator received whose `User-Agent` names `release` (e.g.
/// `kling-video/1.0.0`: slotd sends the handler and version that made each request).
fn requests_by(c: &Cluster, release: &str) -> u64 {
    c.sim
        .stats()
        .requests_by_agent
        .iter()
        .filter(|(agent, _)| agent.contains(release))
        .map(|(_, n)| n)
        .sum()
}

/// Calls of `function` made by handler version `version`, summed over `procs` (the count of
/// `slotd_handler_call_seconds`, labelled by version).
async fn calls_by_version(c: &Cluster, version: &str, function: &str) -> f64 {
    let mut sum = 0.0;
    for p in &c.schedulers {
        let text = c
            .client
            .get(format!("{}/metrics", p.base))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text");
        sum += text
            .lines()
            .filter(|l| l.starts_with("slotd_handler_call_seconds_count{"))
            .filter(|l| {
                l.contains(&format!("version=\"{version}\""))
                    && l.contains(&format!("function=\"{function}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    sum
}

/// Each unit of task `id` as the API shows it (`?units=true`).
async fn units_of(c: &Cluster, id: &str) -> Vec<Value> {
    let v = get_json(
        &c.client,
        &format!("{}/v1/tasks/{id}?units=true", c.api.base),
    )
    .await
    .expect("the task");
    v["units"].as_array().cloned().unwrap_or_default()
}

/// Version 1.1 published while 1.0 has 20 jobs in flight (the account's whole concurrency):
/// those are polled and finished by 1.0 (its tick calls go on after the publish, and each unit
/// names 1.0 as the release of its job), new units go to 1.1, and 1.0 is unloaded in every
/// scheduler after its last job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_jobs_finish_on_the_release_that_created_them() {
    let opts = ClusterOptions {
        apis: 2,
        own_plugins: true,
        // 30–120 s clips take 3–12 s: long enough to publish while they run.
        time_scale: 0.1,
        video_slots: 20,
        ..ClusterOptions::new(2, 42)
    };
    let c = Cluster::start_with(opts).await;
    let v10 = publish(&c.api.base, &built_plugin("kling-video"));
    let first = c.submit_videos(1, 20).await.remove(0);
    c.wait_creates(20).await;

    let v11 = publish(&c.more_apis[0].base, &built_plugin("kling-video-next"));
    // Counted once the publish has returned (every process runs 1.1): whatever 1.0 does
    // from here on, it does for the jobs it created before.
    let ticks_before = calls_by_version(&c, "1.0.0", "tick").await;
    let spoke_before = requests_by(&c, "kling-video/1.0.0");
    let view = get_json(&c.client, &format!("{}/v1/tasks/{first}", c.api.base))
        .await
        .expect("the task");
    assert_ne!(view["status"], "completed", "the jobs were still in flight");
    let second = c.submit_videos(1, 20).await.remove(0);
    c.wait_completed(&[first.clone(), second.clone()]).await;

    // 1.0 kept polling its own jobs after 1.1 was published: slotd's call counts, and at
    // Kling, the requests each release made (slotd names the release in its User-Agent).
    let ticks_after = calls_by_version(&c, "1.0.0", "tick").await;
    assert!(
        ticks_after > ticks_before,
        "1.0 made no tick call after 1.1 was published ({ticks_before} → {ticks_after})"
    );
    let spoke_after = requests_by(&c, "kling-video/1.0.0");
    assert!(
        spoke_after > spoke_before,
        "Kling heard nothing from 1.0 after 1.1 was published ({spoke_before} → {spoke_after}): \
         its jobs were read by another release"
    );
    assert!(calls_by_version(&c, "1.1.0", "tick").await > 0.0);
    assert!(
        requests_by(&c, "kling-video/1.1.0") >= 20,
        "1.1 created the second task's jobs"
    );
    for u in units_of(&c, &first).await {
        assert_eq!(u["planned_release"], v10.as_str(), "{u}");
        assert_eq!(u["job_release"], v10.as_str(), "{u}");
    }
    for u in units_of(&c, &second).await {
        assert_eq!(u["planned_release"], v11.as_str(), "{u}");
        assert_eq!(u["job_release"], v11.as_str(), "{u}");
    }
    // Its last job ended: 1.0 is unloaded in every process that kept it.
    eventually(
        Duration::from_secs(30),
        "1.0 unloaded everywhere",
        async || {
            let list = get_json(
                &c.client,
                &format!("{}/v1/handlers/kling-video/releases", c.api.base),
            )
            .await?;
            let old = list["releases"]
                .as_array()?
                .iter()
                .find(|r| r["sha256"] == v10.as_str())?
                .clone();
            let words = old["processes"].as_array()?;
            (words.len() == 4 && words.iter().all(|w| w["state"] == "unloaded")).then_some(())
        },
    )
    .await;
    c.assert_clean(40).await;
}
