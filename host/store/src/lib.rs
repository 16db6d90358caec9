//! Durable state: tasks, units and the append-only unit event log (docs/state-machine.md).
//!
//! The database is the source of truth. Every unit transition goes through [`TaskStore`] and is
//! committed before the scheduler acts on it. Transitions are single guarded statements
//! (`UPDATE … WHERE status = … RETURNING`), so two actors can never both move one unit.
//! Queries are named `noun_verb`.
//!
//! Implementations: [`sqlite::SqliteStore`] (embedded default) and [`postgres::PostgresStore`]
//! (scale-out); both run the one test suite in `suite.rs`.

mod events;
pub mod group_commit;
mod one_impl;
pub mod postgres;
mod release_signals;
mod releases;
mod rollouts;
mod shared;
pub mod sqlite;
mod standing;
pub use standing::QueueStanding;
#[cfg(test)]
pub(crate) mod suite;
pub mod terms;
mod update;
mod webhooks;

/// The store's traits, for `use slotd_store::prelude::*` where their methods are called.
pub mod prelude {
    pub use crate::{RecordWrite, ServiceStore, StoreRead, TaskStore, UnitWrite};
}

use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;

pub use events::{BadCursor, EventCursor, EventScope};
pub use release_signals::ReleaseSignals;
pub use releases::{
    HandlerLoad, NewRelease, Published, Release, ReleaseFollower, current_releases, release_key,
};
pub use rollouts::{ReleaseOutcome, Rollout, RolloutEvent, RolloutMove, RolloutState};
use slotd_core::model::{Unit, UnitCounts, UnitStatus};
pub use terms::{
    Bind, Budget, Create, Grant, Marked, PendingGroup, SpendLimit, SpendScope, SpendTerms,
    Submission, TaskTerms, Usage,
};
pub(crate) use update::has_repeats;
pub use update::{
    ApplyReport, Field, PROVIDER_QUEUE, RefusedWrite, UnitUpdate, is_provider_queue, split_illegal,
};
pub use webhooks::{Attempt, AttemptNext, AttemptOutcome, Delivery, NewDelivery};

/// Store failures. `Unavailable` is what the API maps to 503 and the scheduler to "pause".
#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// A write carried a fencing token older than the pool's current one: the writer lost
    /// its lease to a newer scheduler (docs/operations.md). Nothing was written.
    #[error("pool {pool}: fencing token {token} is stale (current {current}); write refused")]
    Fenced {
        pool: String,
        token: i64,
        current: i64,
    },
    /// The database refused a status change the state machine forbids (its trigger on
    /// `units`, migration 0006): a bug in the writer, never applied.
    #[error("refused by the state machine: {0}")]
    IllegalTransition(String),
    #[error("database error: {0}")]
    Other(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed => StoreError::Unavailable(e.to_string()),
            sqlx::Error::Database(ref db) if db.code().is_some_and(|c| is_unavailable_code(&c)) => {
                StoreError::Unavailable(e.to_string())
            }
            sqlx::Error::Database(ref db)
                if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some()
                    && db.code().is_some_and(|c| is_sqlite_unavailable_code(&c)) =>
            {
                StoreError::Unavailable(e.to_string())
            }
            sqlx::Error::Database(ref db) if db.message().contains("illegal unit transition") => {
                StoreError::IllegalTransition(db.message().to_string())
            }
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
                StoreError::Corrupt(e.to_string())
            }
            other => StoreError::Other(other.to_string()),
        }
    }
}

/// PostgreSQL SQLSTATEs that mean "the server is not serving right now", not "this query is
/// wrong": connection exceptions (class 08), the server shutting down or starting up
/// (57P01-57P03) and no connection slots left (53300).
fn is_unavailable_code(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "53300")
}

/// SQLite result codes that mean "the file cannot be written right now", not "this query is
/// wrong": busy (5) and locked (6) past the busy timeout, an I/O error (10) and a full disk
/// (13). SQLite reports extended codes (`SQLITE_IOERR_WRITE` is 778); the primary code is the
/// low byte.
fn is_sqlite_unavailable_code(code: &str) -> bool {
    code.parse::<i32>()
        .is_ok_and(|c| matches!(c & 0xff, 5 | 6 | 10 | 13))
}

pub type StoreResult<T> = Result<T, StoreError>;

/// A scheduler's claim to write for one pool: the fencing token of its pool lease
/// (docs/operations.md). Writes carrying a fence are refused with [`StoreError::Fenced`] once a newer
/// token has been seen for the pool, so a paused ex-leader cannot write after losing its lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub pool: String,
    /// Monotonically increasing per pool (issued by the lease store).
    pub token: i64,
}

/// A task to create, with its planned units.
#[derive(Clone, Debug)]
pub struct NewTask {
    pub id: String,
    pub tenant: String,
    pub task_type: String,
    pub payload: String,
    pub idempotency_key: Option<String>,
    pub priority: i32,
    /// The request's `callback_url` (the API's name and the column's): where the task's
    /// completion webhook goes.
    pub completion_webhook_url: Option<String>,
    pub units: Vec<NewUnit>,
    pub now: i64,
    /// Deadline terms; default: none.
    pub terms: TaskTerms,
}

