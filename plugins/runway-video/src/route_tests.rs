//! `runway-video` as a route target: canonical shots mapped to the unit `plan-routed` makes of
//! the equivalent payload (endpoint, ratio, pool), and every refusal naming the canonical
//! field.

use serde_json::{Value, json};
use slotd_sdk::testing::jobs::{self, with};
use slotd_sdk::{Handler, Outcome, RoutedShot, Unit};

use super::*;
use crate::RunwayVideo;
use crate::tests::support::{IMAGE, NOW, fresh, keyed_host, tick_one, turbo_spec};

fn ok(model: &str, shot: Value) -> RoutedShot {
    jobs::routed::<RunwayVideo>(&keyed_host(), model, &shot)
}

/// The spec and pool `plan-routed` gives the only shot of `payload`.
fn planned(payload: Value) -> (String, String) {
    jobs::planned::<RunwayVideo>(&keyed_host(), TASK_TYPE, &payload)
}

/// The create request of a spec: endpoint and body.
fn request(spec: &str) -> (String, Value) {
    let spec: Value = serde_json::from_str(spec).unwrap_or_default();
    (
        spec["endpoint"].as_str().unwrap_or_default().to_string(),
        spec["body"].clone(),
    )
}

fn refusal(model: &str, shot: Value) -> (Option<String>, String) {
    jobs::refusal::<RunwayVideo>(&keyed_host(), model, &shot)
}

fn text() -> Value {
    json!({"prompt": "waves at night", "duration": 8, "aspect_ratio": "16:9"})
}

fn image() -> Value {
    json!({"prompt": "a cat", "image_url": IMAGE, "duration": 5, "aspect_ratio": "16:9"})
}

#[test]
fn every_model_is_listed() {
    assert_eq!(
        RunwayVideo::route_models(),
        ["gen4_turbo", "gen4.5", "veo3", "veo3.1", "veo3.1_fast"]
    );
}

#[test]
fn an_image_shot_is_the_unit_plan_routed_makes_on_the_models_pool() {
    let r = ok("gen4_turbo", with(image(), "seed", json!(1)));
    assert_eq!(
        (r.task_type.as_str(), r.pool.as_str(), r.state.as_str()),
        ("runway_video", "runway:gen4_turbo", "{}")
    );
    // docs/interfaces.md's example, as the handler's own tests plan it.
    assert_eq!(r.spec, turbo_spec());
    let (endpoint, body) = request(&r.spec);
    assert_eq!(endpoint, "/v1/image_to_video");
    assert_eq!(
        body,
        json!({"model": "gen4_turbo", "promptImage": IMAGE, "promptText": "a cat",
               "ratio": "1280:720", "duration": 5, "seed": 1})
    );
}

#[test]
fn a_text_shot_goes_to_text_to_video_where_the_model_has_it() {
    let r = ok(
        "gen4.5",
        with(
            with(text(), "aspect_ratio", json!("9:16")),
            "duration",
            json!(10),
        ),
    );
    assert_eq!(r.pool, "runway:gen4.5");
    let (spec, pool) = planned(
        json!({"model": "gen4.5", "ratio": "720:1280", "duration": 10,
        "shots": [{"prompt_text": "waves at night"}]}),
    );
    assert_eq!(
        (r.spec.as_str(), r.pool.as_str()),
        (spec.as_str(), pool.as_str())
    );
    assert_eq!(request(&r.spec).0, "/v1/text_to_video");

    let veo = json!({"prompt": "waves at night", "duration": 6, "aspect_ratio": "16:9",
        "resolution": "1080p", "negative_prompt": "people"});
    let r = ok("veo3.1_fast", veo);
    let (spec, pool) = planned(json!({"model": "veo3.1_fast", "ratio": "1920:1080",
        "duration": 6, "shots": [{"prompt_text": "waves at night", "negative_prompt": "people"}]}));
    assert_eq!((r.spec, r.pool), (spec, pool));
}

#[test]
fn aspect_ratios_become_runways_ratios() {
    for (shape, resolution, model, want) in [
        ("16:9", None, "gen4_turbo", "1280:720"),
        ("9:16", None, "gen4_turbo", "720:1280"),
        ("1:1", None, "gen4_turbo", "960:960"),
        ("4:3", None, "gen4.5", "1104:832"),
        ("3:4", Some("720p"), "gen4.5", "832:1104"),
        ("21:9", None, "gen4_turbo", "1584:672"),
        ("1280:720", None, "gen4_turbo", "1280:720"),
        ("1104:832", None, "gen4_turbo", "1104:832"),
        ("16:9", Some("720p"), "veo3", "1280:720"),
        ("9:16", Some("1080p"), "veo3.1", "1080:1920"),
        ("1920:1080", None, "veo3.1", "1280:720"),
    ] {
        let mut shot = with(image(), "aspect_ratio", json!(shape));
        shot = with(shot, "duration", json!(8));
        if let Some(r) = resolution {
            shot = with(shot, "resolution", json!(r));
        }
        let r = ok(model, shot);
        assert_eq!(
            request(&r.spec).1["ratio"],
            want,
            "{shape} {resolution:?} {model}"
        );
    }
}

