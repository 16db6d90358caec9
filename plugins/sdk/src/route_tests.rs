//! The canonical shot as the host hands it over: what parses, and every refusal naming its
//! field.

use serde_json::json;

use super::*;

fn parse(v: Value) -> Result<Shot, PlanError> {
    Shot::parse(&v.to_string())
}

/// The field a refusal names (`None` for a refusal of the whole shot).
fn field_of(v: Value) -> Option<String> {
    match parse(v.clone()) {
        Ok(shot) => panic!("{v} parsed as {shot:?}"),
        Err(e) => e.field,
    }
}

#[test]
fn a_full_shot_parses_field_for_field() {
    let shot = parse(json!({
        "prompt": "a lighthouse at dusk", "image_url": "https://img.test/a.png",
        "duration": 5, "aspect_ratio": "16:9", "resolution": "1080p", "seed": -7,
        "negative_prompt": "blur"}));
    assert_eq!(
        shot,
        Ok(Shot {
            prompt: "a lighthouse at dusk".into(),
            image_url: Some("https://img.test/a.png".into()),
            duration: 5.0,
            aspect_ratio: "16:9".into(),
            resolution: Some("1080p".into()),
            seed: Some(-7),
            negative_prompt: Some("blur".into()),
        })
    );
}

#[test]
fn optional_fields_may_be_left_out_or_null() {
    let minimal = parse(json!({"prompt": "p", "duration": 10.0, "aspect_ratio": "9:16"}));
    let nulls = parse(
        json!({"prompt": "p", "duration": 10, "aspect_ratio": "9:16",
        "image_url": null, "resolution": null, "seed": null, "negative_prompt": null}),
    );
    assert_eq!(minimal, nulls);
    let shot = minimal.unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(shot.whole_seconds(), Some(10));
    assert_eq!(
        (
            shot.image_url,
            shot.resolution,
            shot.seed,
            shot.negative_prompt
        ),
        (None, None, None, None)
    );
}

#[test]
fn unknown_fields_are_refused_by_name() {
    let e = parse(json!({"prompt": "p", "duration": 5, "aspect_ratio": "1:1", "fps": 24}));
    let e = e.err().unwrap_or_else(|| PlanError::whole("parsed"));
    assert_eq!(e.field.as_deref(), Some("fps"));
    assert!(
        e.message.contains("allowed here: prompt, image_url"),
        "{}",
        e.message
    );
}

#[test]
fn missing_and_mistyped_fields_are_named() {
    let base = json!({"prompt": "p", "duration": 5, "aspect_ratio": "16:9"});
    for missing in ["prompt", "duration", "aspect_ratio"] {
        let mut shot = base.clone();
        if let Some(map) = shot.as_object_mut() {
            map.remove(missing);
        }
        assert_eq!(field_of(shot), Some(missing.to_string()), "{missing}");
    }
    for (name, bad) in [
        ("prompt", json!(3)),
        ("prompt", json!(null)),
        ("image_url", json!(["https://x.test/a.png"])),
        ("duration", json!("5")),
        ("duration", json!(0)),
        ("duration", json!(-5)),
        ("aspect_ratio", json!(1.77)),
        ("aspect_ratio", json!("wide")),
        ("aspect_ratio", json!("16:0")),
        ("aspect_ratio", json!("16:9:1")),
        ("aspect_ratio", json!("-16:9")),
        ("resolution", json!(1080)),
        ("seed", json!("42")),
        ("seed", json!(1.5)),
        ("seed", json!(u64::MAX)),
        ("negative_prompt", json!(false)),
    ] {
        let mut shot = base.clone();
        if let Some(map) = shot.as_object_mut() {
            map.insert(name.into(), bad.clone());
        }
        assert_eq!(field_of(shot), Some(name.to_string()), "{name} = {bad}");
    }
}

#[test]
fn what_is_not_a_json_object_is_refused_whole() {
    for text in ["", "[]", "\"shot\"", "{\"prompt\": "] {
        let e = Shot::parse(text).err();
        assert_eq!(e.map(|e| e.field), Some(None), "{text:?}");
    }
}

#[test]
fn durations_and_ratios_for_the_handlers_questions() {
    let shot = |duration: f64, ratio: &str| Shot {
        prompt: "p".into(),
        image_url: None,
        duration,
        aspect_ratio: ratio.into(),
        resolution: None,
        seed: None,
        negative_prompt: None,
    };
    assert_eq!(shot(7.0, "16:9").whole_seconds(), Some(7));
    assert_eq!(shot(7.5, "16:9").whole_seconds(), None);
    assert_eq!(shot(0.5, "16:9").whole_seconds(), None);
    assert_eq!(shot(7.0, "16:9").duration_text(), "7");
    assert_eq!(shot(7.5, "16:9").duration_text(), "7.5");
    assert_eq!(shot(5.0, "1280:720").ratio(), (16, 9));
    assert!(shot(5.0, "1280:720").ratio_is("16:9"));
    assert!(shot(5.0, "16:9").ratio_is("1920:1080"));
    assert!(!shot(5.0, "16:9").ratio_is("9:16"));
    assert!(!shot(5.0, "16:9").ratio_is("nope"));
    assert_eq!(parse_ratio(" 4:3 "), Some((4, 3)));
    assert_eq!(parse_ratio("4/3"), None);
}

#[test]
fn the_shared_refusals_name_no_field() {
    let e = unknown_model("kling-video", "kling-v9", &["kling-v1", "kling-v1-6"]);
    assert_eq!(e.field, None);
    assert_eq!(
        e.message,
        "kling-video serves no model \"kling-v9\" in routes; it serves: kling-v1, kling-v1-6"
    );
    assert_eq!(not_routable().field, None);
}