/// A unit to create (ids are generated by the caller).
#[derive(Clone, Debug)]
pub struct NewUnit {
    pub id: String,
    pub pool: String,
    pub stage: String,
    pub spec: String,
    pub state: String,
    /// The pools chosen by the handler's `plan-routed` (JSON object stage → pool), if any.
    pub routes: Option<String>,
    /// A routed unit's options (JSON `UnitRouting`, docs/routes.md): it waits in its route's
    /// pool (`route:NAME`) until bound.
    pub routing: Option<String>,
    /// The handler's estimate of the unit's cost (contract 1.2), if it gave one.
    pub cost_estimate: Option<f64>,
    /// The handler release (sha256) whose `plan` made it.
    pub planned_release: Option<String>,
}

/// The result of [`UnitWrite::task_create`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Created {
    /// A new task was stored.
    New(String),
    /// The tenant's idempotency key already named this task; nothing was stored.
    Existing(String),
}

/// A task header as stored.
#[derive(Clone, Debug, Serialize)]
pub struct TaskRecord {
    pub id: String,
    pub tenant: String,
    pub task_type: String,
    pub payload: String,
    pub idempotency_key: Option<String>,
    pub priority: i32,
    /// The request's `callback_url` (the API's name and the column's): where the task's
    /// completion webhook goes.
    pub completion_webhook_url: Option<String>,
    /// When the client first asked to cancel the task (Unix ms), if it did.
    pub cancel_requested_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    /// Unit counts by status (status and progress derive from these).
    #[serde(skip)]
    pub counts: UnitCounts,
    /// Deadline terms, if the task gave any.
    #[serde(skip)]
    pub terms: TaskTerms,
}

/// Filters and paging for [`StoreRead::task_list`].
#[derive(Clone, Debug, Default)]
pub struct TaskFilter {
    pub task_type: Option<String>,
    /// Only tasks with at least one unit in this status.
    pub unit_status: Option<UnitStatus>,
    /// Return tasks created before this cursor (exclusive): the `seq` of the last task seen.
    pub before: Option<i64>,
    pub limit: u32,
}

/// Page size of [`StoreRead::task_list`] when the caller asks for 0.
pub const LIST_LIMIT_DEFAULT: u32 = 50;
/// The largest page [`StoreRead::task_list`] serves, whoever asks: a guard on the store, not
/// the API's bound (`GET /v1/tasks` accepts at most 500, its own `LIST_LIMIT_MAX`).
pub const PAGE_ROWS_MAX: u32 = 1000;

/// Longest idempotency key [`StoreRead::unit_find_by_provider`] considers (the key comes from
/// outside, and every prefix of it is a candidate unit id).
pub const MAX_LOOKUP_KEY_BYTES: usize = 512;

/// The unit ids an idempotency key (`{unit id}-{stage}-{attempt}`) may name: ids and stages
/// may contain `-`, so every prefix ending before a `-` is a candidate, confirmed by rebuilding
/// the key from the unit found. None for a key longer than [`MAX_LOOKUP_KEY_BYTES`].
pub(crate) fn key_candidates(key: &str) -> Vec<&str> {
    if key.len() > MAX_LOOKUP_KEY_BYTES {
        return Vec::new();
    }
    key.match_indices('-').map(|(i, _)| &key[..i]).collect()
}

/// What [`StoreRead::unit_find_by_provider_refs`] keeps of the units its read found (by job
/// id or by a key's candidate ids): those whose job is one of `jobs` (the first per job) or
/// whose key is one of `keys`, each once.
pub(crate) fn provider_refs_found(units: Vec<Unit>, jobs: &[&str], keys: &[String]) -> Vec<Unit> {
    let mut jobs_seen = std::collections::HashSet::new();
    let mut ids_seen = std::collections::HashSet::new();
    units
        .into_iter()
        .filter(|u| {
            let by_job = u
                .provider_job_id
                .as_deref()
                .is_some_and(|j| jobs.contains(&j) && jobs_seen.insert(j.to_string()));
            (by_job || keys.contains(&u.idempotency_key())) && ids_seen.insert(u.id.clone())
        })
        .collect()
}

/// One page of tasks, newest first.
#[derive(Clone, Debug)]
pub struct TaskPage {
    pub tasks: Vec<TaskRecord>,
    /// Cursor for the next page, if there may be one.
    pub next: Option<i64>,
}

/// One row of the append-only unit event log.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct UnitEvent {
    pub id: i64,
    pub unit_id: String,
    pub task_id: String,
    pub at: i64,
    pub from_status: Option<String>,
    pub to_status: String,
    pub stage: String,
    /// What happened ("accepted job 123", "capacity rejected", "handler fault: trap", …).
    pub detail: Option<String>,
    pub error: Option<String>,
}

/// One slot-relevant transition of a pool's unit (entering or leaving `submitted`), for the
/// console's slot timeline ([`StoreRead::pool_slot_log`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotEvent {
    pub id: i64,
    pub unit_id: String,
    pub task_id: String,
    pub tenant: String,
    pub at: i64,
    pub from_status: Option<String>,
    pub to_status: String,
    /// The stage after the transition: a stage that changed means the job ended well.
    pub stage: String,
    /// Why ("provider over capacity; back to pending", …).
    pub detail: Option<String>,
}

