//! Routes (contract 1.5): a route is a task type several handlers serve. The host splits a
//! route's canonical payload into shots, checks their shape, and asks each target handler's
//! [`crate::Handler::plan_shot`] to map one shot to a unit of its own for a model it lists in
//! [`crate::Handler::route_models`]. This module holds what every handler shares: the
//! [`Shot`] as parsed from the host's JSON (unknown fields and wrong types refused, naming the
//! field), the [`RoutedShot`] a handler answers, and the common refusals.

use serde_json::{Map, Value};

use crate::fields::{self, type_name};
use crate::types::PlanError;

/// One canonical shot as a unit of the handler (WIT `routes.routed-shot`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutedShot {
    /// The handler's own task type whose stages the unit follows.
    pub task_type: String,
    /// The pool of its first stage: the stage's default or one of its `stage-pools`.
    pub pool: String,
    /// The unit's `spec`, as `plan` would write it for the equivalent payload (so `estimate`,
    /// `durations`, `tick` and `finalize` take it like any other unit's).
    pub spec: String,
    /// The unit's initial handler-private state (`{}` if none).
    pub state: String,
}

/// A canonical shot (WIT `routes.plan-shot`'s `shot`):
/// `{"prompt", "image_url"?, "duration", "aspect_ratio", "resolution"?, "seed"?,
/// "negative_prompt"?}`. [`Shot::parse`] checks only the shape the contract gives; whether a
/// model can make it is each handler's question, asked with the field names of
/// [`Shot::FIELDS`] so a refusal names what the client wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct Shot {
    /// What to show.
    pub prompt: String,
    /// The first frame: with it the shot is image-to-video, without it text-to-video.
    pub image_url: Option<String>,
    /// Seconds of video (positive; whole for every provider so far, see
    /// [`Shot::whole_seconds`]).
    pub duration: f64,
    /// `W:H` (e.g. `16:9`), two positive integers; see [`Shot::ratio`].
    pub aspect_ratio: String,
    /// E.g. `720p`, `1080p`.
    pub resolution: Option<String>,
    /// Repeat a generation, where the model can.
    pub seed: Option<i64>,
    /// What to avoid, where the model takes it.
    pub negative_prompt: Option<String>,
}

impl Shot {
    /// The fields of a canonical shot, as the client writes them.
    pub const FIELDS: [&'static str; 7] = [
        "prompt",
        "image_url",
        "duration",
        "aspect_ratio",
        "resolution",
        "seed",
        "negative_prompt",
    ];

    /// Parse the host's JSON. Refuses what is not a JSON object, unknown fields, missing
    /// required fields and values of the wrong type, naming the field. `null` for an optional
    /// field is the same as leaving it out.
    pub fn parse(text: &str) -> Result<Shot, PlanError> {
        let map = match serde_json::from_str(text) {
            Ok(Value::Object(map)) => map,
            Ok(other) => {
                return Err(PlanError::whole(format!(
                    "a shot must be a JSON object, got a {}",
                    type_name(&other)
                )));
            }
            Err(e) => return Err(PlanError::whole(format!("the shot is not valid JSON: {e}"))),
        };
        fields::known_only(&map, "", &Shot::FIELDS)?;
        let duration = match map.get("duration") {
            None | Some(Value::Null) => return Err(required("duration", "a number of seconds")),
            Some(Value::Number(n)) => match n.as_f64() {
                Some(d) if d.is_finite() && d > 0.0 => d,
                _ => {
                    return Err(PlanError::at(
                        "duration",
                        format!("must be a positive number of seconds, got {n}"),
                    ));
                }
            },
            Some(other) => return Err(wrong_type("duration", "a number of seconds", other)),
        };
        let aspect_ratio = required_string(&map, "aspect_ratio", "a string such as \"16:9\"")?;
        if parse_ratio(&aspect_ratio).is_none() {
            return Err(PlanError::at(
                "aspect_ratio",
                format!(
                    "must be W:H with two positive integers (e.g. \"16:9\"), got {:?}",
                    fields::shorten(&aspect_ratio)
                ),
            ));
        }
        let seed = match map.get("seed") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => match n.as_i64() {
                Some(seed) => Some(seed),
                None => {
                    return Err(PlanError::at(
                        "seed",
                        format!(
                            "must be an integer from {} to {}, got {n}",
                            i64::MIN,
                            i64::MAX
                        ),
                    ));
                }
            },
            Some(other) => return Err(wrong_type("seed", "an integer", other)),
        };
        Ok(Shot {
            prompt: required_string(&map, "prompt", "a string")?,
            image_url: optional_string(&map, "image_url")?,
            duration,
            aspect_ratio,
            resolution: optional_string(&map, "resolution")?,
            seed,
            negative_prompt: optional_string(&map, "negative_prompt")?,
        })
    }

    /// The duration as whole seconds, `None` when it has a fraction (or is out of range).
    pub fn whole_seconds(&self) -> Option<u32> {
        let d = self.duration;
        (d.fract() == 0.0 && d >= 1.0 && d <= f64::from(u32::MAX)).then_some(d as u32)
    }

    /// The duration as a client would write it: `7`, `7.5`.
    pub fn duration_text(&self) -> String {
        format!("{}", self.duration)
    }

    /// The aspect ratio reduced to lowest terms (`1280:720` → `(16, 9)`).
    pub fn ratio(&self) -> (u64, u64) {
        // `parse` refused any other form.
        parse_ratio(&self.aspect_ratio).unwrap_or((0, 0))
    }

    /// Whether the shot's aspect ratio is the same shape as `other` (`W:H`, any terms): `16:9`
    /// matches `1280:720`.
    pub fn ratio_is(&self, other: &str) -> bool {
        parse_ratio(other) == Some(self.ratio())
    }
}

/// `W:H` with positive integers, reduced to lowest terms.
pub fn parse_ratio(text: &str) -> Option<(u64, u64)> {
    let (w, h) = text.trim().split_once(':')?;
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    if !digits(w) || !digits(h) {
        return None;
    }
    let (w, h): (u64, u64) = (w.parse().ok()?, h.parse().ok()?);
    if w == 0 || h == 0 {
        return None;
    }
    let g = gcd(w, h);
    Some((w / g, h / g))
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The refusal for a model the handler does not list in `route_models` (no shot field is at
/// fault: the route's configuration names the model).
pub fn unknown_model(handler: &str, model: &str, served: &[&str]) -> PlanError {
    PlanError::whole(format!(
        "{handler} serves no model {:?} in routes; it serves: {}",
        fields::shorten(model),
        served.join(", ")
    ))
}

/// The default refusal of a handler that lists no route models.
pub fn not_routable() -> PlanError {
    PlanError::whole("this handler serves no routes (it lists no route models)")
}

fn required(name: &str, what: &str) -> PlanError {
    PlanError::at(name, format!("is required ({what})"))
}

fn wrong_type(name: &str, what: &str, got: &Value) -> PlanError {
    PlanError::at(name, format!("must be {what}, got a {}", type_name(got)))
}

fn required_string(map: &Map<String, Value>, name: &str, what: &str) -> Result<String, PlanError> {
    match map.get(name) {
        None | Some(Value::Null) => Err(required(name, what)),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(wrong_type(name, what, other)),
    }
}

fn optional_string(map: &Map<String, Value>, name: &str) -> Result<Option<String>, PlanError> {
    fields::opt_string(map, "", name).map(|s| s.map(String::from))
}

#[cfg(test)]
#[path = "route_tests.rs"]
mod tests;
