//! `kling-video` as a route target (contract 1.5 `routes`): a canonical shot as one `video`
//! unit for a Kling model. The shot becomes the equivalent `video` payload shot and goes
//! through [`video`]'s own planning, so its spec is the create body `plan` would write and
//! everything else (price, expected duration, tick, finalize) takes it like any other unit.
//!
//! | canonical | Kling |
//! |---|---|
//! | `image_url` | `image` (an http(s) URL or raw base64): `image2video`; without it `text2video` |
//! | `prompt` | `prompt` (≤ 2500 characters) |
//! | `duration` | `duration` `"5"` or `"10"`; any other length is refused |
//! | `aspect_ratio` | `aspect_ratio` `16:9`, `9:16` or `1:1` (any `W:H` of the same shape); with an image it is checked but not sent: image-to-video follows the image |
//! | `resolution` | `mode`: `720p` → `std` (also when absent), `1080p` → `pro`; others refused |
//! | `negative_prompt` | `negative_prompt` (≤ 2500 characters) |
//! | `seed` | refused: Kling takes no seed |

use serde_json::{Map, Value, json};
use slotd_sdk::route::{self, RoutedShot, Shot};
use slotd_sdk::{PlanError, fields};

use crate::fields::check_image;
use crate::video::{self, MODELS, PROMPT_MAX_CHARS};

/// The aspect ratios Kling makes, as it names them.
pub const ASPECT_RATIOS: [&str; 3] = ["16:9", "9:16", "1:1"];
/// Canonical resolutions and the Kling mode that makes each.
pub const RESOLUTIONS: [(&str, &str); 2] = [("720p", "std"), ("1080p", "pro")];
/// The clip lengths Kling makes, seconds.
pub const DURATIONS: [u32; 2] = [5, 10];

/// The models a route may name: every video model the handler serves.
pub fn models() -> Vec<String> {
    MODELS.iter().map(|m| m.to_string()).collect()
}

/// One canonical shot as a `video` unit for `model`.
pub fn plan_shot(model: &str, shot: &str) -> Result<RoutedShot, PlanError> {
    let Some(model) = MODELS.iter().copied().find(|m| *m == model) else {
        return Err(route::unknown_model(video::HANDLER, model, MODELS));
    };
    let shot = Shot::parse(shot)?;
    let payload_shot = payload_shot(model, &shot)?;
    let spec =
        video::shot_spec(&Map::new(), &Value::Object(payload_shot), "").map_err(canonical_field)?;
    Ok(RoutedShot {
        task_type: video::TASK_TYPE.into(),
        pool: video::POOL.into(),
        spec,
        state: "{}".into(),
    })
}

/// The `video` payload shot a canonical shot is, every value checked with the canonical
/// field's name.
fn payload_shot(model: &str, shot: &Shot) -> Result<Map<String, Value>, PlanError> {
    let mut out = Map::new();
    out.insert("model_name".into(), json!(model));
    if shot.prompt.trim().is_empty() {
        return Err(PlanError::at("prompt", "must not be empty"));
    }
    fields::max_chars(&shot.prompt, "", "prompt", PROMPT_MAX_CHARS)?;
    out.insert("prompt".into(), json!(shot.prompt));
    if let Some(image) = &shot.image_url {
        check_image(image, "image_url")?;
        out.insert("image".into(), json!(image));
    }
    let duration = shot
        .whole_seconds()
        .filter(|d| DURATIONS.contains(d))
        .ok_or_else(|| {
            PlanError::at(
                "duration",
                format!(
                    "{model} makes 5 or 10 second videos, not {}",
                    shot.duration_text()
                ),
            )
        })?;
    out.insert("duration".into(), json!(duration.to_string()));
    let Some(ratio) = ASPECT_RATIOS.iter().find(|r| shot.ratio_is(r)) else {
        return Err(PlanError::at(
            "aspect_ratio",
            format!(
                "{model} makes {} videos, not {}",
                ASPECT_RATIOS.join(", "),
                fields::shorten(&shot.aspect_ratio)
            ),
        ));
    };
    // Image-to-video takes its shape from the image: `plan` leaves the ratio out there too.
    if shot.image_url.is_none() {
        out.insert("aspect_ratio".into(), json!(ratio));
    }
    let resolution = shot.resolution.as_deref().unwrap_or("720p");
    let Some((_, mode)) = RESOLUTIONS.iter().find(|(r, _)| *r == resolution) else {
        return Err(PlanError::at(
            "resolution",
            format!(
                "{model} makes 720p (mode std) or 1080p (mode pro) videos, not {}",
                fields::shorten(resolution)
            ),
        ));
    };
    out.insert("mode".into(), json!(mode));
    if let Some(negative) = &shot.negative_prompt {
        fields::max_chars(negative, "", "negative_prompt", PROMPT_MAX_CHARS)?;
        out.insert("negative_prompt".into(), json!(negative));
    }
    if shot.seed.is_some() {
        return Err(PlanError::at(
            "seed",
            format!("Kling takes no seed: {model} cannot repeat a generation; leave seed out"),
        ));
    }
    Ok(out)
}

/// A refusal of `video`'s planning, named by the canonical field (`image` is `image_url`,
/// `mode` is `resolution`, `model_name` is none: the route names the model).
fn canonical_field(mut e: PlanError) -> PlanError {
    e.field = match e.field.as_deref() {
        Some("image") => Some("image_url".into()),
        Some("mode") => Some("resolution".into()),
        Some("model_name") => None,
        _ => e.field,
    };
    e
}

#[cfg(test)]
#[path = "video_route_tests.rs"]
mod tests;
