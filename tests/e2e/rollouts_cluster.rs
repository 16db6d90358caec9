//! Staged rollouts judged on provider outcomes (docs/handlers.md, "Staged rollout"), over two
//! API and two scheduler processes of the real binary with empty plugins directories,
//! PostgreSQL, Redis and the Kling simulator: the next version under a 10/50/100 rollout with a
//! scheduler killed after the first stage; the survivor goes on with the same stage and counts
//! and promotes it. The misclassifying build under the same rollout, while other clients of
//! the account take its capacity now and then: rolled back on its own at the first stage.

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

/// The newest rollout of kling-video once `pred` holds for it; on a timeout, the rollout as
/// last seen (its stage, reason and the checks of its latest judgement) is in the panic.
async fn rollout_when(c: &Cluster, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    // Generous: a stage's judgement waits on jobs at the provider, and on a busy machine
    // those run slower; the wait ends as soon as the rollout gets there.
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let mut last = Value::Null;
    loop {
        // A busy API may answer with an error body: only a rollout counts.
        if let Some(r) = releases(c).await.map(|v| v["rollouts"][0].clone())
            && r["state"].is_string()
        {
            if pred(&r) {
                return r;
            }
            last = r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after 180 s waiting for {what}; the rollout: {last}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_release_is_promoted_stage_by_stage_across_a_killed_scheduler() {
    let mut c = Cluster::start_with(cluster_options(44)).await;
    publish_incumbent(&c).await;
    // 800 shots: a first stage passes once ~32 of the candidate's units ended without a
    // failure (its tenth of ~320), then 10 more in each later stage.
    let ids = c.submit_videos(40, 20).await;
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
    assert_eq!(stats.creates, 800, "every shot created once");
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

/// The misclassifying build (1.0.1: it fails a unit on Kling's 1303 "over capacity", which
/// creates nothing and which 1.0.0 retries) published with a 10 % first stage while 200 shots
/// run and other clients of the account take its capacity now and then: it is rolled back by
/// the judgement alone, as soon as its failures are beyond chance (never later than
/// `min_units` of its units plus those it had in flight, no more than the pool's slots); the tasks whose units it failed are retried and 1.0.0
/// serves everything else; every shot is created at Kling exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misclassifying_release_is_rolled_back_on_provider_outcomes() {
    const MIN_UNITS: u64 = 5;
    // Jobs at the simulator's usual pace: over capacity half of the time, the pool runs
    // few jobs at once, and the candidate's tenth of them must still end soon.
    let opts = ClusterOptions {
        time_scale: crate::kling::TIME_SCALE,
        ..cluster_options(45)
    };
    let slots = u64::from(opts.video_slots);
    let c = Cluster::start_with(opts).await;
    publish_incumbent(&c).await;
    let ids = c.submit_videos(50, 4).await;
    c.wait_creates(20).await;

    // Other clients of the account hold half of its capacity while the build rolls out: at a
    // third, a candidate that drew one refusal in its first dozen creates (one run in twelve)
    // was still undecided when the wait ran out.
    c.others_hold(0.5).await;
    let bytes = std::fs::read(built_plugin("kling-video-misclassified")).expect("the build");
    let r = c
        .client
        .post(format!(
            "{}/v1/handlers?rollout=10,50,100&min_units={MIN_UNITS}",
            c.api.base
        ))
        .header("content-type", "application/wasm")
        .body(bytes)
        .send()
        .await
        .expect("publish");
    assert_eq!(r.status(), 201, "{:?}", r.text().await);

    let r = rollout_when(&c, "rolled back", |r| {
        r["state"] != "running" && r["state"] != "paused"
    })
    .await;
    c.others_hold(0.0).await;
    assert_eq!(r["state"], "rolled_back", "no person acted: {r}");
    let reason = r["reason"].as_str().unwrap_or_default();
    eprintln!("rolled back: {reason}");
    assert!(reason.starts_with("stage 1 (10 %) failed"), "{reason}");
    let figures = &r["figures"];
    let (ended, failed) = (
        figures["candidate"]["ended"].as_u64().unwrap_or(0),
        figures["candidate"]["failed"].as_u64().unwrap_or(0),
    );
    // Rolled back as soon as its failures were beyond chance: on no more than `min_units` of
    // its units plus those in flight (a pass would have needed at least `min_units`).
    assert!(
        failed >= 2 && ended <= MIN_UNITS + slots,
        "judged on its own units, no more than min_units plus those in flight: {r}"
    );
    assert_eq!(
        figures["candidate"]["failed_by_code"]["1303"].as_u64(),
        Some(failed),
        "it failed units on 1303 only: {r}"
    );
    assert_eq!(figures["incumbent"]["failed"], 0, "{r}");
    assert!(figures["p"].as_f64() < Some(0.01), "{r}");

    // No new unit goes to it; every task completes (the ones it failed were retried), and no
    // shot was created twice.
    c.wait_completed(&ids).await;
    let mut units = Vec::new();
    for id in &ids {
        let url = format!("{}/v1/tasks/{id}?units=true", c.api.base);
        let view = get_json(&c.client, &url).await.expect("the task view");
        units.extend(view["units"].as_array().cloned().unwrap_or_default());
    }
    assert_eq!(units.len(), 200);
    // The units it failed went back to pending by the rollback's retry (their event logs say
    // so) and ended completed like the rest.
    let mut retried = 0;
    for id in &ids {
        let url = format!("{}/v1/tasks/{id}/events", c.api.base);
        let events = get_json(&c.client, &url).await.expect("the task's events");
        retried += events["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| {
                e["detail"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("retry requested"))
            })
            .count() as u64;
    }
    assert!(
        retried >= failed,
        "{retried} units retried, {failed} failed by it"
    );
    let stats = c.sim.stats();
    assert_eq!(stats.creates, 200, "every shot created once");
    assert!(stats.creates_by_external_id.values().all(|&n| n == 1));
    assert!(stats.rate_limited_1303 > 0, "{stats:?}");
    let candidate = r["candidate"].as_str().unwrap_or_default().to_string();
    let by_candidate = units
        .iter()
        .filter(|u| u["job_release"] == candidate.as_str())
        .count() as u64;
    assert!(
        by_candidate + failed <= MIN_UNITS + slots,
        "{by_candidate} units finished by the candidate, {failed} failed by it"
    );
    let steps: Vec<String> = r["events"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["state"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(steps, ["running", "rolled_back"], "{r}");
    c.check().await;
}
