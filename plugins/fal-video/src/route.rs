//! `fal-video` as a route target (contract 1.5 `routes`): a canonical shot as one `fal_video`
//! unit of Pika 2.2. A route may name either endpoint of the family; the shot picks the one it
//! needs: with `image_url` `fal-ai/pika/v2.2/image-to-video`, without it
//! `fal-ai/pika/v2.2/text-to-video`, each on its own pool `fal:<model id>`. The shot becomes
//! the equivalent payload shot and goes through [`crate::shot::resolve`], so its spec is the
//! request `plan-routed` would write and the unit is priced, timed, ticked and finalized like
//! any other.
//!
//! | canonical | Pika 2.2 on fal |
//! |---|---|
//! | `image_url` | `image_url` (an `https://` URL or a `data:image/…;base64,` URI): image-to-video; without it text-to-video |
//! | `prompt` | `prompt` (not blank) |
//! | `duration` | `duration`, the integer 5 or 10 |
//! | `aspect_ratio` | `aspect_ratio` (`16:9 9:16 1:1 4:5 5:4 3:2 2:3`, any `W:H` of the same shape); image-to-video has no such field: checked, not sent (the video follows the image) |
//! | `resolution` | `resolution` `720p` or `1080p` (default 720p) |
//! | `seed` | `seed` |
//! | `negative_prompt` | `negative_prompt` (default: the endpoint's own) |

use serde_json::{Map, Value, json};
use slotd_sdk::route::{self, RoutedShot, Shot};
use slotd_sdk::{PlanError, fields};

use crate::models::{ASPECT_RATIOS, Model, RESOLUTIONS, TASK_TYPE};
use crate::settings::HANDLER;
use crate::shot;
use crate::spec::Spec;

/// The models a route may name: the two endpoints of the Pika 2.2 family.
pub const MODELS: [Model; 2] = [Model::ImageToVideo, Model::TextToVideo];

/// The ids of [`MODELS`].
pub fn models() -> Vec<String> {
    MODELS.iter().map(|m| m.id().to_string()).collect()
}

/// One canonical shot as a `fal_video` unit, for a route naming `model`.
pub fn plan_shot(model: &str, shot: &str) -> Result<RoutedShot, PlanError> {
    let Some(named) = MODELS.iter().copied().find(|m| m.id() == model) else {
        let served: Vec<&str> = MODELS.iter().map(|m| m.id()).collect();
        return Err(route::unknown_model(HANDLER, model, &served));
    };
    let shot = Shot::parse(shot)?;
    // The family's endpoint for this shot (Pika 2.2 has both).
    let model = if shot.image_url.is_some() {
        Model::ImageToVideo
    } else {
        Model::TextToVideo
    };
    let input = payload_shot(named, model, &shot)?;
    let input = shot::resolve(model, &Value::Object(input), "")?;
    Ok(RoutedShot {
        task_type: TASK_TYPE.into(),
        pool: model.pool(),
        spec: Spec::write(model, input),
        state: "{}".into(),
    })
}

/// The payload shot of `model` a canonical shot is, checked with the canonical fields' names
/// and `named` (the route's model) in the messages.
fn payload_shot(named: Model, model: Model, shot: &Shot) -> Result<Map<String, Value>, PlanError> {
    let mut out = Map::new();
    out.insert("prompt".into(), json!(shot.prompt));
    if let Some(image) = &shot.image_url {
        out.insert("image_url".into(), json!(image));
    }
    let duration = shot
        .whole_seconds()
        .filter(|d| matches!(d, 5 | 10))
        .ok_or_else(|| {
            PlanError::at(
                "duration",
                format!(
                    "{named} makes 5 or 10 second videos, not {}",
                    shot.duration_text()
                ),
            )
        })?;
    out.insert("duration".into(), json!(duration));
    let Some(ratio) = ASPECT_RATIOS.iter().find(|r| shot.ratio_is(r)) else {
        return Err(PlanError::at(
            "aspect_ratio",
            format!(
                "{named} makes {} videos, not {}",
                ASPECT_RATIOS.join(", "),
                fields::shorten(&shot.aspect_ratio)
            ),
        ));
    };
    if model.fields().iter().any(|f| f.name == "aspect_ratio") {
        out.insert("aspect_ratio".into(), json!(ratio));
    }
    if let Some(resolution) = &shot.resolution {
        if !RESOLUTIONS.contains(&resolution.as_str()) {
            return Err(PlanError::at(
                "resolution",
                format!(
                    "{named} makes {} videos, not {}",
                    RESOLUTIONS.join(" or "),
                    fields::shorten(resolution)
                ),
            ));
        }
        out.insert("resolution".into(), json!(resolution));
    }
    if let Some(seed) = shot.seed {
        out.insert("seed".into(), json!(seed));
    }
    if let Some(negative) = &shot.negative_prompt {
        out.insert("negative_prompt".into(), json!(negative));
    }
    Ok(out)
}

#[cfg(test)]
#[path = "route_tests.rs"]
mod tests;