/// A unit of a pool holding a slot now, and since when (its `submitted_at`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotHolder {
    pub unit_id: String,
    pub task_id: String,
    pub tenant: String,
    pub stage: String,
    pub since: i64,
}

/// What [`StoreRead::pool_slot_log`] reads: the window's transitions and the current holders.
#[derive(Clone, Debug, Default)]
pub struct SlotLog {
    /// Transitions into or out of `submitted` at or after the window's start, oldest first.
    pub events: Vec<SlotEvent>,
    /// The units `submitted` now (their start may lie before the window).
    pub holders: Vec<SlotHolder>,
    /// The event cap was reached: the oldest transitions of the window are missing.
    pub truncated: bool,
}

/// A page of an event stream ([`StoreRead::unit_events_after`]).
#[derive(Clone, Debug, Default)]
pub struct EventPage {
    /// The events, each with the cursor that resumes right after it.
    pub events: Vec<(EventCursor, UnitEvent)>,
    /// Where to read on.
    pub next: EventCursor,
}

/// Which tasks got events in a stretch of the whole log ([`StoreRead::unit_event_scopes_after`]):
/// what one reader of the log tells the streams it serves, so that each reads its own scope
/// only when there is something in it.
#[derive(Clone, Debug, Default)]
pub struct ScopePage {
    /// `(tenant, task id)` of every task with events in the page, each once, in no order.
    pub scopes: Vec<(String, String)>,
    /// Where to read on (the same cursor a stream of every tenant would have reached).
    pub next: EventCursor,
    /// The page was full: more events may follow right away.
    pub more: bool,
}

/// What a cancellation did. No slot is freed by it: a `submitted` unit's job keeps running at
/// the provider, so the unit keeps its slot until the scheduler sees the job end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cancelled {
    /// Units moved to `cancelled` now (pending, succeeded, finalizing).
    pub units: u32,
    /// `submitted` units newly marked cancel-requested: they end `cancelled` when their
    /// provider jobs end.
    pub waiting: u32,
}

/// The event log's detail for a `submitted` unit a cancel reached (it keeps its status).
pub const CANCEL_WAIT_DETAIL: &str =
    "cancel requested by client; the unit keeps its slot until its provider job ends";

/// Unit counts per (pool, status), for metrics.
#[derive(Clone, Debug)]
pub struct PoolStatusCount {
    pub pool: String,
    pub status: UnitStatus,
    pub count: u64,
}

/// One row of the append-only handler version history: a state a handler file's version
/// entered (loaded and active, refused, quarantined, unloaded).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct HandlerVersionRow {
    /// Row id (ascending with time); ignored when recording.
    pub id: i64,
    /// When (Unix ms).
    pub at: i64,
    /// The file the version came from.
    pub path: String,
    /// Declared handler name, when `describe` answered.
    pub name: Option<String>,
    /// Declared version, when `describe` answered.
    pub version: Option<String>,
    /// sha256 of the file's content, hex.
    pub sha256: String,
    /// `active`, `refused`, `quarantined` or `unloaded`.
    pub state: String,
    /// Why it was refused, quarantined or unloaded.
    pub reason: Option<String>,
}

/// What [`UnitWrite::unit_finalize_release`] is asked to do.
#[derive(Clone, Copy, Debug)]
pub struct FinalizeRelease<'a> {
    pub id: &'a str,
    pub owner: &'a str,
    /// Error JSON recorded on the unit and in the event.
    pub error: &'a str,
    /// When another finalizer may try again (ignored when `give_up`).
    pub next_at: i64,
    /// The attempts are spent: park the unit (`next_at` = `FINALIZE_PARKED_AT`) until an
    /// explicit retry.
    pub give_up: bool,
}

