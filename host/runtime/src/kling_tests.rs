//! The built Kling handlers (`plugins/kling-video`, `plugins/kling-avatar`) against the real
//! simulator (`slotd_sim::kling`), called directly through the runtime: payload validation, the
//! submit/poll flow to success, 1303, in-doubt and duplicate adoption, both avatar stages, and
//! callbacks. A tiny driver below stands in for the scheduler (the full path is the lead's
//! end-to-end suite).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{BatchUnit, Handler, Runtime, TickContext};
use slotd_core::config::{HandlerConfig, RuntimeLimits, Secret};
use slotd_core::model::{Outcome, Unit, UnitStatus};
use slotd_sim::kling::{SimHandle, SimOptions};

/// Simulated durations × this: a 30–120 s clip takes 30–120 ms.
const TIME_SCALE: f64 = 0.001;
const DRIVE_DEADLINE: Duration = Duration::from_secs(20);

pub(super) fn built(file: &str) -> PathBuf {
    PathBuf::from(slotd_testkit::BUILT_PLUGINS).join(file)
}

pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub(super) async fn sim(opts: SimOptions) -> SimHandle {
    slotd_sim::kling::start(SimOptions {
        listen: "127.0.0.1:0".parse().expect("literal address"),
        time_scale: TIME_SCALE,
        access_key: "AK".into(),
        secret_key: "SK".into(),
        long_tail_rate: 0.0,
        ..opts
    })
    .await
    .expect("the simulator starts")
}

pub(super) fn config(sim: &SimHandle, secret: &str) -> HandlerConfig {
    let mut c = HandlerConfig::default();
    c.settings.insert("base_url".into(), sim.base_url().into());
    c.settings.insert("access_key".into(), "AK".into());
    c.settings
        .insert("expected_duration_scale".into(), TIME_SCALE.to_string());
    c.secrets.insert("secret_key".into(), Secret::new(secret));
    c.allowed_hosts = vec![sim.addr().to_string()];
    c
}

/// Both handlers loaded with their config pointing at `sim`, signing with `secret`.
pub(super) async fn load(sim: &SimHandle, secret: &str) -> (Arc<Handler>, Arc<Handler>) {
    let handlers = BTreeMap::from([
        ("kling-video".to_string(), config(sim, secret)),
        ("kling-avatar".to_string(), config(sim, secret)),
    ]);
    let runtime = Runtime::new(RuntimeLimits::default(), handlers).expect("runtime builds");
    let video = runtime
        .load_file(&built("kling_video.wasm"))
        .await
        .expect("kling-video loads");
    let avatar = runtime
        .load_file(&built("kling_avatar.wasm"))
        .await
        .expect("kling-avatar loads");
    (video, avatar)
}

pub(super) fn video_payload() -> Value {
    json!({
        "model_name": "kling-v1-6", "mode": "std", "duration": "5", "aspect_ratio": "16:9",
        "negative_prompt": "blur",
        "shots": [
            {"prompt": "a cat on a roof"},
            {"prompt": "the cat jumps", "image": "https://example.com/cat.png"},
            {"prompt": "the cat lands", "mode": "pro", "duration": "10"},
        ]
    })
}

pub(super) fn avatar_payload() -> Value {
    json!({
        "voice_name": "narrator", "voice_url": "https://example.com/voice.mp3",
        "element_name": "host", "element_description": "the show's host",
        "frontal_image": "https://example.com/front.png",
        "refer_images": ["https://example.com/side.png"],
    })
}

pub(super) async fn specs(handler: &Handler, task_type: &str, payload: &Value) -> Vec<String> {
    handler
        .plan(task_type, &payload.to_string())
        .await
        .expect("plan runs")
        .expect("payload accepted")
        .into_iter()
        .map(|u| u.spec)
        .collect()
}

pub(super) fn unit(id: &str, task_type: &str, stage: &str, spec: &str) -> Unit {
    let now = now_ms() as i64;
    Unit {
        id: id.into(),
        task_id: "t1".into(),
        index: 0,
        tenant: "local".into(),
        task_type: task_type.into(),
        pool: "kling".into(),
        stage: stage.into(),
        status: UnitStatus::Submitted,
        priority: 0,
        spec: spec.into(),
        state: "{}".into(),
        provider_job_id: None,
        submit_attempt: 0,
        attempts: 0,
        polls: 0,
        next_at: 0,
        submitted_at: Some(now),
        error: None,
        result: None,
        cost: None,
        cancel_requested_at: None,
        routes: None,
        routing: None,
        terms: Default::default(),
        releases: Default::default(),
        created_at: now,
        updated_at: now,
    }
}

