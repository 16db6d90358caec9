//! Every validation rule with a body that breaks it: 400 `Validation of body failed` with an
//! issue of the expected code on the expected path; and valid bodies of every model accepted
//! with the contract's price.

use super::*;

const I2V: &str = "/v1/image_to_video";
const T2V: &str = "/v1/text_to_video";

/// (endpoint, body, issue code, issue path).
type Case = (&'static str, Value, &'static str, Value);

/// `model`'s valid body on `endpoint` with `key` set (or removed when `value` is `None`).
fn body(endpoint: &str, model: &str, key: &str, value: Option<Value>) -> Value {
    let valid = if endpoint == I2V {
        i2v(model)
    } else {
        t2v(model)
    };
    with(valid, key, value)
}

fn frame(uri: &str, position: &str) -> Value {
    json!({"uri": uri, "position": position})
}

// Tables read best one case per line.
#[rustfmt::skip]
fn model_and_required_cases() -> Vec<Case> {
    vec![
        (I2V, body(I2V, "gen4_turbo", "model", None), "invalid_type", json!(["model"])),
        (I2V, body(I2V, "gen4_turbo", "model", None), "invalid_union", json!(["model"])),
        (I2V, body(I2V, "gen4_turbo", "model", Some(json!("gen3a_turbo"))), "invalid_union", json!(["model"])),
        (I2V, body(I2V, "gen4_turbo", "model", Some(json!(5))), "invalid_type", json!(["model"])),
        (I2V, body(I2V, "gen4_turbo", "model", Some(Value::Null)), "invalid_type", json!(["model"])),
        (T2V, body(T2V, "veo3.1", "model", Some(json!("gen4_turbo"))), "invalid_union", json!(["model"])),
        (I2V, body(I2V, "gen4_turbo", "promptImage", None), "invalid_type", json!(["promptImage"])),
        (I2V, body(I2V, "gen4_turbo", "ratio", None), "invalid_type", json!(["ratio"])),
        (I2V, body(I2V, "gen4.5", "promptText", None), "invalid_type", json!(["promptText"])),
        (I2V, body(I2V, "gen4.5", "duration", None), "invalid_type", json!(["duration"])),
        (I2V, body(I2V, "veo3", "duration", None), "invalid_type", json!(["duration"])),
        (T2V, body(T2V, "gen4.5", "promptText", None), "invalid_type", json!(["promptText"])),
        (T2V, body(T2V, "veo3.1", "ratio", None), "invalid_type", json!(["ratio"])),
        // Keys of other models, unknown keys.
        (I2V, body(I2V, "gen4_turbo", "audio", Some(json!(true))), "unrecognized_keys", json!([])),
        (I2V, body(I2V, "gen4_turbo", "negativePrompt", Some(json!("x"))), "unrecognized_keys", json!([])),
        (I2V, body(I2V, "gen4_turbo", "foo", Some(json!(1))), "unrecognized_keys", json!([])),
        (T2V, body(T2V, "veo3", "seed", Some(json!(1))), "unrecognized_keys", json!([])),
        (I2V, body(I2V, "veo3.1", "contentModeration", Some(json!({}))), "unrecognized_keys", json!([])),
        // Not an object at all.
        (I2V, json!([1, 2]), "invalid_type", json!([])),
    ]
}

#[rustfmt::skip]
fn scalar_cases() -> Vec<Case> {
    let turbo = |key: &str, v: Value| body(I2V, "gen4_turbo", key, Some(v));
    vec![
        (I2V, turbo("ratio", json!("1920:1080")), "invalid_value", json!(["ratio"])),
        (I2V, body(I2V, "veo3.1", "ratio", Some(json!("1104:832"))), "invalid_value", json!(["ratio"])),
        (T2V, body(T2V, "gen4.5", "ratio", Some(json!("960:960"))), "invalid_value", json!(["ratio"])),
        (I2V, turbo("ratio", json!(16)), "invalid_type", json!(["ratio"])),
        (I2V, turbo("duration", json!(1)), "too_small", json!(["duration"])),
        (I2V, turbo("duration", json!(11)), "too_big", json!(["duration"])),
        (I2V, turbo("duration", json!(5.5)), "invalid_type", json!(["duration"])),
        (I2V, turbo("duration", json!("5")), "invalid_type", json!(["duration"])),
        (I2V, body(I2V, "veo3.1", "duration", Some(json!(5))), "invalid_value", json!(["duration"])),
        (T2V, body(T2V, "veo3", "duration", Some(json!(4))), "invalid_value", json!(["duration"])),
        // promptText: non-empty, at most 1000 UTF-16 code units (501 emoji are 1002).
        (I2V, turbo("promptText", json!("")), "too_small", json!(["promptText"])),
        (I2V, turbo("promptText", json!("a".repeat(1001))), "too_big", json!(["promptText"])),
        (I2V, turbo("promptText", json!("😀".repeat(501))), "too_big", json!(["promptText"])),
        (I2V, turbo("promptText", Value::Null), "invalid_type", json!(["promptText"])),
        (I2V, turbo("seed", json!(-1)), "too_small", json!(["seed"])),
        (I2V, turbo("seed", json!(4_294_967_296_u64)), "too_big", json!(["seed"])),
        (I2V, turbo("seed", json!(1.5)), "invalid_type", json!(["seed"])),
        (I2V, turbo("seed", Value::Null), "invalid_type", json!(["seed"])),
        (I2V, turbo("contentModeration", json!({"publicFigureThreshold": "high"})),
         "invalid_value", json!(["contentModeration", "publicFigureThreshold"])),
        (I2V, turbo("contentModeration", json!({"x": 1})), "unrecognized_keys", json!(["contentModeration"])),
        (I2V, turbo("contentModeration", json!("auto")), "invalid_type", json!(["contentModeration"])),
        (T2V, body(T2V, "veo3.1", "audio", Some(json!("yes"))), "invalid_type", json!(["audio"])),
        (T2V, body(T2V, "veo3", "negativePrompt", Some(json!(3))), "invalid_type", json!(["negativePrompt"])),
    ]
}