/// The durable store's reads. Times are Unix milliseconds passed in by the caller (injected
/// clock). The store is three traits: these reads, the [`RecordWrite`]s beside the units and
/// the [`UnitWrite`]s; [`TaskStore`] is all three (what a driver implements and a test
/// holds), [`ServiceStore`] the first two (what the service holds), and the unit writes
/// belong to one holder, the lifecycle.
#[async_trait]
pub trait StoreRead: Send + Sync + 'static {
    /// Cheap liveness check for `/readyz`.
    async fn ping(&self) -> StoreResult<()>;

    /// A tenant's task, or `None` (also for another tenant's task).
    async fn task_get(&self, tenant: &str, id: &str) -> StoreResult<Option<TaskRecord>>;

    /// The units of a task, by index.
    async fn task_units(&self, task_id: &str) -> StoreResult<Vec<Unit>>;

    /// A tenant's tasks, newest first.
    async fn task_list(&self, tenant: &str, filter: &TaskFilter) -> StoreResult<TaskPage>;

    /// Tasks newest first: of one tenant, or of every tenant with `None` (the console's
    /// admin view).
    async fn task_list_any(
        &self,
        tenant: Option<&str>,
        filter: &TaskFilter,
    ) -> StoreResult<TaskPage>;

    /// The tenant that owns task `id`, if there is such a task (an admin acting on it).
    async fn task_tenant(&self, id: &str) -> StoreResult<Option<String>>;

    /// Pending units of `pool` whose type is in `task_types` and whose `next_at <= now`, in
    /// fill order: priority (high first), then round-robin across tenants, FIFO within a tenant.
    /// Within a (priority, tenant), earliest deadline first (units without one last).
    async fn unit_list_pending(
        &self,
        pool: &str,
        task_types: &[String],
        now: i64,
        limit: u32,
    ) -> StoreResult<Vec<Unit>> {
        self.unit_list_fill(pool, task_types, now, limit, &[]).await
    }

    /// [`StoreRead::unit_list_pending`] leaving out the units of `except_tenants` (tenants
    /// found over budget earlier in the same fill).
    async fn unit_list_fill(
        &self,
        pool: &str,
        task_types: &[String],
        now: i64,
        limit: u32,
        except_tenants: &[String],
    ) -> StoreResult<Vec<Unit>>;

    /// The creates recorded for `pool`'s quotas (grants with `quota_pool`) at or after
    /// `since`, oldest first.
    async fn quota_creates_since(&self, pool: &str, since: i64) -> StoreResult<Vec<Create>>;

    /// Slots each tenant's units hold in `pool` now (tenants holding none are left out).
    async fn unit_count_submitted_by_tenant(&self, pool: &str) -> StoreResult<Vec<(String, u64)>>;

    /// Submitted units of `pool`, the accounts they were submitted on and their submissions.
    async fn unit_list_submitted_accounts(&self, pool: &str) -> StoreResult<Vec<Submission>>;

    /// Pending units of `pool` with a deadline or start-by time to enforce (not best effort),
    /// earliest deadline first.
    async fn unit_list_deadlined(&self, pool: &str, limit: u32) -> StoreResult<Vec<Unit>>;

    /// Pending units of `pool` per (priority, tenant), for the priorities at or above
    /// `min_priority` (the deadline sweep's picture of the fill order ahead of its units).
    async fn unit_pending_groups(
        &self,
        pool: &str,
        min_priority: i32,
    ) -> StoreResult<Vec<PendingGroup>>;

    /// How many pending units of its own (pool, priority, tenant) group come before the unit
    /// `unit_id` in fill order (deadline, task, index), counting no further than `cap`.
    async fn unit_rank_in_group(&self, unit_id: &str, cap: u32) -> StoreResult<u64>;

    /// A tenant's budget, if it has one.
    async fn budget_get(&self, tenant: &str) -> StoreResult<Option<Budget>>;

    /// The reserved-or-spent cost of a pool's or an account's grants made at or after `since`
    /// (a provider spend limit's period; see `terms/spend.rs`).
    async fn spend_used(&self, scope: &SpendScope, since: i64) -> StoreResult<f64>;

    /// A tenant's reserved and spent cost in the period of `period_ms` containing `now`.
    async fn budget_usage(&self, tenant: &str, period_ms: i64, now: i64) -> StoreResult<Usage>;

    /// Per tenant over every unit: (tenant, provider-reported cost, estimated cost, units
    /// with a reported cost).
    async fn cost_by_tenant(&self) -> StoreResult<Vec<(String, f64, f64, i64)>>;

    /// Submitted units of `pool` (types in `task_types`) whose poll is due, soonest first.
    async fn unit_list_due(
        &self,
        pool: &str,
        task_types: &[String],
        now: i64,
        limit: u32,
    ) -> StoreResult<Vec<Unit>>;

    /// The earliest `next_at` of `pool`'s units in `status` (when the pool's loop has
    /// something to do next), or `None` if it has none.
    async fn unit_next_due(&self, pool: &str, status: UnitStatus) -> StoreResult<Option<i64>>;

    /// [`StoreRead::unit_next_due`] of two statuses, read in one statement.
    async fn unit_next_due_of_both(
        &self,
        pool: &str,
        first: UnitStatus,
        second: UnitStatus,
    ) -> StoreResult<(Option<i64>, Option<i64>)>;

    /// How many of `pool`'s `submitted` units on `account` the provider holds in its own
    /// queue (`wait_reason` [`PROVIDER_QUEUE`], contract 1.4 `observe.queued`).
    async fn unit_count_provider_queued(
        &self,
        pool: &str,
        account: Option<&str>,
    ) -> StoreResult<u32>;

    /// Ids of the units of `pool` currently `submitted` (slot reconciliation).
    async fn unit_list_submitted_ids(&self, pool: &str) -> StoreResult<Vec<String>>;

    /// Find the submitted unit a provider webhook refers to, by job id or idempotency key,
    /// among units of the given task types.
    async fn unit_find_by_provider(
        &self,
        task_types: &[String],
        provider_job_id: Option<&str>,
        idempotency_key: Option<&str>,
    ) -> StoreResult<Option<Unit>>;

    /// The submitted units of the given task types whose provider job is one of `jobs` or
    /// whose idempotency key is one of `keys`, in one read (the batched form of
    /// [`StoreRead::unit_find_by_provider`]). At most one unit per job id; each unit once.
    async fn unit_find_by_provider_refs(
        &self,
        task_types: &[String],
        jobs: &[String],
        keys: &[String],
    ) -> StoreResult<Vec<Unit>>;

    /// Unit counts per pool and status.
    async fn unit_count_by_pool(&self) -> StoreResult<Vec<PoolStatusCount>>;

    /// Where the task's waiting units stand ([`QueueStanding`]); `None` when none of its units
    /// waits for or holds a slot.
    async fn task_queue_standing(&self, task_id: &str) -> StoreResult<Option<QueueStanding>>;

    /// The event log of one task (every unit), oldest first.
    async fn unit_events(&self, task_id: &str) -> StoreResult<Vec<UnitEvent>>;

    /// Among the last `scan` events of every task, those whose detail starts with `prefix`.
    async fn unit_events_recent_with(&self, prefix: &str, scan: i64)
    -> StoreResult<Vec<UnitEvent>>;

    /// At most `limit` events of `scope` after `after`, in stream order, each with the cursor
    /// that resumes after it; and the cursor to read on from (see `events.rs` for why this is
    /// not simply "ids above").
    async fn unit_events_after(
        &self,
        scope: EventScope<'_>,
        after: EventCursor,
        limit: u32,
    ) -> StoreResult<EventPage>;

    /// Which tasks (with their tenant) have events among the next `limit` events of the whole
    /// log after `after`, every tenant's, read in the same order and with the same cursor as
    /// [`StoreRead::unit_events_after`]: a reader following the log with it learns which
    /// streams have something to read without reading the events themselves.
    async fn unit_event_scopes_after(
        &self,
        after: EventCursor,
        limit: u32,
    ) -> StoreResult<ScopePage>;

    /// The cursor at the log's end now: a stream starting there sees only what comes next.
    async fn unit_events_head(&self) -> StoreResult<EventCursor>;

    /// Whether task `task_id` has events a stream at `cursor` has not read yet, committed or
    /// not yet settled (a task stream ends only once there are none).
    async fn unit_events_behind(&self, task_id: &str, cursor: EventCursor) -> StoreResult<bool>;

    /// Tasks with a `callback_url` whose end is not queued for delivery yet and whose every
    /// unit has settled (completed, failed, cancelled, or parked after its finalization gave
    /// up): the tasks that have ended, after task `seq` `after`, oldest first, as `(seq,
    /// tenant, task id, ends)`, `ends` counting the retries that reopened the task's webhook
    /// (0 until one does: the end to queue is its `ends + 1`-th). A task still running costs
    /// one index probe, so a sweep reads the ended tasks, not every open one.
    async fn webhook_open_tasks(
        &self,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<(i64, String, String, i64)>>;

    /// A task's deliveries, each with its attempts (oldest first).
    async fn webhook_list(&self, task_id: &str) -> StoreResult<Vec<(Delivery, Vec<Attempt>)>>;

    /// The newest `limit` deliveries across tasks, newest first: of one tenant, or of every
    /// tenant with `None`; only those in `status` if given.
    async fn webhook_recent(
        &self,
        tenant: Option<&str>,
        status: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<Delivery>>;

    /// The slot history of `pool` since `since` (Unix ms): at most `limit` transitions into
    /// or out of `submitted`, plus the units holding a slot now. Read backwards from the log's
    /// end by id, so a recent window costs the window, not the log.
    async fn pool_slot_log(&self, pool: &str, since: i64, limit: u32) -> StoreResult<SlotLog>;

    /// A published handler release and its bytes, by its sha256 (`None`: never published).
    /// Bytes that no longer hash to the key are reported as corrupt, never returned.
    async fn release_get(&self, sha256: &str) -> StoreResult<Option<(Release, Vec<u8>)>>;

    /// The published releases, newest first; only those of handler `name` if given.
    async fn release_list(&self, name: Option<&str>) -> StoreResult<Vec<Release>>;

    /// Every process's word on the releases it was given, heard since `since` (Unix ms).
    async fn handler_load_list(&self, since: i64) -> StoreResult<Vec<HandlerLoad>>;

    /// How many units have a provider job in flight (`submitted`, `succeeded`, `finalizing`)
    /// per handler release that created it.
    async fn unit_job_releases(&self) -> StoreResult<Vec<(String, i64)>>;

    /// A rollout's steps, oldest first.
    async fn rollout_events(&self, id: &str) -> StoreResult<Vec<RolloutEvent>>;

    /// The newest `limit` rollouts, newest first; only handler `name`'s if given.
    async fn rollout_list(&self, name: Option<&str>, limit: u32) -> StoreResult<Vec<Rollout>>;

    /// What became of the units whose jobs each of `releases` created, among those that ended
    /// (or last changed) since `since` (Unix ms): counts by status and error.
    async fn release_outcomes(
        &self,
        releases: &[String],
        since: i64,
    ) -> StoreResult<Vec<ReleaseOutcome>>;

    /// Each of `releases`' signals (see [`ReleaseSignals`]) summed over the minutes from the
    /// one `since` (Unix ms) falls in.
    async fn release_signals(
        &self,
        releases: &[String],
        since: i64,
    ) -> StoreResult<Vec<(String, ReleaseSignals)>>;

    /// (tenant, task id) of the tasks with a unit failed since `since` (Unix ms) whose job
    /// release `release` created: what a rolled-back rollout retries.
    async fn release_failed_tasks(
        &self,
        release: &str,
        since: i64,
    ) -> StoreResult<Vec<(String, String)>>;

    /// The processes that looked at the releases since `since` (Unix ms).
    async fn handler_process_list(&self, since: i64) -> StoreResult<Vec<ReleaseFollower>>;

    /// The newest `limit` history rows, newest first; only those of handler `name` if given.
    async fn handler_version_list(
        &self,
        name: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<HandlerVersionRow>>;
}

/// The writes of records beside the units, which change no unit's status: the schema, quota
/// bookkeeping, budgets, pool fences, the completion webhook outbox, host keys and the handler
/// version history (docs/architecture.md, "One writer of units", says why each stays outside
/// the lifecycle).
#[async_trait]
pub trait RecordWrite: Send + Sync + 'static {
    /// Apply pending migrations.
    async fn migrate(&self) -> StoreResult<()>;

    /// Forget `pool`'s recorded creates older than `before`; returns how many.
    async fn quota_creates_prune(&self, pool: &str, before: i64) -> StoreResult<u64>;

    /// Set a tenant's budget (`source` `config` does not replace one set through the API).
    /// Its units held back are made due again by the lifecycle
    /// ([`UnitWrite::unit_release_holds`]), with their follow-ups.
    async fn budget_set(&self, budget: &Budget) -> StoreResult<()>;

    /// Remove budgets the configuration set for tenants it no longer names (`keep`: the ones
    /// it does); returns the tenants whose budget went.
    async fn budget_prune_config(&self, keep: &[String]) -> StoreResult<Vec<String>>;

    /// Raise `pool`'s fencing token to `token` (a scheduler that just won the pool's lease calls
    /// this before writing). Returns false, changing nothing, if the stored token is already
    /// higher; raising to the current value is a no-op that returns true.
    ///
    /// A fenced write (`fence: Some`) also raises the stored token to its own, in its
    /// transaction, and is refused with [`StoreError::Fenced`] (nothing written) if the stored
    /// token is higher. The fence row stays locked until that transaction ends, so an advance
    /// waits for a write in flight: every write of the old leader commits before the new
    /// token is in place, or is refused after. `None` (embedded, single instance) skips it.
    async fn pool_fence_advance(&self, pool: &str, token: i64) -> StoreResult<bool>;

    /// Queue `d` and mark its task's webhook done, in one transaction; queuing the same id
    /// again changes nothing. The end of a task never retried: see
    /// [`RecordWrite::webhook_enqueue_end`].
    async fn webhook_enqueue(&self, d: &NewDelivery) -> StoreResult<()> {
        self.webhook_enqueue_end(d, 0).await.map(|_| ())
    }

    /// Queue `d`, the delivery of the end a sweep read with `ends` (from
    /// [`StoreRead::webhook_open_tasks`]), and mark its task's webhook done if its count is
    /// still `ends`, in one transaction; queuing the same id again adds nothing. False: a
    /// retry reopened the task since (`d` is queued all the same, the task stays open for
    /// its next end).
    async fn webhook_enqueue_end(&self, d: &NewDelivery, ends: i64) -> StoreResult<bool>;

    /// Take up to `limit` deliveries due at `now` whose lease is free, leased to `owner` until
    /// `lease_until`.
    async fn webhook_claim(
        &self,
        owner: &str,
        lease_until: i64,
        now: i64,
        limit: u32,
    ) -> StoreResult<Vec<Delivery>>;

    /// Record an attempt and what comes next, if `a.owner` still holds the lease (false: it
    /// does not, nothing changed).
    async fn webhook_attempt(&self, a: &AttemptOutcome<'_>) -> StoreResult<bool>;

    /// The host key named `name` (docs/trust-model.md: one key shared by every instance, e.g. the
    /// callback token key). Stores `candidate` first if there is none, atomically: of
    /// concurrent callers one candidate wins and every caller gets the stored key.
    async fn host_key_get_or_create(
        &self,
        name: &str,
        candidate: &[u8],
        now: i64,
    ) -> StoreResult<Vec<u8>>;

    /// Append one state change of a handler version to the history (hot reload,
    /// docs/handlers.md: every loaded version is recorded; refusals and quarantines too, so an
    /// operator can tell afterwards which build served when and why one was dropped).
    async fn handler_version_record(&self, row: &HandlerVersionRow) -> StoreResult<()>;

    /// Publish a handler file as a release, keyed by the sha256 the store computes: a new
    /// release, the same file again (nothing changes), or a version already published as
    /// another file (refused, nothing changes).
    async fn release_put(&self, release: &NewRelease) -> StoreResult<Published>;

    /// Start rollout `rollout`; false (nothing stored) when its handler already has one
    /// running or paused.
    async fn rollout_start(&self, rollout: &Rollout) -> StoreResult<bool>;

    /// Move a rollout if it is still where the move expects it; false when it moved already.
    async fn rollout_move(&self, m: &RolloutMove) -> StoreResult<bool>;

    /// Record a running rollout's latest judgement figures without moving it (what
    /// `GET /v1/handlers/{name}/releases` shows while a stage is judged).
    async fn rollout_figures(&self, id: &str, figures: &serde_json::Value) -> StoreResult<()>;

    /// Add one tick's signals of release `release` (sha256) at `at` (Unix ms).
    async fn release_signals_add(
        &self,
        release: &str,
        at: i64,
        signals: &ReleaseSignals,
    ) -> StoreResult<()>;

    /// Make release `sha256` its handler's current one (and no longer withdrawn); false when
    /// there is no such release.
    async fn release_promote(&self, sha256: &str, now: i64) -> StoreResult<bool>;

    /// Withdraw handler `name`'s releases published by `published_by` (a file removed from
    /// the plugins directory); returns their sha256s.
    async fn release_withdraw(
        &self,
        name: &str,
        published_by: &str,
        reason: &str,
        now: i64,
    ) -> StoreResult<Vec<String>>;

    /// Record that `follower` looked at the releases, and (rewrite) its word on each release
    /// it was given: loaded, unloaded or failed.
    async fn handler_load_put(
        &self,
        follower: &ReleaseFollower,
        loads: &[HandlerLoad],
    ) -> StoreResult<()>;

    /// Forget the words and processes older than `before` (Unix ms): processes long gone.
    /// Returns how many rows went.
    async fn handler_load_prune(&self, before: i64) -> StoreResult<u64>;
}

/// The writes of tasks and units: creation, the submit marker, guarded updates, cancel,
/// retry and finalization. Only `slotd-units`' lifecycle holds one (docs/architecture.md).
#[async_trait]
pub trait UnitWrite: Send + Sync + 'static {
    /// Store a task and its units in one transaction, unless the tenant's idempotency key
    /// already names a task.
    async fn task_create(&self, task: NewTask) -> StoreResult<Created> {
        self.task_create_batch(std::slice::from_ref(&task))
            .await?
            .pop()
            .ok_or_else(|| {
                StoreError::Other(format!("task {}: the store answered nothing", task.id))
            })
    }

    /// Store many tasks in one transaction (group commit, see [`group_commit`]), each as
    /// [`UnitWrite::task_create`] would, in order: a task whose tenant's idempotency key an
    /// earlier task of the batch took is `Existing` of that one. One answer per task, in order.
    async fn task_create_batch(&self, tasks: &[NewTask]) -> StoreResult<Vec<Created>>;

    /// Cancel a tenant's task: record the request on the task (once), move its pending,
    /// succeeded and finalizing units to `cancelled`, and mark its `submitted` units
    /// cancel-requested (they keep their slots until their jobs end). Repeating it changes
    /// nothing. `None` if there is no such task.
    async fn task_cancel(&self, tenant: &str, id: &str, now: i64)
    -> StoreResult<Option<Cancelled>>;

    /// Move the failed units of a tenant's task back to pending with the next submit attempt,
    /// and make its units whose finalization gave up (parked `succeeded` ones) due for
    /// finalization again with their attempts reset, keeping their provider job and result;
    /// none once the task was cancelled (cancel is final). Returns how many units moved, or
    /// `None` if there is no such task.
    async fn task_retry_failed(&self, tenant: &str, id: &str, now: i64)
    -> StoreResult<Option<u32>>;

    /// The write-ahead submit marker: move these units `pending -> submitted` (job id cleared,
    /// `submitted_at = now`, due again at `next_at` unless the call that follows says when:
    /// the scheduler passes the end of that call's deadline, after which an untouched unit is
    /// in doubt) and return the ones that moved, before anything is sent.
    /// With a `fence`, checked in the same transaction: see [`RecordWrite::pool_fence_advance`].
    async fn unit_mark_submitted(
        &self,
        ids: &[String],
        now: i64,
        next_at: i64,
        fence: Option<&Fence>,
    ) -> StoreResult<Vec<Unit>> {
        let grants: Vec<Grant> = ids
            .iter()
            .map(|id| Grant {
                unit_id: id.clone(),
                tenant: String::new(),
                account: None,
                estimate: 0.0,
                submission: String::new(),
                budget_retry_at: now,
                quota_pool: None,
                spend: None,
                bind: None,
            })
            .collect();
        Ok(self
            .unit_mark_granted(&grants, now, next_at, fence)
            .await?
            .units)
    }

    /// [`UnitWrite::unit_mark_submitted`] for slot grants on accounts, in one transaction
    /// with the budget check and reservation (see `terms.rs`): grants their tenant's budget
    /// cannot cover are not marked and wait with `wait_reason = budget`.
    async fn unit_mark_granted(
        &self,
        grants: &[Grant],
        now: i64,
        next_at: i64,
        fence: Option<&Fence>,
    ) -> StoreResult<Marked>;

    /// Apply guarded updates in one transaction, with an event row for each applied one.
    /// With a `fence`, checked in the same transaction: see [`RecordWrite::pool_fence_advance`].
    async fn unit_apply(
        &self,
        updates: &[UnitUpdate],
        now: i64,
        fence: Option<&Fence>,
    ) -> StoreResult<ApplyReport>;

    /// Claim up to `limit` units for finalization: `succeeded` ones whose `next_at <= now`, and
    /// `finalizing` ones whose lease expired (a dead finalizer's). Sets owner and lease expiry;
    /// the returned units' `attempts` is the finalization attempt this claim starts (1-based).
    async fn unit_claim_finalize(
        &self,
        owner: &str,
        lease_until: i64,
        now: i64,
        limit: u32,
    ) -> StoreResult<Vec<Unit>>;

    /// Finish finalizations: `finalizing -> completed` with each unit's result (`(id,
    /// result)` pairs), for the units `owner` still holds the lease on, in one write. Returns
    /// the ids it completed; the others' leases were lost and nothing of theirs was written.
    async fn unit_complete_many(
        &self,
        owner: &str,
        done: &[(String, String)],
        now: i64,
    ) -> StoreResult<Vec<String>>;

    /// Finish one finalization ([`UnitWrite::unit_complete_many`] of one). Returns whether it
    /// did.
    async fn unit_complete(
        &self,
        id: &str,
        owner: &str,
        result: &str,
        now: i64,
    ) -> StoreResult<bool> {
        let done = [(id.to_string(), result.to_string())];
        Ok(!self.unit_complete_many(owner, &done, now).await?.is_empty())
    }

    /// Extend the finalization lease `owner` holds on unit `id` to `lease_until` (a finalizer
    /// whose download outlasts the lease renews it while streaming). Returns false, changing
    /// nothing, if `owner` no longer holds it: the finalizer then abandons its work.
    async fn unit_finalize_renew(
        &self,
        id: &str,
        owner: &str,
        lease_until: i64,
    ) -> StoreResult<bool>;

    /// Make `tenant`'s held-back units (`pending` with a wait reason) due at `now`, for the
    /// fill to decide anew (its budget changed); returns the (task, pool) of each.
    async fn unit_release_holds(
        &self,
        tenant: &str,
        now: i64,
    ) -> StoreResult<Vec<(String, String)>>;

    /// Give a finalization back, if `release.owner` still holds the lease: `finalizing ->
    /// succeeded` with the error recorded, due again at `next_at`; or, when `give_up` is set
    /// (attempts spent), parked at [`FINALIZE_PARKED_AT`](slotd_core::model::FINALIZE_PARKED_AT) so
    /// no finalizer claims it until [`UnitWrite::task_retry_failed`]. The provider result
    /// stays.
    async fn unit_finalize_release(
        &self,
        release: FinalizeRelease<'_>,
        now: i64,
    ) -> StoreResult<bool>;
}

/// The whole store: its reads, its record writes and its unit writes. What a driver is and
/// what [`open`] returns; the service splits it into a [`DynServiceStore`] for everyone and a
/// [`DynUnitWriter`] for the lifecycle.
pub trait TaskStore: ServiceStore + UnitWrite {}
impl<T: ServiceStore + UnitWrite + ?Sized> TaskStore for T {}

/// The store without its unit writes: reads and the records beside the units.
pub trait ServiceStore: StoreRead + RecordWrite {}
impl<T: StoreRead + RecordWrite + ?Sized> ServiceStore for T {}

/// The whole store, as [`open`] returns it.
pub type DynStore = Arc<dyn TaskStore>;
/// The store as the service holds it: no unit write compiles through it.
pub type DynServiceStore = Arc<dyn ServiceStore>;
/// The unit writes, held by the lifecycle only.
pub type DynUnitWriter = Arc<dyn UnitWrite>;

/// Open the store a database URL names (`sqlite://…` or `postgres://…`) and migrate it.
/// Errors show the URL with its password redacted.
pub async fn open(url: &str) -> anyhow::Result<DynStore> {
    let shown = slotd_core::redact::redact_url(url);
    if url.starts_with("sqlite:") {
        let store = sqlite::SqliteStore::connect(url).await?;
        store
            .migrate()
            .await
            .map_err(|e| anyhow::anyhow!("database_url {shown:?}: {e}"))?;
        Ok(Arc::new(store))
    } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        let store = postgres::PostgresStore::connect(url).await?;
        store
            .migrate()
            .await
            .map_err(|e| anyhow::anyhow!("database_url {shown:?}: {e}"))?;
        Ok(Arc::new(store))
    } else {
        anyhow::bail!("database_url {shown:?}: expected a sqlite:// or postgres:// URL")
    }
}

/// End a refused transaction now rather than when the pool next touches the connection: a
/// fence check holds the pool's fence row (on PostgreSQL), and a lingering transaction would
/// keep the next leader's advance waiting. The refusal is what the caller needs to hear; a
/// failed rollback (the connection is gone, which ends the transaction anyway) is only logged.
pub(crate) async fn rollback<DB: sqlx::Database>(
    tx: sqlx::Transaction<'static, DB>,
    refusal: StoreError,
) -> StoreError {
    if let Err(e) = tx.rollback().await {
        tracing::warn!(error = %e, "rolling back a refused write");
    }
    refusal
}
