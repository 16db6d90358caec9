//! `fal-video` as a route target: canonical shots mapped to the Pika 2.2 endpoint they need
//! (image-to-video with an image, text-to-video without, whichever endpoint the route names)
//! and to the unit `plan-routed` makes of the equivalent payload; every refusal naming the
//! canonical field.

use serde_json::{Value, json};
use slotd_sdk::testing::jobs::{self, with};
use slotd_sdk::{Handler, Outcome, RoutedShot, Unit};

use super::*;
use crate::FalVideoHandler;
use crate::tests::support::{BASE, NOW, T2V, answer, fresh, keyed_host, queued, tick_one};

const I2V: &str = "fal-ai/pika/v2.2/image-to-video";
const IMG: &str = "https://v3b.fal.media/files/cat.png";

fn ok(model: &str, shot: Value) -> RoutedShot {
    jobs::routed::<FalVideoHandler>(&keyed_host(), model, &shot)
}

/// The spec and pool `plan-routed` gives the only shot of a payload of `model`.
fn planned(model: &str, shot: Value) -> (String, String) {
    let payload = json!({"model": model, "shots": [shot]});
    jobs::planned::<FalVideoHandler>(&keyed_host(), TASK_TYPE, &payload)
}

fn refusal(model: &str, shot: Value) -> (Option<String>, String) {
    jobs::refusal::<FalVideoHandler>(&keyed_host(), model, &shot)
}

fn text() -> Value {
    json!({"prompt": "a cat surfing", "duration": 5, "aspect_ratio": "16:9"})
}

#[test]
fn the_pika_family_endpoints_are_listed() {
    assert_eq!(FalVideoHandler::route_models(), [I2V, T2V]);
}

#[test]
fn an_image_shot_is_the_image_to_video_unit_plan_routed_makes() {
    let shot = json!({"prompt": "the cat turns its head", "image_url": IMG, "duration": 10,
        "aspect_ratio": "16:9", "resolution": "1080p", "seed": 42, "negative_prompt": "blur"});
    for model in [I2V, T2V] {
        let r = ok(model, shot.clone());
        assert_eq!(
            (r.task_type.as_str(), r.pool.as_str(), r.state.as_str()),
            ("fal_video", "fal:fal-ai/pika/v2.2/image-to-video", "{}")
        );
        // No aspect_ratio: image-to-video has none, the video follows the image.
        let (spec, pool) = planned(
            I2V,
            json!({"image_url": IMG, "prompt": "the cat turns its head", "duration": 10,
                "resolution": "1080p", "seed": 42, "negative_prompt": "blur"}),
        );
        assert_eq!((r.spec, r.pool), (spec, pool), "route naming {model}");
    }
}

#[test]
fn a_text_shot_uses_the_sibling_text_to_video_endpoint_and_its_pool() {
    for model in [I2V, T2V] {
        let r = ok(model, with(text(), "aspect_ratio", json!("9:16")));
        assert_eq!(r.pool, "fal:fal-ai/pika/v2.2/text-to-video");
        // The endpoint's own defaults filled, as plan fills them.
        let (spec, pool) = planned(
            T2V,
            json!({"prompt": "a cat surfing", "aspect_ratio": "9:16"}),
        );
        assert_eq!((r.spec, r.pool), (spec, pool), "route naming {model}");
    }
    let r = ok(T2V, with(text(), "aspect_ratio", json!("1920:1080")));
    assert!(r.spec.contains(r#""aspect_ratio":"16:9""#), "{}", r.spec);
    let empty = ok(T2V, with(text(), "negative_prompt", json!("")));
    assert!(
        empty.spec.contains(r#""negative_prompt":"""#),
        "{}",
        empty.spec
    );
}

#[test]
fn routed_specs_are_priced_timed_and_submitted_like_planned_ones() {
    let host = keyed_host();
    for (shot, usd) in [
        (text(), 0.20),
        (with(text(), "resolution", json!("1080p")), 0.45),
        (
            with(with(text(), "image_url", json!(IMG)), "duration", json!(10)),
            0.40,
        ),
    ] {
        let r = ok(I2V, shot);
        assert_eq!(FalVideoHandler::estimate(&r.task_type, &r.spec), Some(usd));
        assert!(FalVideoHandler::expected_duration(&host, &r.task_type, &r.spec).is_some());
    }
    let r = ok(T2V, with(text(), "seed", json!(7)));
    // support's `fresh` unit: the same shot, planned.
    assert_eq!(r.spec, fresh("a").spec);
    let host = keyed_host().on_any(|_| answer(200, queued("r1")));
    for spec in [r.spec.clone(), fresh("a").spec] {
        let unit = Unit {
            spec,
            state: r.state.clone(),
            ..fresh("a")
        };
        assert_eq!(
            tick_one(&host, NOW, unit).outcome,
            Outcome::Accepted("r1".into())
        );
    }
    let sent = host.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].url, format!("{BASE}/{T2V}"));
    assert_eq!((&sent[0].url, &sent[0].body), (&sent[1].url, &sent[1].body));
}

#[test]
fn what_pika_cannot_make_is_refused_naming_the_field() {
    assert_eq!(
        refusal(I2V, with(text(), "duration", json!(7))),
        (
            Some("duration".into()),
            "fal-ai/pika/v2.2/image-to-video makes 5 or 10 second videos, not 7".into()
        )
    );
    assert_eq!(
        refusal(T2V, with(text(), "aspect_ratio", json!("4:3"))),
        (
            Some("aspect_ratio".into()),
            "fal-ai/pika/v2.2/text-to-video makes 16:9, 9:16, 1:1, 4:5, 5:4, 3:2, 2:3 videos, \
             not 4:3"
                .into()
        )
    );
    let image_21_9 = with(
        with(text(), "image_url", json!(IMG)),
        "aspect_ratio",
        json!("21:9"),
    );
    assert_eq!(refusal(I2V, image_21_9).0.as_deref(), Some("aspect_ratio"));
    assert_eq!(
        refusal(I2V, with(text(), "resolution", json!("4k"))),
        (
            Some("resolution".into()),
            "fal-ai/pika/v2.2/image-to-video makes 720p or 1080p videos, not 4k".into()
        )
    );
    for (key, value) in [
        ("duration", json!(5.5)),
        ("image_url", json!("http://v3b.fal.media/files/cat.png")),
        ("image_url", json!("data:image/png;base64,???")),
        ("prompt", json!("  ")),
        ("fps", json!(24)),
    ] {
        let (field, message) = refusal(I2V, with(text(), key, value));
        assert_eq!(field.as_deref(), Some(key), "{key}: {message}");
    }
    for model in [
        "fal-ai/pika/v2.2/pikascenes",
        "fal-ai/pika/v2.1/image-to-video",
        "fal-ai/kling-video/v2.1/standard/image-to-video",
    ] {
        let (field, message) = refusal(model, text());
        assert_eq!(field, None, "the route names the model, not the shot");
        assert!(
            message.contains("fal-video serves no model") && message.contains(I2V),
            "{message}"
        );
    }
}
