//! The Pika input schemas of FAL_API.md "Pika request bodies", as the fal simulator checks a
//! request when a runner picks it up: a body that breaks them completes with a 422 result whose
//! `detail` lists each problem Pydantic-v2 style (`loc`, `msg`, `type`, `input`). Unknown keys
//! are ignored and reported separately (`extra`), so the simulator can count them or, with a
//! flag, refuse them as `extra_forbidden`.

use serde::Serialize;
use serde_json::{Map, Value, json};

/// One problem with a body, as fal's model errors list them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Detail {
    pub loc: Vec<Value>,
    pub msg: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
}

impl Detail {
    fn at(loc: &[&str], kind: &str, msg: impl Into<String>, input: Option<&Value>) -> Detail {
        Detail {
            loc: std::iter::once("body")
                .chain(loc.iter().copied())
                .map(|s| s.parse::<u64>().map_or_else(|_| json!(s), |i| json!(i)))
                .collect(),
            msg: msg.into(),
            kind: kind.to_string(),
            input: input.cloned(),
        }
    }
}

/// Which Pika schema a model id has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schema {
    /// v2.2 text-to-video: `prompt`; `aspect_ratio`, `resolution`, `duration` 5 or 10.
    TextToVideo,
    /// v2.2 image-to-video: `image_url`, `prompt`.
    ImageToVideo,
    /// v2.2 pikascenes: `image_urls` (1–5), `prompt`, `ingredients_mode`.
    Scenes,
    /// v2.2 pikaframes: 2–5 `image_urls` (keyframes), optional `transitions`.
    Frames,
    /// v2.1 and v2 turbo text-to-video.
    TextToVideoOlder,
    /// v2.1 and v2 turbo image-to-video.
    ImageToVideoOlder,
}

/// The Pika endpoints the simulator serves, with their schemas.
pub const MODELS: &[(&str, Schema)] = &[
    ("fal-ai/pika/v2.2/text-to-video", Schema::TextToVideo),
    ("fal-ai/pika/v2.2/image-to-video", Schema::ImageToVideo),
    ("fal-ai/pika/v2.2/pikascenes", Schema::Scenes),
    ("fal-ai/pika/v2.2/pikaframes", Schema::Frames),
    ("fal-ai/pika/v2.1/text-to-video", Schema::TextToVideoOlder),
    (
        "fal-ai/pika/v2/turbo/text-to-video",
        Schema::TextToVideoOlder,
    ),
    ("fal-ai/pika/v2.1/image-to-video", Schema::ImageToVideoOlder),
    (
        "fal-ai/pika/v2/turbo/image-to-video",
        Schema::ImageToVideoOlder,
    ),
];

/// The schema of `model`, if the simulator serves it.
pub fn schema_of(model: &str) -> Option<Schema> {
    MODELS.iter().find(|(m, _)| *m == model).map(|(_, s)| *s)
}

const ASPECT_RATIOS: &[&str] = &["16:9", "9:16", "1:1", "4:5", "5:4", "3:2", "2:3"];
const RESOLUTIONS: &[&str] = &["720p", "1080p"];
const INGREDIENTS: &[&str] = &["precise", "creative"];
/// Pikaframes: the transitions' durations together.
const FRAMES_TOTAL_MAX_S: i64 = 25;

/// What checking a body found: the problems (empty: valid) and the keys it ignored.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checked {
    pub problems: Vec<Detail>,
    pub extra: Vec<String>,
}

impl Checked {
    /// `{"detail": [...]}`, the body of the 422 result.
    pub fn detail_body(&self) -> Value {
        json!({ "detail": self.problems })
    }
}

