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
    let c = Cluster::start_with(opts).await;
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
