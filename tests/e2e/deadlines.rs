//! Deadlines: a unit that cannot complete by its task's deadline fails before any
//! provider request with `deadline_unreachable`, unless the task asked for best effort; within
//! a priority, earlier deadlines fill first.

use std::time::Duration;

use serde_json::{Value, json};
use slotd_core::clock::Clock;

use crate::kling::{Run, sim_options, video_payload};
use crate::support::*;

/// Unix ms as RFC 3339.
pub fn rfc3339(ms: i64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + Duration::from_millis(ms as u64))
        .to_string()
}

pub fn now_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis(),
    )
    .expect("fits")
}

async fn post(run: &Run, body: Value) -> String {
    let r = run
        .client
        .post(format!("{}/v1/tasks/video", run.base))
        .json(&body)
        .send()
        .await
        .expect("post");
    let status = r.status();
    let v: Value = r.json().await.expect("json");
    assert_eq!(status, 202, "{v}");
    v["task_id"].as_str().expect("id").to_string()
}

async fn events(client: &reqwest::Client, base: &str, id: &str) -> Vec<Value> {
    get_json(client, &format!("{base}/v1/tasks/{id}/events"))
        .await
        .and_then(|v| v["events"].as_array().cloned())
        .unwrap_or_default()
}

/// The ids of a task's units.
async fn unit_ids(run: &Run, task: &str) -> Vec<String> {
    let (_, full) = api_call(
        &run.services,
        "GET",
        &format!("/v1/tasks/{task}?units=true"),
        None,
    )
    .await;
    full["units"]
        .as_array()
        .expect("units")
        .iter()
        .map(|u| u["id"].as_str().expect("id").to_string())
        .collect()
}

/// Beside a backlog that holds every slot, a task due before any job could end fails its
/// units before submitting them (the simulator sees no create for them); the same task with
/// `best_effort` runs and completes late, with the decision in its events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_deadline_fails_before_any_create_unless_best_effort() {
    // Jobs of 0.9–3.6 s: a deadline 0.75 s away is in the future when it arrives, even on a
    // loaded machine, and out of reach of any job.
    let opts = slotd_sim::kling::SimOptions {
        time_scale: 0.03,
        ..sim_options(51)
    };
    let run = Run::start(opts, 18, false).await;
    let mut backlog = Vec::new();
    for _ in 0..3 {
        backlog.push(run.submit("video", video_payload(20)).await);
    }
    // The pool's durations are known once a few jobs ended.
    eventually(Duration::from_secs(60), "durations learned", async || {
        run.services
            .durations
            .pool_distribution("kling:video")
            .map(|_| ())
    })
    .await;

    let deadline = now_ms() + 750;
    let refused = post(
        &run,
        json!({"payload": video_payload(3), "deadline": rfc3339(deadline)}),
    )
    .await;
    let kept = post(
        &run,
        json!({"payload": video_payload(3), "deadline": rfc3339(deadline),
               "deadline_policy": "best_effort"}),
    )
    .await;
    let views = run
        .wait_terminal(&[refused.clone(), kept.clone()], Duration::from_secs(120))
        .await;
    let (r, k) = (&views[0], &views[1]);
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(r["deadline_policy"], "refuse", "{r}");
    for unit in r["results"].as_array().expect("results") {
        assert_eq!(unit["error"]["code"], "deadline_unreachable", "{unit}");
        let message = unit["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("p95 duration"),
            "the numbers are given: {message}"
        );
        assert!(unit["provider_task_id"].is_null(), "{unit}");
    }
    // No create for any of its units: their idempotency keys never reached the simulator.
    let refused_ids = unit_ids(&run, &refused).await;
    assert_eq!(refused_ids.len(), 3);
    let stats = run.sim.stats();
    let creates_of = |id: &str| -> u64 {
        stats
            .creates_by_external_id
            .iter()
            .filter(|(k, _)| k.starts_with(id))
            .map(|(_, n)| *n)
            .sum()
    };
    for id in &refused_ids {
        assert_eq!(creates_of(id), 0, "unit {id} reached the provider");
    }
    // The same count sees the creates of the best-effort task's units, which ran (it would
    // see nothing at all if the simulator's keys did not start with the unit ids).
    let kept_ids = unit_ids(&run, &kept).await;
    assert_eq!(kept_ids.len(), 3);
    for id in &kept_ids {
        assert!(
            creates_of(id) >= 1,
            "unit {id} of the best-effort task: no create in {:?}",
            stats.creates_by_external_id
        );
    }
    let failed_events = events(&run.client, &run.base, &refused).await;
    assert!(
        failed_events.iter().any(|e| e["to_status"] == "failed"
            && e["detail"]
                .as_str()
                .is_some_and(|d| d.contains("deadline unreachable"))),
        "{failed_events:?}"
    );

    assert_eq!(k["status"], "completed", "best effort runs anyway: {k}");
    let noted = events(&run.client, &run.base, &kept).await;
    let completed_at = noted
        .iter()
        .filter(|e| e["to_status"] == "completed")
        .filter_map(|e| e["at"].as_i64())
        .max();
    assert!(
        completed_at.is_some_and(|t| t > deadline),
        "and completes after the deadline ({deadline}): {completed_at:?}"
    );
    assert!(
        noted.iter().any(|e| e["detail"]
            .as_str()
            .is_some_and(|d| d.contains("deadline_policy best_effort"))),
        "the decision is in the events: {noted:?}"
    );
    let views = run.wait_terminal(&backlog, Duration::from_secs(120)).await;
    assert!(views.iter().all(|v| v["status"] == "completed"));
    run.stop().await;
}