/// Check `body` against `schema`.
pub fn check(schema: Schema, body: &Value) -> Checked {
    let mut c = Checked::default();
    let Some(obj) = body.as_object() else {
        c.problems.push(Detail::at(
            &[],
            "model_attributes_type",
            "Input should be a valid dictionary or object to extract fields from",
            Some(body),
        ));
        return c;
    };
    let known: &[&str] = match schema {
        Schema::TextToVideo | Schema::TextToVideoOlder => &[
            "prompt",
            "negative_prompt",
            "aspect_ratio",
            "resolution",
            "duration",
            "seed",
        ],
        Schema::ImageToVideo | Schema::ImageToVideoOlder => &[
            "image_url",
            "prompt",
            "negative_prompt",
            "resolution",
            "duration",
            "seed",
        ],
        Schema::Scenes => &[
            "image_urls",
            "prompt",
            "negative_prompt",
            "aspect_ratio",
            "resolution",
            "duration",
            "ingredients_mode",
            "seed",
        ],
        Schema::Frames => &[
            "image_urls",
            "prompt",
            "negative_prompt",
            "resolution",
            "transitions",
            "seed",
        ],
    };
    c.extra = obj
        .keys()
        .filter(|k| !known.contains(&k.as_str()))
        .cloned()
        .collect();
    let p = &mut c.problems;
    let prompt_required = schema != Schema::Frames;
    text(p, obj, "prompt", prompt_required, true);
    text(p, obj, "negative_prompt", false, false);
    one_of(p, obj, "resolution", RESOLUTIONS);
    optional_int(p, obj, "seed", true);
    match schema {
        Schema::TextToVideo | Schema::TextToVideoOlder => {
            one_of(p, obj, "aspect_ratio", ASPECT_RATIOS);
            duration(p, obj);
        }
        Schema::ImageToVideo | Schema::ImageToVideoOlder => {
            url(p, obj, "image_url", &["image_url"]);
            duration(p, obj);
        }
        Schema::Scenes => {
            one_of(p, obj, "aspect_ratio", ASPECT_RATIOS);
            one_of(p, obj, "ingredients_mode", INGREDIENTS);
            duration(p, obj);
            urls(p, obj, 1, 5);
        }
        Schema::Frames => {
            let n = urls(p, obj, 2, 5);
            transitions(p, obj, n);
        }
    }
    c
}

fn missing(p: &mut Vec<Detail>, obj: &Map<String, Value>, field: &str) {
    p.push(Detail::at(
        &[field],
        "missing",
        "Field required",
        Some(&Value::Object(obj.clone())),
    ));
}

fn text(
    p: &mut Vec<Detail>,
    obj: &Map<String, Value>,
    field: &str,
    required: bool,
    nonempty: bool,
) {
    match obj.get(field) {
        None if required => missing(p, obj, field),
        None => {}
        Some(Value::String(s)) if nonempty && s.trim().is_empty() => p.push(Detail::at(
            &[field],
            "string_too_short",
            "String should have at least 1 character",
            obj.get(field),
        )),
        Some(Value::String(_)) => {}
        Some(v) => p.push(Detail::at(
            &[field],
            "string_type",
            "Input should be a valid string",
            Some(v),
        )),
    }
}

fn one_of(p: &mut Vec<Detail>, obj: &Map<String, Value>, field: &str, allowed: &[&str]) {
    let Some(v) = obj.get(field) else { return };
    if v.as_str().is_some_and(|s| allowed.contains(&s)) {
        return;
    }
    let list: Vec<String> = allowed.iter().map(|a| format!("'{a}'")).collect();
    p.push(Detail::at(
        &[field],
        "literal_error",
        format!("Input should be {}", list.join(", ")),
        Some(v),
    ));
}

/// An integer (a float such as `5.0` is not one), `null` allowed where `nullable`.
fn optional_int(p: &mut Vec<Detail>, obj: &Map<String, Value>, field: &str, nullable: bool) {
    match obj.get(field) {
        None => {}
        Some(Value::Null) if nullable => {}
        Some(v) if v.as_i64().is_some() => {}
        Some(v) => p.push(Detail::at(
            &[field],
            "int_type",
            "Input should be a valid integer",
            Some(v),
        )),
    }
}

/// `duration`: a JSON integer, 5 or 10 (FAL_API.md: v2.2 exactly; older models sent the same).
fn duration(p: &mut Vec<Detail>, obj: &Map<String, Value>) {
    let Some(v) = obj.get("duration") else { return };
    match v.as_i64() {
        Some(5 | 10) => {}
        Some(_) => p.push(Detail::at(
            &["duration"],
            "literal_error",
            "Input should be 5 or 10",
            Some(v),
        )),
        None => p.push(Detail::at(
            &["duration"],
            "int_type",
            "Input should be a valid integer",
            Some(v),
        )),
    }
}

/// A URL fal could fetch: `http(s)://…` or a `data:image/…;base64,…` URI.
fn fetchable(s: &str) -> bool {
    let web = (s.starts_with("https://") || s.starts_with("http://"))
        && url::Url::parse(s).is_ok_and(|u| u.host_str().is_some());
    web || (s.starts_with("data:image/") && s.contains(";base64,"))
}

