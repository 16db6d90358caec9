//! The `kling-avatar` handler's knowledge: the `avatar_clone` payload (docs/interfaces.md), one
//! unit in two stages — `voice` (a custom voice) then `element` (an advanced custom element
//! speaking with that voice) — their create bodies, and what each stage's success yields.
//!
//! Ids are carried as strings: Kling's `element_id` is a JSON number of 18 digits, beyond what
//! a JavaScript client reads exactly.

use serde_json::{Value, json};

use crate::fields::{
    check_image, check_url, known_only, max_chars, opt_string, payload, required_text, type_name,
};
use crate::task::{Success, TaskObject, text};
use slotd_sdk::{Outcome, PlanError, ProviderError};

pub const HANDLER: &str = "kling-avatar";
pub const VERSION: &str = "1.0.0";
pub const TASK_TYPE: &str = "avatar_clone";
pub const STAGE_VOICE: &str = "voice";
pub const STAGE_ELEMENT: &str = "element";
pub const POOL: &str = "kling:avatar";
/// 2 of the seed account's 20 concurrent jobs; the video pool takes the other 18.
pub const DEFAULT_SLOTS: u32 = 2;

pub const VOICES: &str = "/v1/general/custom-voices";
pub const ELEMENTS: &str = "/v1/general/advanced-custom-elements";

pub const NAME_MAX_CHARS: usize = 20;
pub const DESCRIPTION_MAX_CHARS: usize = 100;

const FIELDS: &[&str] = &[
    "voice_name",
    "voice_url",
    "element_name",
    "element_description",
    "frontal_image",
    "refer_images",
];

/// Validate an `avatar_clone` payload; one spec holding both stages' create bodies (the
/// element's `element_voice_id` is added once the voice exists).
pub fn plan(task_type: &str, text: &str) -> Result<Vec<String>, PlanError> {
    if task_type != TASK_TYPE {
        return Err(PlanError::whole(format!(
            "{HANDLER} serves task type {TASK_TYPE:?}, not {task_type:?}"
        )));
    }
    let p = payload(text)?;
    known_only(&p, "", FIELDS)?;
    let voice_name = required_text(&p, "", "voice_name", NAME_MAX_CHARS)?;
    let voice_url = required_text(&p, "", "voice_url", usize::MAX)?;
    check_url(voice_url, "voice_url")?;
    let element_name = required_text(&p, "", "element_name", NAME_MAX_CHARS)?;
    let description = opt_string(&p, "", "element_description")?.unwrap_or_default();
    max_chars(
        description,
        "",
        "element_description",
        DESCRIPTION_MAX_CHARS,
    )?;
    let frontal = required_text(&p, "", "frontal_image", usize::MAX)?;
    check_image(frontal, "frontal_image")?;
    let refer = match p.get("refer_images") {
        Some(Value::Array(list)) if !list.is_empty() => list,
        Some(Value::Array(_)) => {
            return Err(PlanError::at("refer_images", "needs at least one image"));
        }
        Some(other) => {
            return Err(PlanError::at(
                "refer_images",
                format!("must be a list of image URLs, got a {}", type_name(other)),
            ));
        }
        None => {
            return Err(PlanError::at(
                "refer_images",
                "is required (a list of image URLs)",
            ));
        }
    };
    let mut refer_images = Vec::with_capacity(refer.len());
    for (i, image) in refer.iter().enumerate() {
        let field = format!("refer_images[{i}]");
        let Value::String(image) = image else {
            return Err(PlanError::at(
                field,
                format!("must be an image URL string, got a {}", type_name(image)),
            ));
        };
        check_image(image, &field)?;
        refer_images.push(json!({ "image_url": image }));
    }
    let spec = json!({
        "voice": { "voice_name": voice_name, "voice_url": voice_url },
        "element": {
            "element_name": element_name,
            "element_description": description,
            "reference_type": "image_refer",
            "element_image_list": {
                "frontal_image": frontal,
                "refer_images": refer_images,
            },
        },
    });
    Ok(vec![spec.to_string()])
}

