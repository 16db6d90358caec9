//! The models and endpoints in scope (RUNWAY_API.md, "Create: request bodies"), each model's
//! schema per endpoint (keys, ratios, durations, frame positions) and its price. One static
//! table, so the validator and the cost both read the contract from the same place.

use std::fmt;
use std::str::FromStr;

/// A generation model the simulator knows. Anything else is refused as `invalid_union`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Model {
    Gen4Turbo,
    Gen45,
    Veo3,
    Veo31,
    Veo31Fast,
}

impl Model {
    /// Every model, in the order of stats and `GET /v1/organization`.
    pub const ALL: [Model; 5] = [
        Model::Gen4Turbo,
        Model::Gen45,
        Model::Veo3,
        Model::Veo31,
        Model::Veo31Fast,
    ];

    /// The wire name (`gen4_turbo`, `gen4.5`, `veo3`, `veo3.1`, `veo3.1_fast`).
    pub fn as_str(self) -> &'static str {
        match self {
            Model::Gen4Turbo => "gen4_turbo",
            Model::Gen45 => "gen4.5",
            Model::Veo3 => "veo3",
            Model::Veo31 => "veo3.1",
            Model::Veo31Fast => "veo3.1_fast",
        }
    }

    /// The model named `name` on the wire, if it is one of ours.
    pub fn parse(name: &str) -> Option<Model> {
        Model::ALL.into_iter().find(|m| m.as_str() == name)
    }

    /// Position in [`Model::ALL`] (per-model state lives in arrays).
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// Credits per output second (RUNWAY_API.md, "Cost"); where the contract gives a range
    /// that depends on `audio`, the low end is without audio.
    pub(crate) fn credits_per_second(self, audio: bool) -> u64 {
        match (self, audio) {
            (Model::Gen4Turbo, _) => 5,
            (Model::Gen45, _) => 12,
            (Model::Veo3, _) => 40,
            (Model::Veo31, false) => 20,
            (Model::Veo31, true) => 40,
            (Model::Veo31Fast, false) => 10,
            (Model::Veo31Fast, true) => 15,
        }
    }

    /// How much slower than `gen4_turbo` a clip second takes (drawn durations).
    pub(crate) fn slowness(self) -> f64 {
        match self {
            Model::Gen4Turbo => 1.0,
            Model::Gen45 | Model::Veo31Fast => 1.5,
            Model::Veo3 | Model::Veo31 => 2.5,
        }
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Model {
    type Err = String;
    fn from_str(s: &str) -> Result<Model, String> {
        Model::parse(s).ok_or_else(|| {
            let known: Vec<&str> = Model::ALL.iter().map(|m| m.as_str()).collect();
            format!("unknown model {s:?} (known: {})", known.join(", "))
        })
    }
}

/// The two create endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    ImageToVideo,
    TextToVideo,
}

impl Endpoint {
    pub(crate) fn path(self) -> &'static str {
        match self {
            Endpoint::ImageToVideo => "/v1/image_to_video",
            Endpoint::TextToVideo => "/v1/text_to_video",
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Endpoint::ImageToVideo => "image_to_video",
            Endpoint::TextToVideo => "text_to_video",
        }
    }
}

/// The `duration` values a schema accepts (integer seconds).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Durations {
    /// Any integer in `min..=max`.
    Range(u32, u32),
    /// Exactly one of these.
    OneOf(&'static [u32]),
}

/// One model's request schema on one endpoint.
#[derive(Debug)]
pub(crate) struct Schema {
    pub model: Model,
    pub required: &'static [&'static str],
    pub optional: &'static [&'static str],
    pub ratios: &'static [&'static str],
    pub durations: Durations,
    /// `duration` when the body leaves it out (only where it is optional). The API's own
    /// defaults are unverified; these are the simulator's choice.
    pub duration_default: Option<u32>,
    /// Whether `promptImage` may also carry a `last` frame.
    pub last_frame: bool,
}

