//! The Runway models this handler serves and what each accepts, straight from the tables of
//! `RUNWAY_API.md` ("Create: request bodies"): per model and endpoint the body keys, the
//! ratios, the durations and whether a last frame is allowed; plus what the contract says about
//! price, and our own estimates of how long a task runs (Runway publishes none).

use std::fmt;

/// A model in scope. Each has its own pool `runway:<model>`: Runway's concurrency limits are
/// per model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    Gen4Turbo,
    Gen45,
    Veo3,
    Veo31,
    Veo31Fast,
}

/// The two create endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    ImageToVideo,
    TextToVideo,
}

/// The `duration` values a schema accepts (integer seconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durations {
    /// Every integer from the first to the second, both included.
    Range(u32, u32),
    /// Exactly these.
    OneOf(&'static [u32]),
}

impl Durations {
    pub fn allows(self, seconds: u64) -> bool {
        match self {
            Durations::Range(lo, hi) => (u64::from(lo)..=u64::from(hi)).contains(&seconds),
            Durations::OneOf(values) => values.iter().any(|v| u64::from(*v) == seconds),
        }
    }

    /// The longest allowed duration.
    pub fn max(self) -> u32 {
        match self {
            Durations::Range(_, hi) => hi,
            Durations::OneOf(values) => values.iter().copied().max().unwrap_or(0),
        }
    }
}

impl fmt::Display for Durations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Durations::Range(lo, hi) => write!(f, "an integer from {lo} to {hi}"),
            Durations::OneOf([only]) => write!(f, "{only}"),
            Durations::OneOf(values) => {
                let list: Vec<String> = values.iter().map(u32::to_string).collect();
                write!(f, "one of {}", list.join(", "))
            }
        }
    }
}

/// What one model accepts on one endpoint (body keys in camelCase, as sent).
#[derive(Debug)]
pub struct Schema {
    pub required: &'static [&'static str],
    pub optional: &'static [&'static str],
    pub ratios: &'static [&'static str],
    pub durations: Durations,
    /// `promptImage` may carry a `last` frame besides the `first`.
    pub last_frame: bool,
}

impl Schema {
    /// Whether the body may carry `key`.
    pub fn accepts(&self, key: &str) -> bool {
        self.required.contains(&key) || self.optional.contains(&key)
    }
}

const GEN4_RATIOS: &[&str] = &[
    "1280:720", "720:1280", "1104:832", "832:1104", "960:960", "1584:672",
];
const GEN45_TEXT_RATIOS: &[&str] = &["1280:720", "720:1280"];
const VEO_RATIOS: &[&str] = &["1280:720", "720:1280", "1080:1920", "1920:1080"];
const VEO31_DURATIONS: Durations = Durations::OneOf(&[4, 6, 8]);
const VEO3_DURATIONS: Durations = Durations::OneOf(&[8]);
const GEN4_DURATIONS: Durations = Durations::Range(2, 10);

const GEN4_TURBO_I2V: Schema = Schema {
    required: &["promptImage", "ratio"],
    optional: &["promptText", "duration", "seed", "contentModeration"],
    ratios: GEN4_RATIOS,
    durations: GEN4_DURATIONS,
    last_frame: false,
};
const GEN45_I2V: Schema = Schema {
    required: &["promptImage", "promptText", "ratio", "duration"],
    optional: &["seed", "contentModeration"],
    ratios: GEN4_RATIOS,
    durations: GEN4_DURATIONS,
    last_frame: false,
};
const VEO31_I2V: Schema = Schema {
    required: &["promptImage", "ratio"],
    optional: &["promptText", "duration", "audio", "negativePrompt"],
    ratios: VEO_RATIOS,
    durations: VEO31_DURATIONS,
    last_frame: true,
};
const VEO3_I2V: Schema = Schema {
    required: &["promptImage", "ratio", "duration"],
    optional: &["promptText", "negativePrompt"],
    ratios: VEO_RATIOS,
    durations: VEO3_DURATIONS,
    last_frame: false,
};
const GEN45_T2V: Schema = Schema {
    required: &["promptText", "ratio", "duration"],
    optional: &["seed", "contentModeration"],
    ratios: GEN45_TEXT_RATIOS,
    durations: GEN4_DURATIONS,
    last_frame: false,
};
const VEO31_T2V: Schema = Schema {
    required: &["promptText", "ratio"],
    optional: &["duration", "audio", "negativePrompt"],
    ratios: VEO_RATIOS,
    durations: VEO31_DURATIONS,
    last_frame: false,
};
const VEO3_T2V: Schema = Schema {
    required: &["promptText", "ratio", "duration"],
    optional: &["negativePrompt"],
    ratios: VEO_RATIOS,
    durations: VEO3_DURATIONS,
    last_frame: false,
};