fn url(p: &mut Vec<Detail>, obj: &Map<String, Value>, field: &str, loc: &[&str]) {
    match obj.get(field) {
        None => missing(p, obj, field),
        Some(Value::String(s)) if fetchable(s) => {}
        Some(v @ Value::String(_)) => p.push(Detail::at(
            loc,
            "url_parsing",
            "Input should be a valid URL",
            Some(v),
        )),
        Some(v) => p.push(Detail::at(
            loc,
            "string_type",
            "Input should be a valid string",
            Some(v),
        )),
    }
}

/// `image_urls`: a list of `min..=max` URLs; returns how many there are (0 when unusable).
fn urls(p: &mut Vec<Detail>, obj: &Map<String, Value>, min: usize, max: usize) -> usize {
    let Some(v) = obj.get("image_urls") else {
        missing(p, obj, "image_urls");
        return 0;
    };
    let Some(list) = v.as_array() else {
        p.push(Detail::at(
            &["image_urls"],
            "list_type",
            "Input should be a valid list",
            Some(v),
        ));
        return 0;
    };
    if list.len() < min {
        p.push(Detail::at(
            &["image_urls"],
            "too_short",
            format!(
                "List should have at least {min} items after validation, not {}",
                list.len()
            ),
            Some(v),
        ));
    } else if list.len() > max {
        p.push(Detail::at(
            &["image_urls"],
            "too_long",
            format!(
                "List should have at most {max} items after validation, not {}",
                list.len()
            ),
            Some(v),
        ));
    }
    for (i, item) in list.iter().enumerate() {
        let index = i.to_string();
        let loc = ["image_urls", index.as_str()];
        match item.as_str() {
            Some(s) if fetchable(s) => {}
            Some(_) => p.push(Detail::at(
                &loc,
                "url_parsing",
                "Input should be a valid URL",
                Some(item),
            )),
            None => p.push(Detail::at(
                &loc,
                "string_type",
                "Input should be a valid string",
                Some(item),
            )),
        }
    }
    list.len()
}

