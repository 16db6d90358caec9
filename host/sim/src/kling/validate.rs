//! Strict validation of create bodies with Kling's documented types. Every refusal is 400/1201
//! with a message that starts with the field's name, so a client log says what to fix.

use serde_json::{Map, Value};

use super::error::SimError;
use super::task::{Kind, Spec};

/// The longest `prompt` / `negative_prompt`, in characters.
pub const PROMPT_MAX_CHARS: usize = 2500;
/// The longest `voice_name` / `element_name`, in characters.
pub const NAME_MAX_CHARS: usize = 20;
/// The longest `element_description`, in characters.
pub const DESCRIPTION_MAX_CHARS: usize = 100;

/// A create request that passed validation.
#[derive(Debug, Clone)]
pub(crate) struct CreateRequest {
    pub external_task_id: Option<String>,
    pub callback_url: Option<String>,
    pub spec: Spec,
}

/// Parses and validates a create body for `kind`.
pub(crate) fn create_request(kind: Kind, body: &[u8]) -> Result<CreateRequest, SimError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| SimError::bad_request(format!("the request body is not valid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(SimError::bad_request(
            "the request body must be a JSON object",
        ));
    };
    let spec = match kind {
        Kind::Text2Video | Kind::Image2Video => video(kind, &obj)?,
        Kind::Voice => voice(&obj)?,
        Kind::Element => element(&obj)?,
    };
    let callback_url = opt_str(&obj, "callback_url")?
        .filter(|s| !s.is_empty())
        .map(|s| {
            if s.starts_with("http://") || s.starts_with("https://") {
                Ok(s.to_owned())
            } else {
                Err(SimError::param("callback_url", "must be an http(s) URL"))
            }
        })
        .transpose()?;
    let external_task_id = opt_str(&obj, "external_task_id")?
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    Ok(CreateRequest {
        external_task_id,
        callback_url,
        spec,
    })
}

fn video(kind: Kind, obj: &Map<String, Value>) -> Result<Spec, SimError> {
    let model_name = opt_str(obj, "model_name")?.unwrap_or("kling-v1");
    if !model_name.starts_with("kling-v") {
        return Err(SimError::param(
            "model_name",
            format!("unknown model {model_name:?} (expected e.g. kling-v1-6)"),
        ));
    }
    let prompt = opt_str(obj, "prompt")?.unwrap_or_default();
    if kind == Kind::Text2Video && prompt.trim().is_empty() {
        return Err(SimError::param("prompt", "is required"));
    }
    max_chars("prompt", prompt, PROMPT_MAX_CHARS)?;
    max_chars(
        "negative_prompt",
        opt_str(obj, "negative_prompt")?.unwrap_or_default(),
        PROMPT_MAX_CHARS,
    )?;
    match obj.get("cfg_scale") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.as_f64().is_some_and(|f| (0.0..=1.0).contains(&f)) => {}
        Some(_) => return Err(SimError::param("cfg_scale", "must be a number from 0 to 1")),
    }
    let mode = one_of(obj, "mode", &["std", "pro"])?.unwrap_or("std");
    if kind == Kind::Text2Video {
        one_of(obj, "aspect_ratio", &["16:9", "9:16", "1:1"])?;
    }
    one_of(obj, "sound", &["on", "off"])?;
    let duration = match obj.get("duration") {
        None | Some(Value::Null) => 5,
        Some(Value::String(s)) if s == "5" => 5,
        Some(Value::String(s)) if s == "10" => 10,
        Some(Value::String(s)) => {
            return Err(SimError::param(
                "duration",
                format!("must be \"5\" or \"10\" (got {s:?})"),
            ));
        }
        Some(other) => {
            return Err(SimError::param(
                "duration",
                format!(
                    "must be the string \"5\" or \"10\" (got the {} {other})",
                    type_name(other)
                ),
            ));
        }
    };
    if kind == Kind::Image2Video {
        let mut any = false;
        for field in ["image", "image_tail"] {
            if let Some(image) = opt_str(obj, field)?.filter(|s| !s.is_empty()) {
                if image.starts_with("data:") {
                    return Err(SimError::param(
                        field,
                        "must be a URL or raw base64 without a data: prefix",
                    ));
                }
                any = true;
            }
        }
        if !any {
            return Err(SimError::param("image", "image or image_tail is required"));
        }
    }
    Ok(Spec::Video {
        pro: mode == "pro",
        duration,
    })
}

