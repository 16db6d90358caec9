//! Checks of the scalar fields. Each pushes its issues and returns the value when the task
//! needs it; JSON `null` is never valid (an `invalid_type` like any other wrong type).

use serde_json::{Value, json};

use super::PROMPT_TEXT_MAX_UTF16;
use super::issue::{Issue, at};
use crate::runway::model::Durations;

/// Largest `seed` (an unsigned 32-bit integer).
pub const SEED_MAX: u64 = 4_294_967_295;
/// `contentModeration.publicFigureThreshold` values.
const THRESHOLDS: [&str; 2] = ["auto", "low"];

/// A string, or an `invalid_type` issue.
pub(super) fn string<'a>(
    path: &[Value],
    value: &'a Value,
    issues: &mut Vec<Issue>,
) -> Option<&'a str> {
    match value {
        Value::String(s) => Some(s.as_str()),
        other => {
            issues.push(Issue::invalid_type(path.to_vec(), "string", Some(other)));
            None
        }
    }
}

/// Non-empty, at most 1000 UTF-16 code units (what JavaScript's `length` counts).
pub(super) fn prompt_text(path: &[Value], value: &Value, issues: &mut Vec<Issue>) {
    let Some(s) = string(path, value, issues) else {
        return;
    };
    if s.is_empty() {
        issues.push(Issue::too_small(path.to_vec(), "string", 1));
    } else if s.encode_utf16().count() > PROMPT_TEXT_MAX_UTF16 {
        issues.push(Issue::too_big(
            path.to_vec(),
            "string",
            PROMPT_TEXT_MAX_UTF16 as u64,
        ));
    }
}

/// One of the schema's ratios.
pub(super) fn ratio(path: &[Value], value: &Value, ratios: &[&str], issues: &mut Vec<Issue>) {
    if let Some(s) = string(path, value, issues)
        && !ratios.contains(&s)
    {
        let values = ratios.iter().map(|r| json!(r)).collect();
        issues.push(Issue::invalid_value(path.to_vec(), values));
    }
}

/// A JSON number with no fractional part (`5` and `5.0` alike, as in JavaScript).
fn integer(path: &[Value], value: &Value, issues: &mut Vec<Issue>) -> Option<i128> {
    let int = match value {
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
            // `as` saturates: a huge float still compares as out of range.
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i128)),
        _ => None,
    };
    if int.is_none() {
        let expected = if value.is_number() { "int" } else { "number" };
        issues.push(Issue::invalid_type(path.to_vec(), expected, Some(value)));
    }
    int
}

/// Seconds of video allowed by the schema.
pub(super) fn duration(
    path: &[Value],
    value: &Value,
    durations: Durations,
    issues: &mut Vec<Issue>,
) -> Option<u32> {
    let n = integer(path, value, issues)?;
    let issue = match durations {
        Durations::Range(lo, _) if n < i128::from(lo) => {
            Issue::too_small(path.to_vec(), "number", u64::from(lo))
        }
        Durations::Range(_, hi) if n > i128::from(hi) => {
            Issue::too_big(path.to_vec(), "number", u64::from(hi))
        }
        Durations::OneOf(set) if !set.iter().any(|d| i128::from(*d) == n) => {
            Issue::invalid_value(path.to_vec(), set.iter().map(|d| json!(d)).collect())
        }
        _ => return u32::try_from(n).ok(),
    };
    issues.push(issue);
    None
}

/// An integer in `0..=4294967295`.
pub(super) fn seed(path: &[Value], value: &Value, issues: &mut Vec<Issue>) {
    match integer(path, value, issues) {
        Some(n) if n < 0 => issues.push(Issue::too_small(path.to_vec(), "number", 0)),
        Some(n) if n > i128::from(SEED_MAX) => {
            issues.push(Issue::too_big(path.to_vec(), "number", SEED_MAX));
        }
        _ => {}
    }
}

/// `true` or `false`.
pub(super) fn boolean(path: &[Value], value: &Value, issues: &mut Vec<Issue>) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        other => {
            issues.push(Issue::invalid_type(path.to_vec(), "boolean", Some(other)));
            None
        }
    }
}

/// `{"publicFigureThreshold": "auto" | "low"}`, the key optional, no other key.
pub(super) fn content_moderation(path: &[Value], value: &Value, issues: &mut Vec<Issue>) {
    let Value::Object(obj) = value else {
        issues.push(Issue::invalid_type(path.to_vec(), "object", Some(value)));
        return;
    };
    let unknown: Vec<String> = obj
        .keys()
        .filter(|k| *k != "publicFigureThreshold")
        .cloned()
        .collect();
    if !unknown.is_empty() {
        issues.push(Issue::unrecognized_keys(path.to_vec(), unknown));
    }
    if let Some(v) = obj.get("publicFigureThreshold") {
        let inner = at(path, "publicFigureThreshold");
        if let Some(s) = string(&inner, v, issues)
            && !THRESHOLDS.contains(&s)
        {
            let values = THRESHOLDS.iter().map(|t| json!(t)).collect();
            issues.push(Issue::invalid_value(inner, values));
        }
    }
}