/// Pikaframes' `transitions`: exactly one fewer than the keyframes, each `{duration ≥ 1,
/// prompt}`, the durations together at most 25 s.
fn transitions(p: &mut Vec<Detail>, obj: &Map<String, Value>, frames: usize) {
    let Some(v) = obj.get("transitions") else {
        return;
    };
    let Some(list) = v.as_array() else {
        p.push(Detail::at(
            &["transitions"],
            "list_type",
            "Input should be a valid list",
            Some(v),
        ));
        return;
    };
    if frames >= 2 && list.len() != frames - 1 {
        p.push(Detail::at(
            &["transitions"],
            "value_error",
            format!(
                "Value error, transitions must have exactly {} items (one per gap between {frames} keyframes), not {}",
                frames - 1,
                list.len()
            ),
            Some(v),
        ));
    }
    let mut total = 0i64;
    for (i, t) in list.iter().enumerate() {
        let index = i.to_string();
        let Some(o) = t.as_object() else {
            p.push(Detail::at(
                &["transitions", &index],
                "model_type",
                "Input should be a valid dictionary",
                Some(t),
            ));
            continue;
        };
        let d = o.get("duration").map_or(Some(5), Value::as_i64);
        match d {
            Some(d) if d >= 1 => total += d,
            _ => p.push(Detail::at(
                &["transitions", &index, "duration"],
                "int_type",
                "Input should be a valid integer of at least 1",
                o.get("duration"),
            )),
        }
        if let Some(pr) = o.get("prompt")
            && !pr.is_string()
        {
            p.push(Detail::at(
                &["transitions", &index, "prompt"],
                "string_type",
                "Input should be a valid string",
                Some(pr),
            ));
        }
    }
    if total > FRAMES_TOTAL_MAX_S {
        p.push(Detail::at(
            &["transitions"],
            "value_error",
            format!("Value error, the transitions last {total} s together; at most {FRAMES_TOTAL_MAX_S} s"),
            Some(v),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(c: &Checked) -> Vec<(String, String)> {
        c.problems
            .iter()
            .map(|d| {
                let loc: Vec<String> = d
                    .loc
                    .iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                    .collect();
                (loc.join("."), d.kind.clone())
            })
            .collect()
    }

    #[test]
    fn a_valid_text_to_video_body_passes_and_unknown_keys_are_only_reported() {
        let c = check(
            Schema::TextToVideo,
            &json!({"prompt": "a fox", "duration": 10, "resolution": "1080p",
                    "aspect_ratio": "9:16", "seed": null, "style": "anime"}),
        );
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        assert_eq!(c.extra, ["style"]);
    }

    #[test]
    fn each_problem_is_named_by_its_field_and_type() {
        let c = check(
            Schema::TextToVideo,
            &json!({"duration": 5.0, "resolution": "4k", "aspect_ratio": "21:9", "seed": "7"}),
        );
        assert_eq!(
            types(&c),
            [
                ("body.prompt".to_string(), "missing".to_string()),
                ("body.resolution".into(), "literal_error".into()),
                ("body.seed".into(), "int_type".into()),
                ("body.aspect_ratio".into(), "literal_error".into()),
                ("body.duration".into(), "int_type".into()),
            ]
        );
        let body = c.detail_body();
        assert_eq!(body["detail"][0]["loc"], json!(["body", "prompt"]));
        assert_eq!(body["detail"][1]["input"], "4k");
        let c = check(Schema::TextToVideo, &json!({"prompt": " ", "duration": 7}));
        assert_eq!(
            types(&c),
            [
                ("body.prompt".to_string(), "string_too_short".to_string()),
                ("body.duration".into(), "literal_error".into()),
            ]
        );
        let c = check(Schema::TextToVideo, &json!(["not", "an", "object"]));
        assert_eq!(
            types(&c),
            [("body".to_string(), "model_attributes_type".to_string())]
        );
    }

    #[test]
    fn images_are_urls_fal_can_fetch() {
        let ok = check(
            Schema::ImageToVideo,
            &json!({"prompt": "p", "image_url": "https://v3b.fal.media/files/cat.png"}),
        );
        assert!(ok.problems.is_empty(), "{:?}", ok.problems);
        let data = check(
            Schema::ImageToVideoOlder,
            &json!({"prompt": "p", "image_url": "data:image/png;base64,iVBORw0KGgo="}),
        );
        assert!(data.problems.is_empty(), "{:?}", data.problems);
        let bad = check(
            Schema::ImageToVideo,
            &json!({"prompt": "p", "image_url": "file:///etc/passwd"}),
        );
        assert_eq!(
            types(&bad),
            [("body.image_url".to_string(), "url_parsing".to_string())]
        );
        let none = check(Schema::ImageToVideo, &json!({"prompt": "p"}));
        assert_eq!(
            types(&none),
            [("body.image_url".to_string(), "missing".to_string())]
        );
    }

    #[test]
    fn scenes_and_frames_count_their_images_and_transitions() {
        let scenes = check(
            Schema::Scenes,
            &json!({"prompt": "p", "image_urls": [], "ingredients_mode": "loose"}),
        );
        assert_eq!(
            types(&scenes),
            [
                (
                    "body.ingredients_mode".to_string(),
                    "literal_error".to_string()
                ),
                ("body.image_urls".into(), "too_short".into()),
            ]
        );
        let u = "https://example.com/k.png";
        let frames = check(
            Schema::Frames,
            &json!({"image_urls": [u, u, u], "transitions": [{"duration": 20}, {"duration": 10, "prompt": 3}]}),
        );
        assert_eq!(
            types(&frames),
            [
                (
                    "body.transitions.1.prompt".to_string(),
                    "string_type".to_string()
                ),
                ("body.transitions".into(), "value_error".into()),
            ]
        );
        let gaps = check(
            Schema::Frames,
            &json!({"image_urls": [u, u, u], "transitions": [{}]}),
        );
        assert_eq!(
            types(&gaps),
            [("body.transitions".to_string(), "value_error".to_string())]
        );
        let fine = check(
            Schema::Frames,
            &json!({"image_urls": [u, u], "transitions": [{"prompt": "go"}]}),
        );
        assert!(fine.problems.is_empty(), "{:?}", fine.problems);
    }

    #[test]
    fn every_model_has_a_schema_and_others_none() {
        assert_eq!(
            schema_of("fal-ai/pika/v2.2/text-to-video"),
            Some(Schema::TextToVideo)
        );
        assert_eq!(schema_of("fal-ai/pika/v1.5/pikaffects"), None, "retired");
        assert_eq!(
            schema_of("fal-ai/pika/v2.5/text-to-video"),
            None,
            "out of scope"
        );
        assert_eq!(MODELS.len(), 8);
    }
}
