//! Callbacks are authenticated by construction (docs/trust-model.md), against the real Kling
//! simulator and the real `kling-video` handler with callbacks on.
//!
//! Forged callbacks say "succeeded, here is my video" for a unit that is running at the
//! provider: without a token, with a garbled one, with a valid token of another unit's batch,
//! and with a valid token replayed against the unit's next attempt. Each must change nothing.
//! The simulator is told to fail every job after acceptance, so a unit can only ever reach
//! `succeeded` through a forgery; and it runs at real speed where the test needs a unit to
//! stay put while it is attacked.

use std::time::Duration;

use serde_json::{Value, json};
use slotd_core::config::Secret;
use slotd_sim::kling::SimOptions;

use crate::kling::{Run, sim_options, video_payload};
use crate::support::eventually;

/// Where a forged success points the unit's video.
const ATTACKER_URL: &str = "http://attacker.invalid/evil.mp4";

/// A simulator whose every job fails after acceptance, at `time_scale` (1.0: a job takes at
/// least ten real seconds to fail, so nothing moves while a test attacks it).
fn failing_sim(seed: u64, time_scale: f64) -> SimOptions {
    SimOptions {
        time_scale,
        failure_after_accept_rate: 1.0,
        long_tail_rate: 0.0,
        ..sim_options(seed)
    }
}

/// Kling's callback body for `job` (sent as `external_task_id`) having succeeded with the
/// attacker's video.
fn forged_success(job: &str, external: &str) -> Value {
    json!({
        "task_id": job,
        "task_status": "succeed",
        "task_status_msg": "",
        "task_info": {"external_task_id": external},
        "task_result": {"videos": [{"id": "1", "url": ATTACKER_URL, "duration": "5"}]},
        "final_unit_deduction": "1",
        "created_at": 1_781_080_778_802_i64,
        "updated_at": 1_781_080_794_151_i64,
    })
}

/// Kling's callback body for `job` having failed.
fn forged_failure(job: &str, external: &str) -> Value {
    json!({
        "task_id": job,
        "task_status": "failed",
        "task_status_msg": "forged",
        "task_info": {"external_task_id": external},
        "final_unit_deduction": "0",
    })
}

/// One accepted provider job of a unit, as the simulator saw its create.
struct Accepted {
    job: String,
    external: String,
    /// The callback URL the handler handed the provider for it.
    callback_url: String,
}

/// Wait until the task's only unit has a provider job other than `previous`, and return it.
async fn accepted(run: &Run, task_id: &str, previous: Option<&str>) -> Accepted {
    eventually(
        Duration::from_secs(30),
        "the unit's job accepted",
        async || {
            let units = run.services.store.task_units(task_id).await.ok()?;
            let unit = units.first()?;
            let job = unit.provider_job_id.clone()?;
            if Some(job.as_str()) == previous
                || unit.status != slotd_core::model::UnitStatus::Submitted
            {
                return None;
            }
            let sim_job = run.sim.jobs().into_iter().find(|j| j.task_id == job)?;
            Some(Accepted {
                external: sim_job.external_task_id?,
                callback_url: sim_job.callback_url?,
                job,
            })
        },
    )
    .await
}

/// What a callback could change: every unit's status, stage, job, result, error, cost and
/// submit attempt, and the task's event log. (Not the poll schedule: a genuine "processing"
/// callback may move that.)
async fn snapshot(run: &Run, task_id: &str) -> Value {
    let units = run.services.store.task_units(task_id).await.expect("units");
    let events = run
        .services
        .store
        .unit_events(task_id)
        .await
        .expect("events");
    json!({
        "units": units.iter().map(|u| json!({
            "status": u.status.as_str(), "stage": u.stage, "job": u.provider_job_id,
            "result": u.result, "error": u.error, "cost": u.cost,
            "attempt": u.submit_attempt, "submitted_at": u.submitted_at,
        })).collect::<Vec<_>>(),
        "events": events.iter().map(|e| json!([e.from_status, e.to_status, e.detail])).collect::<Vec<_>>(),
    })
}

