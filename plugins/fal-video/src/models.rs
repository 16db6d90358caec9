//! The Pika models served through fal (FAL_API.md "Pika request bodies"): their ids and pools,
//! the input fields each takes with their defaults, what a clip costs ("Cost") and how long
//! it is expected to take ("How long things take").

use std::fmt;

/// The task type served: every model's units have it.
pub const TASK_TYPE: &str = "fal_video";

/// A Pika model on fal that this handler serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    TextToVideo,
    ImageToVideo,
    Scenes,
    Frames,
}

/// What a field holds, as the model's schema says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A non-blank string.
    Prompt,
    /// Any string (empty allowed).
    Text,
    /// One of [`ASPECT_RATIOS`].
    AspectRatio,
    /// One of [`RESOLUTIONS`].
    Resolution,
    /// The integer 5 or 10.
    Duration,
    /// An integer, or `null` (random, like leaving it out).
    Seed,
    /// An image fal can fetch: an `https://` URL or a base64 `data:image/…` URI.
    ImageUrl,
    /// A list of `min..=max` images.
    ImageUrls { min: usize, max: usize },
    /// `precise` or `creative`.
    IngredientsMode,
    /// pikaframes' keyframe transitions (see [`crate::shot`]).
    Transitions,
}

/// What the request holds when the payload leaves a field out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// The payload must give it.
    Required,
    /// Left out of the request (fal's own default applies, e.g. a random seed).
    Omit,
    /// This string (fal's documented default, sent explicitly).
    Text(&'static str),
    /// This integer.
    Int(u64),
}

/// One input field of a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub kind: Kind,
    pub fill: Fill,
}

const fn field(name: &'static str, kind: Kind, fill: Fill) -> Field {
    Field { name, kind, fill }
}

pub const ASPECT_RATIOS: [&str; 7] = ["16:9", "9:16", "1:1", "4:5", "5:4", "3:2", "2:3"];
pub const RESOLUTIONS: [&str; 2] = ["720p", "1080p"];
pub const INGREDIENTS_MODES: [&str; 2] = ["precise", "creative"];
/// The default negative prompt of text-to-video and pikascenes.
const UGLY: &str = "ugly, bad, terrible";

const TEXT_TO_VIDEO: &[Field] = &[
    field("prompt", Kind::Prompt, Fill::Required),
    field("negative_prompt", Kind::Text, Fill::Text(UGLY)),
    field("aspect_ratio", Kind::AspectRatio, Fill::Text("16:9")),
    field("resolution", Kind::Resolution, Fill::Text("720p")),
    field("duration", Kind::Duration, Fill::Int(5)),
    field("seed", Kind::Seed, Fill::Omit),
];

const IMAGE_TO_VIDEO: &[Field] = &[
    field("image_url", Kind::ImageUrl, Fill::Required),
    field("prompt", Kind::Prompt, Fill::Required),
    field("negative_prompt", Kind::Text, Fill::Text("")),
    field("resolution", Kind::Resolution, Fill::Text("720p")),
    field("duration", Kind::Duration, Fill::Int(5)),
    field("seed", Kind::Seed, Fill::Omit),
];

const SCENES: &[Field] = &[
    field(
        "image_urls",
        Kind::ImageUrls { min: 1, max: 5 },
        Fill::Required,
    ),
    field("prompt", Kind::Prompt, Fill::Required),
    field("negative_prompt", Kind::Text, Fill::Text(UGLY)),
    field("aspect_ratio", Kind::AspectRatio, Fill::Text("16:9")),
    field("resolution", Kind::Resolution, Fill::Text("1080p")),
    field("duration", Kind::Duration, Fill::Int(5)),
    field(
        "ingredients_mode",
        Kind::IngredientsMode,
        Fill::Text("precise"),
    ),
    field("seed", Kind::Seed, Fill::Omit),
];

const FRAMES: &[Field] = &[
    field(
        "image_urls",
        Kind::ImageUrls { min: 2, max: 5 },
        Fill::Required,
    ),
    field("prompt", Kind::Prompt, Fill::Omit),
    field("negative_prompt", Kind::Text, Fill::Text("")),
    field("resolution", Kind::Resolution, Fill::Text("720p")),
    field("transitions", Kind::Transitions, Fill::Omit),
    field("seed", Kind::Seed, Fill::Omit),
];

/// Pika endpoints fal lists that this handler refuses, and why.
const REFUSED: &[(&str, &str)] = &[
    (
        "fal-ai/pika/v1.5/pikaffects",
        "is retired: it left fal's endpoint list in 2025-12",
    ),
    (
        "fal-ai/pika/v2.5/text-to-video",
        "is not served: fal's client does not list it and it shows no real price",
    ),
    (
        "fal-ai/pika/v2.1/text-to-video",
        "is out of scope (an older Pika generation); use fal-ai/pika/v2.2/text-to-video",
    ),
    (
        "fal-ai/pika/v2.1/image-to-video",
        "is out of scope (an older Pika generation); use fal-ai/pika/v2.2/image-to-video",
    ),
    (
        "fal-ai/pika/v2/turbo/text-to-video",
        "is out of scope (an older Pika generation); use fal-ai/pika/v2.2/text-to-video",
    ),
    (
        "fal-ai/pika/v2/turbo/image-to-video",
        "is out of scope (an older Pika generation); use fal-ai/pika/v2.2/image-to-video",
    ),
];

/// Price of 5 s of video at 720p and at 1080p, US dollars (fal's v2.2 pages).
const USD_PER_5S: (f64, f64) = (0.20, 0.45);
/// The outcome-unknown hold never ends sooner than this (seconds of fal time): it also covers
/// a wait in fal's queue before the run.
pub const HOLD_FLOOR_SECS: f64 = 900.0;