fn voice(obj: &Map<String, Value>) -> Result<Spec, SimError> {
    let voice_name = required_name(obj, "voice_name", NAME_MAX_CHARS)?;
    let voice_url = opt_str(obj, "voice_url")?.filter(|s| !s.is_empty());
    let video_id = opt_str(obj, "video_id")?.filter(|s| !s.is_empty());
    if voice_url.is_none() && video_id.is_none() {
        return Err(SimError::param(
            "voice_url",
            "voice_url or video_id is required",
        ));
    }
    Ok(Spec::Voice { voice_name })
}

fn element(obj: &Map<String, Value>) -> Result<Spec, SimError> {
    let element_name = required_name(obj, "element_name", NAME_MAX_CHARS)?;
    let description = opt_str(obj, "element_description")?.unwrap_or_default();
    max_chars("element_description", description, DESCRIPTION_MAX_CHARS)?;
    let reference_type = one_of(obj, "reference_type", &["image_refer", "video_refer"])?
        .ok_or_else(|| {
            SimError::param("reference_type", "is required (image_refer or video_refer)")
        })?;
    if reference_type == "image_refer" {
        let list = obj
            .get("element_image_list")
            .and_then(Value::as_object)
            .ok_or_else(|| SimError::param("element_image_list", "is required for image_refer"))?;
        let frontal = opt_str(list, "frontal_image")
            .map_err(|_| SimError::param("element_image_list.frontal_image", "must be a string"))?;
        if frontal.is_none_or(str::is_empty) {
            return Err(SimError::param(
                "element_image_list.frontal_image",
                "is required",
            ));
        }
    } else {
        let videos = obj
            .get("element_video_list")
            .and_then(|l| l.get("refer_videos"))
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
            .ok_or_else(|| {
                SimError::param(
                    "element_video_list.refer_videos",
                    "is required for video_refer",
                )
            })?;
        if !videos.iter().all(|v| {
            v.get("video_url")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
        }) {
            return Err(SimError::param(
                "element_video_list.refer_videos",
                "every entry needs a video_url",
            ));
        }
    }
    let voice_id = opt_str(obj, "element_voice_id")?
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            SimError::param("element_voice_id", "is required (the cloned voice's id)")
        })?;
    Ok(Spec::Element {
        element_name,
        element_description: description.to_owned(),
        voice_id: voice_id.to_owned(),
    })
}

fn required_name(obj: &Map<String, Value>, field: &str, max: usize) -> Result<String, SimError> {
    let name = opt_str(obj, field)?.unwrap_or_default();
    if name.trim().is_empty() {
        return Err(SimError::param(field, "is required"));
    }
    max_chars(field, name, max)?;
    Ok(name.to_owned())
}

/// A string field, absent/null = `None`, any other type refused.
fn opt_str<'a>(obj: &'a Map<String, Value>, field: &str) -> Result<Option<&'a str>, SimError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(SimError::param(
            field,
            format!("must be a string (got a {})", type_name(other)),
        )),
    }
}

fn one_of<'a>(
    obj: &'a Map<String, Value>,
    field: &str,
    allowed: &[&str],
) -> Result<Option<&'a str>, SimError> {
    match opt_str(obj, field)? {
        None => Ok(None),
        Some(s) if allowed.contains(&s) => Ok(Some(s)),
        Some(s) => Err(SimError::param(
            field,
            format!("must be one of {} (got {s:?})", allowed.join(", ")),
        )),
    }
}

fn max_chars(field: &str, s: &str, max: usize) -> Result<(), SimError> {
    let n = s.chars().count();
    if n > max {
        return Err(SimError::param(
            field,
            format!("is {n} characters long; at most {max} are allowed"),
        ));
    }
    Ok(())
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
