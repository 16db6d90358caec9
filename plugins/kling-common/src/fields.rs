//! Payload validation helpers. Every refusal names the field by its JSON path (`mode`,
//! `shots[2].prompt`, `refer_images[0]`) so the API caller's 422 says what to fix.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use crate::types::PlanError;

/// Largest image Kling accepts (10 MB), for raw base64 images.
pub const IMAGE_MAX_BYTES: usize = 10 * 1024 * 1024;

/// `prefix.name`, or `name` at the top level.
pub fn path(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// The JSON type of a value, for messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Parse the payload text as a JSON object.
pub fn payload(text: &str) -> Result<Map<String, Value>, PlanError> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(PlanError::whole(format!(
            "the payload must be a JSON object, got a {}",
            type_name(&other)
        ))),
        Err(e) => Err(PlanError::whole(format!(
            "the payload is not valid JSON: {e}"
        ))),
    }
}

/// Refuse fields outside `allowed`.
pub fn known_only(
    map: &Map<String, Value>,
    prefix: &str,
    allowed: &[&str],
) -> Result<(), PlanError> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(unknown) => Err(PlanError::at(
            path(prefix, unknown),
            format!(
                "unknown field {unknown:?}; allowed here: {}",
                allowed.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// A string field; absent (or null) is `None`, another type is refused.
pub fn opt_string<'a>(
    map: &'a Map<String, Value>,
    prefix: &str,
    name: &str,
) -> Result<Option<&'a str>, PlanError> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(PlanError::at(
            path(prefix, name),
            format!("must be a string, got a {}", type_name(other)),
        )),
    }
}

/// A required, non-blank string of at most `max` characters.
pub fn required_text<'a>(
    map: &'a Map<String, Value>,
    prefix: &str,
    name: &str,
    max: usize,
) -> Result<&'a str, PlanError> {
    match opt_string(map, prefix, name)? {
        Some(s) if !s.trim().is_empty() => max_chars(s, prefix, name, max),
        _ => Err(PlanError::at(path(prefix, name), "is required")),
    }
}

/// `s` if it has at most `max` characters (Unicode scalar values, as Kling counts).
pub fn max_chars<'a>(
    s: &'a str,
    prefix: &str,
    name: &str,
    max: usize,
) -> Result<&'a str, PlanError> {
    let n = s.chars().count();
    if n > max {
        return Err(PlanError::at(
            path(prefix, name),
            format!("is {n} characters long; at most {max} are allowed"),
        ));
    }
    Ok(s)
}

/// A string from a fixed set.
pub fn check_one_of(value: &str, field: &str, allowed: &[&str]) -> Result<(), PlanError> {
    if allowed.contains(&value) {
        Ok(())
    } else {
        Err(PlanError::at(
            field,
            format!("must be one of {}, got {value:?}", allowed.join(", ")),
        ))
    }
}

/// An absolute http(s) URL with a host.
pub fn check_url(value: &str, field: &str) -> Result<(), PlanError> {
    let rest = value
        .strip_prefix("https://")
        .or_else(|| value.strip_prefix("http://"));
    match rest {
        Some(rest)
            if !rest.is_empty()
                && !rest.starts_with('/')
                && !value.chars().any(char::is_whitespace) =>
        {
            Ok(())
        }
        _ => Err(PlanError::at(
            field,
            format!("must be an http(s) URL, got {:?}", shorten(value)),
        )),
    }
}

/// An image as Kling takes it: an http(s) URL, or raw base64 without a `data:` prefix.
pub fn check_image(value: &str, field: &str) -> Result<(), PlanError> {
    if value.starts_with("data:") {
        return Err(PlanError::at(
            field,
            "must be a URL or raw base64 without a data: prefix (remove \"data:…;base64,\")",
        ));
    }
    if value.starts_with("http://") || value.starts_with("https://") {
        return check_url(value, field);
    }
    let decoded = STANDARD.decode(value.trim()).map_err(|_| {
        PlanError::at(
            field,
            format!(
                "must be an http(s) URL or raw base64, got {:?}",
                shorten(value)
            ),
        )
    })?;
    if decoded.is_empty() {
        return Err(PlanError::at(field, "is empty"));
    }
    if decoded.len() > IMAGE_MAX_BYTES {
        return Err(PlanError::at(
            field,
            format!(
                "is {} bytes; Kling accepts images up to {IMAGE_MAX_BYTES}",
                decoded.len()
            ),
        ));
    }
    Ok(())
}

/// At most 60 characters of a value, for messages (raw base64 can be megabytes).
pub fn shorten(s: &str) -> String {
    if s.chars().count() <= 60 {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(60).collect::<String>())
    }
}
