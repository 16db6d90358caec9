//! `plan`: a payload `{"model": "<fal model id>", "shots": [{…the model's input fields…}]}`
//! becomes one unit per shot, each with the resolved request as its spec (see
//! [`crate::spec`]). Validation is local and complete: fal validates only when a runner picks
//! the request up, so a bad body would queue, wait and end as a 422 result.

use serde_json::Value;
use slotd_sdk::PlanError;
use slotd_sdk::fields::{known_only, payload, type_name};

use crate::models::{Model, TASK_TYPE};
use crate::shot;
use crate::spec::Spec;

/// Most shots one task may hold.
pub const MAX_SHOTS: usize = 100;

/// One planned shot: its model and its spec text.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedShot {
    pub model: Model,
    pub spec: String,
}

/// Check a payload and resolve every shot.
pub fn plan(task_type: &str, text: &str) -> Result<Vec<PlannedShot>, PlanError> {
    if task_type != TASK_TYPE {
        return Err(PlanError::whole(format!(
            "task type {task_type:?} is not served by fal-video (it serves {TASK_TYPE})"
        )));
    }
    let map = payload(text)?;
    known_only(&map, "", &["model", "shots"])?;
    let model = match map.get("model") {
        Some(Value::String(id)) => {
            Model::parse(id).ok_or_else(|| PlanError::at("model", Model::refusal(id)))?
        }
        Some(other) => {
            return Err(PlanError::at(
                "model",
                format!(
                    "must be a fal model id (a string), got a {}",
                    type_name(other)
                ),
            ));
        }
        None => return Err(PlanError::at("model", "is required (a fal model id)")),
    };
    let shots = match map.get("shots") {
        Some(Value::Array(shots)) => shots,
        Some(other) => {
            return Err(PlanError::at(
                "shots",
                format!("must be a list of shots, got a {}", type_name(other)),
            ));
        }
        None => return Err(PlanError::at("shots", "is required (a list of shots)")),
    };
    if shots.is_empty() || shots.len() > MAX_SHOTS {
        return Err(PlanError::at(
            "shots",
            format!("must hold 1 to {MAX_SHOTS} shots, got {}", shots.len()),
        ));
    }
    shots
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let input = shot::resolve(model, s, &format!("shots[{i}]"))?;
            Ok(PlannedShot {
                model,
                spec: Spec::write(model, input),
            })
        })
        .collect()
}
