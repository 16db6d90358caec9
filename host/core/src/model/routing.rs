//! Routed units (docs/routes.md): a unit of a route waits on the route, not on a pool, with one
//! option per target of the route (what that target's handler planned for it, or why it
//! refused); it is bound to one option when its submit marker is written, and goes back to the
//! route when that target refuses it before accepting the job.
//!
//! Also the canonical shot a route's payload is made of, checked here for shape before any
//! handler sees it.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Routed units wait in the pseudo-pool `route:<name>` until they are bound.
pub const ROUTE_POOL_PREFIX: &str = "route:";
/// The stage a routed unit is in while it waits on its route.
pub const ROUTE_STAGE: &str = "route";

/// The pool routed units of `route` wait in.
pub fn route_pool(route: &str) -> String {
    format!("{ROUTE_POOL_PREFIX}{route}")
}

/// The route whose units wait in `pool`, if it is a route's pool.
pub fn route_of_pool(pool: &str) -> Option<&str> {
    pool.strip_prefix(ROUTE_POOL_PREFIX)
}

/// What a routed unit carries (`units.routing`, JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnitRouting {
    pub route: String,
    /// One per target of the route when the unit was planned, in the route's order.
    pub options: Vec<RouteOption>,
    /// The option the unit is bound to (set with its submit marker), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<usize>,
}

/// One target's view of a routed unit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RouteOption {
    pub handler: String,
    pub model: String,
    /// What the target's handler planned; `None` when it refused the shot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<TargetUnit>,
    /// The last time this target refused the unit, and until when it is left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusal>,
}

/// A target's unit for one shot: its handler's task type, first stage and pool, spec and
/// initial state, and what the handler expects it to cost and take.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetUnit {
    pub task_type: String,
    pub stage: String,
    pub pool: String,
    pub spec: String,
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<f64>,
    /// The handler's expected duration (p50, ms), until observed durations replace it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_ms: Option<u64>,
}

/// Why a target refused a unit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Refusal {
    /// `plan`, `failed`, `not_created`, `capacity`, `account_refused`, `account_exhausted`,
    /// `quota_exhausted`.
    pub reason: String,
    pub message: String,
    pub at: i64,
    /// Left out until then; `None`: for good (it cannot make this shot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<i64>,
}

impl RouteOption {
    /// Whether this target may take the unit at `now`: it planned it and has not refused it
    /// for good or for a while that is not over.
    pub fn usable(&self, now: i64) -> bool {
        self.plan.is_some()
            && match &self.refused {
                None => true,
                Some(r) => r.until.is_some_and(|u| u <= now),
            }
    }

    /// Whether this target can still ever take the unit.
    pub fn open(&self) -> bool {
        self.plan.is_some() && self.refused.as_ref().is_none_or(|r| r.until.is_some())
    }

    pub fn label(&self) -> String {
        format!("{}/{}", self.handler, self.model)
    }
}

impl UnitRouting {
    pub fn parse(text: &str) -> Option<UnitRouting> {
        serde_json::from_str(text).ok()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }

    /// The option the unit is bound to.
    pub fn bound_option(&self) -> Option<&RouteOption> {
        self.bound.and_then(|i| self.options.get(i))
    }

    /// When the earliest target left out for a while may take it again (`None`: one may now,
    /// or none ever will).
    pub fn next_usable_at(&self, now: i64) -> Option<i64> {
        if self.options.iter().any(|o| o.usable(now)) {
            return None;
        }
        self.options
            .iter()
            .filter(|o| o.open())
            .filter_map(|o| o.refused.as_ref().and_then(|r| r.until))
            .min()
    }
}

/// A canonical shot's fields, in the order the docs list them.
pub const SHOT_FIELDS: [&str; 7] = [
    "prompt",
    "image_url",
    "duration",
    "aspect_ratio",
    "resolution",
    "seed",
    "negative_prompt",
];
/// Longest prompt (or negative prompt) a canonical shot may carry, in characters.
pub const SHOT_TEXT_MAX: usize = 4000;
/// Longest `image_url`.
pub const SHOT_URL_MAX: usize = 2048;

/// A canonical payload refused: the field (`shots[2].duration`) and what is wrong.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ShotError {
    pub field: String,
    pub message: String,
}

fn shot_error(field: impl Into<String>, message: impl Into<String>) -> ShotError {
    ShotError {
        field: field.into(),
        message: message.into(),
    }
}

