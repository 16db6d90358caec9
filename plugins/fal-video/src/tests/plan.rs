//! `plan`: the payload's shape, every model's fields checked exactly as FAL_API.md's Pika table
//! says (each refusal names the field), the resolved spec and routing.

use serde_json::{Value, json};
use slotd_sdk::Handler;
use slotd_sdk::testing::ScriptedHost;

use super::support::*;
use crate::FalVideoHandler;
use crate::models::TASK_TYPE;

pub const I2V: &str = "fal-ai/pika/v2.2/image-to-video";
pub const SCENES: &str = "fal-ai/pika/v2.2/pikascenes";
pub const FRAMES: &str = "fal-ai/pika/v2.2/pikaframes";
pub const IMG: &str = "https://v3b.fal.media/files/cat.png";
const DATA: &str = "data:image/png;base64,iVBORw0KGgo=";

fn routed(payload: &Value) -> Result<Vec<slotd_sdk::RoutedUnit>, slotd_sdk::PlanError> {
    FalVideoHandler::plan_routed(&ScriptedHost::new(), TASK_TYPE, &payload.to_string())
}

/// Assert `payload` is refused at `field` with a message containing `why`.
fn refused(payload: Value, field: &str, why: &str) {
    match routed(&payload) {
        Ok(_) => panic!("accepted: {payload}"),
        Err(e) => {
            assert_eq!(
                e.field.as_deref(),
                Some(field),
                "{}: {}",
                payload,
                e.message
            );
            assert!(e.message.contains(why), "{field}: {}", e.message);
        }
    }
}

/// Refusal of a one-shot payload of `model`.
fn shot_refused(model: &str, shot: Value, field: &str, why: &str) {
    refused(json!({"model": model, "shots": [shot]}), field, why);
}

/// The input the spec of a one-shot payload holds.
fn input(model: &str, shot: Value) -> Value {
    let spec: Value = serde_json::from_str(&spec_of(model, shot)).unwrap_or_default();
    assert_eq!(spec["model"], model);
    spec["input"].clone()
}

#[test]
fn payload_shape_and_models() {
    refused(json!({"shots": [{"prompt": "x"}]}), "model", "required");
    refused(json!({"model": 3, "shots": []}), "model", "string");
    refused(
        json!({"model": "fal-ai/pika/v1.5/pikaffects", "shots": [{}]}),
        "model",
        "retired",
    );
    refused(
        json!({"model": "fal-ai/pika/v2.5/text-to-video", "shots": [{}]}),
        "model",
        "not served",
    );
    refused(
        json!({"model": "fal-ai/pika/v2.1/image-to-video", "shots": [{}]}),
        "model",
        "out of scope",
    );
    refused(
        json!({"model": "fal-ai/veo3", "shots": [{}]}),
        "model",
        "served: fal-ai/pika/v2.2/text-to-video",
    );
    refused(json!({"model": T2V}), "shots", "required");
    refused(json!({"model": T2V, "shots": []}), "shots", "1 to 100");
    refused(json!({"model": T2V, "shots": {}}), "shots", "list");
    refused(
        json!({"model": T2V, "shots": [{"prompt": "x"}], "ratio": "16:9"}),
        "ratio",
        "unknown field",
    );
    refused(
        json!({"model": T2V, "shots": [{"prompt": "x"}, "y"]}),
        "shots[1]",
        "object",
    );
    let bad_type = FalVideoHandler::plan_routed(&ScriptedHost::new(), "other", "{}");
    assert!(bad_type.is_err_and(|e| e.field.is_none()));
    let not_json = FalVideoHandler::plan_routed(&ScriptedHost::new(), TASK_TYPE, "{");
    assert!(not_json.is_err_and(|e| e.message.contains("not valid JSON")));
}

#[test]
fn text_to_video_fields() {
    let ok = |shot: Value| json!({"model": T2V, "shots": [{"prompt": "x"}, shot]});
    refused(ok(json!({})), "shots[1].prompt", "required");
    refused(ok(json!({"prompt": "  "})), "shots[1].prompt", "empty");
    refused(ok(json!({"prompt": 5})), "shots[1].prompt", "string");
    refused(
        ok(json!({"prompt": "x", "duration": 8})),
        "shots[1].duration",
        "5 or 10",
    );
    refused(
        ok(json!({"prompt": "x", "duration": "5"})),
        "shots[1].duration",
        "5 or 10",
    );
    refused(
        ok(json!({"prompt": "x", "duration": 5.0})),
        "shots[1].duration",
        "5 or 10",
    );
    refused(
        ok(json!({"prompt": "x", "aspect_ratio": "21:9"})),
        "shots[1].aspect_ratio",
        "16:9",
    );
    refused(
        ok(json!({"prompt": "x", "resolution": "480p"})),
        "shots[1].resolution",
        "720p, 1080p",
    );
    refused(
        ok(json!({"prompt": "x", "seed": 1.5})),
        "shots[1].seed",
        "integer or null",
    );
    refused(
        ok(json!({"prompt": "x", "seed": "1"})),
        "shots[1].seed",
        "integer or null",
    );
    refused(
        ok(json!({"prompt": "x", "image_url": IMG})),
        "shots[1].image_url",
        "unknown field",
    );
    refused(
        ok(json!({"prompt": "x", "negative_prompt": null})),
        "shots[1].negative_prompt",
        "null",
    );
    assert_eq!(
        input(T2V, json!({"prompt": "x"})),
        json!({"prompt": "x", "negative_prompt": "ugly, bad, terrible", "aspect_ratio": "16:9",
               "resolution": "720p", "duration": 5})
    );
    let given = json!({"prompt": "x", "negative_prompt": "", "aspect_ratio": "9:16",
                       "resolution": "1080p", "duration": 10, "seed": -3});
    assert_eq!(input(T2V, given.clone()), given);
    assert!(
        input(T2V, json!({"prompt": "x", "seed": null}))
            .get("seed")
            .is_none()
    );
}