pub(super) fn ctx() -> TickContext {
    TickContext {
        pool: "kling".into(),
        now_ms: now_ms(),
        provider_callback_url: None,
        account: None,
    }
}

pub(super) async fn tick(handler: &Handler, units: &[(Unit, bool)]) -> Vec<Outcome> {
    let batch: Vec<BatchUnit> = units
        .iter()
        .map(|(unit, in_doubt)| BatchUnit {
            unit: unit.clone(),
            in_doubt: *in_doubt,
        })
        .collect();
    let changes = handler.tick(&ctx(), &batch).await.expect("tick runs");
    assert_eq!(
        changes.len(),
        units.len(),
        "one change per unit: {changes:?}"
    );
    units
        .iter()
        .map(|(u, _)| {
            changes
                .iter()
                .find(|c| c.unit_id == u.id)
                .map(|c| c.outcome.clone())
                .unwrap_or_else(|| panic!("no change for unit {}", u.id))
        })
        .collect()
}

/// Stand-in for the scheduler: tick every submitted unit and apply the changes until none is
/// submitted or the deadline passes. A `next-stage` unit is resubmitted at once.
pub(super) async fn drive(handler: &Handler, units: &mut [Unit]) {
    let deadline = Instant::now() + DRIVE_DEADLINE;
    loop {
        let live: Vec<Unit> = units
            .iter()
            .filter(|u| u.status == UnitStatus::Submitted)
            .cloned()
            .collect();
        if live.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "units still submitted: {live:?}");
        let batch: Vec<BatchUnit> = live
            .iter()
            .map(|u| BatchUnit {
                unit: u.clone(),
                in_doubt: false,
            })
            .collect();
        let changes = handler.tick(&ctx(), &batch).await.expect("tick runs");
        for change in changes {
            let Some(u) = units.iter_mut().find(|u| u.id == change.unit_id) else {
                panic!("change for an unknown unit {}", change.unit_id);
            };
            if let Some(state) = change.state {
                u.state = state;
            }
            if change.cost.is_some() {
                u.cost = change.cost;
            }
            match change.outcome {
                Outcome::Accepted { job_id } => u.provider_job_id = Some(job_id),
                Outcome::Running { .. } => u.polls += 1,
                Outcome::Succeeded { result } => {
                    u.status = UnitStatus::Succeeded;
                    u.result = Some(result);
                }
                Outcome::NextStage { stage } => {
                    u.stage = stage;
                    u.provider_job_id = None;
                    u.polls = 0;
                    u.submitted_at = Some(now_ms() as i64);
                }
                Outcome::Fail { error } => {
                    u.status = UnitStatus::Failed;
                    u.error = Some(format!("{error:?}"));
                }
                other => panic!("unexpected outcome for {}: {other:?}", u.id),
            }
        }
        // Polling with a deadline: give the simulated jobs a moment between ticks.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn video_plan_resolves_shots_and_names_every_bad_field() {
    let sim = sim(SimOptions::default()).await;
    let (video, _) = load(&sim, "SK").await;
    let specs = specs(&video, "video", &video_payload()).await;
    assert_eq!(specs.len(), 3, "one unit per shot");
    let bodies: Vec<Value> = specs
        .iter()
        .map(|s| serde_json::from_str(s).expect("spec is JSON"))
        .collect();
    assert_eq!(bodies[0]["model_name"], "kling-v1-6");
    assert_eq!(bodies[0]["negative_prompt"], "blur");
    assert_eq!(bodies[0]["aspect_ratio"], "16:9");
    assert_eq!(bodies[1]["image"], "https://example.com/cat.png");
    assert!(
        bodies[1].get("aspect_ratio").is_none(),
        "image2video ignores it"
    );
    assert_eq!(bodies[2]["mode"], "pro");
    assert_eq!(bodies[2]["duration"], "10");
    assert!(bodies.iter().all(|b| b.get("external_task_id").is_none()));

    let long = "x".repeat(2501);
    let cases: Vec<(Value, Option<&str>)> = vec![
        (
            json!({"shots": [{"prompt": "a"}], "model_name": "kling-v9"}),
            Some("model_name"),
        ),
        (
            json!({"shots": [{"prompt": "a"}], "mode": "fast"}),
            Some("mode"),
        ),
        (
            json!({"shots": [{"prompt": "a"}], "duration": 5}),
            Some("duration"),
        ),
        (
            json!({"shots": [{"prompt": "a"}], "duration": "7"}),
            Some("duration"),
        ),
        (
            json!({"shots": [{"prompt": "a"}], "aspect_ratio": "4:3"}),
            Some("aspect_ratio"),
        ),
        (
            json!({"shots": [{"prompt": "a"}], "negative_prompt": long}),
            Some("negative_prompt"),
        ),
        (
            json!({"shots": [{"prompt": "a"}], "cfg_scale": 1.5}),
            Some("cfg_scale"),
        ),
        (
            json!({"shots": [{"prompt": "a"}], "sound": "loud"}),
            Some("sound"),
        ),
        (json!({"shots": [{"prompt": "a"}], "fps": 24}), Some("fps")),
        (json!({"shots": []}), Some("shots")),
        (json!({"mode": "std"}), Some("shots")),
        (
            json!({"shots": [{"prompt": "a"}, {"image": "https://x/y.png"}]}),
            Some("shots[1].prompt"),
        ),
        (
            json!({"shots": [{"prompt": long}]}),
            Some("shots[0].prompt"),
        ),
        (
            json!({"shots": [{"prompt": "a", "seed": 1}]}),
            Some("shots[0].seed"),
        ),
        (
            json!({"shots": [{"prompt": "a"}, {"prompt": "b", "mode": "x"}]}),
            Some("shots[1].mode"),
        ),
        (
            json!({"shots": [{"prompt": "a", "image": "data:image/png;base64,AAAA"}]}),
            Some("shots[0].image"),
        ),
        (
            json!({"shots": [{"prompt": "a", "image": "not base64 !"}]}),
            Some("shots[0].image"),
        ),
        (json!({"shots": ["a cat"]}), Some("shots[0]")),
        (json!([1, 2]), None),
    ];
    for (payload, field) in cases {
        let answer = video
            .plan("video", &payload.to_string())
            .await
            .expect("plan runs");
        let err = answer.expect_err(&format!("{payload} must be refused"));
        assert_eq!(err.field.as_deref(), field, "{payload}: {err:?}");
        assert!(!err.message.is_empty());
    }
    let raw_base64 = json!({"shots": [{"prompt": "a", "image": "iVBORw0KGgo="}]});
    assert!(
        video
            .plan("video", &raw_base64.to_string())
            .await
            .expect("plan runs")
            .is_ok()
    );
    let wrong_type = video.plan("avatar_clone", "{}").await.expect("plan runs");
    assert!(wrong_type.is_err());
}

