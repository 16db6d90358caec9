//! The `kling-video` handler's knowledge: the `video` payload (docs/interfaces.md), one unit per
//! shot whose spec is the fully resolved create body, which collection a spec goes to, how
//! long it is expected to take (poll hints and contract 1.3 stated durations), and what a
//! `succeed` task yields.

use serde_json::{Map, Value, json};

use crate::fields::{
    check_image, check_one_of, known_only, max_chars, opt_string, path, payload, required_text,
    type_name,
};
use crate::task::{Success, TaskObject, text};
use slotd_sdk::{ExpectedDuration, Outcome, PlanError, ProviderError};

pub const HANDLER: &str = "kling-video";
pub const VERSION: &str = "1.0.0";
/// The version the reload tests' second build (`kling-video-next`) declares.
pub const NEXT_VERSION: &str = "1.1.0";
pub const TASK_TYPE: &str = "video";
pub const STAGE: &str = "video";
pub const POOL: &str = "kling:video";
/// 18 of the seed account's 20 concurrent jobs; the avatar pool takes the other 2.
pub const DEFAULT_SLOTS: u32 = 18;

pub const TEXT2VIDEO: &str = "/v1/videos/text2video";
pub const IMAGE2VIDEO: &str = "/v1/videos/image2video";
/// Largest `pageSize` of the video lists.
pub const PAGE_SIZE_MAX: u32 = 500;

/// The models KLING_API.md documents for the legacy generation.
pub const MODELS: &[&str] = &[
    "kling-v1",
    "kling-v1-6",
    "kling-v2-master",
    "kling-v2-1-master",
    "kling-v2-5-turbo",
    "kling-v2-6",
    "kling-v3",
];
pub const MODEL_DEFAULT: &str = "kling-v1";
pub const PROMPT_MAX_CHARS: usize = 2500;

/// Fields a task or a shot may set; a shot's value wins over the task's.
const SETTINGS: &[&str] = &[
    "model_name",
    "mode",
    "duration",
    "aspect_ratio",
    "negative_prompt",
    "cfg_scale",
    "sound",
];
const SHOT_ONLY: &[&str] = &["prompt", "image", "image_tail"];

/// Validate a `video` payload; one spec (resolved create body) per shot.
pub fn plan(task_type: &str, text: &str) -> Result<Vec<String>, PlanError> {
    if task_type != TASK_TYPE {
        return Err(PlanError::whole(format!(
            "{HANDLER} serves task type {TASK_TYPE:?}, not {task_type:?}"
        )));
    }
    let task = payload(text)?;
    let mut allowed = SETTINGS.to_vec();
    allowed.push("shots");
    known_only(&task, "", &allowed)?;
    let defaults = settings(&task, "")?;
    let shots = match task.get("shots") {
        Some(Value::Array(shots)) if !shots.is_empty() => shots,
        Some(Value::Array(_)) => return Err(PlanError::at("shots", "needs at least one shot")),
        Some(other) => {
            return Err(PlanError::at(
                "shots",
                format!("must be an array of shots, got a {}", type_name(other)),
            ));
        }
        None => return Err(PlanError::at("shots", "is required (a list of shots)")),
    };
    shots
        .iter()
        .enumerate()
        .map(|(i, shot)| shot_spec(&defaults, shot, &format!("shots[{i}]")))
        .collect()
}

/// The validated settings of one level (task or shot), only those present.
fn settings(map: &Map<String, Value>, prefix: &str) -> Result<Map<String, Value>, PlanError> {
    let mut out = Map::new();
    if let Some(model) = opt_string(map, prefix, "model_name")? {
        check_one_of(model, &path(prefix, "model_name"), MODELS)?;
        out.insert("model_name".into(), json!(model));
    }
    if let Some(mode) = opt_string(map, prefix, "mode")? {
        check_one_of(mode, &path(prefix, "mode"), &["std", "pro"])?;
        out.insert("mode".into(), json!(mode));
    }
    match map.get("duration") {
        None | Some(Value::Null) => {}
        Some(Value::String(d)) => {
            check_one_of(d, &path(prefix, "duration"), &["5", "10"])?;
            out.insert("duration".into(), json!(d));
        }
        Some(other) => {
            return Err(PlanError::at(
                path(prefix, "duration"),
                format!(
                    "must be the string \"5\" or \"10\", got the {} {other}",
                    type_name(other)
                ),
            ));
        }
    }
    if let Some(ratio) = opt_string(map, prefix, "aspect_ratio")? {
        check_one_of(
            ratio,
            &path(prefix, "aspect_ratio"),
            &["16:9", "9:16", "1:1"],
        )?;
        out.insert("aspect_ratio".into(), json!(ratio));
    }
    if let Some(negative) = opt_string(map, prefix, "negative_prompt")? {
        max_chars(negative, prefix, "negative_prompt", PROMPT_MAX_CHARS)?;
        out.insert("negative_prompt".into(), json!(negative));
    }
    match map.get("cfg_scale") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.as_f64().is_some_and(|f| (0.0..=1.0).contains(&f)) => {
            out.insert("cfg_scale".into(), Value::Number(n.clone()));
        }
        Some(other) => {
            return Err(PlanError::at(
                path(prefix, "cfg_scale"),
                format!("must be a number from 0 to 1, got {other}"),
            ));
        }
    }
    if let Some(sound) = opt_string(map, prefix, "sound")? {
        check_one_of(sound, &path(prefix, "sound"), &["on", "off"])?;
        out.insert("sound".into(), json!(sound));
    }
    Ok(out)
}