/// The projection follows the fill order: a backlog of a higher priority is ahead of a task
/// whatever its deadline, so a deadline that one wave behind the busy slots would meet but the
/// backlog's waves cannot fails before any create (counting only the deadline units ahead, as
/// the first projection did, let it through to complete late).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_backlog_counts_against_a_deadline() {
    let opts = slotd_sim::kling::SimOptions {
        time_scale: 0.01,
        ..sim_options(52)
    };
    let run = Run::start(opts, 18, false).await;
    // 160 shots at priority 10 on 18 slots: about nine waves.
    let mut backlog = Vec::new();
    for _ in 0..8 {
        backlog.push(post(&run, json!({"payload": video_payload(20), "priority": 10})).await);
    }
    let pool = eventually(Duration::from_secs(60), "durations learned", async || {
        run.services.durations.pool_distribution("kling:video")
    })
    .await;
    let (wave, p95) = (pool.mean(), pool.quantile(0.95));
    // Room for two waves and the slowest job: more than the next wave, far less than the
    // seven or more still ahead.
    let deadline = now_ms() + 2 * wave + p95;
    let refused = post(
        &run,
        json!({"payload": video_payload(3), "deadline": rfc3339(deadline)}),
    )
    .await;
    let view = run
        .wait_terminal(std::slice::from_ref(&refused), Duration::from_secs(60))
        .await;
    assert_eq!(view[0]["status"], "failed", "{}", view[0]);
    for unit in view[0]["results"].as_array().expect("results") {
        assert_eq!(unit["error"]["code"], "deadline_unreachable", "{unit}");
        assert!(unit["provider_task_id"].is_null(), "{unit}");
    }
    // Refused on the projection of the waves ahead, not once the deadline drew near: the
    // projected start in the decision is several waves after it was made (one wave, had only
    // the busy slots been counted).
    let decided = events(&run.client, &run.base, &refused)
        .await
        .into_iter()
        .find(|e| e["to_status"] == "failed")
        .expect("the failure event");
    let detail = decided["detail"].as_str().unwrap_or_default();
    let start = detail
        .split_once("(start ")
        .and_then(|(_, rest)| rest.split_once(" + p95"))
        .and_then(|(at, _)| chrono::DateTime::parse_from_rfc3339(at).ok())
        .map(|t| t.timestamp_millis())
        .unwrap_or_else(|| panic!("a projected start in {detail:?}"));
    let at = decided["at"].as_i64().expect("event time");
    assert!(
        start - at > 2 * wave,
        "projected start {} ms after the decision, waves of {wave} ms: {detail}",
        start - at
    );
    let pending: u64 = run
        .services
        .store
        .unit_pending_groups("kling:video", 10)
        .await
        .expect("groups")
        .iter()
        .map(|g| g.pending)
        .sum();
    println!(
        "wave {wave} ms, p95 {p95} ms, deadline {} ms away; {pending} backlog units still pending after the verdict",
        2 * wave + p95
    );
    let views = run.wait_terminal(&backlog, Duration::from_secs(120)).await;
    assert!(views.iter().all(|v| v["status"] == "completed"));
    assert_eq!(
        run.sim.stats().creates,
        160,
        "no create for the refused task"
    );
    run.stop().await;
}

/// Slots free one at a time behind a backlog: of two tasks created while every slot is busy,
/// the one due first is filled first (earliest deadline first), and both before the backlog's
/// remaining units, which have no deadline.
#[tokio::test]
async fn earlier_deadlines_fill_first() {
    let m = Manual::start(2, 100).await;
    let backlog = m.submit("fixture", json!({"count": 6, "polls": 1})).await;
    m.round(&["fixture"], 10).await;
    let now = m.clock.as_ref().now_ms();
    let late = m
        .submit_body(json!({"payload": {"count": 2, "polls": 1},
                            "deadline": rfc3339(now + 3_600_000)}))
        .await;
    let soon = m
        .submit_body(json!({"payload": {"count": 2, "polls": 1},
                            "deadline": rfc3339(now + 1_800_000)}))
        .await;
    let ids = [backlog.clone(), late.clone(), soon.clone()];
    m.run_until(&["fixture"], 200, async |m| {
        let mut done = true;
        for id in &ids {
            done &= m.task(id).await["status"] == "completed";
        }
        done
    })
    .await;
    // When each unit was marked submitted.
    let marks = async |id: &str| -> Vec<i64> {
        let (_, v) = api_call(&m.services, "GET", &format!("/v1/tasks/{id}/events"), None).await;
        v["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["to_status"] == "submitted" && e["from_status"] == "pending")
            .filter_map(|e| e["at"].as_i64())
            .collect()
    };
    let (b, l, s) = (
        marks(&backlog).await,
        marks(&late).await,
        marks(&soon).await,
    );
    let max = |v: &[i64]| v.iter().copied().max().unwrap_or(i64::MIN);
    let min = |v: &[i64]| v.iter().copied().min().unwrap_or(i64::MAX);
    assert_eq!((l.len(), s.len(), b.len()), (2, 2, 6));
    assert!(
        max(&s) <= min(&l),
        "the earlier deadline fills first: soon {s:?}, late {l:?}"
    );
    assert!(
        max(&l) <= max(&b),
        "deadlines before the backlog's rest: late {l:?}, backlog {b:?}"
    );
    assert!(
        b.iter().filter(|&&t| t > max(&l)).count() >= 1,
        "backlog units were still waiting when the deadline tasks were filled: {b:?}"
    );
    m.check().await;
}
