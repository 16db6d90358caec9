//! A unit's spec: the resolved create request, `{"endpoint": "/v1/image_to_video", "body":
//! {…camelCase…}}`, written once by `plan` and read back on every call. What the other calls
//! need besides the request (model, clip length, audio) is read from the body, so the spec
//! holds nothing that could disagree with what is sent.

use serde_json::{Map, Value, json};

use crate::models::{Endpoint, Model};

/// A spec read back from a unit.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    pub endpoint: Endpoint,
    /// The create body exactly as sent.
    pub body: Value,
    pub model: Model,
    /// Clip length in seconds (the model's default when the body leaves it out).
    pub duration: u32,
    /// Whether sound is generated (Veo 3.1 models; changes the price).
    pub audio: bool,
}

impl Spec {
    /// The spec text for a create request.
    pub fn write(endpoint: Endpoint, body: Map<String, Value>) -> String {
        json!({"endpoint": endpoint.path(), "body": body}).to_string()
    }

    /// Read a spec written by [`Spec::write`].
    pub fn read(text: &str) -> Result<Spec, String> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| format!("the unit spec is not JSON: {e}"))?;
        let endpoint = v
            .get("endpoint")
            .and_then(Value::as_str)
            .and_then(Endpoint::from_path)
            .ok_or("the unit spec names no known endpoint")?;
        let body = v
            .get("body")
            .filter(|b| b.is_object())
            .ok_or("the unit spec has no create body")?
            .clone();
        let model = body
            .get("model")
            .and_then(Value::as_str)
            .and_then(Model::parse)
            .ok_or("the unit spec's body names no model this handler serves")?;
        let duration = match body.get("duration") {
            None => model.default_duration(),
            Some(d) => d
                .as_u64()
                .and_then(|d| u32::try_from(d).ok())
                .ok_or("the unit spec's duration is not a whole number of seconds")?,
        };
        let audio = body.get("audio").and_then(Value::as_bool).unwrap_or(false);
        Ok(Spec {
            endpoint,
            body,
            model,
            duration,
            audio,
        })
    }

    /// The price Runway's documented rates give this request, in credits.
    pub fn listed_credits(&self) -> u64 {
        self.model
            .credits_per_second(self.audio)
            .saturating_mul(u64::from(self.duration))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn written_specs_read_back_with_defaults_resolved() {
        let text = Spec::write(
            Endpoint::ImageToVideo,
            body(
                json!({"model": "gen4_turbo", "promptImage": "https://a.test/i.png", "ratio": "960:960"}),
            ),
        );
        let spec = Spec::read(&text);
        assert_eq!(
            spec.as_ref().map(|s| s.endpoint),
            Ok(Endpoint::ImageToVideo)
        );
        assert_eq!(spec.as_ref().map(|s| s.duration), Ok(10));
        assert_eq!(spec.as_ref().map(Spec::listed_credits), Ok(50));
        let veo = Spec::write(
            Endpoint::TextToVideo,
            body(
                json!({"model": "veo3.1_fast", "promptText": "x", "ratio": "1280:720", "duration": 6, "audio": true}),
            ),
        );
        assert_eq!(Spec::read(&veo).map(|s| s.listed_credits()), Ok(90));
    }

    #[test]
    fn broken_specs_say_what_is_wrong() {
        for (text, why) in [
            ("nope", "not JSON"),
            (r#"{"endpoint": "/v1/x", "body": {}}"#, "endpoint"),
            (r#"{"endpoint": "/v1/text_to_video"}"#, "create body"),
            (
                r#"{"endpoint": "/v1/text_to_video", "body": {"model": "gen3a_turbo"}}"#,
                "model",
            ),
            (
                r#"{"endpoint": "/v1/text_to_video", "body": {"model": "veo3", "duration": "8"}}"#,
                "duration",
            ),
        ] {
            let got = Spec::read(text).err().unwrap_or_default();
            assert!(got.contains(why), "{text}: {got}");
        }
    }
}