const GEN4_RATIOS: &[&str] = &[
    "1280:720", "720:1280", "1104:832", "832:1104", "960:960", "1584:672",
];
const VEO_RATIOS: &[&str] = &["1280:720", "720:1280", "1080:1920", "1920:1080"];
const GEN45_TEXT_RATIOS: &[&str] = &["1280:720", "720:1280"];
const VEO31_DURATIONS: Durations = Durations::OneOf(&[4, 6, 8]);
const VEO3_DURATIONS: Durations = Durations::OneOf(&[8]);

const IMAGE_TO_VIDEO: &[Schema] = &[
    Schema {
        model: Model::Gen4Turbo,
        required: &["promptImage", "ratio"],
        optional: &["promptText", "duration", "seed", "contentModeration"],
        ratios: GEN4_RATIOS,
        durations: Durations::Range(2, 10),
        duration_default: Some(10),
        last_frame: false,
    },
    Schema {
        model: Model::Gen45,
        required: &["promptImage", "promptText", "ratio", "duration"],
        optional: &["seed", "contentModeration"],
        ratios: GEN4_RATIOS,
        durations: Durations::Range(2, 10),
        duration_default: None,
        last_frame: false,
    },
    Schema {
        model: Model::Veo31,
        required: &["promptImage", "ratio"],
        optional: &["promptText", "duration", "audio", "negativePrompt"],
        ratios: VEO_RATIOS,
        durations: VEO31_DURATIONS,
        duration_default: Some(8),
        last_frame: true,
    },
    Schema {
        model: Model::Veo31Fast,
        required: &["promptImage", "ratio"],
        optional: &["promptText", "duration", "audio", "negativePrompt"],
        ratios: VEO_RATIOS,
        durations: VEO31_DURATIONS,
        duration_default: Some(8),
        last_frame: true,
    },
    Schema {
        model: Model::Veo3,
        required: &["promptImage", "ratio", "duration"],
        optional: &["promptText", "negativePrompt"],
        ratios: VEO_RATIOS,
        durations: VEO3_DURATIONS,
        duration_default: None,
        last_frame: false,
    },
];

const TEXT_TO_VIDEO: &[Schema] = &[
    Schema {
        model: Model::Gen45,
        required: &["promptText", "ratio", "duration"],
        optional: &["seed", "contentModeration"],
        ratios: GEN45_TEXT_RATIOS,
        durations: Durations::Range(2, 10),
        duration_default: None,
        last_frame: false,
    },
    Schema {
        model: Model::Veo31,
        required: &["promptText", "ratio"],
        optional: &["duration", "audio", "negativePrompt"],
        ratios: VEO_RATIOS,
        durations: VEO31_DURATIONS,
        duration_default: Some(8),
        last_frame: false,
    },
    Schema {
        model: Model::Veo31Fast,
        required: &["promptText", "ratio"],
        optional: &["duration", "audio", "negativePrompt"],
        ratios: VEO_RATIOS,
        durations: VEO31_DURATIONS,
        duration_default: Some(8),
        last_frame: false,
    },
    Schema {
        model: Model::Veo3,
        required: &["promptText", "ratio", "duration"],
        optional: &["negativePrompt"],
        ratios: VEO_RATIOS,
        durations: VEO3_DURATIONS,
        duration_default: None,
        last_frame: false,
    },
];

/// The schema of `model` on `endpoint`, if that pair exists (`gen4_turbo` is image-only).
pub(crate) fn schema(endpoint: Endpoint, model: &str) -> Option<&'static Schema> {
    let table = match endpoint {
        Endpoint::ImageToVideo => IMAGE_TO_VIDEO,
        Endpoint::TextToVideo => TEXT_TO_VIDEO,
    };
    table.iter().find(|s| s.model.as_str() == model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_text_to_video_has_no_gen4_turbo() {
        for m in Model::ALL {
            assert_eq!(m.as_str().parse::<Model>(), Ok(m));
            assert_eq!(Model::ALL[m.index()], m);
        }
        assert!("gen3a_turbo".parse::<Model>().is_err());
        assert!(schema(Endpoint::ImageToVideo, "gen4_turbo").is_some());
        assert!(schema(Endpoint::TextToVideo, "gen4_turbo").is_none());
        assert_eq!(Model::Veo31.credits_per_second(true), 40);
    }
}