#[tokio::test]
async fn video_units_run_to_success_polled_by_list() {
    let sim = sim(SimOptions::default()).await;
    let (video, _) = load(&sim, "SK").await;
    let specs = specs(&video, "video", &video_payload()).await;
    let mut units: Vec<Unit> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| unit(&format!("v{i}"), "video", "video", s))
        .collect();
    drive(&video, &mut units).await;
    let stats = sim.stats();
    for u in &units {
        assert_eq!(u.status, UnitStatus::Succeeded, "{u:?}");
        let result: Value =
            serde_json::from_str(u.result.as_deref().unwrap_or("{}")).expect("result is JSON");
        assert_eq!(
            result["provider_task_id"].as_str(),
            u.provider_job_id.as_deref()
        );
        assert!(
            result["video_url"]
                .as_str()
                .is_some_and(|s| s.ends_with(".mp4"))
        );
        assert!(u.cost.is_some(), "final_unit_deduction recorded: {u:?}");
        let finalized = video.finalize(&ctx(), u).await.expect("finalize runs");
        assert_eq!(finalized.artifacts.len(), 1);
        assert_eq!(finalized.artifacts[0].name, "video.mp4");
        assert_eq!(
            Some(&finalized.artifacts[0].url),
            result["video_url"].as_str().map(String::from).as_ref()
        );
    }
    assert_eq!(
        units[2].cost.as_deref(),
        Some("7"),
        "pro 10 s costs 7 units"
    );
    assert_eq!(stats.creates, 3);
    assert_eq!(stats.creates_by_kind.get("image2video"), Some(&1));
    assert!(
        stats.creates_by_external_id.values().all(|&n| n == 1),
        "{stats:?}"
    );
    assert!(
        stats.list_queries >= 1,
        "several due units are polled by list: {stats:?}"
    );
    assert_eq!(stats.auth_refusals, 0);
    // Every request names slotd, the handler release that made it (it sets no agent itself).
    let agents: Vec<&String> = stats.requests_by_agent.keys().collect();
    let release = video.sha256.get(..12).unwrap_or_default();
    assert_eq!(agents.len(), 1, "{agents:?}");
    assert!(
        agents[0].starts_with("slotd/")
            && agents[0].contains(&format!(" kling-video/{} ", video.info.version))
            && agents[0].ends_with(&format!("(release {release})")),
        "{agents:?}"
    );
}

