//! What the simulator counted, served at `GET /_sim/stats` ([`FalStats`]), and every request it
//! made, at `GET /_sim/jobs` ([`FalJob`]). Tests read them to count submits (and double
//! submits), refusals, slot use and webhook deliveries, and to check downloaded bytes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Counters since start. Times are **simulated** seconds (real ones divided by `time_scale`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FalStats {
    /// The time factor in use (echoed).
    pub time_scale: f64,
    /// Queue API and history requests received, refused or not.
    pub requests: u64,
    /// Submits accepted (a request was made; lost answers included).
    pub submits: u64,
    /// Submits refused, by reason: `unauthorized`, `locked`, `unknown_model`, `bad_body`,
    /// `bad_query`, `bad_header`, `schema` (with `--validate-at-submit`), `queue_full`,
    /// `fault_500`, `fault_503`, `fault_429`.
    pub submits_refused: BTreeMap<String, u64>,
    /// Requests refused 401 (missing or unknown key), any endpoint.
    pub auth_refusals: u64,
    /// Accepted submits whose input equals an earlier accepted one of the same account and
    /// model: a client that submitted again after a lost answer (or simply sent one input
    /// twice; tests that count on this keep their inputs distinct).
    pub duplicate_inputs: u64,
    /// Submits refused 403 (exhausted balance).
    pub locked_refusals: u64,
    pub status_reads: u64,
    pub result_reads: u64,
    /// Cancel requests received.
    pub cancel_requests: u64,
    /// Requests cancelled (queued, or running with `--cancel-running`).
    pub cancelled: u64,
    /// Status, result and cancel requests answered 404 (unknown id, another account's, model
    /// path inserted, result expired).
    pub not_found: u64,
    /// CDN files served.
    pub file_downloads: u64,
    /// CDN requests answered 404 (unknown, not a success, or expired).
    pub files_not_found: u64,
    pub history_reads: u64,
    /// Unknown input keys seen in accepted bodies (ignored, or refused with
    /// `--refuse-unknown-keys`), and how often each.
    pub unknown_input_keys: u64,
    pub unknown_input_key_names: BTreeMap<String, u64>,
    /// Requests `IN_QUEUE` now, all accounts.
    pub queued: u64,
    /// Requests `IN_PROGRESS` now, all accounts.
    pub in_progress: u64,
    /// The most requests `IN_PROGRESS` at once, all accounts.
    pub max_in_progress: u64,
    /// The most unfinished (queued + running) requests at once, all accounts.
    pub max_unfinished: u64,
    /// Requests `COMPLETED` (succeeded, failed, cancelled, timed out).
    pub completed: u64,
    pub succeeded: u64,
    /// Completed requests that did not succeed, by `error_type` (cancels and timeouts too).
    pub failed_by_type: BTreeMap<String, u64>,
    /// Webhook attempts made (retries and duplicates included).
    pub webhook_attempts: u64,
    /// Attempts answered 2xx.
    pub webhooks_sent: u64,
    /// Attempts without a 2xx answer (refused, unreachable, timed out).
    pub webhooks_failed: u64,
    /// Deliveries abandoned after their last attempt.
    pub webhooks_given_up: u64,
    /// Attempts signed with a key no JWKS lists (`--webhook-bad-signature-rate`).
    pub webhooks_bad_signature: u64,
    /// Deliveries sent twice (`--webhook-duplicate-rate`).
    pub webhooks_duplicated: u64,
    /// USD charged: successful requests only.
    pub billed_usd: f64,
    pub faults: FalFaultStats,
    pub accounts: BTreeMap<String, FalAccountStats>,
}

/// Faults injected so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FalFaultStats {
    /// Submits answered 500 or 503 before any check.
    pub submit_5xx: u64,
    /// Submits answered 429 before any check.
    pub submit_429: u64,
    /// Accepted submits whose answer was lost (the request exists).
    pub lost_answers: u64,
    /// Accepted submits answered after `slow_ms`.
    pub slow: u64,
    /// Status, result and cancel requests answered 503.
    pub read_5xx: u64,
    /// Accepted requests drawn to fail when they run.
    pub failed_after_accept: u64,
}

/// One account.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FalAccountStats {
    /// Its concurrency limit.
    pub concurrency: u32,
    /// The user id its webhooks carry (`X-Fal-Webhook-User-Id`).
    pub user_id: String,
    /// Its submits are refused 403 "User is locked".
    pub exhausted: bool,
    pub submits: u64,
    pub queued: u64,
    pub in_progress: u64,
    /// The most of its requests `IN_PROGRESS` at once.
    pub max_in_progress: u64,
    /// Its unfinished (queued + running) requests now.
    pub unfinished: u64,
    /// The most of its requests unfinished at once: what a client that keeps its submits
    /// within the limit bounds.
    pub max_unfinished: u64,
    pub completed: u64,
    pub succeeded: u64,
    pub cancelled: u64,
    pub billed_usd: f64,
}

/// One request, for `GET /_sim/jobs`, in submission order. Times are simulated seconds since
/// the simulator started.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FalJob {
    pub request_id: String,
    pub account: String,
    /// The model id it was submitted to.
    pub endpoint: String,
    /// `normal` or `low`.
    pub priority: String,
    /// `IN_QUEUE`, `IN_PROGRESS` or `COMPLETED`.
    pub status: String,
    pub submitted: f64,
    pub started: Option<f64>,
    pub ended: Option<f64>,
    /// Its drawn run time once started.
    pub planned_seconds: f64,
    /// The result's HTTP status once completed (200, 422, 499, 500, 504).
    pub status_code: Option<u16>,
    pub error_type: Option<String>,
    pub cancelled: bool,
    /// Its submit answer was lost on purpose: the client does not know it exists.
    pub lost_answer: bool,
    /// The input's `prompt`, when it has one.
    pub prompt: Option<String>,
    /// sha256 (hex) of the input as JSON (group by it to find resubmitted inputs).
    pub input_sha256: String,
    /// `720p` or `1080p`.
    pub resolution: String,
    /// Seconds of video asked for.
    pub video_seconds: u32,
    /// Its CDN file (successes only; planned ones listed from the start).
    pub file_url: Option<String>,
    /// sha256 (hex) of the file's bytes, as a download must yield them.
    pub file_sha256: Option<String>,
    pub file_size: Option<u64>,
    /// What it costs if it succeeds.
    pub price_usd: f64,
    /// What was charged (its price once succeeded, else 0).
    pub billed_usd: f64,
    pub webhook_url: Option<String>,
    pub webhook_attempts: u32,
    /// Webhook attempts answered 2xx.
    pub webhook_deliveries: u32,
    /// Unknown input keys of its body.
    pub unknown_keys: Vec<String>,
}
