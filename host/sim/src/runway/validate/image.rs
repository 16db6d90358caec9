//! `promptImage` and the input-asset rules of RUNWAY_API.md ("Input assets"): one string, or
//! `[{uri, position}]` with the positions the model allows; each string is an HTTPS URL on a
//! domain (at most 2048 characters), a `runway://` upload URI, or a base64 data URI of a JPEG,
//! PNG or WebP under 5 MB. Only the form is checked: the simulator fetches nothing. Asset
//! issues are `custom` with Runway's own reasons ("Only HTTPS URLs are allowed", …).

use std::collections::HashSet;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::fields::string;
use super::issue::{Issue, at};
use crate::runway::model::Schema;

/// Longest image URL.
pub const URL_MAX_CHARS: usize = 2048;
/// A data URI must be shorter than this, whole (5 MB).
pub const DATA_URI_MAX_BYTES: usize = 5 * 1024 * 1024;
/// Media types a data URI may carry.
const IMAGE_TYPES: [&str; 3] = ["image/jpeg", "image/png", "image/webp"];

pub(super) fn prompt_image(value: &Value, schema: &Schema, issues: &mut Vec<Issue>) {
    let path = [json!("promptImage")];
    match value {
        Value::String(s) => asset(&path, s, issues),
        Value::Array(items) => frames(&path, items, schema, issues),
        other => issues.push(Issue::invalid_type(
            path.to_vec(),
            "string | array",
            Some(other),
        )),
    }
}

/// `[{uri, position}]`: one `first` (and, where allowed, one `last`; never `last` alone).
fn frames(path: &[Value], items: &[Value], schema: &Schema, issues: &mut Vec<Issue>) {
    let max = if schema.last_frame { 2 } else { 1 };
    if items.is_empty() {
        issues.push(Issue::too_small(path.to_vec(), "array", 1));
    } else if items.len() > max {
        issues.push(Issue::too_big(path.to_vec(), "array", max as u64));
    }
    let allowed: &[&str] = if schema.last_frame {
        &["first", "last"]
    } else {
        &["first"]
    };
    let mut seen = HashSet::new();
    let mut repeated = false;
    for (i, item) in items.iter().enumerate() {
        let item_path = at(path, i);
        let Value::Object(obj) = item else {
            issues.push(Issue::invalid_type(item_path, "object", Some(item)));
            continue;
        };
        for key in ["uri", "position"] {
            if !obj.contains_key(key) {
                issues.push(Issue::invalid_type(at(&item_path, key), "string", None));
            }
        }
        if let Some(uri) = obj.get("uri") {
            let uri_path = at(&item_path, "uri");
            if let Some(s) = string(&uri_path, uri, issues) {
                asset(&uri_path, s, issues);
            }
        }
        if let Some(position) = obj.get("position") {
            let pos_path = at(&item_path, "position");
            if let Some(p) = string(&pos_path, position, issues) {
                if !allowed.contains(&p) {
                    let values = allowed.iter().map(|a| json!(a)).collect();
                    issues.push(Issue::invalid_value(pos_path, values));
                } else {
                    repeated |= !seen.insert(p.to_owned());
                }
            }
        }
        let unknown: Vec<String> = obj
            .keys()
            .filter(|k| *k != "uri" && *k != "position")
            .cloned()
            .collect();
        if !unknown.is_empty() {
            issues.push(Issue::unrecognized_keys(item_path, unknown));
        }
    }
    if repeated {
        issues.push(Issue::custom(
            path.to_vec(),
            "Each position may appear only once",
        ));
    }
    if seen.contains("last") && !seen.contains("first") {
        issues.push(Issue::custom(
            path.to_vec(),
            "A last frame requires a first frame",
        ));
    }
}

/// The form of one asset reference.
fn asset(path: &[Value], s: &str, issues: &mut Vec<Issue>) {
    let problem = if s.is_empty() {
        issues.push(Issue::too_small(path.to_vec(), "string", 1));
        return;
    } else if let Some(rest) = s.strip_prefix("data:") {
        data_uri(s.len(), rest)
    } else if let Some(rest) = s.strip_prefix("runway://") {
        rest.is_empty().then_some("Invalid Runway upload URI")
    } else {
        url_problem(s)
    };
    if let Some(message) = problem {
        issues.push(Issue::custom(path.to_vec(), message));
    }
}

fn url_problem(s: &str) -> Option<&'static str> {
    if s.chars().count() > URL_MAX_CHARS {
        return Some("URLs must be at most 2048 characters long");
    }
    let Ok(url) = url::Url::parse(s) else {
        return Some("Invalid URL");
    };
    if url.scheme() != "https" {
        return Some("Only HTTPS URLs are allowed");
    }
    match url.host() {
        Some(url::Host::Domain(_)) => None,
        _ => Some("URLs must be hosted on a domain"),
    }
}

/// `data:<image type>;base64,<payload>` (after `data:`), the whole URI under 5 MB.
fn data_uri(total_len: usize, rest: &str) -> Option<&'static str> {
    if total_len >= DATA_URI_MAX_BYTES {
        return Some("Data URIs must be smaller than 5 MB");
    }
    let Some((meta, payload)) = rest.split_once(',') else {
        return Some("Invalid data URI");
    };
    let Some(media_type) = meta.strip_suffix(";base64") else {
        return Some("Invalid data URI");
    };
    if !IMAGE_TYPES.contains(&media_type.to_ascii_lowercase().as_str()) {
        return Some("Unsupported asset type");
    }
    if payload.is_empty() || STANDARD.decode(payload).is_err() {
        return Some("Invalid data URI");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(s: &str) -> Option<String> {
        let mut issues = Vec::new();
        asset(&[json!("promptImage")], s, &mut issues);
        issues.first().map(|i| i.message.clone())
    }

    #[test]
    fn asset_forms() {
        assert_eq!(problem("https://example.com/a.png"), None);
        assert_eq!(problem("runway://upload/abc"), None);
        assert_eq!(problem("data:image/png;base64,iVBORw0KGgo="), None);
        let cases = [
            ("http://example.com/a.png", "Only HTTPS URLs are allowed"),
            (
                "https://192.168.1.4/a.png",
                "URLs must be hosted on a domain",
            ),
            ("https://[::1]/a.png", "URLs must be hosted on a domain"),
            ("example.com/a.png", "Invalid URL"),
            ("data:image/gif;base64,R0lGOD==", "Unsupported asset type"),
            ("data:image/png,raw", "Invalid data URI"),
            ("data:image/png;base64,@@@", "Invalid data URI"),
            ("runway://", "Invalid Runway upload URI"),
        ];
        for (input, want) in cases {
            assert_eq!(problem(input).as_deref(), Some(want), "{input}");
        }
        let long = format!("https://example.com/{}", "a".repeat(URL_MAX_CHARS));
        assert!(problem(&long).is_some_and(|m| m.contains("2048")));
    }
}