#[test]
fn routed_specs_are_priced_timed_and_created_like_planned_ones() {
    let r = ok("gen4_turbo", with(image(), "seed", json!(1)));
    assert_eq!(RunwayVideo::estimate(&r.task_type, &r.spec), Some(25.0));
    let host = keyed_host();
    let stated = RunwayVideo::expected_duration(&host, &r.task_type, &r.spec);
    let planned_stated = RunwayVideo::expected_duration(&host, &r.task_type, &turbo_spec());
    assert!(stated.is_some());
    assert_eq!(stated, planned_stated);
    let veo = ok("veo3", with(text(), "resolution", json!("1080p")));
    assert_eq!(
        RunwayVideo::estimate(&veo.task_type, &veo.spec),
        Some(320.0)
    );

    let host = keyed_host().on_any(|_| slotd_sdk::testing::json_answer(200, &json!({"id": "t1"})));
    for spec in [r.spec.clone(), turbo_spec()] {
        let unit = Unit {
            spec,
            state: r.state.clone(),
            ..fresh("u1")
        };
        assert_eq!(
            tick_one(&host, NOW, unit).outcome,
            Outcome::Accepted("t1".into())
        );
    }
    let sent = host.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!((&sent[0].url, &sent[0].body), (&sent[1].url, &sent[1].body));
}

#[test]
fn an_empty_negative_prompt_is_left_out_even_where_none_is_taken() {
    let r = ok("gen4_turbo", with(image(), "negative_prompt", json!(" ")));
    assert_eq!(request(&r.spec).1.get("negativePrompt"), None);
}

#[test]
fn what_the_model_cannot_make_is_refused_naming_the_field() {
    assert_eq!(
        refusal("gen4_turbo", text()),
        (
            Some("image_url".into()),
            "gen4_turbo makes video from an image only: image_url is required".into()
        )
    );
    assert_eq!(
        refusal("gen4_turbo", with(image(), "aspect_ratio", json!("4:5"))),
        (
            Some("aspect_ratio".into()),
            "gen4_turbo makes 16:9, 9:16, 1:1, 4:3, 3:4, 21:9 videos from an image, not 4:5".into()
        )
    );
    assert_eq!(
        refusal("gen4.5", with(text(), "aspect_ratio", json!("1:1"))).1,
        "gen4.5 makes 16:9, 9:16 videos from text, not 1:1"
    );
    assert_eq!(
        refusal("veo3.1", with(text(), "aspect_ratio", json!("1:1")))
            .0
            .as_deref(),
        Some("aspect_ratio")
    );
    assert_eq!(
        refusal("gen4_turbo", with(image(), "resolution", json!("1080p"))),
        (
            Some("resolution".into()),
            "gen4_turbo makes 16:9 videos at 720p, not 1080p".into()
        )
    );
    assert_eq!(
        refusal("veo3", with(text(), "resolution", json!("4k"))).1,
        "veo3 makes 16:9 videos at 720p or 1080p, not 4k"
    );
    assert_eq!(
        refusal("gen4_turbo", with(image(), "duration", json!(12))),
        (
            Some("duration".into()),
            "gen4_turbo makes 2 to 10 second videos, not 12".into()
        )
    );
    assert_eq!(
        refusal("veo3.1", with(text(), "duration", json!(5))).1,
        "veo3.1 makes 4, 6 or 8 second videos, not 5"
    );
    assert_eq!(
        refusal("veo3", with(text(), "duration", json!(7.5))).1,
        "veo3 makes 8 second videos, not 7.5"
    );
    for (model, shot, field) in [
        ("veo3.1", with(text(), "seed", json!(3)), "seed"),
        ("gen4_turbo", with(image(), "seed", json!(-1)), "seed"),
        (
            "gen4.5",
            with(image(), "seed", json!(4_294_967_296u64)),
            "seed",
        ),
        (
            "gen4_turbo",
            with(image(), "negative_prompt", json!("blur")),
            "negative_prompt",
        ),
        (
            "gen4_turbo",
            with(image(), "image_url", json!("http://cdn.example.com/a.png")),
            "image_url",
        ),
        (
            "gen4_turbo",
            with(image(), "image_url", json!("https://10.0.0.1/a.png")),
            "image_url",
        ),
        (
            "gen4_turbo",
            with(image(), "prompt", json!("x".repeat(1001))),
            "prompt",
        ),
        ("gen4.5", with(text(), "prompt", json!("")), "prompt"),
        ("gen4.5", with(text(), "fps", json!(24)), "fps"),
    ] {
        let (got, message) = refusal(model, shot);
        assert_eq!(got.as_deref(), Some(field), "{model}: {message}");
    }
    let (field, message) = refusal("gen3a_turbo", image());
    assert_eq!(field, None, "the route names the model, not the shot");
    assert!(
        message.contains("serves no model \"gen3a_turbo\""),
        "{message}"
    );
}
