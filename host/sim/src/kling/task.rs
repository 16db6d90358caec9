//! One simulated task: what was asked (its [`Spec`]), where it is in
//! `submitted → processing → succeed | failed`, how long each phase lasts (its [`Fate`], drawn
//! from KLING_API.md's "How long things take"), and how it looks on the wire.

use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::clock::Clock;

/// The four task families; each has its own paths and list, all share the account's quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Text2Video,
    Image2Video,
    Voice,
    Element,
}

impl Kind {
    pub(crate) const ALL: [Kind; 4] = [
        Kind::Text2Video,
        Kind::Image2Video,
        Kind::Voice,
        Kind::Element,
    ];

    /// The last path segment of the kind's collection (also its name in the stats).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Text2Video => "text2video",
            Kind::Image2Video => "image2video",
            Kind::Voice => "custom-voices",
            Kind::Element => "advanced-custom-elements",
        }
    }

    /// The collection path, e.g. `/v1/videos/text2video`.
    pub(crate) fn path(self) -> &'static str {
        match self {
            Kind::Text2Video => "/v1/videos/text2video",
            Kind::Image2Video => "/v1/videos/image2video",
            Kind::Voice => "/v1/general/custom-voices",
            Kind::Element => "/v1/general/advanced-custom-elements",
        }
    }

    /// Largest `pageSize` a list accepts (custom voices allow 1000).
    pub(crate) fn page_size_max(self) -> u32 {
        if self == Kind::Voice { 1000 } else { 500 }
    }
}

/// What a create asked for, reduced to what shapes the task's timing and result.
#[derive(Clone, Debug)]
pub(crate) enum Spec {
    Video {
        pro: bool,
        /// Seconds of video: 5 or 10.
        duration: u32,
    },
    Voice {
        voice_name: String,
    },
    Element {
        element_name: String,
        element_description: String,
        /// The `element_voice_id` the request carried (a voice this simulator cloned).
        voice_id: String,
    },
}

/// Kling's status enum; note the spelling `succeed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Submitted,
    Processing,
    Succeed,
    Failed,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Submitted => "submitted",
            Status::Processing => "processing",
            Status::Succeed => "succeed",
            Status::Failed => "failed",
        }
    }

    pub(crate) fn is_terminal(self) -> bool {
        matches!(self, Status::Succeed | Status::Failed)
    }
}

/// When a task changes status, in real time already scaled by the time factor.
#[derive(Clone, Debug)]
pub(crate) struct Fate {
    /// Time spent `submitted` before `processing`.
    pub queued: Duration,
    /// Time spent `processing` before the end.
    pub run: Duration,
    /// `Some(reason)`: the task ends `failed` with this `task_status_msg`.
    pub failure: Option<&'static str>,
}

/// Reasons a task fails after acceptance, as Kling words them in `task_status_msg`.
const FAILURE_MESSAGES: [&str; 3] = [
    "Failure to pass the risk control system: the output did not pass content moderation",
    "The generation failed due to an internal error, please try again",
    "The input image did not pass content moderation",
];

/// Simulated seconds (min, max) for a spec, before the long tail.
fn duration_range(spec: &Spec) -> (f64, f64) {
    match spec {
        Spec::Video { pro, duration, .. } if *pro || *duration == 10 => (60.0, 300.0),
        Spec::Video { .. } => (30.0, 120.0),
        Spec::Voice { .. } => (5.0, 20.0),
        Spec::Element { .. } => (10.0, 90.0),
    }
}

/// Draws a task's timing and fate, scaled to real time by `clock`.
pub(crate) fn draw_fate(
    rng: &mut StdRng,
    spec: &Spec,
    clock: &Clock,
    long_tail_rate: f64,
    failure_rate: f64,
) -> Fate {
    let (lo, hi) = duration_range(spec);
    let is_video = matches!(spec, Spec::Video { .. });
    let total = if is_video && rng.random::<f64>() < long_tail_rate {
        rng.random_range(600.0..900.0)
    } else {
        rng.random_range(lo..hi)
    };
    let queued = total * rng.random_range(0.05..0.2);
    let mut run = total - queued;
    let failure = if rng.random::<f64>() < failure_rate {
        run *= rng.random_range(0.3..1.0);
        Some(FAILURE_MESSAGES[rng.random_range(0..FAILURE_MESSAGES.len())])
    } else {
        None
    };
    Fate {
        queued: clock.scaled(queued),
        run: clock.scaled(run),
        failure,
    }
}

