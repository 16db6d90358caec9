//! `plan`: the `runway_video` payload, validated per model exactly as RUNWAY_API.md's tables
//! say, one unit per shot whose spec is the resolved create request.
//!
//! ```json
//! {"model": "gen4_turbo", "ratio": "1280:720", "duration": 5,
//!  "shots": [{"prompt_image": "https://…", "prompt_text": "…", "seed": 1}]}
//! ```
//!
//! Task-level settings (`model`, `ratio`, `duration`, `audio`, `negative_prompt`,
//! `content_moderation`) apply to every shot; a shot may override any of them. Shot fields:
//! `prompt_image`, `last_image` (Veo 3.1 models' last frame), `prompt_text`, `seed`. A shot
//! with an image goes to `image_to_video`, a text-only shot to `text_to_video` (not for
//! `gen4_turbo`, which is image-only). Every refusal names the field by its path, as the
//! caller wrote it (`shots[2].prompt_text`, or `duration` for a task-level value).

use serde_json::{Map, Value, json};
use slotd_sdk::PlanError;
use slotd_sdk::fields::{self, path, type_name};

use crate::assets::{check_image, check_prompt};
use crate::models::{Endpoint, Model, OUT_OF_SCOPE, Schema};
use crate::spec::Spec;

/// The task type this handler serves.
pub const TASK_TYPE: &str = "runway_video";

/// Fields a task or a shot may set; a shot's value wins.
const SETTINGS: &[&str] = &[
    "model",
    "ratio",
    "duration",
    "audio",
    "negative_prompt",
    "content_moderation",
];
/// Fields only a shot sets.
const SHOT_ONLY: &[&str] = &["prompt_image", "last_image", "prompt_text", "seed"];
/// Largest `seed` (RUNWAY_API.md: 0–4294967295).
const SEED_MAX: u64 = 4_294_967_295;

/// One shot, planned: its spec and the model whose pool it goes to.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedShot {
    pub spec: String,
    pub model: Model,
}

/// Validate a payload of task type `task_type` and plan one unit per shot.
pub fn plan(task_type: &str, text: &str) -> Result<Vec<PlannedShot>, PlanError> {
    if task_type != TASK_TYPE {
        return Err(PlanError::whole(format!(
            "runway-video serves task type {TASK_TYPE:?}, not {task_type:?}"
        )));
    }
    let task = fields::payload(text)?;
    let mut allowed = SETTINGS.to_vec();
    allowed.push("shots");
    fields::known_only(&task, "", &allowed)?;
    let shots = match task.get("shots") {
        Some(Value::Array(shots)) if !shots.is_empty() => shots,
        Some(Value::Array(_)) => return Err(PlanError::at("shots", "needs at least one shot")),
        Some(other) => {
            return Err(PlanError::at(
                "shots",
                format!("must be an array of shots, got a {}", type_name(other)),
            ));
        }
        None => return Err(PlanError::at("shots", "is required (a list of shots)")),
    };
    shots
        .iter()
        .enumerate()
        .map(|(i, shot)| plan_shot(&task, shot, &format!("shots[{i}]")))
        .collect()
}

/// A payload value and the path the caller wrote it at.
struct Field<'a> {
    name: &'static str,
    path: String,
    value: &'a Value,
}

/// One payload shot at `prefix` (`task`'s settings apply where the shot sets none), planned.
pub(crate) fn plan_shot(
    task: &Map<String, Value>,
    shot: &Value,
    prefix: &str,
) -> Result<PlannedShot, PlanError> {
    let Value::Object(shot) = shot else {
        return Err(PlanError::at(
            prefix,
            format!("must be an object, got a {}", type_name(shot)),
        ));
    };
    let mut allowed = SETTINGS.to_vec();
    allowed.extend_from_slice(SHOT_ONLY);
    fields::known_only(shot, prefix, &allowed)?;
    let fields = shot_fields(task, shot, prefix)?;
    let model = model_of(&fields)?;
    let (endpoint, schema) = endpoint_of(model, &fields, prefix)?;
    let mut body = Map::new();
    body.insert("model".into(), json!(model.as_str()));
    for field in fields.iter().filter(|f| f.name != "model") {
        accepted(field, model, endpoint, schema)?;
        if let Some((key, value)) = body_entry(field, &fields, schema)? {
            body.insert(key.into(), value);
        }
    }
    for key in schema.required {
        if !body.contains_key(*key) {
            return Err(PlanError::at(
                missing_path(key, prefix),
                format!("is required by model {model} ({})", endpoint.name()),
            ));
        }
    }
    Ok(PlannedShot {
        spec: Spec::write(endpoint, body),
        model,
    })
}