impl Model {
    pub const ALL: [Model; 4] = [
        Model::TextToVideo,
        Model::ImageToVideo,
        Model::Scenes,
        Model::Frames,
    ];

    /// fal's model id (the submit path).
    pub fn id(self) -> &'static str {
        match self {
            Model::TextToVideo => "fal-ai/pika/v2.2/text-to-video",
            Model::ImageToVideo => "fal-ai/pika/v2.2/image-to-video",
            Model::Scenes => "fal-ai/pika/v2.2/pikascenes",
            Model::Frames => "fal-ai/pika/v2.2/pikaframes",
        }
    }

    /// The model of a served id.
    pub fn parse(id: &str) -> Option<Model> {
        Model::ALL.into_iter().find(|m| m.id() == id)
    }

    /// Why an id is refused: retired, out of scope, or unknown.
    pub fn refusal(id: &str) -> String {
        let served: Vec<&str> = Model::ALL.iter().map(|m| m.id()).collect();
        match REFUSED.iter().find(|(refused, _)| *refused == id) {
            Some((_, why)) => format!("{id} {why}"),
            None => format!(
                "{id:?} is not a model this handler serves; served: {}",
                served.join(", ")
            ),
        }
    }

    /// The pool its units hold a slot of.
    pub fn pool(self) -> String {
        format!("fal:{}", self.id())
    }

    /// `owner/app`: status, result and cancel live under it, not under the full id.
    pub fn app(self) -> &'static str {
        "fal-ai/pika"
    }

    /// The input fields, in the order the schema lists them.
    pub fn fields(self) -> &'static [Field] {
        match self {
            Model::TextToVideo => TEXT_TO_VIDEO,
            Model::ImageToVideo => IMAGE_TO_VIDEO,
            Model::Scenes => SCENES,
            Model::Frames => FRAMES,
        }
    }

    /// The price of a clip of `seconds` at `hd` (1080p) resolution, US dollars: the v2.2 price
    /// per 5 s (FAL_API.md "Cost": 10 s twice 5 s; pikascenes and pikaframes per 5 s).
    pub fn usd(self, hd: bool, seconds: u32) -> f64 {
        let per_5s = if hd { USD_PER_5S.1 } else { USD_PER_5S.0 };
        let usd = per_5s * f64::from(seconds) / 5.0;
        (usd * 10_000.0).round() / 10_000.0
    }

    /// Expected run of a 5 s 720p clip, seconds of fal time: (p50, p95). Text-to-video runs
    /// two stages (text-to-image, then image-to-video), so it is slower than image-to-video;
    /// pikascenes composes several images first.
    fn base_secs(self) -> (f64, f64) {
        match self {
            Model::TextToVideo => (75.0, 150.0),
            Model::ImageToVideo => (50.0, 110.0),
            Model::Scenes => (90.0, 180.0),
            Model::Frames => (50.0, 100.0),
        }
    }

    /// Expected run of a clip, seconds of fal time: (p50, p95); 1080p × 1.5, and each 5 s
    /// beyond the first adds 80 % of a 5 s clip's time.
    pub fn expected_secs(self, hd: bool, seconds: u32) -> (f64, f64) {
        let (p50, p95) = self.base_secs();
        let resolution = if hd { 1.5 } else { 1.0 };
        let length = 1.0 + 0.8 * (f64::from(seconds.max(1)) / 5.0 - 1.0).max(0.0);
        (p50 * resolution * length, p95 * resolution * length)
    }

    /// The longest such a clip is expected to take (its p99, 2.5 × p95), at least
    /// [`HOLD_FLOOR_SECS`]: how long a submit with an unknown outcome keeps its slot.
    pub fn longest_secs(self, hd: bool, seconds: u32) -> f64 {
        (self.expected_secs(hd, seconds).1 * 2.5).max(HOLD_FLOOR_SECS)
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_pools_and_refusals() {
        for m in Model::ALL {
            assert_eq!(Model::parse(m.id()), Some(m));
            assert!(m.pool().starts_with("fal:fal-ai/pika/v2.2/"));
            assert!(m.id().starts_with(m.app()));
        }
        assert!(Model::refusal("fal-ai/pika/v1.5/pikaffects").contains("retired"));
        assert!(Model::refusal("fal-ai/pika/v2.5/text-to-video").contains("not served"));
        assert!(Model::refusal("fal-ai/kling-video/x").contains("served: fal-ai/pika"));
    }

    #[test]
    fn prices_follow_the_cost_table() {
        let t2v = Model::TextToVideo;
        assert_eq!(t2v.usd(false, 5), 0.20);
        assert_eq!(t2v.usd(true, 5), 0.45);
        assert_eq!(t2v.usd(false, 10), 0.40);
        assert_eq!(t2v.usd(true, 10), 0.90);
        assert_eq!(Model::Frames.usd(false, 25), 1.0);
    }

    #[test]
    fn durations_grow_with_resolution_and_length() {
        let (a, b) = (Model::TextToVideo, Model::ImageToVideo);
        assert!(a.expected_secs(false, 5).0 > b.expected_secs(false, 5).0);
        assert!(a.expected_secs(true, 5).0 > a.expected_secs(false, 5).0);
        assert!(a.expected_secs(false, 10).1 > a.expected_secs(false, 5).1);
        assert_eq!(b.longest_secs(false, 5), HOLD_FLOOR_SECS);
        assert!(a.longest_secs(true, 10) > HOLD_FLOOR_SECS);
    }
}
