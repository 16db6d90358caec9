//! One shot of a payload checked against its model's fields ([`crate::models`]) and resolved
//! into fal's input: only the table's keys, defaults filled. Every refusal names the field by
//! its path (`shots[2].duration`, `shots[0].transitions[1].prompt`).

use serde_json::{Map, Value};
use slotd_sdk::PlanError;
use slotd_sdk::fields::{known_only, path, shorten, type_name};

use crate::models::{ASPECT_RATIOS, Fill, INGREDIENTS_MODES, Kind, Model, RESOLUTIONS};

/// Longest pikaframes video: the transitions together (seconds).
pub const FRAMES_MAX_SECS: u64 = 25;
/// Shortest transition (seconds; unverified at fal, the simulator's choice).
pub const TRANSITION_MIN_SECS: u64 = 1;
/// A transition's length when it does not say.
pub const TRANSITION_DEFAULT_SECS: u64 = 5;

/// fal's input for one shot of `model` at `prefix` (e.g. `shots[0]`).
pub fn resolve(model: Model, shot: &Value, prefix: &str) -> Result<Map<String, Value>, PlanError> {
    let Value::Object(shot) = shot else {
        return Err(PlanError::at(
            prefix,
            format!("must be an object, got a {}", type_name(shot)),
        ));
    };
    let names: Vec<&str> = model.fields().iter().map(|f| f.name).collect();
    known_only(shot, prefix, &names)?;
    let mut input = Map::new();
    for f in model.fields() {
        let at = path(prefix, f.name);
        let value = match shot.get(f.name) {
            // `null` is "not given" for a seed (random either way); refused elsewhere.
            Some(Value::Null) if f.kind == Kind::Seed => None,
            Some(Value::Null) => return Err(PlanError::at(at, "must not be null")),
            Some(v) => Some(check(f.kind, v, &at)?),
            None => match f.fill {
                Fill::Required => return Err(PlanError::at(at, "is required")),
                Fill::Omit => None,
                Fill::Text(s) => Some(Value::from(s)),
                Fill::Int(n) => Some(Value::from(n)),
            },
        };
        if let Some(v) = value {
            input.insert(f.name.to_string(), v);
        }
    }
    if model == Model::Frames {
        frames_rules(&mut input, prefix)?;
    }
    Ok(input)
}

/// A value of `kind`, as sent.
fn check(kind: Kind, v: &Value, at: &str) -> Result<Value, PlanError> {
    match kind {
        Kind::Prompt => prompt(v, at).map(Value::from),
        Kind::Text => text(v, at).map(Value::from),
        Kind::AspectRatio => one_of(v, at, &ASPECT_RATIOS),
        Kind::Resolution => one_of(v, at, &RESOLUTIONS),
        Kind::IngredientsMode => one_of(v, at, &INGREDIENTS_MODES),
        Kind::Duration => match v.as_u64() {
            Some(d @ (5 | 10)) => Ok(Value::from(d)),
            _ => Err(PlanError::at(
                at,
                format!("must be the integer 5 or 10 (seconds), got {}", show(v)),
            )),
        },
        Kind::Seed if v.is_i64() || v.is_u64() => Ok(v.clone()),
        Kind::Seed => Err(PlanError::at(
            at,
            format!("must be an integer or null, got {}", show(v)),
        )),
        Kind::ImageUrl => image(v, at).map(Value::from),
        Kind::ImageUrls { min, max } => images(v, at, min, max),
        // Checked for shape here; the count and total length in `frames_rules`.
        Kind::Transitions => transitions(v, at),
    }
}

fn text<'v>(v: &'v Value, at: &str) -> Result<&'v str, PlanError> {
    v.as_str()
        .ok_or_else(|| PlanError::at(at, format!("must be a string, got a {}", type_name(v))))
}

fn prompt<'v>(v: &'v Value, at: &str) -> Result<&'v str, PlanError> {
    let s = text(v, at)?;
    if s.trim().is_empty() {
        return Err(PlanError::at(at, "must not be empty"));
    }
    Ok(s)
}

fn one_of(v: &Value, at: &str, allowed: &[&str]) -> Result<Value, PlanError> {
    let s = text(v, at)?;
    if allowed.contains(&s) {
        Ok(Value::from(s))
    } else {
        Err(PlanError::at(
            at,
            format!(
                "must be one of {}, got {:?}",
                allowed.join(", "),
                shorten(s)
            ),
        ))
    }
}