/// The collection and create body of a unit's current stage.
pub fn job_of(stage: &str, spec: &str, state: &str) -> Result<(&'static str, Value), String> {
    let spec: Value =
        serde_json::from_str(spec).map_err(|e| format!("unit spec is not JSON: {e}"))?;
    match stage {
        STAGE_VOICE => Ok((
            VOICES,
            spec.get("voice")
                .cloned()
                .ok_or("unit spec has no voice body")?,
        )),
        STAGE_ELEMENT => {
            let mut body = spec
                .get("element")
                .cloned()
                .ok_or("unit spec has no element body")?;
            let voice_id = voice_id_of(state)
                .ok_or("unit state has no voice_id: the voice stage did not record it")?;
            if let Value::Object(map) = &mut body {
                map.insert("element_voice_id".into(), json!(voice_id));
            }
            Ok((ELEMENTS, body))
        }
        other => Err(format!(
            "unknown stage {other:?} (expected voice or element)"
        )),
    }
}

/// The `voice_id` carried in the unit state.
pub fn voice_id_of(state: &str) -> Option<String> {
    let state: Value = serde_json::from_str(state).ok()?;
    text(state.get("voice_id"))
}

/// Expected duration in seconds of a stage (KLING_API.md "How long things take").
pub fn expected_secs(stage: &str) -> (u64, u64) {
    if stage == STAGE_VOICE {
        (5, 20)
    } else {
        (10, 90)
    }
}

/// `pageSize` maximum of a collection (custom voices allow 1000).
pub fn page_size_max(collection: &str) -> u32 {
    if collection == VOICES { 1000 } else { 500 }
}

/// A `succeed` task: a voice moves the unit to `element` with the voice id in its state; an
/// element succeeds the unit with both ids. `state` is the unit's (absent for callbacks).
pub fn success(task: &TaskObject, state: Option<&str>) -> Success {
    let malformed = |what: &str| {
        ProviderError::new(
            Some("malformed"),
            format!("task {} succeeded without {what}", task.task_id),
        )
    };
    if let Some(voice) = task.raw.pointer("/task_result/voices/0") {
        let voice_id =
            text(voice.get("voice_id")).ok_or_else(|| malformed("voices[0].voice_id"))?;
        let state = json!({ "voice_id": voice_id, "voice_task_id": task.task_id });
        return Ok((
            Outcome::NextStage(STAGE_ELEMENT.into()),
            Some(state.to_string()),
        ));
    }
    let element = task
        .raw
        .pointer("/task_result/elements/0")
        .ok_or_else(|| malformed("task_result.voices[0] or task_result.elements[0]"))?;
    let element_id =
        text(element.get("element_id")).ok_or_else(|| malformed("elements[0].element_id"))?;
    let voice_id = text(element.pointer("/element_voice_info/voice_id"))
        .or_else(|| state.and_then(voice_id_of))
        .ok_or_else(|| malformed("elements[0].element_voice_info.voice_id"))?;
    let result = json!({
        "voice_id": voice_id,
        "element_id": element_id,
        "provider_task_id": task.task_id,
    });
    Ok((Outcome::Succeeded(result.to_string()), None))
}

/// What `finalize` merges into the result: `{"voice_id", "element_id"}`.
pub fn finalized_result(result: Option<&str>) -> Result<String, String> {
    let result = result.ok_or("the unit has no result to finalize")?;
    let value: Value =
        serde_json::from_str(result).map_err(|e| format!("the unit result is not JSON: {e}"))?;
    let voice_id = text(value.get("voice_id")).ok_or("the unit result has no voice_id")?;
    let element_id = text(value.get("element_id")).ok_or("the unit result has no element_id")?;
    Ok(json!({ "voice_id": voice_id, "element_id": element_id }).to_string())
}