/// One payload shot's spec (the resolved create body), `defaults` being the task's settings.
pub(crate) fn shot_spec(
    defaults: &Map<String, Value>,
    shot: &Value,
    prefix: &str,
) -> Result<String, PlanError> {
    let Value::Object(shot) = shot else {
        return Err(PlanError::at(
            prefix,
            format!("must be an object with a prompt, got a {}", type_name(shot)),
        ));
    };
    let mut allowed = SETTINGS.to_vec();
    allowed.extend_from_slice(SHOT_ONLY);
    known_only(shot, prefix, &allowed)?;
    let mut body = defaults.clone();
    body.extend(settings(shot, prefix)?);
    let prompt = required_text(shot, prefix, "prompt", PROMPT_MAX_CHARS)?;
    body.insert("prompt".into(), json!(prompt));
    let mut image = false;
    for field in ["image", "image_tail"] {
        if let Some(value) = opt_string(shot, prefix, field)? {
            check_image(value, &path(prefix, field))?;
            body.insert(field.into(), json!(value));
            image = true;
        }
    }
    body.entry("model_name").or_insert(json!(MODEL_DEFAULT));
    body.entry("mode").or_insert(json!("std"));
    body.entry("duration").or_insert(json!("5"));
    if image {
        // Image-to-video ignores it; sending it only invites a refusal.
        body.remove("aspect_ratio");
    } else {
        body.entry("aspect_ratio").or_insert(json!("16:9"));
    }
    Ok(Value::Object(body).to_string())
}

/// The create body a unit's spec holds, and its collection (`image2video` when it has an
/// image).
pub fn job_of(spec: &str) -> Result<(&'static str, Value), String> {
    let body: Value =
        serde_json::from_str(spec).map_err(|e| format!("unit spec is not JSON: {e}"))?;
    if !body.is_object() {
        return Err("unit spec is not a JSON object".into());
    }
    let image = body.get("image").is_some() || body.get("image_tail").is_some();
    Ok((if image { IMAGE2VIDEO } else { TEXT2VIDEO }, body))
}

/// Expected duration in seconds (KLING_API.md "How long things take").
pub fn expected_secs(body: &Value) -> (u64, u64) {
    let pro = body.get("mode").and_then(Value::as_str) == Some("pro");
    let long = body.get("duration").and_then(Value::as_str) == Some("10");
    if pro || long { (60, 300) } else { (30, 120) }
}

/// What a shot is expected to take (contract 1.3 `provider.durations`), from its create body:
/// in the [`expected_secs`] range, the median halfway and the 95th percentile near the top
/// (std 5 s clips 75 s and 115.5 s, pro or 10 s clips 180 s and 288 s; the bundled simulator
/// draws uniformly in the range, with 1 % of jobs in a 10–15 min tail), in milliseconds times
/// `scale` (`expected_duration_scale`). `None` for a spec that is not a create body.
pub fn expected_duration(spec: &str, scale: f64) -> Option<ExpectedDuration> {
    let (_, body) = job_of(spec).ok()?;
    let (lo, hi) = expected_secs(&body);
    let (lo, hi) = (lo as f64, hi as f64);
    // Rounded to the nearest millisecond (a scale like 0.1 is inexact in binary).
    let ms = |secs: f64| (secs * 1000.0 * scale).round() as u64;
    let p50 = ms(lo + (hi - lo) * 0.5).max(1);
    let p95 = ms(lo + (hi - lo) * 0.95).max(p50);
    Some(ExpectedDuration {
        p50_ms: p50,
        p95_ms: p95,
    })
}

/// `succeed` → `succeeded({"video_url", "duration", "video_id", "provider_task_id"})`.
pub fn success(task: &TaskObject) -> Success {
    let video = task.raw.pointer("/task_result/videos/0");
    let url = video.and_then(|v| text(v.get("url"))).ok_or_else(|| {
        ProviderError::new(
            Some("malformed"),
            format!(
                "task {} succeeded without task_result.videos[0].url",
                task.task_id
            ),
        )
    })?;
    let result = json!({
        "video_url": url,
        "duration": video.and_then(|v| text(v.get("duration"))),
        "video_id": video.and_then(|v| text(v.get("id"))),
        "provider_task_id": task.task_id,
    });
    Ok((Outcome::Succeeded(result.to_string()), None))
}

/// The artifact of a succeeded unit: its video URL.
pub fn artifact_url(result: Option<&str>) -> Result<String, String> {
    let result = result.ok_or("the unit has no result to finalize")?;
    let value: Value =
        serde_json::from_str(result).map_err(|e| format!("the unit result is not JSON: {e}"))?;
    text(value.get("video_url")).ok_or_else(|| "the unit result has no video_url".to_string())
}