#[tokio::test]
async fn over_capacity_is_capacity_rejected_not_failed() {
    let sim = sim(SimOptions {
        concurrency: 1,
        ..SimOptions::default()
    })
    .await;
    let (video, _) = load(&sim, "SK").await;
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
    let accepted = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Accepted { .. }))
        .count();
    let rejected = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::CapacityRejected { after_ms: Some(_) }))
        .count();
    assert_eq!((accepted, rejected), (1, 1), "{outcomes:?}");
    assert_eq!(sim.stats().rate_limited_1303, 1);
}

#[tokio::test]
async fn in_doubt_and_duplicate_units_are_adopted_not_resubmitted() {
    let sim = sim(SimOptions::default()).await;
    let (video, _) = load(&sim, "SK").await;
    let specs = specs(
        &video,
        "video",
        &json!({"shots": [{"prompt": "a"}, {"prompt": "b"}]}),
    )
    .await;
    let first = unit("d0", "video", "video", &specs[0]);
    let second = unit("d1", "video", "video", &specs[1]);
    let outcomes = tick(&video, &[(first.clone(), false), (second.clone(), false)]).await;
    let ids: Vec<String> = outcomes
        .iter()
        .map(|o| match o {
            Outcome::Accepted { job_id } => job_id.clone(),
            other => panic!("expected accepted, got {other:?}"),
        })
        .collect();

    // The job ids were "lost": one unit comes back in doubt, the other as a plain resubmit.
    let again = tick(&video, &[(first.clone(), true), (second.clone(), false)]).await;
    assert_eq!(
        again[0],
        Outcome::Accepted {
            job_id: ids[0].clone()
        },
        "in doubt: found by key"
    );
    assert_eq!(
        again[1],
        Outcome::Accepted {
            job_id: ids[1].clone()
        },
        "duplicate: adopted"
    );
    let stats = sim.stats();
    assert_eq!(stats.creates, 2, "nothing created twice: {stats:?}");
    assert_eq!(
        stats.duplicate_refusals, 1,
        "only the non-in-doubt unit tried to create"
    );
    assert_eq!(
        stats.creates_by_external_id.get(&first.idempotency_key()),
        Some(&1)
    );

    // An in-doubt unit the provider never saw is submitted after the lookup.
    let fresh = unit("d2", "video", "video", &specs[0]);
    let outcome = tick(&video, &[(fresh, true)]).await;
    assert!(
        matches!(outcome[0], Outcome::Accepted { .. }),
        "{outcome:?}"
    );
    assert_eq!(sim.stats().creates, 3);
}

#[tokio::test]
async fn failures_are_classified() {
    let sim = sim(SimOptions {
        failure_after_accept_rate: 1.0,
        ..SimOptions::default()
    })
    .await;
    let (video, _) = load(&sim, "SK").await;
    let specs = specs(&video, "video", &json!({"shots": [{"prompt": "a"}]})).await;
    let mut units = vec![unit("f0", "video", "video", &specs[0])];
    drive(&video, &mut units).await;
    assert_eq!(units[0].status, UnitStatus::Failed);
    let error = units[0].error.clone().unwrap_or_default();
    assert!(error.contains("task_failed"), "{error}");

    // A wrong secret key: the provider refuses the JWT (1000-1002). The account is refused,
    // not the job (contract 1.2): retried with code `account_refused`, Kling's code in the
    // message.
    let (wrong, _) = load(&sim, "not-the-secret").await;
    let outcome = tick(&wrong, &[(unit("f1", "video", "video", &specs[0]), false)]).await;
    match &outcome[0] {
        Outcome::RetryAfter { error, .. } => {
            assert_eq!(error.code.as_deref(), Some("account_refused"), "{error:?}");
            assert!(
                ["kling 1000:", "kling 1001:", "kling 1002:"]
                    .iter()
                    .any(|p| error.message.starts_with(p)),
                "{error:?}"
            );
        }
        other => panic!("expected retry-after, got {other:?}"),
    }
}