/// An `https://` URL with a host and no whitespace, or a base64 `data:image/<type>;base64,…`
/// URI (fal fetches URLs itself; a URL it cannot fetch fails after queueing).
fn image<'v>(v: &'v Value, at: &str) -> Result<&'v str, PlanError> {
    let s = text(v, at)?;
    if let Some(rest) = s.strip_prefix("https://") {
        let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if !host.is_empty() && !s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Ok(s);
        }
    } else if let Some(rest) = s.strip_prefix("data:image/") {
        if let Some((subtype, data)) = rest.split_once(";base64,") {
            let base64 = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=');
            if !subtype.is_empty() && !data.is_empty() && data.chars().all(base64) {
                return Ok(s);
            }
        }
        return Err(PlanError::at(
            at,
            format!(
                "must be a base64 data:image/<type>;base64,… URI, got {:?}",
                shorten(s)
            ),
        ));
    }
    Err(PlanError::at(
        at,
        format!(
            "must be an https:// URL fal can fetch or a data:image/… URI, got {:?}",
            shorten(s)
        ),
    ))
}

fn images(v: &Value, at: &str, min: usize, max: usize) -> Result<Value, PlanError> {
    let Value::Array(list) = v else {
        return Err(PlanError::at(
            at,
            format!("must be a list of image URLs, got a {}", type_name(v)),
        ));
    };
    if list.len() < min || list.len() > max {
        return Err(PlanError::at(
            at,
            format!("must hold {min} to {max} images, got {}", list.len()),
        ));
    }
    for (i, item) in list.iter().enumerate() {
        image(item, &format!("{at}[{i}]"))?;
    }
    Ok(v.clone())
}

/// Each transition `{"duration": integer ≥ 1 (default 5), "prompt": string}`, the duration
/// filled in.
fn transitions(v: &Value, at: &str) -> Result<Value, PlanError> {
    let Value::Array(list) = v else {
        return Err(PlanError::at(
            at,
            format!("must be a list of transitions, got a {}", type_name(v)),
        ));
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let here = format!("{at}[{i}]");
        let Value::Object(t) = t else {
            return Err(PlanError::at(
                here,
                format!("must be an object, got a {}", type_name(t)),
            ));
        };
        known_only(t, &here, &["duration", "prompt"])?;
        let duration = match t.get("duration") {
            None => TRANSITION_DEFAULT_SECS,
            Some(d) => d
                .as_u64()
                .filter(|d| *d >= TRANSITION_MIN_SECS && d <= &FRAMES_MAX_SECS)
                .ok_or_else(|| {
                    PlanError::at(
                        path(&here, "duration"),
                        format!(
                            "must be an integer from {TRANSITION_MIN_SECS} to {FRAMES_MAX_SECS} \
                             (seconds), got {}",
                            show(d)
                        ),
                    )
                })?,
        };
        let mut resolved = Map::new();
        resolved.insert("duration".into(), Value::from(duration));
        if let Some(p) = t.get("prompt") {
            resolved.insert(
                "prompt".into(),
                Value::from(prompt(p, &path(&here, "prompt"))?),
            );
        }
        out.push(Value::Object(resolved));
    }
    Ok(Value::Array(out))
}

/// pikaframes: `transitions`, when sent, has one item per gap between keyframes and lasts at
/// most [`FRAMES_MAX_SECS`] in all.
fn frames_rules(input: &mut Map<String, Value>, prefix: &str) -> Result<(), PlanError> {
    let frames = input
        .get("image_urls")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let Some(Value::Array(transitions)) = input.get("transitions") else {
        return Ok(());
    };
    let at = path(prefix, "transitions");
    if transitions.len() + 1 != frames {
        return Err(PlanError::at(
            at,
            format!(
                "must hold one transition per gap between the {frames} image_urls ({}), got {}",
                frames.saturating_sub(1),
                transitions.len()
            ),
        ));
    }
    let total = frames_secs(input);
    if total > FRAMES_MAX_SECS {
        return Err(PlanError::at(
            at,
            format!("last {total} s together; at most {FRAMES_MAX_SECS} s are allowed"),
        ));
    }
    Ok(())
}

/// The length of a pikaframes video: its transitions, else 5 s per gap.
pub fn frames_secs(input: &Map<String, Value>) -> u64 {
    match input.get("transitions").and_then(Value::as_array) {
        Some(ts) => ts
            .iter()
            .map(|t| {
                t.get("duration")
                    .and_then(Value::as_u64)
                    .unwrap_or(TRANSITION_DEFAULT_SECS)
            })
            .sum(),
        None => {
            let frames = input
                .get("image_urls")
                .and_then(Value::as_array)
                .map_or(2, Vec::len);
            TRANSITION_DEFAULT_SECS * (frames.saturating_sub(1).max(1) as u64)
        }
    }
}

/// A value for a message (strings shortened: prompts may be long, data URIs huge).
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{:?}", shorten(s)),
        Value::Array(_) | Value::Object(_) => format!("a {}", type_name(v)),
        other => other.to_string(),
    }
}
