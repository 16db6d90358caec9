//! `runway-video` as a route target (contract 1.5 `routes`): a canonical shot as one
//! `runway_video` unit on its model's pool `runway:<model>`. The shot becomes the equivalent
//! payload shot and goes through [`crate::payload`]'s own planning, so its spec is the create
//! request `plan-routed` would write, and the unit is priced, timed, ticked and finalized like
//! any other.
//!
//! | canonical | Runway |
//! |---|---|
//! | `image_url` | `promptImage` (`POST /v1/image_to_video`); without it `POST /v1/text_to_video`, which `gen4_turbo` does not have |
//! | `prompt` | `promptText` (at most 1000 UTF-16 code units) |
//! | `duration` | `duration`, whole seconds the model allows (gen4: 2–10; veo3.1: 4, 6, 8; veo3: 8) |
//! | `aspect_ratio` + `resolution` | `ratio`: 16:9 → `1280:720` (1080p: `1920:1080`), 9:16 → `720:1280` (`1080:1920`), 1:1 → `960:960`, 4:3 → `1104:832`, 3:4 → `832:1104`, 21:9 → `1584:672`, each where the model's ratio list has it; no resolution is 720p |
//! | `seed` | `seed` (gen4 models, 0–4294967295) |
//! | `negative_prompt` | `negativePrompt` (Veo models); an empty one is left out |

use serde_json::{Map, Value, json};
use slotd_sdk::route::{self, RoutedShot, Shot};
use slotd_sdk::{PlanError, fields};

use crate::assets::{check_image, check_prompt};
use crate::models::{Durations, Endpoint, Model, Schema};
use crate::payload::{self, TASK_TYPE};
use crate::settings::HANDLER;

/// A shape a route may ask for, and Runway's ratio for it at 720p and at 1080p.
struct Shape {
    name: &'static str,
    hd720: &'static str,
    hd1080: Option<&'static str>,
}

const SHAPES: [Shape; 6] = [
    Shape {
        name: "16:9",
        hd720: "1280:720",
        hd1080: Some("1920:1080"),
    },
    Shape {
        name: "9:16",
        hd720: "720:1280",
        hd1080: Some("1080:1920"),
    },
    Shape {
        name: "1:1",
        hd720: "960:960",
        hd1080: None,
    },
    Shape {
        name: "4:3",
        hd720: "1104:832",
        hd1080: None,
    },
    Shape {
        name: "3:4",
        hd720: "832:1104",
        hd1080: None,
    },
    Shape {
        name: "21:9",
        hd720: "1584:672",
        hd1080: None,
    },
];

/// Largest `seed` Runway takes.
const SEED_MAX: i64 = 4_294_967_295;

/// The models a route may name: every model the handler serves.
pub fn models() -> Vec<String> {
    Model::ALL.iter().map(|m| m.as_str().to_string()).collect()
}

/// One canonical shot as a `runway_video` unit of `model`.
pub fn plan_shot(model: &str, shot: &str) -> Result<RoutedShot, PlanError> {
    let Some(model) = Model::parse(model) else {
        let served: Vec<&str> = Model::ALL.iter().map(|m| m.as_str()).collect();
        return Err(route::unknown_model(HANDLER, model, &served));
    };
    let shot = Shot::parse(shot)?;
    let payload_shot = payload_shot(model, &shot)?;
    let planned = payload::plan_shot(&Map::new(), &Value::Object(payload_shot), "")
        .map_err(canonical_field)?;
    Ok(RoutedShot {
        task_type: TASK_TYPE.into(),
        pool: planned.model.pool(),
        spec: planned.spec,
        state: "{}".into(),
    })
}