#[tokio::test]
async fn avatar_runs_voice_then_element_with_the_voice_id() {
    let sim = sim(SimOptions::default()).await;
    let (_, avatar) = load(&sim, "SK").await;
    let specs = specs(&avatar, "avatar_clone", &avatar_payload()).await;
    assert_eq!(specs.len(), 1, "one unit");
    let mut units = vec![unit("a0", "avatar_clone", "voice", &specs[0])];
    drive(&avatar, &mut units).await;
    let u = &units[0];
    assert_eq!(u.status, UnitStatus::Succeeded, "{u:?}");
    assert_eq!(u.stage, "element");
    let result: Value =
        serde_json::from_str(u.result.as_deref().unwrap_or("{}")).expect("result is JSON");
    let voice_id = result["voice_id"].as_str().expect("voice_id").to_string();
    let element_id = result["element_id"]
        .as_str()
        .expect("element_id as a string");
    let stats = sim.stats();
    let element_task = u.provider_job_id.clone().expect("element job id");
    assert_eq!(stats.element_voice_ids.get(&element_task), Some(&voice_id));
    assert_eq!(stats.creates_by_kind.get("custom-voices"), Some(&1));
    assert_eq!(
        stats.creates_by_kind.get("advanced-custom-elements"),
        Some(&1)
    );
    let finalized = avatar.finalize(&ctx(), u).await.expect("finalize runs");
    assert!(finalized.artifacts.is_empty());
    let merged: Value =
        serde_json::from_str(finalized.result.as_deref().unwrap_or("{}")).expect("JSON");
    assert_eq!(
        merged,
        json!({"voice_id": voice_id, "element_id": element_id})
    );
}

#[tokio::test]
async fn avatar_plan_names_every_bad_field() {
    let sim = sim(SimOptions::default()).await;
    let (_, avatar) = load(&sim, "SK").await;
    let with = |k: &str, v: Value| {
        let mut p = avatar_payload();
        p[k] = v;
        p
    };
    let without = |k: &str| {
        let mut p = avatar_payload();
        p.as_object_mut().map(|o| o.remove(k));
        p
    };
    let cases = [
        (with("voice_name", json!("x".repeat(21))), "voice_name"),
        (without("voice_name"), "voice_name"),
        (with("voice_url", json!("ftp://x/v.mp3")), "voice_url"),
        (with("element_name", json!("")), "element_name"),
        (
            with("element_description", json!("d".repeat(101))),
            "element_description",
        ),
        (without("frontal_image"), "frontal_image"),
        (with("refer_images", json!([])), "refer_images"),
        (
            with("refer_images", json!("https://x/y.png")),
            "refer_images",
        ),
        (
            with("refer_images", json!(["https://x/y.png", 3])),
            "refer_images[1]",
        ),
        (with("tags", json!([])), "tags"),
    ];
    for (payload, field) in cases {
        let err = avatar
            .plan("avatar_clone", &payload.to_string())
            .await
            .expect("plan runs")
            .expect_err("refused");
        assert_eq!(err.field.as_deref(), Some(field), "{payload}: {err:?}");
    }
}

#[tokio::test]
async fn callbacks_become_changes_by_job_id_and_key() {
    let sim = sim(SimOptions::default()).await;
    let (video, avatar) = load(&sim, "SK").await;
    let body = json!({
        "task_id": "842250903629086785", "task_status": "succeed", "task_status_msg": "",
        "task_info": {"external_task_id": "u-1-video-0"}, "final_unit_deduction": "1",
        "task_result": {"videos": [{"id": "1", "url": "https://cdn.example/x.mp4", "duration": "5"}]},
    });
    let changes = video
        .on_callback(&[], body.to_string().as_bytes())
        .await
        .expect("callback accepted");
    assert_eq!(changes.len(), 1);
    assert_eq!(
        changes[0].provider_job_id.as_deref(),
        Some("842250903629086785")
    );
    assert_eq!(changes[0].idempotency_key.as_deref(), Some("u-1-video-0"));
    assert_eq!(changes[0].cost.as_deref(), Some("1"));
    assert!(matches!(changes[0].outcome, Outcome::Succeeded { .. }));

    let voice = json!({
        "task_id": "9", "task_status": "succeed", "task_info": {"external_task_id": "a-voice-0"},
        "task_result": {"voices": [{"voice_id": "77", "voice_name": "n"}]},
    });
    let changes = avatar
        .on_callback(&[], voice.to_string().as_bytes())
        .await
        .expect("callback accepted");
    assert_eq!(
        changes[0].outcome,
        Outcome::NextStage {
            stage: "element".into()
        }
    );
    let state: Value =
        serde_json::from_str(changes[0].state.as_deref().unwrap_or("{}")).expect("state is JSON");
    assert_eq!(state["voice_id"], "77");
    assert!(video.on_callback(&[], b"not json").await.is_err());
}
