//! Strict validation of create bodies, exactly per the contract's tables: the body is a union
//! discriminated by `model`; each model's schema is a closed object. Every problem found is
//! listed (400 `Validation of body failed` with `issues`), so a client log says everything to
//! fix at once. The simulator never fetches assets; it checks their form only.
//!
//! - `issue`: the [`Issue`] type and zod-like constructors.
//! - `fields`: the scalar fields (`promptText`, `ratio`, `duration`, `seed`, …).
//! - `image`: `promptImage` and the input-asset rules (HTTPS domain URL, `runway://`, data URI).

mod fields;
mod image;
mod issue;

pub use issue::Issue;

use serde_json::{Map, Value, json};

use super::error::ApiError;
use super::model::{Endpoint, Model, Schema, schema};

/// The longest `promptText`, in UTF-16 code units.
pub const PROMPT_TEXT_MAX_UTF16: usize = 1000;

/// A create that passed validation, reduced to what shapes the task and its price.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CreateRequest {
    pub endpoint: Endpoint,
    pub model: Model,
    /// Seconds of video (the schema's default when the body left it out).
    pub duration: u32,
    /// Veo 3.1 `audio` (changes the price).
    pub audio: bool,
}

impl CreateRequest {
    /// The most the task may cost: credits per second × seconds.
    pub(crate) fn credits(&self) -> u64 {
        self.model.credits_per_second(self.audio) * u64::from(self.duration)
    }
}

/// Parses and validates a create body for `endpoint`, in the contract's check order: content
/// type and JSON first (`{"error"}`), then the shape (`issues`).
pub(crate) fn create_request(
    endpoint: Endpoint,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<CreateRequest, ApiError> {
    if !is_json(content_type) {
        return Err(ApiError::bad_request(format!(
            "Content-Type must be application/json (got {})",
            content_type.map_or("none".to_owned(), |c| format!("{c:?}"))
        )));
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("Request body is not valid JSON: {e}")))?;
    let Value::Object(obj) = &value else {
        let issue = Issue::invalid_type(Vec::new(), "object", Some(&value));
        return Err(ApiError::validation(vec![issue]));
    };
    let schema = model_schema(endpoint, obj).map_err(ApiError::validation)?;
    let mut issues = Vec::new();
    let mut checked = Checked::default();
    for (name, required) in schema
        .required
        .iter()
        .map(|n| (*n, true))
        .chain(schema.optional.iter().map(|n| (*n, false)))
    {
        match obj.get(name) {
            None if required => issues.push(Issue::invalid_type(
                vec![json!(name)],
                expected_type(name),
                None,
            )),
            None => {}
            Some(v) => check_field(name, v, schema, &mut issues, &mut checked),
        }
    }
    let unknown: Vec<String> = obj
        .keys()
        .filter(|k| {
            k.as_str() != "model"
                && !schema.required.contains(&k.as_str())
                && !schema.optional.contains(&k.as_str())
        })
        .cloned()
        .collect();
    if !unknown.is_empty() {
        issues.push(Issue::unrecognized_keys(Vec::new(), unknown));
    }
    if !issues.is_empty() {
        return Err(ApiError::validation(issues));
    }
    Ok(CreateRequest {
        endpoint,
        model: schema.model,
        // A required duration was checked present; an optional one has a default.
        duration: checked.duration.or(schema.duration_default).unwrap_or(0),
        audio: checked.audio.unwrap_or(false),
    })
}

/// The `promptText` of a create body that passed [`create_request`], for `/_sim/jobs`.
pub(crate) fn prompt_text(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    value.get("promptText")?.as_str().map(str::to_owned)
}

/// `application/json`, with or without parameters (`; charset=utf-8`).
fn is_json(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|c| c.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// The schema `model` selects; a missing, mistyped or unknown model is the only issue worth
/// reporting (no schema to check the rest against), as a discriminated union does.
fn model_schema(
    endpoint: Endpoint,
    obj: &Map<String, Value>,
) -> Result<&'static Schema, Vec<Issue>> {
    let path = vec![json!("model")];
    match obj.get("model") {
        Some(Value::String(name)) => {
            schema(endpoint, name).ok_or_else(|| vec![Issue::unknown_model()])
        }
        None => Err(vec![
            Issue::invalid_type(path, "string", None),
            Issue::unknown_model(),
        ]),
        Some(other) => Err(vec![Issue::invalid_type(path, "string", Some(other))]),
    }
}

/// What the checks learned that the task needs.
#[derive(Default)]
struct Checked {
    duration: Option<u32>,
    audio: Option<bool>,
}

fn check_field(
    name: &str,
    value: &Value,
    schema: &Schema,
    issues: &mut Vec<Issue>,
    checked: &mut Checked,
) {
    let path = [json!(name)];
    match name {
        "promptImage" => image::prompt_image(value, schema, issues),
        "promptText" => fields::prompt_text(&path, value, issues),
        "negativePrompt" => {
            fields::string(&path, value, issues);
        }
        "ratio" => fields::ratio(&path, value, schema.ratios, issues),
        "duration" => checked.duration = fields::duration(&path, value, schema.durations, issues),
        "seed" => fields::seed(&path, value, issues),
        "contentModeration" => fields::content_moderation(&path, value, issues),
        "audio" => checked.audio = fields::boolean(&path, value, issues),
        // Every key of the schema tables is matched above.
        _ => {}
    }
}

/// The type named in the issue of a missing required field.
fn expected_type(name: &str) -> &'static str {
    match name {
        "duration" | "seed" => "number",
        "audio" => "boolean",
        "contentModeration" => "object",
        "promptImage" => "string | array",
        _ => "string",
    }
}
