//! Field by field: ratios, durations, prompts, images, seeds and model-specific options.

use serde_json::{Value, json};

use super::*;

#[test]
fn ratios_and_durations_follow_each_models_table() {
    refused(
        with(turbo(), "ratio", json!("1920:1080")),
        "ratio",
        "must be one of 1280:720",
    );
    refused(
        with(turbo(), "ratio", json!(16)),
        "ratio",
        "must be a string",
    );
    refused(
        shot("veo3.1", "960:960", json!({"prompt_image": IMAGE})),
        "ratio",
        "1080:1920",
    );
    for (d, ok) in [(2, true), (10, true), (1, false), (11, false)] {
        let (field, _) = refusal(with(turbo(), "duration", json!(d)));
        assert_eq!(field.starts_with("accepted"), ok, "gen4_turbo {d}");
    }
    for (bad, why) in [
        (json!("5"), "an integer from 2 to 10"),
        (json!(5.5), "got 5.5"),
        (json!(-2), "seconds"),
    ] {
        refused(with(turbo(), "duration", bad), "duration", why);
    }
    let veo31 = |d: Value| {
        with(
            shot("veo3.1", "1280:720", json!({"prompt_text": "x"})),
            "duration",
            d,
        )
    };
    assert_eq!(request(veo31(json!(6))).1["duration"], 6);
    refused(veo31(json!(5)), "duration", "one of 4, 6, 8");
    let veo3 = |d: Value| {
        with(
            shot("veo3", "1280:720", json!({"prompt_image": IMAGE})),
            "duration",
            d,
        )
    };
    refused(veo3(json!(6)), "duration", "must be 8");
    refused(
        shot("veo3", "1280:720", json!({"prompt_image": IMAGE})),
        "duration",
        "is required by model veo3",
    );
    refused(
        with(
            turbo(),
            "shots",
            json!([{"prompt_image": IMAGE, "duration": 12}]),
        ),
        "shots[0].duration",
        "2 to 10",
    );
}

#[test]
fn prompt_text_is_limited_in_utf16_code_units() {
    let shots = json!([{"prompt_image": IMAGE}, {"prompt_image": IMAGE},
                       {"prompt_image": IMAGE, "prompt_text": "😀".repeat(501)}]);
    refused(
        with(turbo(), "shots", shots),
        "shots[2].prompt_text",
        "1002 UTF-16 code units",
    );
    let at_limit = json!([{"prompt_image": IMAGE, "prompt_text": "😀".repeat(500)}]);
    assert!(plan_json(&with(turbo(), "shots", at_limit)).is_ok());
    refused(
        with(
            turbo(),
            "shots",
            json!([{"prompt_image": IMAGE, "prompt_text": ""}]),
        ),
        "shots[0].prompt_text",
        "must not be empty",
    );
}

#[test]
fn prompt_images_must_be_https_on_a_domain_or_data_uris() {
    for (image, why) in [
        ("http://cdn.example.com/a.png", "HTTPS"),
        ("https://198.51.100.4/a.png", "not an IP address"),
        ("data:image/gif;base64,R0lGODlh", "image/jpeg"),
    ] {
        refused(
            with(turbo(), "shots", json!([{"prompt_image": image}])),
            "shots[0].prompt_image",
            why,
        );
    }
    let long = format!("https://cdn.example.com/{}", "a".repeat(2048));
    refused(
        with(turbo(), "shots", json!([{"prompt_image": long}])),
        "shots[0].prompt_image",
        "2048",
    );
    let data = json!([{"prompt_image": "data:image/png;base64,iVBORw0KGgo="}]);
    assert!(plan_json(&with(turbo(), "shots", data)).is_ok());
    refused(
        with(turbo(), "shots", json!([{"prompt_image": 7}])),
        "shots[0].prompt_image",
        "must be a string",
    );
}

#[test]
fn seeds_are_integers_in_range_and_only_for_gen4_models() {
    let seeded = |seed: Value| {
        with(
            turbo(),
            "shots",
            json!([{"prompt_image": IMAGE, "seed": seed}]),
        )
    };
    assert_eq!(
        request(seeded(json!(4_294_967_295_u64))).1["seed"],
        4_294_967_295_u64
    );
    assert_eq!(request(seeded(json!(0))).1["seed"], 0);
    for bad in [json!(-1), json!(4_294_967_296_u64), json!(1.5), json!("1")] {
        refused(seeded(bad), "shots[0].seed", "integer from 0 to 4294967295");
    }
    refused(
        shot("veo3.1", "1280:720", json!({"prompt_text": "x", "seed": 3})),
        "shots[0].seed",
        "is not accepted by model veo3.1 (text_to_video)",
    );
}

#[test]
fn model_specific_options_are_refused_elsewhere() {
    refused(
        with(turbo(), "audio", json!(true)),
        "audio",
        "not accepted by model gen4_turbo",
    );
    let veo3 = with(
        shot("veo3", "1280:720", json!({"prompt_image": IMAGE})),
        "duration",
        json!(8),
    );
    refused(
        with(veo3.clone(), "audio", json!(false)),
        "audio",
        "not accepted by model veo3",
    );
    refused(
        with(turbo(), "negative_prompt", json!("blur")),
        "negative_prompt",
        "not accepted by model gen4_turbo",
    );
    refused(
        with(veo3.clone(), "content_moderation", json!({})),
        "content_moderation",
        "not accepted by model veo3",
    );
    let veo31 = shot("veo3.1", "1280:720", json!({"prompt_text": "x"}));
    refused(
        with(veo31.clone(), "audio", json!("yes")),
        "audio",
        "must be a boolean",
    );
    refused(
        with(veo31, "negative_prompt", json!(" ")),
        "negative_prompt",
        "must not be empty",
    );
    let moderation = |v: Value| with(turbo(), "content_moderation", v);
    assert_eq!(
        request(moderation(json!({"public_figure_threshold": "auto"}))).1["contentModeration"],
        json!({"publicFigureThreshold": "auto"})
    );
    refused(
        moderation(json!({"public_figure_threshold": "high"})),
        "content_moderation.public_figure_threshold",
        "must be one of auto, low",
    );
    refused(
        moderation(json!({"threshold": "low"})),
        "content_moderation.threshold",
        "unknown field",
    );
    refused(
        moderation(json!("low")),
        "content_moderation",
        "must be an object",
    );
}
