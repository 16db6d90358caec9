//! One simulated task: what was asked (model, endpoint, seconds, price), where it is in
//! `THROTTLED → PENDING → RUNNING → SUCCEEDED | FAILED` (or `CANCELLED`), how long each phase
//! lasts (its [`Fate`], drawn from the seed), and how it looks on the wire.

use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::model::Model;
use super::validate::CreateRequest;
use crate::clock::{Clock, iso_now};

/// Runway's task statuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Throttled,
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Throttled => "THROTTLED",
            Status::Pending => "PENDING",
            Status::Running => "RUNNING",
            Status::Succeeded => "SUCCEEDED",
            Status::Failed => "FAILED",
            Status::Cancelled => "CANCELLED",
        }
    }

    pub(crate) fn is_terminal(self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed | Status::Cancelled)
    }
}

/// A documented failure: `failureCode` and the `failure` text that goes with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Failure {
    pub code: &'static str,
    pub message: &'static str,
}

/// The failure codes of RUNWAY_API.md ("Failure codes"), one example of each form.
pub(crate) const FAILURES: [Failure; 8] = [
    Failure {
        code: "SAFETY.INPUT.TEXT",
        message: "The input text did not pass moderation",
    },
    Failure {
        code: "SAFETY.INPUT.IMAGE",
        message: "The input image did not pass moderation",
    },
    Failure {
        code: "SAFETY.OUTPUT.VIDEO",
        message: "The generated video did not pass moderation",
    },
    Failure {
        code: "INTERNAL.BAD_OUTPUT.CODE01",
        message: "The output was rejected for quality reasons",
    },
    Failure {
        code: "INPUT_PREPROCESSING.SAFETY.TEXT",
        message: "The prompt text was rejected by moderation",
    },
    Failure {
        code: "INPUT_PREPROCESSING.INTERNAL",
        message: "Moderation could not process the input",
    },
    Failure {
        code: "ASSET.INVALID",
        message: "An input asset is invalid",
    },
    Failure {
        code: "INTERNAL",
        message: "An internal error occurred",
    },
];

/// When a task changes status once it holds a slot, in real time (already scaled).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Fate {
    /// Time spent `PENDING` before `RUNNING`.
    pub pending: Duration,
    /// Time spent `RUNNING` before the end.
    pub run: Duration,
    /// `Some`: the task ends `FAILED` with this code.
    pub failure: Option<Failure>,
}

/// Simulated seconds of `RUNNING` for a clip: 6–15 s per clip second, times the model's
/// slowness (a 5 s `gen4_turbo` clip 30–75 s, an 8 s `veo3` clip 2–5 min).
fn run_range(model: Model, seconds: u32) -> (f64, f64) {
    let s = f64::from(seconds.max(1)) * model.slowness();
    (6.0 * s, 15.0 * s)
}

/// Draws a task's timing and fate, scaled to real time by `clock`.
pub(crate) fn draw_fate(
    rng: &mut StdRng,
    req: &CreateRequest,
    clock: &Clock,
    long_tail_rate: f64,
    failure_rate: f64,
) -> Fate {
    let (lo, hi) = run_range(req.model, req.duration);
    let mut run = if rng.random::<f64>() < long_tail_rate {
        rng.random_range(300.0..600.0)
    } else {
        rng.random_range(lo..hi)
    };
    let pending = rng.random_range(2.0..8.0);
    let failure = (rng.random::<f64>() < failure_rate).then(|| {
        run *= rng.random_range(0.2..1.0);
        FAILURES[rng.random_range(0..FAILURES.len())]
    });
    Fate {
        pending: clock.scaled(pending),
        run: clock.scaled(run),
        failure,
    }
}

/// A task as the simulator keeps it (also after it ended, was cancelled or deleted: the
/// `/_sim/jobs` history).
#[derive(Clone, Debug)]
pub(crate) struct Task {
    pub id: String,
    pub req: CreateRequest,
    pub status: Status,
    /// `createdAt`, ISO 8601 UTC with milliseconds.
    pub created_at: String,
    pub created: Instant,
    /// When it took a slot (left `THROTTLED`), once it has.
    pub started: Option<Instant>,
    /// When it began `RUNNING`.
    pub running_at: Option<Instant>,
    /// When it ended `SUCCEEDED` or `FAILED` (released its slot).
    pub ended: Option<Instant>,
    /// When the first `DELETE` asked to cancel it while unfinished.
    pub cancel_requested: Option<Instant>,
    /// When it became `CANCELLED` (released its slot, if it held one).
    pub cancelled_at: Option<Instant>,
    /// From this instant on the task answers 404 (deleted, or cancelled and gone).
    pub gone_at: Option<Instant>,
    pub fate: Fate,
    /// Stops the task's timer when it is cancelled.
    pub stop: CancellationToken,
    /// When it was last read (`GET`), if ever.
    pub last_read: Option<Instant>,
    /// Reads sooner than Runway's pace after the create or the previous read.
    pub reads_too_soon: u32,
    /// The create's `promptText`, if any.
    pub prompt_text: Option<String>,
}