/// A task as the simulator keeps it.
#[derive(Clone, Debug)]
pub(crate) struct SimTask {
    pub id: String,
    pub kind: Kind,
    pub spec: Spec,
    pub external_task_id: Option<String>,
    pub callback_url: Option<String>,
    pub status: Status,
    /// Set when the task failed.
    pub status_msg: String,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// When the task took its slot (for busy slot-seconds).
    pub started: Instant,
    /// When it ended (released its slot), once it has.
    pub ended: Option<Instant>,
    /// Its drawn duration from create to end, in simulated seconds.
    pub planned_seconds: f64,
    /// The numeric id of what the task produces (video id, `voice_id`, `element_id`).
    pub result_id: u64,
}

impl SimTask {
    /// The task object of query answers, list entries and callbacks.
    pub(crate) fn to_json(&self, base_url: &str) -> Value {
        let mut obj = json!({
            "task_id": self.id,
            "task_status": self.status.as_str(),
            "task_status_msg": self.status_msg,
            "task_info": self.task_info(),
            "created_at": self.created_at_ms,
            "updated_at": self.updated_at_ms,
        });
        if self.status.is_terminal() {
            let units = if self.status == Status::Succeed {
                self.units()
            } else {
                "0".to_owned()
            };
            obj["final_unit_deduction"] = json!(units);
        }
        if self.status == Status::Succeed {
            obj["task_result"] = self.task_result(base_url);
        }
        obj
    }

    /// The `data` of a create answer.
    pub(crate) fn create_json(&self) -> Value {
        json!({
            "task_id": self.id,
            "task_info": self.task_info(),
            "task_status": self.status.as_str(),
            "created_at": self.created_at_ms,
            "updated_at": self.updated_at_ms,
        })
    }

    fn task_info(&self) -> Value {
        match &self.external_task_id {
            Some(ext) => json!({ "external_task_id": ext }),
            None => json!({}),
        }
    }

    /// `final_unit_deduction` of a succeeded task: its price
    /// ([`price_units`](super::account::price_units)), as Kling writes it (`"1"`, `"3.5"`).
    fn units(&self) -> String {
        super::account::price_units(&self.spec).to_string()
    }

    fn task_result(&self, base_url: &str) -> Value {
        let id = &self.id;
        match &self.spec {
            Spec::Video { duration, .. } => json!({
                "videos": [{
                    "id": self.result_id.to_string(),
                    "url": format!("{base_url}/files/{id}.mp4"),
                    "duration": duration.to_string(),
                }]
            }),
            Spec::Voice { voice_name } => json!({
                "voices": [{
                    "voice_id": self.result_id.to_string(),
                    "voice_name": voice_name,
                    "trial_url": format!("{base_url}/files/{id}.mp3"),
                    "owned_by": "kling-sim",
                }]
            }),
            Spec::Element {
                element_name,
                element_description,
                voice_id,
            } => json!({
                "elements": [{
                    "element_id": self.result_id,
                    "element_name": element_name,
                    "element_description": element_description,
                    "element_voice_info": { "voice_id": voice_id },
                    "status": "succeed",
                }]
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn fates(seed: u64, spec: &Spec, failure_rate: f64) -> Vec<Fate> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..200)
            .map(|_| draw_fate(&mut rng, spec, &Clock::new(1.0), 0.0, failure_rate))
            .collect()
    }

    #[test]
    fn draws_are_seeded_and_within_the_reported_ranges() {
        let std5 = Spec::Video {
            pro: false,
            duration: 5,
        };
        let pro = Spec::Video {
            pro: true,
            duration: 5,
        };
        let voice = Spec::Voice {
            voice_name: "v".into(),
        };
        for (spec, lo, hi) in [
            (&std5, 30.0, 120.0),
            (&pro, 60.0, 300.0),
            (&voice, 5.0, 20.0),
        ] {
            for p in fates(7, spec, 0.0) {
                let total = (p.queued + p.run).as_secs_f64();
                assert!(
                    (lo - 1e-6..=hi + 1e-6).contains(&total),
                    "{spec:?}: {total}"
                );
                assert!(p.queued > Duration::ZERO && p.failure.is_none());
            }
        }
        let a: Vec<_> = fates(7, &std5, 0.5)
            .iter()
            .map(|p| (p.run, p.failure))
            .collect();
        let b: Vec<_> = fates(7, &std5, 0.5)
            .iter()
            .map(|p| (p.run, p.failure))
            .collect();
        let c: Vec<_> = fates(8, &std5, 0.5)
            .iter()
            .map(|p| (p.run, p.failure))
            .collect();
        assert_eq!(a, b, "same seed, same draws");
        assert_ne!(a, c, "another seed, other draws");
        let failures = a.iter().filter(|(_, f)| f.is_some()).count();
        assert!((50..150).contains(&failures), "about half fail: {failures}");
    }
}