/// Check a route's payload `{"shots": [ … ]}` for shape and return each shot as the JSON
/// handed to the targets' `plan-shot` (its fields only, trimmed, in name order). At most `max`
/// shots.
pub fn canonical_shots(payload: &str, max: usize) -> Result<Vec<String>, ShotError> {
    let value: Value = serde_json::from_str(payload)
        .map_err(|e| shot_error("payload", format!("not JSON: {e}")))?;
    let Value::Object(mut top) = value else {
        return Err(shot_error(
            "payload",
            "must be an object {\"shots\": [...]}",
        ));
    };
    if let Some(extra) = top.keys().find(|k| k.as_str() != "shots") {
        return Err(shot_error(
            extra.clone(),
            "unknown field; a route's payload has only \"shots\"",
        ));
    }
    let Some(Value::Array(shots)) = top.remove("shots") else {
        return Err(shot_error("shots", "required: a list of shots"));
    };
    if shots.is_empty() {
        return Err(shot_error(
            "shots",
            "the list is empty: give at least one shot",
        ));
    }
    if shots.len() > max {
        return Err(shot_error(
            "shots",
            format!("{} shots; at most {max} per task", shots.len()),
        ));
    }
    shots
        .into_iter()
        .enumerate()
        .map(|(i, s)| canonical_shot(&format!("shots[{i}]"), s))
        .collect()
}

fn canonical_shot(at: &str, shot: Value) -> Result<String, ShotError> {
    let Value::Object(mut fields) = shot else {
        return Err(shot_error(at, "must be an object"));
    };
    if let Some(extra) = fields.keys().find(|k| !SHOT_FIELDS.contains(&k.as_str())) {
        return Err(shot_error(
            format!("{at}.{extra}"),
            format!("unknown field; a shot has {}", SHOT_FIELDS.join(", ")),
        ));
    }
    let mut out = Map::new();
    let prompt = text(at, &mut fields, "prompt", true)?;
    out.insert("prompt".into(), Value::String(prompt.unwrap_or_default()));
    if let Some(url) = text(at, &mut fields, "image_url", false)? {
        check_image_url(&format!("{at}.image_url"), &url)?;
        out.insert("image_url".into(), Value::String(url));
    }
    let duration = match fields.remove("duration") {
        Some(Value::Number(n)) => n
            .as_f64()
            .filter(|d| d.is_finite() && *d > 0.0 && *d <= 600.0)
            .ok_or_else(|| {
                shot_error(
                    format!("{at}.duration"),
                    "seconds: a number above 0, at most 600",
                )
            })?,
        Some(_) => {
            return Err(shot_error(
                format!("{at}.duration"),
                "seconds: a number, e.g. 5",
            ));
        }
        None => return Err(shot_error(format!("{at}.duration"), "required (seconds)")),
    };
    // Whole seconds stay integers (`5`, not `5.0`) for handlers that read an integer.
    let duration = if duration.fract() == 0.0 {
        Value::from(duration as u64)
    } else {
        Value::from(duration)
    };
    out.insert("duration".into(), duration);
    let ratio = text(at, &mut fields, "aspect_ratio", true)?.unwrap_or_default();
    if !is_ratio(&ratio) {
        return Err(shot_error(
            format!("{at}.aspect_ratio"),
            format!("{ratio:?} is not a ratio W:H such as \"16:9\""),
        ));
    }
    out.insert("aspect_ratio".into(), Value::String(ratio));
    if let Some(r) = text(at, &mut fields, "resolution", false)? {
        out.insert("resolution".into(), Value::String(r));
    }
    match fields.remove("seed") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.as_u64().is_some_and(|s| s <= u64::from(u32::MAX)) => {
            out.insert("seed".into(), Value::Number(n));
        }
        Some(_) => {
            return Err(shot_error(
                format!("{at}.seed"),
                format!("an integer from 0 to {}", u32::MAX),
            ));
        }
    }
    if let Some(n) = text(at, &mut fields, "negative_prompt", false)? {
        out.insert("negative_prompt".into(), Value::String(n));
    }
    serde_json::to_string(&Value::Object(out))
        .map_err(|e| shot_error(at, format!("could not be written back: {e}")))
}

/// A string field: trimmed, non-empty, at most [`SHOT_TEXT_MAX`] characters.
fn text(
    at: &str,
    fields: &mut Map<String, Value>,
    name: &str,
    required: bool,
) -> Result<Option<String>, ShotError> {
    let field = format!("{at}.{name}");
    match fields.remove(name) {
        None | Some(Value::Null) if required => Err(shot_error(field, "required")),
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => {
            let s = s.trim().to_string();
            if s.is_empty() {
                return Err(shot_error(field, "empty"));
            }
            if s.chars().count() > SHOT_TEXT_MAX {
                return Err(shot_error(
                    field,
                    format!("longer than {SHOT_TEXT_MAX} characters"),
                ));
            }
            Ok(Some(s))
        }
        Some(_) => Err(shot_error(field, "must be a string")),
    }
}

fn check_image_url(field: &str, url: &str) -> Result<(), ShotError> {
    if url.len() > SHOT_URL_MAX {
        return Err(shot_error(
            field,
            format!("longer than {SHOT_URL_MAX} characters"),
        ));
    }
    let lower = url.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with('/') => Ok(()),
        _ => Err(shot_error(field, "must be an http(s) URL")),
    }
}

