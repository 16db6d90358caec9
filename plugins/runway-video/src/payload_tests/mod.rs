//! `plan`, by the shape of the payload and the endpoint and model each shot gets; field by
//! field checks are in `fields`.

use serde_json::{Value, json};

use super::*;

mod fields;

const IMAGE: &str = "https://cdn.example.com/frame.png";
const LAST: &str = "https://cdn.example.com/last.png";

fn plan_json(payload: &Value) -> Result<Vec<PlannedShot>, PlanError> {
    plan(TASK_TYPE, &payload.to_string())
}

/// The create request of the only shot of `payload`.
fn request(payload: Value) -> (String, Value) {
    let shots = plan_json(&payload);
    assert!(shots.is_ok(), "{payload}: {shots:?}");
    let spec: Value = shots
        .ok()
        .and_then(|s| s.into_iter().next())
        .and_then(|s| serde_json::from_str(&s.spec).ok())
        .unwrap_or_default();
    (
        spec["endpoint"].as_str().unwrap_or_default().to_string(),
        spec["body"].clone(),
    )
}

/// The field and message of the refusal of `payload`.
fn refusal(payload: Value) -> (String, String) {
    match plan_json(&payload) {
        Ok(_) => (format!("accepted: {payload}"), String::new()),
        Err(e) => (e.field.unwrap_or_default(), e.message),
    }
}

/// Assert `payload` is refused at `field` with a message containing `why`.
fn refused(payload: Value, field: &str, why: &str) {
    let (got_field, message) = refusal(payload);
    assert_eq!(got_field, field, "{message}");
    assert!(message.contains(why), "{field}: {message}");
}

fn with(mut base: Value, key: &str, value: Value) -> Value {
    base[key] = value;
    base
}

fn turbo() -> Value {
    json!({"model": "gen4_turbo", "ratio": "1280:720", "duration": 5,
           "shots": [{"prompt_image": IMAGE, "prompt_text": "a cat", "seed": 1}]})
}

fn shot(model: &str, ratio: &str, shot: Value) -> Value {
    json!({"model": model, "ratio": ratio, "shots": [shot]})
}

#[test]
fn the_spec_example_becomes_one_image_to_video_request() {
    let (endpoint, body) = request(turbo());
    assert_eq!(endpoint, "/v1/image_to_video");
    assert_eq!(
        body,
        json!({"model": "gen4_turbo", "promptImage": IMAGE, "promptText": "a cat",
               "ratio": "1280:720", "duration": 5, "seed": 1})
    );
    let shots = plan_json(&turbo()).unwrap_or_default();
    assert_eq!(shots[0].model, Model::Gen4Turbo);
}

#[test]
fn every_shot_is_a_unit_and_may_override_the_task_settings() {
    let payload = json!({"model": "gen4_turbo", "ratio": "1280:720", "shots": [
        {"prompt_image": IMAGE},
        {"prompt_text": "a dog", "model": "veo3.1_fast", "duration": 6, "audio": true},
        {"prompt_text": "a bird", "model": "gen4.5", "duration": 10, "ratio": "720:1280",
         "content_moderation": {"public_figure_threshold": "low"}},
    ]});
    let shots = plan_json(&payload).unwrap_or_default();
    let models: Vec<Model> = shots.iter().map(|s| s.model).collect();
    assert_eq!(models, [Model::Gen4Turbo, Model::Veo31Fast, Model::Gen45]);
    let bodies: Vec<Value> = shots
        .iter()
        .map(|s| serde_json::from_str::<Value>(&s.spec).unwrap_or_default())
        .collect();
    assert_eq!(
        bodies[0]["body"],
        json!({"model": "gen4_turbo", "promptImage": IMAGE, "ratio": "1280:720"})
    );
    assert_eq!(bodies[1]["endpoint"], "/v1/text_to_video");
    assert_eq!(bodies[1]["body"]["audio"], true);
    assert_eq!(
        bodies[2]["body"]["contentModeration"],
        json!({"publicFigureThreshold": "low"})
    );
}

#[test]
fn veo31_takes_a_last_frame_as_a_frame_list() {
    let (endpoint, body) = request(shot(
        "veo3.1",
        "1920:1080",
        json!({"prompt_image": IMAGE, "last_image": LAST, "negative_prompt": "blur"}),
    ));
    assert_eq!(endpoint, "/v1/image_to_video");
    assert_eq!(
        body["promptImage"],
        json!([{"uri": IMAGE, "position": "first"}, {"uri": LAST, "position": "last"}])
    );
    assert_eq!(body["negativePrompt"], "blur");
    refused(
        shot(
            "veo3.1",
            "1920:1080",
            json!({"prompt_text": "x", "last_image": LAST}),
        ),
        "shots[0].last_image",
        "a last frame alone is refused",
    );
    refused(
        with(
            turbo(),
            "shots",
            json!([{"prompt_image": IMAGE, "last_image": LAST}]),
        ),
        "shots[0].last_image",
        "first frame only",
    );
    refused(
        shot(
            "veo3",
            "1280:720",
            json!({"prompt_image": IMAGE, "last_image": LAST}),
        ),
        "shots[0].last_image",
        "first frame only",
    );
}