/// The payload shot a canonical shot is, every value checked with the canonical field's name.
fn payload_shot(model: Model, shot: &Shot) -> Result<Map<String, Value>, PlanError> {
    let mut out = Map::new();
    out.insert("model".into(), json!(model.as_str()));
    let endpoint = match &shot.image_url {
        Some(image) => {
            check_image(image, "image_url")?;
            out.insert("prompt_image".into(), json!(image));
            Endpoint::ImageToVideo
        }
        None => Endpoint::TextToVideo,
    };
    let Some(schema) = model.schema(endpoint) else {
        return Err(PlanError::at(
            "image_url",
            format!("{model} makes video from an image only: image_url is required"),
        ));
    };
    if shot.prompt.trim().is_empty() {
        return Err(PlanError::at("prompt", "must not be empty"));
    }
    check_prompt(&shot.prompt, "prompt")?;
    out.insert("prompt_text".into(), json!(shot.prompt));
    out.insert("ratio".into(), json!(ratio(model, schema, shot)?));
    let duration = shot
        .whole_seconds()
        .filter(|d| schema.durations.allows(u64::from(*d)))
        .ok_or_else(|| {
            PlanError::at(
                "duration",
                format!(
                    "{model} makes {} second videos, not {}",
                    seconds(schema.durations),
                    shot.duration_text()
                ),
            )
        })?;
    out.insert("duration".into(), json!(duration));
    if let Some(seed) = shot.seed {
        if !schema.accepts("seed") {
            return Err(PlanError::at(
                "seed",
                format!("{model} takes no seed (only gen4_turbo and gen4.5 do); leave it out"),
            ));
        }
        if !(0..=SEED_MAX).contains(&seed) {
            return Err(PlanError::at(
                "seed",
                format!("{model} takes a seed from 0 to {SEED_MAX}, not {seed}"),
            ));
        }
        out.insert("seed".into(), json!(seed));
    }
    if let Some(negative) = shot.negative_prompt.as_deref().map(str::trim)
        && !negative.is_empty()
    {
        if !schema.accepts("negativePrompt") {
            return Err(PlanError::at(
                "negative_prompt",
                format!(
                    "{model} takes no negative prompt (only veo3, veo3.1 and veo3.1_fast do); \
                     leave it out"
                ),
            ));
        }
        out.insert("negative_prompt".into(), json!(shot.negative_prompt));
    }
    Ok(out)
}

/// Runway's `ratio` for the shot's aspect ratio at its resolution (720p when it names none).
fn ratio(model: Model, schema: &Schema, shot: &Shot) -> Result<&'static str, PlanError> {
    let offered: Vec<&Shape> = SHAPES
        .iter()
        .filter(|s| ratios_of(s).any(|r| schema.ratios.contains(&r)))
        .collect();
    let names: Vec<&str> = offered.iter().map(|s| s.name).collect();
    let Some(shape) = SHAPES
        .iter()
        .find(|s| shot.ratio_is(s.name) || ratios_of(s).any(|r| shot.ratio_is(r)))
        .filter(|s| offered.iter().any(|o| o.name == s.name))
    else {
        return Err(PlanError::at(
            "aspect_ratio",
            format!(
                "{model} makes {} videos{}, not {}",
                names.join(", "),
                if shot.image_url.is_some() {
                    " from an image"
                } else {
                    " from text"
                },
                fields::shorten(&shot.aspect_ratio)
            ),
        ));
    };
    let resolution = shot.resolution.as_deref().unwrap_or("720p");
    let wanted = match resolution {
        "720p" => Some(shape.hd720),
        "1080p" => shape.hd1080,
        _ => None,
    };
    match wanted.filter(|r| schema.ratios.contains(r)) {
        Some(r) => Ok(r),
        None => {
            let made: Vec<&str> = [("720p", Some(shape.hd720)), ("1080p", shape.hd1080)]
                .into_iter()
                .filter(|(_, r)| r.is_some_and(|r| schema.ratios.contains(&r)))
                .map(|(name, _)| name)
                .collect();
            Err(PlanError::at(
                "resolution",
                format!(
                    "{model} makes {} videos at {}, not {}",
                    shape.name,
                    made.join(" or "),
                    fields::shorten(resolution)
                ),
            ))
        }
    }
}

fn ratios_of(shape: &Shape) -> impl Iterator<Item = &'static str> {
    [Some(shape.hd720), shape.hd1080].into_iter().flatten()
}

/// The clip lengths of a schema, for messages: `2 to 10`, `4, 6 or 8`, `8`.
fn seconds(durations: Durations) -> String {
    match durations {
        Durations::Range(lo, hi) => format!("{lo} to {hi}"),
        Durations::OneOf([only]) => only.to_string(),
        Durations::OneOf(values) => {
            let list: Vec<String> = values.iter().map(u32::to_string).collect();
            match list.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
                _ => list.join(""),
            }
        }
    }
}

/// A refusal of the payload planning, named by the canonical field.
fn canonical_field(mut e: PlanError) -> PlanError {
    e.field = match e.field.as_deref() {
        Some("prompt_image") => Some("image_url".into()),
        Some("prompt_text") => Some("prompt".into()),
        Some("ratio") => Some("aspect_ratio".into()),
        Some("model") => None,
        _ => e.field,
    };
    e
}

#[cfg(test)]
#[path = "route_tests.rs"]
mod tests;