#[rustfmt::skip]
fn image_cases() -> Vec<Case> {
    let turbo = |v: Value| body(I2V, "gen4_turbo", "promptImage", Some(v));
    let veo = |v: Value| body(I2V, "veo3.1", "promptImage", Some(v));
    let http = "http://example.com/a.png";
    vec![
        (I2V, turbo(json!(http)), "custom", json!(["promptImage"])),
        (I2V, turbo(json!("https://10.0.0.1/a.png")), "custom", json!(["promptImage"])),
        (I2V, turbo(json!("data:image/gif;base64,R0lGODlh")), "custom", json!(["promptImage"])),
        (I2V, turbo(json!("data:image/png;base64,***")), "custom", json!(["promptImage"])),
        (I2V, turbo(json!("")), "too_small", json!(["promptImage"])),
        (I2V, turbo(json!(5)), "invalid_type", json!(["promptImage"])),
        (I2V, turbo(json!([frame(IMAGE, "last")])), "invalid_value", json!(["promptImage", 0, "position"])),
        (I2V, veo(json!([frame(IMAGE, "last")])), "custom", json!(["promptImage"])),
        (I2V, veo(json!([frame(IMAGE, "first"), frame(IMAGE, "first")])), "custom", json!(["promptImage"])),
        (I2V, veo(json!([frame(http, "first")])), "custom", json!(["promptImage", 0, "uri"])),
        (I2V, turbo(json!([])), "too_small", json!(["promptImage"])),
        (I2V, turbo(json!([frame(IMAGE, "first"), frame(IMAGE, "first")])), "too_big", json!(["promptImage"])),
        (I2V, veo(json!([frame(IMAGE, "first"), frame(IMAGE, "last"), frame(IMAGE, "last")])),
         "too_big", json!(["promptImage"])),
        (I2V, turbo(json!([{"uri": IMAGE}])), "invalid_type", json!(["promptImage", 0, "position"])),
        (I2V, turbo(json!([{"uri": IMAGE, "position": "first", "x": 1}])), "unrecognized_keys", json!(["promptImage", 0])),
        (I2V, turbo(json!([IMAGE])), "invalid_type", json!(["promptImage", 0])),
    ]
}

fn cases() -> Vec<Case> {
    let mut all = model_and_required_cases();
    all.extend(scalar_cases());
    all.extend(image_cases());
    all
}

