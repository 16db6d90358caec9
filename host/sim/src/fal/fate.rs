//! What a request will do, drawn at submit from the seed: how long it waits before a runner may
//! take it, how long it runs (FAL_API.md "How long things take": tens of seconds to minutes,
//! 1080p and 10 s slower, turbo faster, a small long tail), whether it fails when it runs and
//! how, what it costs (FAL_API.md "Cost"), and the webhook misbehaviours drawn for it.

use rand::Rng;
use rand::rngs::StdRng;
use serde_json::Value;

use super::options::FalOptions;
use super::schema::Schema;

/// A failure after acceptance (FAL_API.md "Errors"), drawn with `--failure-rate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FailureKind {
    /// 500 `runner_server_error`: the runner failed (not billed).
    #[value(name = "runner_server_error")]
    RunnerServerError,
    /// 422 `content_policy_violation` on the prompt.
    #[value(name = "content_policy_violation")]
    ContentPolicyViolation,
    /// 422 `file_download_error` on an input image (models with images only).
    #[value(name = "file_download_error")]
    FileDownloadError,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::RunnerServerError => "runner_server_error",
            FailureKind::ContentPolicyViolation => "content_policy_violation",
            FailureKind::FileDownloadError => "file_download_error",
        }
    }
}

/// What the body asks for, as far as time and price go (defaults where absent or invalid).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Spec {
    pub hd: bool,
    /// Seconds of video.
    pub seconds: u32,
}

impl Spec {
    pub(crate) fn resolution(self) -> &'static str {
        if self.hd { "1080p" } else { "720p" }
    }
}

/// The spec of `body` under `schema`: pikascenes defaults to 1080p, pikaframes lasts the sum
/// of its transitions (5 s per gap without them).
pub(crate) fn spec_of(schema: Schema, body: &Value) -> Spec {
    let hd = match body.get("resolution").and_then(Value::as_str) {
        Some(r) => r == "1080p",
        None => schema == Schema::Scenes,
    };
    let seconds = if schema == Schema::Frames {
        match body.get("transitions").and_then(Value::as_array) {
            Some(ts) => ts
                .iter()
                .map(|t| t.get("duration").and_then(Value::as_u64).unwrap_or(5))
                .sum::<u64>(),
            None => {
                let frames = body
                    .get("image_urls")
                    .and_then(Value::as_array)
                    .map_or(2, Vec::len);
                5 * frames.saturating_sub(1).max(1) as u64
            }
        }
    } else {
        match body.get("duration").and_then(Value::as_u64) {
            Some(10) => 10,
            _ => 5,
        }
    };
    Spec {
        hd,
        seconds: u32::try_from(seconds.clamp(1, 60)).unwrap_or(5),
    }
}

/// The price in USD (FAL_API.md "Cost"; the unverified rows as the simulator's choices).
pub(crate) fn price_usd(model: &str, spec: Spec) -> f64 {
    if model.starts_with("fal-ai/pika/v2.1/") {
        return 0.40;
    }
    if model.starts_with("fal-ai/pika/v2/turbo/") {
        return 0.20;
    }
    let per_5s = if spec.hd { 0.45 } else { 0.20 };
    per_5s * f64::from(spec.seconds) / 5.0
}

/// Simulated seconds a 5 s 720p clip runs, low and high.
fn base_range(model: &str) -> (f64, f64) {
    let i2v = model.ends_with("image-to-video");
    if model.contains("/turbo/") {
        return if i2v { (15.0, 35.0) } else { (20.0, 45.0) };
    }
    if model.contains("/v2.1/") {
        return if i2v { (35.0, 80.0) } else { (50.0, 100.0) };
    }
    match model.rsplit('/').next().unwrap_or_default() {
        // Two stages (text-to-image, then image-to-video): the slowest single clip.
        "text-to-video" => (60.0, 120.0),
        "pikascenes" => (70.0, 140.0),
        "pikaframes" => (40.0, 80.0),
        _ => (40.0, 90.0),
    }
}

/// A request's fate, in simulated seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Fate {
    /// From submit until a runner may take it, even under the limit.
    pub dispatch_s: f64,
    /// From start to end (0 for a body that breaks the schema: it ends when picked up).
    pub run_s: f64,
    pub failure: Option<FailureKind>,
    /// Its webhook is signed with a key no JWKS lists.
    pub bad_signature: bool,
    /// Its webhook is delivered twice.
    pub duplicate: bool,
}

