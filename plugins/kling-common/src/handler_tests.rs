//! The two handlers as the host calls them, through the SDK's `Handler` trait.

use serde_json::json;
use slotd_sdk::testing::ScriptedHost;
use slotd_sdk::{Features, Handler, Outcome, TickContext, Unit, features};

use crate::testing::{kling, kling_host};
use crate::{KlingAvatar, KlingVideo, avatar};

#[test]
fn describe_declares_stages_pools_versions_and_no_features() {
    let v = KlingVideo::<false>::describe();
    assert_eq!(
        (v.name.as_str(), v.version.as_str()),
        ("kling-video", "1.0.0")
    );
    assert_eq!(KlingVideo::<true>::describe().version, "1.1.0");
    assert_eq!(v.pools[0].default_max_slots, 18);
    let a = KlingAvatar::describe();
    let stages: Vec<_> = a.task_types[0]
        .stages
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(stages, ["voice", "element"]);
    assert_eq!(features::<KlingVideo>(), Features::default());
    assert_eq!(features::<KlingAvatar>(), Features::default());
}

#[test]
fn plan_and_finalize() {
    let host = ScriptedHost::new();
    let payload = json!({"shots": [{"prompt": "a"}, {"prompt": "b"}]}).to_string();
    let units = KlingVideo::<false>::plan(&host, "video", &payload).unwrap_or_default();
    assert_eq!(units.len(), 2);
    assert_eq!(units[0].state, "{}");
    assert!(KlingAvatar::plan(&host, "video", &payload).is_err());
    let done = Unit {
        result: Some(json!({"video_url": "http://x/1.mp4"}).to_string()),
        ..Unit::default()
    };
    let finalized = KlingVideo::<false>::finalize(&host, &TickContext::default(), done);
    let artifacts = finalized.map(|f| f.artifacts).unwrap_or_default();
    assert_eq!(artifacts[0].url, "http://x/1.mp4");
    let avatar_result = json!({"voice_id": "v", "element_id": 7}).to_string();
    let unit = Unit {
        result: Some(avatar_result),
        ..Unit::default()
    };
    let result = KlingAvatar::finalize(&host, &TickContext::default(), unit).map(|f| f.result);
    assert_eq!(
        result,
        Ok(Some(r#"{"element_id":"7","voice_id":"v"}"#.to_string()))
    );
}

#[test]
fn avatar_ticks_submit_the_voice_and_fail_unreadable_units() {
    let host = kling_host(|_| kling(200, 0, "SUCCEED", json!({"task_id": "9"})));
    let spec = avatar::plan(
        avatar::TASK_TYPE,
        &json!({
        "voice_name": "v", "voice_url": "https://x/v.mp3", "element_name": "e",
        "frontal_image": "https://x/f.png", "refer_images": ["https://x/r.png"]})
        .to_string(),
    );
    let voice = Unit {
        id: "u1".into(),
        stage: "voice".into(),
        spec: spec.unwrap_or_default().remove(0),
        idempotency_key: "u1-voice-0".into(),
        ..Unit::default()
    };
    let broken = Unit {
        id: "u2".into(),
        stage: "element".into(),
        spec: "{}".into(),
        ..Unit::default()
    };
    let ctx = TickContext::default();
    let changes = KlingAvatar::tick(&host, &ctx, vec![voice, broken]).unwrap_or_default();
    assert!(
        matches!(&changes[0].outcome, Outcome::Fail(e) if e.code.as_deref() == Some("bad_spec"))
    );
    assert_eq!(changes[1].outcome, Outcome::Accepted("9".into()));
    assert!(host.requests()[0].url.ends_with(avatar::VOICES));
    let unconfigured = KlingVideo::<false>::tick(&ScriptedHost::new(), &ctx, Vec::new());
    assert_eq!(
        unconfigured,
        Err("base_url is not configured (set handlers.kling-video.base_url)".into())
    );
}

#[test]
fn video_shots_are_estimated_in_units_and_avatars_are_unknown() {
    let host = ScriptedHost::new();
    let payload = json!({"mode": "std", "shots": [
        {"prompt": "a"}, {"prompt": "b", "mode": "pro", "duration": "10"}]});
    let units = KlingVideo::<false>::plan(&host, "video", &payload.to_string())
        .unwrap_or_else(|e| panic!("{e:?}"));
    let costs: Vec<Option<f64>> = units
        .iter()
        .map(|u| KlingVideo::<false>::estimate("video", &u.spec))
        .collect();
    assert_eq!(costs, [Some(1.0), Some(7.0)]);
    assert_eq!(
        KlingVideo::<false>::estimate("avatar_clone", &units[0].spec),
        None
    );
    assert_eq!(KlingAvatar::estimate("avatar_clone", "{}"), None);
}

#[test]
fn video_shots_state_their_expected_durations_scaled_and_avatars_state_none() {
    let payload = json!({"shots": [
        {"prompt": "a"},
        {"prompt": "b", "mode": "pro"},
        {"prompt": "c", "duration": "10", "image": "https://x/i.png"}]});
    let host = ScriptedHost::new();
    let units = KlingVideo::<false>::plan(&host, "video", &payload.to_string())
        .unwrap_or_else(|e| panic!("{e:?}"));
    let stated = |host: &ScriptedHost| -> Vec<Option<(u64, u64)>> {
        units
            .iter()
            .map(|u| {
                KlingVideo::<false>::expected_duration(host, "video", &u.spec)
                    .map(|e| (e.p50_ms, e.p95_ms))
            })
            .collect()
    };
    // KLING_API.md: std 5 s clips 30 s – 2 min, pro or 10 s clips 1 – 5 min.
    assert_eq!(
        stated(&host),
        [
            Some((75_000, 115_500)),
            Some((180_000, 288_000)),
            Some((180_000, 288_000))
        ]
    );
    // Against a simulator at time × 0.1, in the simulator's milliseconds.
    let fast = ScriptedHost::new().with_config("expected_duration_scale", "0.1");
    assert_eq!(stated(&fast)[0], Some((7_500, 11_550)));
    let tiny = ScriptedHost::new().with_config("expected_duration_scale", "0.000001");
    assert_eq!(stated(&tiny)[0], Some((1, 1)), "never a zero median");
    // Unknown: another task type, an unreadable spec, an unusable scale.
    assert_eq!(
        KlingVideo::<false>::expected_duration(&host, "avatar_clone", &units[0].spec),
        None
    );
    assert_eq!(
        KlingVideo::<false>::expected_duration(&host, "video", "nope"),
        None
    );
    let broken = ScriptedHost::new().with_config("expected_duration_scale", "0");
    assert_eq!(stated(&broken)[0], None);
    assert_eq!(
        KlingAvatar::expected_duration(&host, "avatar_clone", "{}"),
        None
    );
}