#[test]
fn image_to_video_fields() {
    shot_refused(
        I2V,
        json!({"prompt": "x"}),
        "shots[0].image_url",
        "required",
    );
    shot_refused(
        I2V,
        json!({"image_url": IMG}),
        "shots[0].prompt",
        "required",
    );
    for bad in [
        "http://a.test/x.png",
        "https://",
        "ftp://a/x",
        "https://a.test/a b.png",
        "data:image/png;base64,",
        "data:text/plain;base64,AAAA",
        "data:image/png,raw",
    ] {
        shot_refused(
            I2V,
            json!({"image_url": bad, "prompt": "x"}),
            "shots[0].image_url",
            "",
        );
    }
    shot_refused(
        I2V,
        json!({"image_url": IMG, "prompt": "x", "aspect_ratio": "16:9"}),
        "shots[0].aspect_ratio",
        "unknown field",
    );
    assert_eq!(
        input(
            I2V,
            json!({"image_url": DATA, "prompt": "x", "duration": 10})
        ),
        json!({"image_url": DATA, "prompt": "x", "negative_prompt": "", "resolution": "720p",
               "duration": 10})
    );
}

#[test]
fn pikascenes_fields() {
    shot_refused(
        SCENES,
        json!({"prompt": "x"}),
        "shots[0].image_urls",
        "required",
    );
    shot_refused(
        SCENES,
        json!({"image_urls": [], "prompt": "x"}),
        "shots[0].image_urls",
        "1 to 5",
    );
    shot_refused(
        SCENES,
        json!({"image_urls": vec![IMG; 6], "prompt": "x"}),
        "shots[0].image_urls",
        "1 to 5",
    );
    shot_refused(
        SCENES,
        json!({"image_urls": IMG, "prompt": "x"}),
        "shots[0].image_urls",
        "list",
    );
    shot_refused(
        SCENES,
        json!({"image_urls": [IMG, "nope"], "prompt": "x"}),
        "shots[0].image_urls[1]",
        "https",
    );
    shot_refused(
        SCENES,
        json!({"image_urls": [IMG], "prompt": "x", "ingredients_mode": "loose"}),
        "shots[0].ingredients_mode",
        "precise, creative",
    );
    shot_refused(
        SCENES,
        json!({"images": [{"image_url": IMG}], "prompt": "x"}),
        "shots[0].images",
        "unknown field",
    );
    assert_eq!(
        input(SCENES, json!({"image_urls": [IMG, DATA], "prompt": "x"})),
        json!({"image_urls": [IMG, DATA], "prompt": "x", "negative_prompt": "ugly, bad, terrible",
               "aspect_ratio": "16:9", "resolution": "1080p", "duration": 5,
               "ingredients_mode": "precise"})
    );
}

#[test]
fn pikaframes_fields_and_transitions() {
    let two = json!([IMG, IMG]);
    shot_refused(
        FRAMES,
        json!({"image_urls": [IMG]}),
        "shots[0].image_urls",
        "2 to 5",
    );
    shot_refused(
        FRAMES,
        json!({"image_urls": two, "prompt": ""}),
        "shots[0].prompt",
        "empty",
    );
    shot_refused(
        FRAMES,
        json!({"image_urls": two, "duration": 5}),
        "shots[0].duration",
        "unknown field",
    );
    shot_refused(
        FRAMES,
        json!({"image_urls": two, "transitions": [{}, {}]}),
        "shots[0].transitions",
        "one transition per gap",
    );
    shot_refused(
        FRAMES,
        json!({"image_urls": two, "transitions": [{"duration": 0}]}),
        "shots[0].transitions[0].duration",
        "from 1 to 25",
    );
    shot_refused(
        FRAMES,
        json!({"image_urls": two, "transitions": [{"prompt": " "}]}),
        "shots[0].transitions[0].prompt",
        "empty",
    );
    shot_refused(
        FRAMES,
        json!({"image_urls": two, "transitions": [{"speed": 1}]}),
        "shots[0].transitions[0].speed",
        "unknown field",
    );
    shot_refused(
        FRAMES,
        json!({"image_urls": vec![IMG; 5], "transitions": [{"duration": 10}, {"duration": 10}, {}, {}]}),
        "shots[0].transitions",
        "30 s",
    );
    assert_eq!(
        input(
            FRAMES,
            json!({"image_urls": [IMG, IMG, IMG], "transitions": [{"prompt": "pan"}, {"duration": 3}]})
        ),
        json!({"image_urls": [IMG, IMG, IMG], "negative_prompt": "", "resolution": "720p",
               "transitions": [{"duration": 5, "prompt": "pan"}, {"duration": 3}]})
    );
}

#[test]
fn units_are_routed_to_their_model_pool() {
    let units = routed(
        &json!({"model": SCENES, "shots": [{"image_urls": [IMG], "prompt": "a"},
                                                          {"image_urls": [IMG], "prompt": "b"}]}),
    );
    let units = units.unwrap_or_default();
    assert_eq!(units.len(), 2);
    for u in &units {
        assert_eq!(u.pools, [("main".to_string(), format!("fal:{SCENES}"))]);
        assert_eq!(u.state, "{}");
    }
    let plain = FalVideoHandler::plan(
        &ScriptedHost::new(),
        TASK_TYPE,
        &json!({"model": I2V, "shots": [{"image_url": IMG, "prompt": "x"}]}).to_string(),
    );
    assert!(plain.is_err_and(|e| e.field.as_deref() == Some("model")));
}
