//! The webhook outbox's records (the statements are in `shared.rs`, the same on both stores):
//! a delivery per ended task with a `callback_url`, retried under a lease until delivered or
//! given up, every attempt kept.

use serde::Serialize;

/// A delivery to queue (`TaskStore::webhook_enqueue`).
#[derive(Clone, Debug)]
pub struct NewDelivery {
    /// The `webhook-id`: stable across attempts, so receivers can deduplicate.
    pub id: String,
    pub task_id: String,
    pub tenant: String,
    pub url: String,
    /// `task.completed`, `task.failed` or `task.cancelled`.
    pub event: String,
    /// The JSON body, fixed when queued.
    pub payload: String,
    pub now: i64,
}

/// A delivery as stored.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Delivery {
    pub id: String,
    pub task_id: String,
    #[serde(skip)]
    pub tenant: String,
    pub url: String,
    pub event: String,
    #[serde(skip)]
    pub payload: String,
    /// `pending`, `delivered` or `failed` (given up).
    pub status: String,
    /// Attempts made so far.
    #[serde(rename = "attempts_made")]
    pub attempts: i64,
    pub next_at: i64,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub created_at: i64,
    pub delivered_at: Option<i64>,
}

/// One attempt's outcome, recorded by the lease's owner (`TaskStore::webhook_attempt`).
#[derive(Clone, Debug)]
pub struct AttemptOutcome<'a> {
    pub delivery_id: &'a str,
    pub owner: &'a str,
    pub at: i64,
    /// The receiver's HTTP status, if it answered.
    pub status: Option<i64>,
    /// Why it failed, if it did.
    pub error: Option<String>,
    pub duration_ms: i64,
    /// What happens next.
    pub next: AttemptNext,
}

/// After an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptNext {
    Delivered,
    RetryAt(i64),
    GiveUp,
}

/// One stored attempt (`GET /v1/tasks/{id}/webhooks`).
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Attempt {
    pub at: i64,
    pub status: Option<i64>,
    pub error: Option<String>,
    pub duration_ms: i64,
}