/// The fields a shot uses, shot-only ones first: its own, then the task's settings it does not
/// override. `null` is refused everywhere (Runway refuses it too).
fn shot_fields<'a>(
    task: &'a Map<String, Value>,
    shot: &'a Map<String, Value>,
    prefix: &str,
) -> Result<Vec<Field<'a>>, PlanError> {
    let own = SHOT_ONLY.iter().chain(SETTINGS).filter_map(|name| {
        shot.get(*name).map(|value| Field {
            name,
            path: path(prefix, name),
            value,
        })
    });
    let inherited = SETTINGS
        .iter()
        .filter(|name| !shot.contains_key(**name))
        .filter_map(|name| {
            task.get(*name).map(|value| Field {
                name,
                path: name.to_string(),
                value,
            })
        });
    let fields: Vec<Field<'a>> = own.chain(inherited).collect();
    match fields.iter().find(|f| f.value.is_null()) {
        Some(f) => Err(PlanError::at(
            &f.path,
            "must not be null (leave the field out instead)",
        )),
        None => Ok(fields),
    }
}

fn find<'f, 'a>(fields: &'f [Field<'a>], name: &str) -> Option<&'f Field<'a>> {
    fields.iter().find(|f| f.name == name)
}

fn model_of(fields: &[Field<'_>]) -> Result<Model, PlanError> {
    let served = || {
        let names: Vec<&str> = Model::ALL.iter().map(|m| m.as_str()).collect();
        names.join(", ")
    };
    let Some(field) = find(fields, "model") else {
        return Err(PlanError::at(
            "model",
            format!("is required (one of {})", served()),
        ));
    };
    let name = string(field)?;
    if let Some(model) = Model::parse(name) {
        return Ok(model);
    }
    let why = if OUT_OF_SCOPE.contains(&name) {
        format!(
            "{name:?} is a Runway model this handler does not serve (retired, or not image/text \
             to video); use one of {}",
            served()
        )
    } else {
        format!(
            "unknown model {:?}; use one of {}",
            fields::shorten(name),
            served()
        )
    };
    Err(PlanError::at(&field.path, why))
}

/// A shot with an image goes to `image_to_video`; a text-only shot to `text_to_video` where
/// the model has it.
fn endpoint_of(
    model: Model,
    fields: &[Field<'_>],
    prefix: &str,
) -> Result<(Endpoint, &'static Schema), PlanError> {
    let endpoint = if find(fields, "prompt_image").is_some() {
        Endpoint::ImageToVideo
    } else if let Some(last) = find(fields, "last_image") {
        return Err(PlanError::at(
            &last.path,
            format!("needs {prefix}.prompt_image: a last frame alone is refused"),
        ));
    } else {
        Endpoint::TextToVideo
    };
    match model.schema(endpoint) {
        Some(schema) => Ok((endpoint, schema)),
        None => Err(PlanError::at(
            path(prefix, "prompt_image"),
            format!(
                "is required: {model} makes video from an image only (text-only shots need \
                 gen4.5, veo3, veo3.1 or veo3.1_fast)"
            ),
        )),
    }
}

/// The body key a payload field becomes.
fn body_key(name: &str) -> &'static str {
    match name {
        "prompt_image" | "last_image" => "promptImage",
        "prompt_text" => "promptText",
        "negative_prompt" => "negativePrompt",
        "content_moderation" => "contentModeration",
        "ratio" => "ratio",
        "duration" => "duration",
        "seed" => "seed",
        "audio" => "audio",
        _ => "",
    }
}

/// Refuse a field the model does not take on this endpoint.
fn accepted(
    field: &Field<'_>,
    model: Model,
    endpoint: Endpoint,
    schema: &Schema,
) -> Result<(), PlanError> {
    let ok = if field.name == "last_image" {
        schema.last_frame
    } else {
        schema.accepts(body_key(field.name))
    };
    if ok {
        return Ok(());
    }
    let why = if field.name == "last_image" {
        format!("is not accepted by model {model}: it takes a first frame only")
    } else {
        format!("is not accepted by model {model} ({})", endpoint.name())
    };
    Err(PlanError::at(&field.path, why))
}

/// The body entry for a field, checked; `None` for `last_image`, which `prompt_image` carries.
fn body_entry(
    field: &Field<'_>,
    fields: &[Field<'_>],
    schema: &Schema,
) -> Result<Option<(&'static str, Value)>, PlanError> {
    let value = match field.name {
        "last_image" => return Ok(None),
        "prompt_image" => prompt_image(field, find(fields, "last_image"))?,
        "prompt_text" => {
            let text = string(field)?;
            check_prompt(text, &field.path)?;
            json!(text)
        }
        // Runway documents no length limit for it.
        "negative_prompt" => match string(field)? {
            text if text.trim().is_empty() => {
                return Err(PlanError::at(&field.path, "must not be empty"));
            }
            text => json!(text),
        },
        "ratio" => {
            let ratio = string(field)?;
            fields::check_one_of(ratio, &field.path, schema.ratios)?;
            json!(ratio)
        }
        "duration" => json!(duration(field, schema)?),
        "seed" => json!(seed(field)?),
        "audio" => match field.value {
            Value::Bool(b) => json!(b),
            other => return Err(wrong_type(field, "a boolean", other)),
        },
        "content_moderation" => content_moderation(field)?,
        _ => return Ok(None),
    };
    Ok(Some((body_key(field.name), value)))
}

/// `promptImage`: the first frame as a string, or both frames as `[{uri, position}]`.
fn prompt_image(first: &Field<'_>, last: Option<&Field<'_>>) -> Result<Value, PlanError> {
    let first_uri = string(first)?;
    check_image(first_uri, &first.path)?;
    let Some(last) = last else {
        return Ok(json!(first_uri));
    };
    let last_uri = string(last)?;
    check_image(last_uri, &last.path)?;
    Ok(json!([
        {"uri": first_uri, "position": "first"},
        {"uri": last_uri, "position": "last"},
    ]))
}

fn duration(field: &Field<'_>, schema: &Schema) -> Result<u64, PlanError> {
    match field.value.as_u64() {
        Some(d) if schema.durations.allows(d) => Ok(d),
        _ => Err(PlanError::at(
            &field.path,
            format!(
                "must be {} (seconds, a JSON number), got {}",
                schema.durations, field.value
            ),
        )),
    }
}

fn seed(field: &Field<'_>) -> Result<u64, PlanError> {
    match field.value.as_u64() {
        Some(s) if s <= SEED_MAX => Ok(s),
        _ => Err(PlanError::at(
            &field.path,
            format!(
                "must be an integer from 0 to {SEED_MAX}, got {}",
                fields::shorten(&field.value.to_string())
            ),
        )),
    }
}

/// `{"public_figure_threshold": "auto" | "low"}` → `{"publicFigureThreshold": …}`.
fn content_moderation(field: &Field<'_>) -> Result<Value, PlanError> {
    let Value::Object(map) = field.value else {
        return Err(wrong_type(field, "an object", field.value));
    };
    fields::known_only(map, &field.path, &["public_figure_threshold"])?;
    let mut out = Map::new();
    if let Some(v) = map.get("public_figure_threshold") {
        let inner = Field {
            name: "public_figure_threshold",
            path: path(&field.path, "public_figure_threshold"),
            value: v,
        };
        let threshold = string(&inner)?;
        fields::check_one_of(threshold, &inner.path, &["auto", "low"])?;
        out.insert("publicFigureThreshold".into(), json!(threshold));
    }
    Ok(Value::Object(out))
}

fn string<'a>(field: &Field<'a>) -> Result<&'a str, PlanError> {
    match field.value {
        Value::String(s) => Ok(s),
        other => Err(wrong_type(field, "a string", other)),
    }
}

fn wrong_type(field: &Field<'_>, expected: &str, got: &Value) -> PlanError {
    PlanError::at(
        &field.path,
        format!("must be {expected}, got a {}", type_name(got)),
    )
}

/// Where the caller should add a body key the model requires.
fn missing_path(key: &str, prefix: &str) -> String {
    match key {
        "promptImage" => path(prefix, "prompt_image"),
        "promptText" => path(prefix, "prompt_text"),
        other => SETTINGS
            .iter()
            .find(|name| body_key(name) == other)
            .map_or_else(|| other.to_string(), |name| name.to_string()),
    }
}

#[cfg(test)]
#[path = "payload_tests/mod.rs"]
mod tests;