fn is_ratio(s: &str) -> bool {
    let Some((w, h)) = s.split_once(':') else {
        return false;
    };
    let ok = |p: &str| {
        !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) && p != "0"
    };
    ok(w) && ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shot_is_written_back_in_its_canonical_form() {
        let shots = canonical_shots(
            r#"{"shots":[{"aspect_ratio":"16:9","duration":5,"prompt":"  a fox  ",
                "image_url":"https://img.example/fox.png","seed":7}]}"#,
            10,
        )
        .expect("valid");
        assert_eq!(
            shots,
            vec![
                r#"{"aspect_ratio":"16:9","duration":5,"image_url":"https://img.example/fox.png","prompt":"a fox","seed":7}"#
            ]
        );
    }

    #[test]
    fn every_refusal_names_its_field() {
        let field = |p: &str| canonical_shots(p, 3).expect_err(p).field;
        assert_eq!(field("[]"), "payload");
        assert_eq!(field("{"), "payload");
        assert_eq!(field(r#"{"shots":[],"x":1}"#), "x");
        assert_eq!(field(r#"{"shots":[]}"#), "shots");
        assert_eq!(field(r#"{"shots":[1,2,3,4]}"#), "shots");
        assert_eq!(field(r#"{"shots":[3]}"#), "shots[0]");
        let one = |s: &str| {
            field(&format!(
                r#"{{"shots":[{{"prompt":"p","duration":5,"aspect_ratio":"16:9"}},{s}]}}"#
            ))
        };
        assert_eq!(
            one(r#"{"duration":5,"aspect_ratio":"16:9"}"#),
            "shots[1].prompt"
        );
        assert_eq!(
            one(r#"{"prompt":" ","duration":5,"aspect_ratio":"16:9"}"#),
            "shots[1].prompt"
        );
        assert_eq!(
            one(r#"{"prompt":"p","aspect_ratio":"16:9"}"#),
            "shots[1].duration"
        );
        assert_eq!(
            one(r#"{"prompt":"p","duration":"5","aspect_ratio":"16:9"}"#),
            "shots[1].duration"
        );
        assert_eq!(
            one(r#"{"prompt":"p","duration":-1,"aspect_ratio":"16:9"}"#),
            "shots[1].duration"
        );
        assert_eq!(
            one(r#"{"prompt":"p","duration":5,"aspect_ratio":"wide"}"#),
            "shots[1].aspect_ratio"
        );
        assert_eq!(
            one(r#"{"prompt":"p","duration":5,"aspect_ratio":"16:0"}"#),
            "shots[1].aspect_ratio"
        );
        assert_eq!(
            one(r#"{"prompt":"p","duration":5,"aspect_ratio":"16:9","seed":-2}"#),
            "shots[1].seed"
        );
        assert_eq!(
            one(r#"{"prompt":"p","duration":5,"aspect_ratio":"16:9","seed":1.5}"#),
            "shots[1].seed"
        );
        assert_eq!(
            one(
                r#"{"prompt":"p","duration":5,"aspect_ratio":"16:9","image_url":"file:///etc/passwd"}"#
            ),
            "shots[1].image_url"
        );
        assert_eq!(
            one(r#"{"prompt":"p","duration":5,"aspect_ratio":"16:9","fps":30}"#),
            "shots[1].fps"
        );
        assert_eq!(
            one(r#"{"prompt":"p","duration":5,"aspect_ratio":"16:9","negative_prompt":7}"#),
            "shots[1].negative_prompt"
        );
    }

    fn option(until: Option<Option<i64>>) -> RouteOption {
        RouteOption {
            handler: "h".into(),
            model: "m".into(),
            plan: Some(TargetUnit {
                task_type: "t".into(),
                stage: "main".into(),
                pool: "p".into(),
                spec: "{}".into(),
                state: "{}".into(),
                estimate: None,
                expected_ms: None,
            }),
            refused: until.map(|until| Refusal {
                reason: "r".into(),
                message: "m".into(),
                at: 0,
                until,
            }),
        }
    }

    #[test]
    fn a_refused_target_is_left_out_until_its_time_or_for_good() {
        let fine = option(None);
        let later = option(Some(Some(100)));
        let never = option(Some(None));
        assert!(fine.usable(0) && fine.open());
        assert!(!later.usable(99) && later.usable(100) && later.open());
        assert!(!never.usable(i64::MAX) && !never.open());
        let routing = UnitRouting {
            route: "clip".into(),
            options: vec![later.clone(), never.clone()],
            bound: None,
        };
        assert_eq!(routing.next_usable_at(50), Some(100));
        assert_eq!(routing.next_usable_at(100), None);
        let parsed = UnitRouting::parse(&routing.to_json()).expect("round trip");
        assert_eq!(parsed, routing);
    }
}
