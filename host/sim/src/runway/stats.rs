//! The simulator's counters, served as JSON at `GET /_sim/stats` and by
//! [`RunwaySimHandle::stats`](super::RunwaySimHandle::stats), and the task history of
//! `GET /_sim/jobs`. Tests read them to prove what a client did: how many creates, how many
//! refusals of which kind, and above all how many tasks it had at the provider at once.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Counters since start.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RunwayStats {
    /// The time factor in use (echoed).
    pub time_scale: f64,
    /// The daily limit's rolling "24 hours", real seconds (echoed: `--day-seconds`, else
    /// 86,400 times the time factor).
    #[serde(default)]
    pub day_secs: f64,
    /// Every `/v1/…` request received, refused or not.
    pub requests: u64,
    /// Creates accepted (a task was made), both endpoints.
    pub creates: u64,
    /// Creates refused, by HTTP status (`"400"`, `"401"`, `"429"`, `"502"`, …). A create whose
    /// answer was lost is accepted, not refused.
    pub creates_refused: BTreeMap<String, u64>,
    /// Creates refused with 400 for their body (content type, JSON, validation).
    pub validation_refusals: u64,
    /// Requests refused with 401 (missing or wrong key), any path.
    pub auth_refusals: u64,
    /// Requests refused with 400 for a missing or unknown `X-Runway-Version`, any path.
    pub version_refusals: u64,
    /// Creates refused with 429 for the daily limit (the rate limit's are
    /// `faults.rate_limited_creates`).
    pub daily_limit_refusals: u64,
    /// `GET /v1/tasks/{id}` requests (found or not).
    pub gets: u64,
    /// Reads of a task sooner than Runway's pace (five seconds, scaled) after its create or
    /// its previous read.
    #[serde(default)]
    pub polls_too_soon: u64,
    /// `DELETE /v1/tasks/{id}` requests (found or not).
    pub deletes: u64,
    /// `GET /v1/organization` requests.
    pub organization_gets: u64,
    /// Task requests answered 404.
    pub not_found: u64,
    /// Tasks cancelled (a `DELETE` while `THROTTLED`, `PENDING` or `RUNNING`).
    pub cancelled: u64,
    /// Finished tasks deleted (a `DELETE` after the end).
    pub deleted: u64,
    /// Tasks that ended `SUCCEEDED`.
    pub succeeded: u64,
    /// Tasks that ended `FAILED`.
    pub failed: u64,
    /// Output files served.
    pub downloads: u64,
    /// Output links refused with 403 (expired or altered).
    pub link_refusals: u64,
    /// Credits spent by succeeded tasks.
    pub credits_charged: u64,
    /// Per model (wire name), every model listed.
    pub models: BTreeMap<String, ModelStats>,
    /// Faults injected, per kind.
    pub faults: FaultStats,
}

/// One model's slots and counters.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ModelStats {
    /// Its concurrency limit.
    pub concurrency: u32,
    /// Its daily limit.
    pub daily_limit: u32,
    /// Creates accepted.
    pub creates: u64,
    /// Tasks `PENDING` now.
    pub pending: u32,
    /// Tasks `RUNNING` now.
    pub running: u32,
    /// Tasks `THROTTLED` now.
    pub throttled: u32,
    /// The peak of tasks holding a slot (`PENDING` + `RUNNING`) at once; never above
    /// `concurrency`.
    pub max_running_seen: u32,
    /// The peak of unfinished tasks (`THROTTLED` + `PENDING` + `RUNNING`) at once: what a client
    /// had submitted and not yet seen end. A client that never over-submits keeps this at or
    /// below `concurrency`.
    pub max_held_seen: u32,
    /// Accepted creates within the rolling daily window now.
    pub daily_used: u32,
    pub succeeded: u64,
    pub failed: u64,
    pub cancelled: u64,
}

/// Faults injected so far.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct FaultStats {
    /// Requests answered 502/503/504 before taking effect (task reads' own 5xx included).
    pub http_5xx: u64,
    /// Requests answered 429 before taking effect: task reads (`read_429_rate`) and creates
    /// (`create_429_rate`).
    #[serde(default)]
    pub http_429: u64,
    /// Of those, creates (`create_429_rate`): Runway's rate limit, not its daily limit
    /// (`daily_limit_refusals`).
    #[serde(default)]
    pub rate_limited_creates: u64,
    /// Requests that took effect and then lost their answer.
    pub lost_answers: u64,
    /// Of those, creates that made a task: tasks the client was never told about.
    #[serde(default)]
    pub lost_create_answers: u64,
    /// Answers delayed by `slow_ms`.
    pub slow: u64,
    /// Accepted tasks drawn to end `FAILED`.
    pub failed_after_accept: u64,
}

/// One task, for `GET /_sim/jobs`, in creation order. Times are **simulated** seconds since
/// the first create (real seconds divided by `time_scale`). When a task ends and a throttled
/// one takes its slot, both happen at the same instant: `ended` (or `cancelled_at`) of the one
/// equals `started` of the other.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunwayJob {
    pub task_id: String,
    /// Wire name of the model.
    pub model: String,
    /// `image_to_video` or `text_to_video`.
    pub endpoint: String,
    /// Seconds of video.
    pub duration: u32,
    /// Its status now (`CANCELLED` stays so after it answers 404).
    pub status: String,
    /// Whether `GET` answers 404 for it now (deleted, or cancelled and gone).
    pub gone: bool,
    pub created: f64,
    /// When it took a slot (left `THROTTLED`).
    pub started: Option<f64>,
    /// When it began `RUNNING`.
    pub running: Option<f64>,
    /// When it ended `SUCCEEDED` or `FAILED`.
    pub ended: Option<f64>,
    /// When the first `DELETE` asked to cancel it (before `cancelled_at` by
    /// `cancel_lag_ms`).
    pub cancel_requested: Option<f64>,
    /// When it became `CANCELLED` and released its slot.
    pub cancelled_at: Option<f64>,
    /// Its drawn time from slot to end (`PENDING` + `RUNNING`).
    pub planned_seconds: f64,
    /// The `failureCode` it was drawn to end with, if any.
    pub failure_code: Option<String>,
    /// Credits charged (its estimate if it succeeded, else 0).
    pub credits: u64,
    /// Its reads sooner than Runway's pace (see [`RunwayStats::polls_too_soon`]).
    #[serde(default)]
    pub reads_too_soon: u32,
    /// The create's `promptText`, if any: what ties a task to the client's request (Runway
    /// has no client id), even a task whose create answer was lost.
    #[serde(default)]
    pub prompt_text: Option<String>,
}

/// One task read of the request log (`GET /_sim/reads`), in arrival order: every
/// `GET /v1/tasks/{id}` past the key and version checks, whatever it was answered.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunwayRead {
    pub task_id: String,
    /// When it arrived, in simulated seconds since the first create (as `RunwayJob` times).
    pub at: f64,
    /// The status it was answered: 200, 404, or an injected 429/5xx.
    pub status: u16,
}