/// Runway models that exist but that this handler does not serve (retired, or other kinds of
/// generation), so a payload naming one gets a precise refusal.
pub const OUT_OF_SCOPE: &[&str] = &[
    "gen3a_turbo",
    "gen4_aleph",
    "aleph2",
    "seedance2",
    "seedance2_fast",
    "seedance2_mini",
    "happyhorse_1_0",
    "gemini_omni_flash",
];

/// Estimated seconds of generation per second of clip, lowest and highest, for a model as fast
/// as `gen4_turbo` (third-party reports put a 5 s `gen4_turbo` clip near
/// 60 s; Runway publishes no figures). Our choice; see [`Model::slowness`].
const RUN_SECS_PER_CLIP_SECOND: (f64, f64) = (6.0, 15.0);
/// How long a `gen4_turbo` task may take at worst: Runway's own SDKs stop waiting after
/// 10 minutes. Slower models scale it by [`Model::slowness`].
const LONGEST_RUN_SECS: f64 = 600.0;

impl Model {
    pub const ALL: [Model; 5] = [
        Model::Gen4Turbo,
        Model::Gen45,
        Model::Veo3,
        Model::Veo31,
        Model::Veo31Fast,
    ];

    /// Runway's name, as sent in `model`.
    pub fn as_str(self) -> &'static str {
        match self {
            Model::Gen4Turbo => "gen4_turbo",
            Model::Gen45 => "gen4.5",
            Model::Veo3 => "veo3",
            Model::Veo31 => "veo3.1",
            Model::Veo31Fast => "veo3.1_fast",
        }
    }

    pub fn parse(name: &str) -> Option<Model> {
        Model::ALL.into_iter().find(|m| m.as_str() == name)
    }

    /// The pool whose slots this model's tasks hold.
    pub fn pool(self) -> String {
        format!("runway:{}", self.as_str())
    }

    /// What the model accepts on `endpoint`; `None` when it does not serve it.
    pub fn schema(self, endpoint: Endpoint) -> Option<&'static Schema> {
        match (self, endpoint) {
            (Model::Gen4Turbo, Endpoint::ImageToVideo) => Some(&GEN4_TURBO_I2V),
            (Model::Gen4Turbo, Endpoint::TextToVideo) => None,
            (Model::Gen45, Endpoint::ImageToVideo) => Some(&GEN45_I2V),
            (Model::Gen45, Endpoint::TextToVideo) => Some(&GEN45_T2V),
            (Model::Veo3, Endpoint::ImageToVideo) => Some(&VEO3_I2V),
            (Model::Veo3, Endpoint::TextToVideo) => Some(&VEO3_T2V),
            (Model::Veo31 | Model::Veo31Fast, Endpoint::ImageToVideo) => Some(&VEO31_I2V),
            (Model::Veo31 | Model::Veo31Fast, Endpoint::TextToVideo) => Some(&VEO31_T2V),
        }
    }

    /// The clip length Runway makes when the body has no `duration` (unverified for
    /// `gen4_turbo`; the simulator's 10 s). Used for cost estimates and poll hints only.
    pub fn default_duration(self) -> u32 {
        match self {
            Model::Gen4Turbo | Model::Gen45 => 10,
            Model::Veo3 | Model::Veo31 | Model::Veo31Fast => 8,
        }
    }

    /// Credits per second of output (RUNWAY_API.md "Cost"); where the range depends on
    /// `audio`, the low end is without audio (the simulator's reading; unverified).
    pub fn credits_per_second(self, audio: bool) -> u64 {
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

    /// How much slower than `gen4_turbo` a clip second is generated (our estimate: Veo and
    /// `gen4.5` are reported slower; the simulator draws with the same factors).
    pub fn slowness(self) -> f64 {
        match self {
            Model::Gen4Turbo => 1.0,
            Model::Gen45 | Model::Veo31Fast => 1.5,
            Model::Veo3 | Model::Veo31 => 2.5,
        }
    }

    /// Expected generation time of a clip of `seconds`, shortest and longest, in seconds.
    pub fn expected_secs(self, seconds: u32) -> (f64, f64) {
        let s = f64::from(seconds.max(1)) * self.slowness();
        (
            RUN_SECS_PER_CLIP_SECOND.0 * s,
            RUN_SECS_PER_CLIP_SECOND.1 * s,
        )
    }

    /// The longest a task of this model is expected to run, long tail included, in seconds:
    /// how long a submission whose outcome is unknown keeps its slot.
    pub fn longest_secs(self) -> f64 {
        LONGEST_RUN_SECS * self.slowness()
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Endpoint {
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::ImageToVideo => "/v1/image_to_video",
            Endpoint::TextToVideo => "/v1/text_to_video",
        }
    }

    pub fn from_path(path: &str) -> Option<Endpoint> {
        [Endpoint::ImageToVideo, Endpoint::TextToVideo]
            .into_iter()
            .find(|e| e.path() == path)
    }

    pub fn name(self) -> &'static str {
        match self {
            Endpoint::ImageToVideo => "image_to_video",
            Endpoint::TextToVideo => "text_to_video",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_pools_and_endpoints() {
        for m in Model::ALL {
            assert_eq!(Model::parse(m.as_str()), Some(m));
            assert!(m.pool().starts_with("runway:"));
            assert!(m.schema(Endpoint::ImageToVideo).is_some());
            assert!(
                m.schema(Endpoint::ImageToVideo)
                    .is_some_and(|s| s.durations.allows(u64::from(m.default_duration())))
            );
        }
        assert_eq!(Model::parse("gen3a_turbo"), None);
        assert!(Model::Gen4Turbo.schema(Endpoint::TextToVideo).is_none());
        assert_eq!(Model::Veo31Fast.pool(), "runway:veo3.1_fast");
        for e in [Endpoint::ImageToVideo, Endpoint::TextToVideo] {
            assert_eq!(Endpoint::from_path(e.path()), Some(e));
        }
    }

    #[test]
    fn durations_read_as_the_tables_say() {
        assert!(GEN4_DURATIONS.allows(2) && GEN4_DURATIONS.allows(10));
        assert!(!GEN4_DURATIONS.allows(1) && !GEN4_DURATIONS.allows(11));
        assert!(VEO31_DURATIONS.allows(6) && !VEO31_DURATIONS.allows(5));
        assert_eq!(VEO3_DURATIONS.to_string(), "8");
        assert_eq!(VEO31_DURATIONS.to_string(), "one of 4, 6, 8");
        assert_eq!(GEN4_DURATIONS.to_string(), "an integer from 2 to 10");
        assert_eq!(VEO31_DURATIONS.max(), 8);
    }

    #[test]
    fn slower_models_are_expected_to_run_longer() {
        let (lo, hi) = Model::Gen4Turbo.expected_secs(5);
        assert_eq!((lo, hi), (30.0, 75.0));
        assert!(Model::Veo3.expected_secs(8).1 > Model::Gen4Turbo.expected_secs(8).1);
        assert_eq!(Model::Gen4Turbo.longest_secs(), 600.0);
        assert_eq!(Model::Veo31.longest_secs(), 1500.0);
    }
}
