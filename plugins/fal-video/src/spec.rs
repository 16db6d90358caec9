//! A unit's spec: the resolved request, `{"model": "<fal model id>", "input": {…}}`, written
//! once by `plan` and read back on every call. What the other calls need (resolution, clip
//! length, price, expected run) is read from the input, so nothing can disagree with what is
//! sent.

use serde_json::{Map, Value, json};
use slotd_sdk::ExpectedDuration;

use crate::models::Model;
use crate::settings::Config;
use crate::shot::frames_secs;

/// A spec read back from a unit.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    pub model: Model,
    /// fal's input exactly as sent (the submit body).
    pub input: Value,
    /// 1080p.
    pub hd: bool,
    /// Seconds of video.
    pub seconds: u32,
}

impl Spec {
    /// The spec text of a resolved request.
    pub fn write(model: Model, input: Map<String, Value>) -> String {
        json!({"model": model.id(), "input": input}).to_string()
    }

    /// Read a spec written by [`Spec::write`].
    pub fn read(text: &str) -> Result<Spec, String> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| format!("the unit spec is not JSON: {e}"))?;
        let model = v
            .get("model")
            .and_then(Value::as_str)
            .and_then(Model::parse)
            .ok_or("the unit spec names no model this handler serves")?;
        let input = v
            .get("input")
            .and_then(Value::as_object)
            .ok_or("the unit spec has no input object")?;
        let hd = input.get("resolution").and_then(Value::as_str) == Some("1080p");
        let seconds = if model == Model::Frames {
            frames_secs(input)
        } else {
            input.get("duration").and_then(Value::as_u64).unwrap_or(5)
        };
        let seconds = u32::try_from(seconds).map_err(|_| "the unit spec's duration is too long")?;
        Ok(Spec {
            model,
            input: Value::Object(input.clone()),
            hd,
            seconds,
        })
    }

    /// The listed price, US dollars.
    pub fn usd(&self) -> f64 {
        self.model.usd(self.hd, self.seconds)
    }

    /// The expected run (p50, p95), times `expected_duration_scale`.
    pub fn expected(&self, cfg: &Config) -> ExpectedDuration {
        let (p50, p95) = self.model.expected_secs(self.hd, self.seconds);
        let p50_ms = cfg.scaled_ms(p50).max(1);
        ExpectedDuration {
            p50_ms,
            p95_ms: cfg.scaled_ms(p95).max(p50_ms),
        }
    }

    /// How long a submit with an unknown outcome keeps its slot (ms of slotd time).
    pub fn hold_ms(&self, cfg: &Config) -> u64 {
        cfg.scaled_ms(self.model.longest_secs(self.hd, self.seconds))
            .max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_read_back_and_broken_ones_say_why() {
        let input = json!({"prompt": "x", "resolution": "1080p", "duration": 10});
        let text = Spec::write(
            Model::TextToVideo,
            input.as_object().cloned().unwrap_or_default(),
        );
        let spec = Spec::read(&text);
        assert_eq!(spec.as_ref().map(|s| (s.hd, s.seconds)), Ok((true, 10)));
        assert_eq!(spec.map(|s| s.usd()), Ok(0.9));
        for (text, why) in [
            ("nope", "not JSON"),
            (r#"{"model": "fal-ai/x", "input": {}}"#, "model"),
            (r#"{"model": "fal-ai/pika/v2.2/pikascenes"}"#, "input"),
        ] {
            let got = Spec::read(text).err().unwrap_or_default();
            assert!(got.contains(why), "{text}: {got}");
        }
    }
}
