//! `kling-video` as a route target: canonical shots mapped to the `video` unit `plan` makes of
//! the equivalent payload, and every refusal naming the canonical field.

use serde_json::{Value, json};
use slotd_sdk::testing::ScriptedHost;
use slotd_sdk::{Handler, Outcome, PlanError, RoutedShot, TickContext, Unit, UnitStatus};

use super::*;
use crate::testing::{kling, kling_host};
use crate::{KlingAvatar, KlingVideo};

const IMAGE: &str = "https://img.test/first.png";

fn routed(model: &str, shot: Value) -> Result<RoutedShot, PlanError> {
    KlingVideo::<false>::plan_shot(&ScriptedHost::new(), model, &shot.to_string())
}

fn ok(model: &str, shot: Value) -> RoutedShot {
    routed(model, shot).unwrap_or_else(|e| panic!("refused: {e:?}"))
}

/// The spec `plan` makes of a one-shot `video` payload.
fn planned(payload_shot: Value) -> String {
    let payload = json!({ "shots": [payload_shot] }).to_string();
    let units = KlingVideo::<false>::plan(&ScriptedHost::new(), "video", &payload);
    let mut units = units.unwrap_or_else(|e| panic!("plan refused: {e:?}"));
    units.remove(0).spec
}

/// The refusal of a shot, as `(field, message)`.
fn refusal(model: &str, shot: Value) -> (Option<String>, String) {
    match routed(model, shot) {
        Ok(r) => panic!("routed: {r:?}"),
        Err(e) => (e.field, e.message),
    }
}

fn base() -> Value {
    json!({"prompt": "a lighthouse at dusk", "duration": 5, "aspect_ratio": "16:9"})
}

fn with(mut shot: Value, key: &str, value: Value) -> Value {
    if let Some(map) = shot.as_object_mut() {
        map.insert(key.into(), value);
    }
    shot
}

#[test]
fn every_video_model_is_listed_and_the_avatar_handler_serves_none() {
    assert_eq!(KlingVideo::<false>::route_models(), video::MODELS);
    assert_eq!(KlingVideo::<true>::route_models(), video::MODELS);
    assert!(KlingAvatar::route_models().is_empty());
    let refused = KlingAvatar::plan_shot(&ScriptedHost::new(), "kling-v1", &base().to_string());
    assert!(refused.is_err_and(|e| e.message.contains("serves no routes")));
}

#[test]
fn a_text_shot_is_the_text2video_unit_plan_makes() {
    let shot = json!({"prompt": "waves", "duration": 10, "aspect_ratio": "9:16",
        "resolution": "1080p", "negative_prompt": "blur"});
    let r = ok("kling-v1-6", shot);
    assert_eq!(
        (r.task_type.as_str(), r.pool.as_str(), r.state.as_str()),
        ("video", "kling:video", "{}")
    );
    assert_eq!(
        r.spec,
        planned(
            json!({"prompt": "waves", "model_name": "kling-v1-6", "mode": "pro",
            "duration": "10", "aspect_ratio": "9:16", "negative_prompt": "blur"})
        )
    );
    assert_eq!(
        video::job_of(&r.spec).map(|(c, _)| c),
        Ok(video::TEXT2VIDEO)
    );
}

#[test]
fn an_image_shot_is_the_image2video_unit_plan_makes() {
    let r = ok("kling-v2-master", with(base(), "image_url", json!(IMAGE)));
    assert_eq!(
        (r.task_type.as_str(), r.pool.as_str()),
        ("video", "kling:video")
    );
    // The ratio is checked but not sent: image-to-video follows the image.
    assert_eq!(
        r.spec,
        planned(json!({"prompt": "a lighthouse at dusk", "image": IMAGE,
            "model_name": "kling-v2-master", "mode": "std", "duration": "5"}))
    );
    let body: Value = serde_json::from_str(&r.spec).unwrap_or_default();
    assert_eq!(body.get("aspect_ratio"), None);
    assert_eq!(
        video::job_of(&r.spec).map(|(c, _)| c),
        Ok(video::IMAGE2VIDEO)
    );
}

