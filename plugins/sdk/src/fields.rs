//! Payload validation for `plan`: every refusal names the field by its JSON path (`mode`,
//! `shots[2].prompt`) so the API caller's 422 says what to fix.

use serde_json::{Map, Value};

use crate::types::PlanError;

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

/// `s` if it has at most `max` characters (Unicode scalar values).
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

/// At most 60 characters of a value, for messages (payloads may hold megabytes of base64).
pub fn shorten(s: &str) -> String {
    if s.chars().count() <= 60 {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(60).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn refusals_name_the_field_path() {
        let map = payload(r#"{"a": 1, "s": "x", "blank": " "}"#).unwrap_or_default();
        assert_eq!(
            payload("[1]").map(|_| ()),
            Err(PlanError::whole(
                "the payload must be a JSON object, got a array"
            ))
        );
        assert_eq!(
            known_only(&map, "shots[0]", &["a", "s"]).map_err(|e| e.field),
            Err(Some("shots[0].blank".into()))
        );
        assert_eq!(
            opt_string(&map, "", "a").map_err(|e| e.field),
            Err(Some("a".into()))
        );
        assert_eq!(opt_string(&map, "", "none"), Ok(None));
        assert_eq!(required_text(&map, "", "s", 1), Ok("x"));
        assert!(required_text(&map, "", "blank", 9).is_err());
        assert!(max_chars("ééé", "", "s", 2).is_err());
        assert!(check_one_of("c", "f", &["a", "b"]).is_err());
        assert_eq!(type_name(&json!(null)), "null");
    }

    #[test]
    fn urls_need_a_scheme_and_a_host() {
        assert_eq!(check_url("https://x.test/a", "u"), Ok(()));
        for bad in ["ftp://x", "https://", "http:///a", "https://a b"] {
            assert!(check_url(bad, "u").is_err(), "{bad}");
        }
        assert_eq!(shorten(&"x".repeat(61)).chars().count(), 61);
    }
}