impl Task {
    pub(crate) fn new(
        id: String,
        req: CreateRequest,
        prompt_text: Option<String>,
        fate: Fate,
        now: Instant,
    ) -> Task {
        Task {
            id,
            req,
            status: Status::Throttled,
            created_at: iso_now(),
            created: now,
            started: None,
            running_at: None,
            ended: None,
            cancel_requested: None,
            cancelled_at: None,
            gone_at: None,
            fate,
            stop: CancellationToken::new(),
            last_read: None,
            reads_too_soon: 0,
            prompt_text,
        }
    }

    /// Whether `GET` still finds it at `now`.
    pub(crate) fn visible(&self, now: Instant) -> bool {
        self.gone_at.is_none_or(|t| now < t)
    }

    /// What it costs: its estimate once succeeded, nothing otherwise.
    pub(crate) fn cost(&self) -> u64 {
        if self.status == Status::Succeeded {
            self.req.credits()
        } else {
            0
        }
    }

    /// The task object of `GET /v1/tasks/{id}`; `output` is the link minted for this answer.
    pub(crate) fn to_json(&self, now: Instant, output: Option<String>) -> Value {
        let mut obj = json!({
            "id": self.id,
            "createdAt": self.created_at,
            "status": self.status.as_str(),
        });
        if self.status.is_terminal() {
            obj["cost"] = json!({ "credits": self.cost() });
        } else {
            obj["estimatedCost"] = json!({ "credits": self.req.credits() });
        }
        match self.status {
            Status::Running => obj["progress"] = json!(self.progress(now)),
            Status::Succeeded => obj["output"] = json!(output.into_iter().collect::<Vec<_>>()),
            Status::Failed => {
                if let Some(f) = self.fate.failure {
                    obj["failure"] = json!(f.message);
                    obj["failureCode"] = json!(f.code);
                }
            }
            _ => {}
        }
        obj
    }

    /// Share of `RUNNING` time elapsed, 0–0.99, two decimals.
    fn progress(&self, now: Instant) -> f64 {
        let Some(since) = self.running_at else {
            return 0.0;
        };
        let total = self.fate.run.as_secs_f64();
        let done = now.saturating_duration_since(since).as_secs_f64();
        let share = if total > 0.0 { done / total } else { 0.0 };
        (share.clamp(0.0, 0.99) * 100.0).floor() / 100.0
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::runway::model::Endpoint;

    fn fates(seed: u64, model: Model, seconds: u32, failure_rate: f64) -> Vec<Fate> {
        let req = CreateRequest {
            endpoint: Endpoint::TextToVideo,
            model,
            duration: seconds,
            audio: false,
        };
        let mut rng = StdRng::seed_from_u64(seed);
        (0..200)
            .map(|_| draw_fate(&mut rng, &req, &Clock::new(1.0), 0.0, failure_rate))
            .collect()
    }

    #[test]
    fn draws_are_seeded_and_slower_for_long_clips_and_veo() {
        let short = fates(7, Model::Gen4Turbo, 5, 0.0);
        for p in &short {
            let run = p.run.as_secs_f64();
            assert!((30.0..=75.0).contains(&run), "{run}");
            assert!(p.pending >= Duration::from_secs(2) && p.failure.is_none());
        }
        let mean = |ps: &[Fate]| ps.iter().map(|p| p.run.as_secs_f64()).sum::<f64>() / 200.0;
        assert!(mean(&fates(7, Model::Gen4Turbo, 10, 0.0)) > mean(&short));
        assert!(mean(&fates(7, Model::Veo3, 8, 0.0)) > mean(&fates(7, Model::Gen4Turbo, 8, 0.0)));
        assert_eq!(
            fates(7, Model::Veo31, 8, 0.5),
            fates(7, Model::Veo31, 8, 0.5)
        );
        assert_ne!(
            fates(7, Model::Veo31, 8, 0.5),
            fates(8, Model::Veo31, 8, 0.5)
        );
        let failed = fates(7, Model::Veo31, 8, 0.5)
            .iter()
            .filter(|p| p.failure.is_some())
            .count();
        assert!((50..150).contains(&failed), "about half fail: {failed}");
    }
}