/// Draws a fate. Always the same count of numbers, whatever the options, so one request's
/// options never shift the draws of the next.
pub(crate) fn draw_fate(
    rng: &mut StdRng,
    o: &FalOptions,
    model: &str,
    spec: Spec,
    images: bool,
    invalid: bool,
) -> Fate {
    let [dispatch, tail, run, fail, which, cut, sig, dup]: [f64; 8] = rng.random();
    let (lo, hi) = base_range(model);
    let mut factor = if spec.hd { 1.6 } else { 1.0 };
    factor *= if model.ends_with("pikaframes") {
        (f64::from(spec.seconds) / 5.0).powf(0.7)
    } else if spec.seconds >= 10 {
        1.8
    } else {
        1.0
    };
    let mut run_s = if tail < o.long_tail_rate {
        240.0 + run * 240.0
    } else {
        (lo + run * (hi - lo)) * factor
    };
    let kinds: Vec<FailureKind> = [
        FailureKind::RunnerServerError,
        FailureKind::ContentPolicyViolation,
        FailureKind::FileDownloadError,
    ]
    .into_iter()
    .filter(|k| o.failure_kinds.is_empty() || o.failure_kinds.contains(k))
    .filter(|k| images || *k != FailureKind::FileDownloadError)
    .collect();
    let failure = (!invalid && fail < o.failure_rate && !kinds.is_empty())
        .then(|| kinds[((which * kinds.len() as f64) as usize).min(kinds.len() - 1)]);
    if failure.is_some() {
        run_s *= 0.1 + 0.5 * cut;
    }
    if invalid {
        run_s = 0.0;
    }
    Fate {
        dispatch_s: 0.5 + 1.5 * dispatch,
        run_s,
        failure,
        bad_signature: sig < o.webhook_bad_signature_rate,
        duplicate: dup < o.webhook_duplicate_rate,
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use serde_json::json;

    use super::*;

    fn mean_run(model: &str, spec: Spec) -> f64 {
        let o = FalOptions {
            long_tail_rate: 0.0,
            ..FalOptions::default()
        };
        let mut rng = StdRng::seed_from_u64(7);
        let runs: Vec<f64> = (0..200)
            .map(|_| draw_fate(&mut rng, &o, model, spec, false, false).run_s)
            .collect();
        for r in &runs {
            assert!((10.0..=500.0).contains(r), "{model}: {r}");
        }
        runs.iter().sum::<f64>() / runs.len() as f64
    }

    #[test]
    fn hd_long_and_two_stage_clips_are_slower_turbo_faster() {
        let sd5 = Spec {
            hd: false,
            seconds: 5,
        };
        let t2v = "fal-ai/pika/v2.2/text-to-video";
        let base = mean_run(t2v, sd5);
        assert!(mean_run(t2v, Spec { hd: true, ..sd5 }) > base);
        assert!(mean_run(t2v, Spec { seconds: 10, ..sd5 }) > base);
        assert!(mean_run("fal-ai/pika/v2.2/image-to-video", sd5) < base);
        assert!(mean_run("fal-ai/pika/v2/turbo/text-to-video", sd5) < base / 2.0);
    }

    #[test]
    fn prices_and_specs_follow_the_cost_table() {
        let t2v = "fal-ai/pika/v2.2/text-to-video";
        let spec = |s, b| spec_of(s, &b);
        let sd5 = spec(Schema::TextToVideo, json!({"prompt": "p"}));
        assert_eq!(price_usd(t2v, sd5), 0.20);
        let hd10 = spec(
            Schema::TextToVideo,
            json!({"resolution": "1080p", "duration": 10}),
        );
        assert!((price_usd(t2v, hd10) - 0.90).abs() < 1e-9);
        let scenes = spec(Schema::Scenes, json!({}));
        assert!((price_usd("fal-ai/pika/v2.2/pikascenes", scenes) - 0.45).abs() < 1e-9);
        let frames = spec(
            Schema::Frames,
            json!({"image_urls": ["a", "b", "c"], "transitions": [{"duration": 5}, {}]}),
        );
        assert_eq!(frames.seconds, 10);
        assert_eq!(
            spec(Schema::Frames, json!({"image_urls": ["a", "b", "c"]})).seconds,
            10
        );
        assert_eq!(price_usd("fal-ai/pika/v2.1/image-to-video", hd10), 0.40);
        assert_eq!(price_usd("fal-ai/pika/v2/turbo/image-to-video", sd5), 0.20);
    }

    #[test]
    fn failures_are_drawn_among_the_kinds_that_apply() {
        let o = FalOptions {
            failure_rate: 1.0,
            ..FalOptions::default()
        };
        let mut rng = StdRng::seed_from_u64(1);
        let spec = Spec {
            hd: false,
            seconds: 5,
        };
        let model = "fal-ai/pika/v2.2/text-to-video";
        for _ in 0..50 {
            let p = draw_fate(&mut rng, &o, model, spec, false, false);
            assert!(matches!(
                p.failure,
                Some(FailureKind::RunnerServerError | FailureKind::ContentPolicyViolation)
            ));
        }
        let invalid = draw_fate(&mut rng, &o, model, spec, true, true);
        assert_eq!((invalid.failure, invalid.run_s), (None, 0.0));
    }
}