/// POST `body` to `url`; the status and the JSON answer.
async fn post(run: &Run, url: &str, body: &Value) -> (u16, Value) {
    let r = run
        .client
        .post(url)
        .json(body)
        .send()
        .await
        .expect("post callback");
    let status = r.status().as_u16();
    let problem = r
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes() == b"application/problem+json");
    let answer: Value = r.json().await.unwrap_or(Value::Null);
    if status == 401 {
        assert!(problem, "a 401 is problem+json: {answer}");
    }
    (status, answer)
}

/// The token part of a callback URL slotd minted.
fn token_of(url: &str) -> &str {
    url.rsplit_once("/v1/callbacks/kling-video/")
        .map(|(_, token)| token)
        .unwrap_or_else(|| panic!("callback URL without a token: {url}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_without_a_valid_token_are_refused_and_change_nothing() {
    let run = Run::start(failing_sim(31, 1.0), 4, true).await;
    let id = run.submit("video", video_payload(1)).await;
    let unit = accepted(&run, &id, None).await;
    let before = snapshot(&run, &id).await;
    let body = forged_success(&unit.job, &unit.external);
    let base = &run.base;

    // (a) No token: the URL of earlier versions.
    let (status, answer) = post(&run, &format!("{base}/v1/callbacks/kling-video"), &body).await;
    assert_eq!(status, 401, "no token: {answer}");

    // (b) Garbled tokens: junk, a valid token with one MAC character changed, a valid token
    // cut short, and a valid token presented on another handler's route.
    let token = token_of(&unit.callback_url);
    let mut flipped = token.to_string();
    let at = flipped.len() - 10;
    let other = if flipped.as_bytes()[at] == b'A' {
        "B"
    } else {
        "A"
    };
    flipped.replace_range(at..at + 1, other);
    let garbled = [
        format!("{base}/v1/callbacks/kling-video/garbage"),
        format!("{base}/v1/callbacks/kling-video/{flipped}"),
        format!(
            "{base}/v1/callbacks/kling-video/{}",
            &token[..token.len() - 8]
        ),
        format!("{base}/v1/callbacks/kling-avatar/{token}"),
    ];
    for url in &garbled {
        let (status, answer) = post(&run, url, &body).await;
        assert_eq!(status, 401, "{url}: {answer}");
    }
    // The token is checked before the handler is asked: a body the handler would refuse with
    // 400 still gets 401.
    let (status, _) = post(&run, &garbled[1], &json!("not a task object")).await;
    assert_eq!(status, 401);

    assert_eq!(
        snapshot(&run, &id).await,
        before,
        "a refused callback changed the unit"
    );
    // The genuine URL reaches the handler (which refuses a body that is no task object).
    let (status, answer) = post(&run, &unit.callback_url, &json!("not a task object")).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(snapshot(&run, &id).await, before);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_batch_s_token_cannot_move_a_unit() {
    let run = Run::start(failing_sim(32, 1.0), 4, true).await;
    // Two tasks submitted one after the other: two ticks, two batches, two tokens.
    let mine = run.submit("video", video_payload(1)).await;
    let my_unit = accepted(&run, &mine, None).await;
    let theirs = run.submit("video", video_payload(1)).await;
    let their_unit = accepted(&run, &theirs, None).await;
    let (mine_before, theirs_before) = (snapshot(&run, &mine).await, snapshot(&run, &theirs).await);

    // (c) My valid token, their unit: mark it succeeded with my video, or failed.
    for body in [
        forged_success(&their_unit.job, &their_unit.external),
        forged_failure(&their_unit.job, &their_unit.external),
    ] {
        let (status, answer) = post(&run, &my_unit.callback_url, &body).await;
        assert_eq!(status, 200, "a valid token is accepted: {answer}");
        assert_eq!(answer["applied"], 0, "{answer}");
        assert_eq!(answer["ignored"], 1, "{answer}");
    }
    assert_eq!(
        snapshot(&run, &theirs).await,
        theirs_before,
        "their unit moved"
    );
    assert_eq!(snapshot(&run, &mine).await, mine_before, "my unit moved");
    assert_ne!(
        token_of(&my_unit.callback_url),
        token_of(&their_unit.callback_url),
        "separate batches carry separate tokens"
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_token_cannot_touch_the_unit_after_it_moved() {
    // Fast enough to see a job fail (1.5–18 s), slow enough that the next attempt stays
    // running while it is attacked (at least 1.5 s).
    let run = Run::start(failing_sim(33, 0.15), 4, true).await;
    let id = run.submit("video", video_payload(1)).await;
    let first = accepted(&run, &id, None).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    assert_eq!(views[0]["status"], "failed", "{}", views[0]);

    // (d) The first attempt's token, replayed after the unit failed: ignored.
    let failed = snapshot(&run, &id).await;
    let (status, answer) = post(
        &run,
        &first.callback_url,
        &forged_success(&first.job, &first.external),
    )
    .await;
    assert_eq!((status, &answer["applied"]), (200, &json!(0)), "{answer}");
    assert_eq!(snapshot(&run, &id).await, failed);

    // Retried: a new attempt, a new job. The old token names the old attempt only.
    let retry = run
        .client
        .post(format!("{}/v1/tasks/{id}/retry", run.base))
        .send()
        .await
        .expect("retry");
    assert_eq!(retry.status(), 200);
    let second = accepted(&run, &id, Some(&first.job)).await;
    assert_ne!(
        second.external, first.external,
        "a retry is a new submission"
    );
    let running = snapshot(&run, &id).await;
    let (status, answer) = post(
        &run,
        &first.callback_url,
        &forged_success(&second.job, &second.external),
    )
    .await;
    assert_eq!((status, &answer["applied"]), (200, &json!(0)), "{answer}");
    let after = snapshot(&run, &id).await;
    // While the provider still runs the job, nothing but a forgery could have moved the unit.
    let provider_running = run
        .sim
        .jobs()
        .iter()
        .any(|j| j.task_id == second.job && j.ended.is_none());
    if provider_running {
        assert_eq!(after, running, "the old token moved the new attempt");
    }
    // And whatever happens next is the provider's doing: the attempt fails like every job here.
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    assert_eq!(views[0]["status"], "failed", "{}", views[0]);
    let log = snapshot(&run, &id).await.to_string();
    assert!(!log.contains("\"succeeded\""), "the unit succeeded: {log}");
    assert!(
        !log.contains(ATTACKER_URL),
        "the attacker's URL was recorded: {log}"
    );
    run.stop().await;
}

/// The normal path: the simulator's callbacks (through the tokens slotd minted) move units,
/// none is refused, and every job was created with a tokened URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minted_callbacks_move_units() {
    let run = Run::start(sim_options(34), 18, true).await;
    let id = run.submit("video", video_payload(10)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    let by_callback = callback_transitions(&run, &id).await;
    let sim = run.stop().await;
    let stats = sim.stats();
    assert!(stats.callbacks_sent > 0, "{stats:?}");
    assert_eq!(
        stats.callbacks_rejected, 0,
        "a genuine callback was refused"
    );
    assert!(by_callback > 0, "no unit was moved by a callback");
    for job in sim.jobs() {
        token_of(job.callback_url.as_deref().unwrap_or_default());
    }
}

/// A genuine callback that only says the job is still running (Kling's `processing`, which
/// the handler reports as the job accepted again) tells nothing the unit's row does not hold:
/// it is answered as applied and nothing is written: not the poll count, not the next poll,
/// not the row's `updated_at`, not an event. (The safety net's polls are an hour
/// apart here, so nothing else writes the unit while the test looks.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_that_only_says_running_writes_nothing() {
    let run = Run::start_with(failing_sim(35, 1.0), 4, true, |c| {
        c.scheduler.callback_safety_poll = Some(Duration::from_secs(3600));
    })
    .await;
    let id = run.submit("video", video_payload(1)).await;
    let unit = accepted(&run, &id, None).await;
    let row = async || {
        let units = run.services.store.task_units(&id).await.expect("units");
        let u = units.first().expect("one unit");
        (u.status, u.polls, u.next_at, u.updated_at, u.state.clone())
    };
    let (before, events_before) = (row().await, snapshot(&run, &id).await);
    let processing = json!({
        "task_id": unit.job,
        "task_status": "processing",
        "task_status_msg": "",
        "task_info": {"external_task_id": unit.external},
    });
    for _ in 0..3 {
        let (status, answer) = post(&run, &unit.callback_url, &processing).await;
        assert_eq!((status, &answer["applied"]), (200, &json!(1)), "{answer}");
        assert_eq!(answer["ignored"], 0, "{answer}");
    }
    assert_eq!(row().await, before, "a running callback wrote the unit");
    assert_eq!(snapshot(&run, &id).await, events_before);
    // A callback that says something is still written: the job failed.
    let (status, answer) = post(
        &run,
        &unit.callback_url,
        &forged_failure(&unit.job, &unit.external),
    )
    .await;
    assert_eq!((status, &answer["applied"]), (200, &json!(1)), "{answer}");
    assert_ne!(row().await.0, before.0, "the failure was not written");
    run.stop().await;
}

/// Standard Webhooks signatures still work on top of tokens: with the same `whsec_` secret on
/// both sides the signed callbacks move units, and an unsigned one is refused by the handler
/// even through a valid token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_callbacks_work_on_top_of_tokens() {
    const SECRET: &str = "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXR0ZXN0c2VjcmV0MTI=";
    let opts = SimOptions {
        webhook_secret: Some(SECRET.into()),
        ..sim_options(35)
    };
    let run = Run::start_with(opts, 18, true, |c| {
        if let Some(h) = c.handlers.get_mut("kling-video") {
            h.secrets
                .insert("webhook_secret".into(), Secret::new(SECRET));
        }
    })
    .await;
    let id = run.submit("video", video_payload(6)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    assert!(callback_transitions(&run, &id).await > 0);
    let url = run
        .sim
        .jobs()
        .into_iter()
        .find_map(|j| j.callback_url)
        .expect("a callback URL");
    let events_before = run
        .services
        .store
        .unit_events(&id)
        .await
        .expect("events")
        .len();
    let (status, answer) = post(&run, &url, &forged_success("1", "x")).await;
    assert_eq!(status, 401, "unsigned through a valid token: {answer}");
    // Signed with another key, and signed right but replayed from long ago: 401 too.
    let body = forged_success("1", "x").to_string();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default();
    let other = "whsec_b3RoZXJzZWNyZXRvdGhlcnNlY3JldG90aGVyc2VjcmV0";
    for (secret, ts) in [(other, now), (SECRET, now - 3_600)] {
        let sig = slotd_core::standard_webhooks::sign(secret, "msg-1", ts, body.as_bytes())
            .expect("sign");
        let r = run
            .client
            .post(&url)
            .header("content-type", "application/json")
            .header("webhook-id", "msg-1")
            .header("webhook-timestamp", ts.to_string())
            .header("webhook-signature", sig)
            .body(body.clone())
            .send()
            .await
            .expect("post");
        assert_eq!(r.status(), 401, "bad signature ({secret}, {ts})");
    }
    let events_after = run
        .services
        .store
        .unit_events(&id)
        .await
        .expect("events")
        .len();
    assert_eq!(
        events_before, events_after,
        "a refused callback changed nothing"
    );
    let stats = run.stop().await.stats();
    assert!(stats.callbacks_sent > 0);
    assert_eq!(stats.callbacks_rejected, 0, "a signed callback was refused");
}

/// How many unit transitions of a task the event log attributes to a callback.
async fn callback_transitions(run: &Run, task_id: &str) -> usize {
    run.services
        .store
        .unit_events(task_id)
        .await
        .expect("events")
        .iter()
        .filter(|e| e.detail.as_deref().is_some_and(|d| d.contains("callback")))
        .count()
}