#[tokio::test]
async fn every_rule_refuses_naming_the_path() -> anyhow::Result<()> {
    let handle = sim(frozen()).await?;
    let c = Client::new(&handle)?;
    let mut wrong = Vec::new();
    let all = cases();
    for (path, body, code, issue_path) in &all {
        let (status, v) = c.post(path, body).await?;
        let found = v["issues"].as_array().is_some_and(|is| {
            is.iter()
                .any(|i| i["code"] == *code && i["path"] == *issue_path)
        });
        if status != StatusCode::BAD_REQUEST
            || v["error"] != "Validation of body failed"
            || v["docUrl"] != DOC_URL
            || !found
        {
            wrong.push(format!(
                "{path} {body} → {status} {v}; wanted {code} at {issue_path}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let stats = handle.stats();
    assert_eq!(stats.creates, 0, "no refused body creates a task");
    assert_eq!(stats.validation_refusals, all.len() as u64);
    assert_eq!(stats.creates_refused.get("400"), Some(&(all.len() as u64)));
    handle.shutdown().await
}

#[tokio::test]
async fn all_issues_are_listed_and_unknown_keys_are_named() -> anyhow::Result<()> {
    let handle = sim(frozen()).await?;
    let c = Client::new(&handle)?;
    let body =
        json!({"model": "gen4_turbo", "ratio": "1:1", "duration": 99, "foo": 1, "bar": null});
    let (status, v) = c.post(I2V, &body).await?;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    let codes: Vec<&str> = v["issues"]
        .as_array()
        .context("issues")?
        .iter()
        .filter_map(|i| i["code"].as_str())
        .collect();
    assert_eq!(
        codes,
        [
            "invalid_type",
            "invalid_value",
            "too_big",
            "unrecognized_keys"
        ],
        "{v}"
    );
    let mut keys: Vec<&str> = v["issues"][3]["keys"]
        .as_array()
        .context("keys")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["bar", "foo"], "{v}");
    assert_eq!(
        v["issues"][0]["message"],
        "Invalid input: expected string | array, received undefined"
    );
    handle.shutdown().await
}

#[tokio::test]
async fn bodies_that_are_not_json_get_a_plain_error() -> anyhow::Result<()> {
    let handle = sim(frozen()).await?;
    let c = Client::new(&handle)?;
    let not_json = c
        .request(Method::POST, I2V)
        .header("content-type", "application/json")
        .body("{\"model\": ");
    let (status, v) = c.send(not_json).await?;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("not valid JSON"))
            && v["issues"].is_null(),
        "{v}"
    );
    let text = c
        .request(Method::POST, I2V)
        .header("content-type", "text/plain")
        .body(i2v("gen4_turbo").to_string());
    let (status, v) = c.send(text).await?;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("Content-Type")),
        "{v}"
    );
    assert_eq!(handle.stats().creates, 0);
    handle.shutdown().await
}

#[tokio::test]
async fn valid_bodies_of_every_model_are_accepted_at_their_price() -> anyhow::Result<()> {
    let handle = sim(frozen()).await?;
    let c = Client::new(&handle)?;
    let frames = json!([{"uri": IMAGE, "position": "first"}, {"uri": "runway://uploads/x", "position": "last"}]);
    let cases = [
        (I2V, i2v("gen4_turbo"), 50),
        (I2V, with(i2v("gen4_turbo"), "duration", Some(json!(2))), 10),
        (I2V, i2v("gen4.5"), 60),
        (I2V, with(i2v("veo3.1"), "audio", Some(json!(true))), 320),
        (
            I2V,
            with(
                with(i2v("veo3.1"), "duration", Some(json!(4))),
                "promptImage",
                Some(frames),
            ),
            80,
        ),
        (I2V, i2v("veo3.1_fast"), 80),
        (
            I2V,
            with(i2v("veo3.1_fast"), "audio", Some(json!(true))),
            120,
        ),
        (I2V, i2v("veo3"), 320),
        (T2V, with(t2v("gen4.5"), "duration", Some(json!(10))), 120),
        (T2V, t2v("veo3.1"), 160),
        (
            T2V,
            with(t2v("veo3.1_fast"), "negativePrompt", Some(json!("blur"))),
            80,
        ),
        (T2V, t2v("veo3"), 320),
        (
            I2V,
            with(
                i2v("gen4_turbo"),
                "promptImage",
                Some(json!("data:image/png;base64,iVBORw0KGgo=")),
            ),
            50,
        ),
        (
            I2V,
            with(
                i2v("gen4_turbo"),
                "promptText",
                Some(json!("😀".repeat(500))),
            ),
            50,
        ),
        (
            I2V,
            with(i2v("gen4_turbo"), "seed", Some(json!(4_294_967_295_u64))),
            50,
        ),
        (
            I2V,
            with(
                i2v("gen4.5"),
                "contentModeration",
                Some(json!({"publicFigureThreshold": "low"})),
            ),
            60,
        ),
        (T2V, with(t2v("gen4.5"), "duration", Some(json!(6.0))), 72),
    ];
    for (path, body, credits) in &cases {
        let (status, v) = c.post(path, body).await?;
        assert_eq!(status, StatusCode::OK, "{path} {body}: {v}");
        assert_eq!(
            v["estimatedCost"]["credits"], *credits,
            "{path} {body}: {v}"
        );
        let id = v["id"].as_str().context("id")?;
        assert!(uuid::Uuid::parse_str(id).is_ok(), "a UUID: {id}");
    }
    let charset = c
        .request(Method::POST, T2V)
        .header("content-type", "application/json; charset=utf-8")
        .body(t2v("veo3").to_string());
    assert_eq!(c.send(charset).await?.0, StatusCode::OK);
    assert_eq!(handle.stats().creates, cases.len() as u64 + 1);
    handle.shutdown().await
}