#[test]
fn text_only_shots_go_to_text_to_video_where_the_model_has_it() {
    for model in ["veo3.1", "veo3.1_fast"] {
        let (endpoint, _) = request(shot(model, "1080:1920", json!({"prompt_text": "sea"})));
        assert_eq!(endpoint, "/v1/text_to_video", "{model}");
    }
    let veo3 = with(
        shot("veo3", "1280:720", json!({"prompt_text": "sea"})),
        "duration",
        json!(8),
    );
    assert_eq!(request(veo3).0, "/v1/text_to_video");
    refused(
        with(turbo(), "shots", json!([{"prompt_text": "no image"}])),
        "shots[0].prompt_image",
        "gen4_turbo makes video from an image only",
    );
    refused(
        shot("veo3.1", "1280:720", json!({})),
        "shots[0].prompt_text",
        "is required by model veo3.1 (text_to_video)",
    );
}

#[test]
fn gen45_needs_prompt_text_and_duration_and_has_two_text_ratios() {
    let ok = with(
        shot(
            "gen4.5",
            "960:960",
            json!({"prompt_image": IMAGE, "prompt_text": "x"}),
        ),
        "duration",
        json!(2),
    );
    assert_eq!(request(ok).1["duration"], 2);
    refused(
        with(
            shot("gen4.5", "960:960", json!({"prompt_image": IMAGE})),
            "duration",
            json!(5),
        ),
        "shots[0].prompt_text",
        "is required by model gen4.5 (image_to_video)",
    );
    refused(
        shot(
            "gen4.5",
            "960:960",
            json!({"prompt_image": IMAGE, "prompt_text": "x"}),
        ),
        "duration",
        "is required by model gen4.5",
    );
    refused(
        with(
            shot("gen4.5", "960:960", json!({"prompt_text": "x"})),
            "duration",
            json!(5),
        ),
        "ratio",
        "must be one of 1280:720, 720:1280",
    );
}

#[test]
fn models_out_of_scope_or_unknown_are_refused() {
    refused(
        with(turbo(), "model", json!("gen3a_turbo")),
        "model",
        "does not serve",
    );
    refused(
        with(turbo(), "model", json!("seedance2")),
        "model",
        "does not serve",
    );
    refused(
        with(turbo(), "model", json!("gen5")),
        "model",
        "unknown model \"gen5\"",
    );
    refused(
        with(turbo(), "model", json!(4)),
        "model",
        "must be a string",
    );
    let mut no_model = turbo();
    no_model.as_object_mut().map(|m| m.remove("model"));
    refused(
        no_model,
        "model",
        "is required (one of gen4_turbo, gen4.5, veo3, veo3.1, veo3.1_fast)",
    );
    refused(
        with(
            turbo(),
            "shots",
            json!([{"prompt_image": IMAGE, "model": "gen4_aleph"}]),
        ),
        "shots[0].model",
        "does not serve",
    );
}

#[test]
fn unknown_keys_and_nulls_are_refused_by_path() {
    refused(
        with(turbo(), "prompt", json!("x")),
        "prompt",
        "unknown field",
    );
    refused(
        with(
            turbo(),
            "shots",
            json!([{"prompt_image": IMAGE}, {"prompt_image": IMAGE, "image": IMAGE}]),
        ),
        "shots[1].image",
        "unknown field",
    );
    refused(
        with(turbo(), "duration", Value::Null),
        "duration",
        "must not be null",
    );
    refused(
        with(
            turbo(),
            "shots",
            json!([{"prompt_image": IMAGE, "seed": null}]),
        ),
        "shots[0].seed",
        "must not be null",
    );
}

#[test]
fn the_payload_and_its_shots_have_a_shape() {
    let whole = |text: &str| plan(TASK_TYPE, text).err().map(|e| (e.field, e.message));
    assert!(whole("[]").is_some_and(|(f, m)| f.is_none() && m.contains("JSON object")));
    assert!(whole("{").is_some_and(|(_, m)| m.contains("not valid JSON")));
    assert!(plan("video", &turbo().to_string()).is_err_and(|e| e.message.contains("runway_video")));
    refused(
        with(turbo(), "shots", json!([])),
        "shots",
        "at least one shot",
    );
    refused(
        with(turbo(), "shots", json!({})),
        "shots",
        "must be an array",
    );
    refused(
        with(turbo(), "shots", json!(["a cat"])),
        "shots[0]",
        "must be an object",
    );
    let mut no_shots = turbo();
    no_shots.as_object_mut().map(|m| m.remove("shots"));
    refused(no_shots, "shots", "is required");
}