#[test]
fn defaults_and_equivalent_ratios_map_like_plan() {
    // No resolution: std, as plan's default; 1280:720 is 16:9.
    let r = ok("kling-v1", with(base(), "aspect_ratio", json!("1280:720")));
    assert_eq!(
        r.spec,
        planned(
            json!({"prompt": "a lighthouse at dusk", "model_name": "kling-v1",
            "mode": "std", "duration": "5", "aspect_ratio": "16:9"})
        )
    );
    let square = ok("kling-v3", with(base(), "aspect_ratio", json!("1:1")));
    assert!(
        square.spec.contains(r#""aspect_ratio":"1:1""#),
        "{}",
        square.spec
    );
}

#[test]
fn routed_specs_are_priced_and_timed_like_planned_ones() {
    let host = ScriptedHost::new();
    for (shot, units, p50) in [
        (base(), 1.0, 75_000),
        (with(base(), "resolution", json!("1080p")), 3.5, 180_000),
        (with(base(), "duration", json!(10)), 2.0, 180_000),
        (
            with(
                with(base(), "duration", json!(10)),
                "resolution",
                json!("1080p"),
            ),
            7.0,
            180_000,
        ),
    ] {
        let r = ok("kling-v1-6", shot);
        assert_eq!(
            KlingVideo::<false>::estimate(&r.task_type, &r.spec),
            Some(units)
        );
        let stated = KlingVideo::<false>::expected_duration(&host, &r.task_type, &r.spec);
        assert_eq!(stated.map(|d| d.p50_ms), Some(p50));
    }
}

#[test]
fn a_routed_unit_is_submitted_with_the_body_of_a_planned_one() {
    let r = ok("kling-v1-6", with(base(), "image_url", json!(IMAGE)));
    let host = kling_host(|_| kling(200, 0, "SUCCEED", json!({"task_id": "9"})));
    let unit = |spec: String| Unit {
        id: "u1".into(),
        task_type: r.task_type.clone(),
        stage: video::STAGE.into(),
        status: UnitStatus::Submitted,
        spec,
        state: r.state.clone(),
        idempotency_key: "u1-video-0".into(),
        ..Unit::default()
    };
    let planned_spec = planned(json!({"prompt": "a lighthouse at dusk", "image": IMAGE,
        "model_name": "kling-v1-6", "mode": "std", "duration": "5"}));
    let ctx = TickContext::default();
    for spec in [r.spec.clone(), planned_spec] {
        let changes = KlingVideo::<false>::tick(&host, &ctx, vec![unit(spec)]);
        assert_eq!(
            changes.map(|c| c[0].outcome.clone()),
            Ok(Outcome::Accepted("9".into()))
        );
    }
    let sent = host.requests();
    assert_eq!(sent.len(), 2);
    assert!(sent[0].url.ends_with(video::IMAGE2VIDEO), "{}", sent[0].url);
    assert_eq!(sent[0].url, sent[1].url);
    assert_eq!(sent[0].body, sent[1].body, "the same create body");
}

#[test]
fn what_kling_cannot_make_is_refused_naming_the_field() {
    let m = "kling-v1-6";
    assert_eq!(
        refusal(m, with(base(), "duration", json!(7))),
        (
            Some("duration".into()),
            "kling-v1-6 makes 5 or 10 second videos, not 7".into()
        )
    );
    assert_eq!(
        refusal(m, with(base(), "duration", json!(5.5))).1,
        "kling-v1-6 makes 5 or 10 second videos, not 5.5"
    );
    assert_eq!(
        refusal(m, with(base(), "aspect_ratio", json!("4:3"))),
        (
            Some("aspect_ratio".into()),
            "kling-v1-6 makes 16:9, 9:16, 1:1 videos, not 4:3".into()
        )
    );
    // Also with an image: the ratios Kling makes bound what a route may ask of it.
    let image_4_3 = with(
        with(base(), "image_url", json!(IMAGE)),
        "aspect_ratio",
        json!("4:3"),
    );
    assert_eq!(refusal(m, image_4_3).0.as_deref(), Some("aspect_ratio"));
    assert_eq!(
        refusal(m, with(base(), "resolution", json!("4k"))),
        (
            Some("resolution".into()),
            "kling-v1-6 makes 720p (mode std) or 1080p (mode pro) videos, not 4k".into()
        )
    );
    let (field, message) = refusal(m, with(base(), "seed", json!(42)));
    assert_eq!(field.as_deref(), Some("seed"));
    assert!(message.starts_with("Kling takes no seed"), "{message}");
    for (key, value) in [
        ("image_url", json!("data:image/png;base64,AAAA")),
        ("image_url", json!("ftp://img.test/a.png")),
        ("image_url", json!("not an image")),
        ("prompt", json!("   ")),
        ("prompt", json!("x".repeat(2501))),
        ("negative_prompt", json!("x".repeat(2501))),
    ] {
        let (field, message) = refusal(m, with(base(), key, value));
        assert_eq!(field.as_deref(), Some(key), "{key}: {message}");
    }
}

#[test]
fn shots_the_contract_does_not_allow_and_models_kling_does_not_serve_are_refused() {
    assert_eq!(
        refusal("kling-v1-6", with(base(), "fps", json!(24)))
            .0
            .as_deref(),
        Some("fps")
    );
    assert_eq!(
        refusal("kling-v1-6", with(base(), "duration", json!("5")))
            .0
            .as_deref(),
        Some("duration")
    );
    let (field, message) = refusal("kling-v9", base());
    assert_eq!(field, None, "the route names the model, not the shot");
    assert!(
        message.contains("kling-video serves no model \"kling-v9\""),
        "{message}"
    );
    assert!(message.contains("kling-v1-6"), "{message}");
    let (field, _) = match KlingVideo::<false>::plan_shot(&ScriptedHost::new(), "kling-v1", "[]") {
        Ok(r) => panic!("{r:?}"),
        Err(e) => (e.field, e.message),
    };
    assert_eq!(field, None);
}
