//! Staged rollouts judged on provider outcomes (docs/handlers.md, "Staged rollout"), over two
//! API and two scheduler processes of the real binary with empty plugins directories,
//! PostgreSQL, Redis and the Kling simulator: the next version under a 10/50/100 rollout with a
//! scheduler killed after the first stage; the survivor goes on with the same stage and counts
//! and promotes it. (The judgement's failing side is shown by `rollout::judge`'s tests; an
//! end-to-end rollback of the misclassifying build is still to come.)

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::scale_cluster::{Cluster, ClusterOptions};
use crate::support::*;

fn cluster_options(seed: u64) -> ClusterOptions {
    ClusterOptions {
        apis: 2,
        own_plugins: true,
        time_scale: 0.01,
        ..ClusterOptions::new(2, seed)
    }
}

/// Publish the incumbent, kling-video 1.0.0, and wait until every process runs it.
async fn publish_incumbent(c: &Cluster) {
    let bytes = std::fs::read(built_plugin("kling-video")).expect("the built handler");
    let r = c
        .client
        .post(format!("{}/v1/handlers", c.api.base))
        .header("content-type", "application/wasm")
        .body(bytes)
        .send()
        .await
        .expect("publish");
    assert_eq!(r.status(), 201);
    eventually(
        Duration::from_secs(30),
        "every process runs 1.0.0",
        async || {
            let list = releases(c).await?;
            let words = list["releases"][0]["processes"].as_array()?.clone();
            (words.len() == 4 && words.iter().all(|w| w["state"] == "loaded")).then_some(())
        },
    )
    .await;
}

async fn releases(c: &Cluster) -> Option<Value> {
    get_json(
        &c.client,
        &format!("{}/v1/handlers/kling-video/releases", c.api.base),
    )
    .await
}

/// The newest rollout of kling-video once `pred` holds for it.
async fn rollout_when(c: &Cluster, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    eventually(Duration::from_secs(90), what, async || {
        let r = releases(c).await?["rollouts"][0].clone();
        pred(&r).then_some(r)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_release_is_promoted_stage_by_stage_across_a_killed_scheduler() {
    let mut c = Cluster::start_with(cluster_options(44)).await;
    publish_incumbent(&c).await;
    let ids = c.submit_videos(20, 20).await;
    c.wait_creates(20).await;

    // The real command, following the rollout to its end.
    let base = c.api.base.clone();
    let watch = std::thread::spawn(move || {
        Command::new(env!("CARGO_BIN_EXE_slotd"))
            .args(["plugin", "publish"])
            .arg(built_plugin("kling-video-next"))
            .args([
                "--url",
                &base,
                "--rollout",
                "10,50,100",
                "--min-units",
                "10",
            ])
            .args(["--watch", "--no-wait"])
            .env_remove("SLOTD_API_KEY")
            .output()
            .expect("slotd plugin publish")
    });
    // Once the first stage passed, the scheduler holding the video pool is killed.
    let r = rollout_when(&c, "the first stage passed", |r| {
        r["stage"].as_u64() >= Some(1) || r["state"] == "promoted"
    })
    .await;
    let passed_first = r["reason"].as_str().unwrap_or_default().to_string();
    let holder = c.holder_of("kling:video").await;
    c.schedulers[holder].signal("KILL");
    c.schedulers[holder].child.wait().ok();

    let out = watch.join().expect("the publish thread");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("stage 1 of 3 (10 % of new units)"),
        "{stdout}"
    );
    assert!(stdout.contains("promoted"), "{stdout}");
    assert!(
        passed_first.contains("stage 1 (10 %) passed"),
        "{passed_first}"
    );

    let r = rollout_when(&c, "promoted", |r| r["state"] == "promoted").await;
    assert_eq!(r["stage"], 2, "promoted from its last stage: {r}");
    // 1.1.0 is now the current release, and every task completes.
    let list = releases(&c).await.expect("releases");
    let next = list["releases"]
        .as_array()
        .and_then(|rs| rs.iter().find(|x| x["version"] == "1.1.0"))
        .expect("1.1.0");
    assert_eq!(next["current"], true, "{list}");
    c.wait_completed(&ids).await;
    let stats = c.sim.stats();
    assert_eq!(stats.creates, 400, "every shot created once");
    assert!(stats.creates_by_external_id.values().all(|&n| n == 1));
    // Every step is recorded: started, two stages passed, promoted.
    let steps: Vec<(u64, String)> = r["events"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let stage = e["stage"].as_u64().unwrap_or(99);
            (stage, e["state"].as_str().unwrap_or_default().to_string())
        })
        .collect();
    let want = [
        (0, "running"),
        (1, "running"),
        (2, "running"),
        (2, "promoted"),
    ];
    let want: Vec<(u64, String)> = want.iter().map(|(s, x)| (*s, x.to_string())).collect();
    assert_eq!(steps, want, "{r}");
    c.check().await;
}
