//! The simulator's counters, served as JSON at `GET /_sim/stats` and by `SimHandle::stats()`.
//! Tests and benchmarks read them to count provider requests, 1303 refusals, double submissions
//! and slot utilization.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The pace slotd's Kling handlers keep, in simulated seconds: a task's own query no sooner
/// than this after its create or its previous query (a list page, which answers for many
/// tasks in one request, is not a read of one). Kling documents no pace (only 429/1302 when
/// requests come too fast); this is the handlers' choice, counted so a client reading faster
/// shows in the figures.
pub const SINGLE_READ_PACE_S: f64 = 5.0;

/// Counters since start. Durations are in **simulated** seconds: real seconds divided by
/// `time_scale`, so they read like the real provider's no matter how fast the test runs.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SimStats {
    /// The account's concurrency limit (echoed for ratio computations).
    pub concurrency: u32,
    /// The time factor in use (echoed).
    pub time_scale: f64,
    /// Every `/v1/…` request received, refused or not.
    pub requests: u64,
    /// Those requests by `User-Agent` ("" without one): slotd names the handler release that
    /// makes each request, so a test sees which release spoke to the provider.
    #[serde(default)]
    pub requests_by_agent: BTreeMap<String, u64>,
    /// Creates accepted (a task was made), all kinds.
    pub creates: u64,
    /// Creates accepted per kind (`text2video`, `image2video`, `custom-voices`,
    /// `advanced-custom-elements`).
    pub creates_by_kind: BTreeMap<String, u64>,
    /// Per `external_task_id`: accepted creates plus creates refused as duplicates of it (1303
    /// and validation refusals are not counted). Above 1 means a client tried to submit the same
    /// thing again after it had been accepted.
    pub creates_by_external_id: BTreeMap<String, u64>,
    /// Creates refused because their `external_task_id` was taken (400/1201).
    pub duplicate_refusals: u64,
    /// Creates refused with 429/1303 (account full).
    pub rate_limited_1303: u64,
    /// Of those, the refusals the other client's hold caused (`--other-client-slots`): slotd's
    /// own jobs left room, the other client's took it.
    #[serde(default)]
    pub rate_limited_1303_other_client: u64,
    /// Requests refused with 400/1200 or 1201 for bad bodies or parameters (duplicates aside).
    pub validation_refusals: u64,
    /// Requests refused with 401.
    pub auth_refusals: u64,
    /// Of those, requests refused 401/1002 because the account's credentials were revoked
    /// (`POST /_sim/account {"revoked": true}`).
    #[serde(default)]
    pub revoked_refusals: u64,
    /// Creates refused 429/1102 because the balance did not cover their price
    /// (`POST /_sim/account {"balance": N}` or `--balance N`).
    #[serde(default)]
    pub balance_refusals: u64,
    /// Queries or downloads of something that does not exist (404).
    pub not_found: u64,
    /// Tasks holding a slot now (`submitted` or `processing`).
    pub running: u32,
    /// The most tasks ever holding a slot at once.
    pub max_running: u32,
    /// The most tasks of each kind (`text2video`, `image2video`, …) holding a slot at once:
    /// a client's pool of one kind of work is held to its own limit by these.
    #[serde(default)]
    pub max_running_by_kind: BTreeMap<String, u32>,
    /// Tasks that ended `succeed`.
    pub succeeded: u64,
    /// Tasks that ended `failed`.
    pub failed: u64,
    /// `GET …/{id}` queries.
    pub single_queries: u64,
    /// `GET …?pageNum=&pageSize=` queries.
    pub list_queries: u64,
    /// Queries of one task sooner than [`SINGLE_READ_PACE_S`] (scaled) after its create or
    /// its previous query.
    #[serde(default)]
    pub single_reads_too_soon: u64,
    /// Result files served (complete or not).
    pub downloads: u64,
    /// Callbacks that got an HTTP answer (any status).
    pub callbacks_sent: u64,
    /// Of those, callbacks answered with a status other than 2xx (refused by the receiver).
    pub callbacks_rejected: u64,
    /// Callbacks that got no answer (connection refused, timeout).
    pub callbacks_failed: u64,
    /// Sum over tasks of the time they held a slot, simulated seconds (running tasks count up
    /// to now).
    pub busy_slot_seconds: f64,
    /// From the first accepted create to the last task end (or now while any runs), simulated
    /// seconds.
    pub busy_window_seconds: f64,
    /// `busy_slot_seconds / (concurrency × busy_window_seconds)`; 0 before any create.
    pub utilization: f64,
    /// Faults injected, per kind.
    pub faults: FaultStats,
    /// Slots the other client of the account holds now (`--other-client-slots`).
    #[serde(default)]
    pub other_client_held: u32,
    /// The other client's bursts begun so far, oldest first.
    #[serde(default)]
    pub other_client_bursts: Vec<OtherClientBurst>,
    /// Element task id → the `element_voice_id` its create carried.
    pub element_voice_ids: BTreeMap<String, String>,
}

/// Faults injected so far.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct FaultStats {
    /// Requests answered 5xx before taking effect.
    pub http_5xx: u64,
    /// Answers whose body was cut into invalid JSON.
    pub malformed: u64,
    /// Answers delayed by `slow_ms`.
    pub slow: u64,
    /// Accepted tasks drawn to end `failed`.
    pub failed_after_accept: u64,
}

/// One burst of the other client of the account (`--other-client-slots`). Times are simulated
/// seconds since the first create, the time base of [`SimJob`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OtherClientBurst {
    /// When it began.
    pub start: f64,
    /// When it released its slots; `None` while it holds them.
    pub end: Option<f64>,
    /// The slots it wanted.
    pub slots: u32,
    /// The most slots it held at once (it takes only free ones, so slotd's jobs running at
    /// the start keep it below `slots` until they end).
    pub peak_held: u32,
}

/// One task the simulator ran, for `GET /_sim/jobs`. Times are simulated seconds since the
/// first create.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SimJob {
    pub task_id: String,
    /// `text2video`, `image2video`, `custom-voices` or `advanced-custom-elements`.
    pub kind: String,
    pub external_task_id: Option<String>,
    pub status: String,
    /// When it took its slot.
    pub started: f64,
    /// When it released it, if it has.
    pub ended: Option<f64>,
    /// Its drawn duration (create to end).
    pub planned_seconds: f64,
    /// The `callback_url` its create carried, if any.
    #[serde(default)]
    pub callback_url: Option<String>,
}
