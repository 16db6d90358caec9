//! The SQLite store: the embedded default, one database file.
//!
//! SQLite serializes writers, so the store holds exactly one writer connection (every write
//! transaction queues on it instead of fighting over the file lock) and a small pool of reader
//! connections that WAL lets run beside the writer. Write transactions start with
//! `BEGIN IMMEDIATE` so that another process sharing the file (e.g. `slotd migrate`) makes
//! this one wait on the busy timeout rather than fail on a read-to-write upgrade.
//!
//! Lists of ids and types are bound as one JSON array and read with `json_each(?)`, so each
//! query is one statement prepared once per connection whatever the list length.
//!
//! The queries live by concern: [`tasks`] (create, read, list, cancel, retry), [`units`] (the
//! scheduler's reads and guarded writes), [`finalize`] (leases) and [`apply`] (the batch update);
//! what both stores share (row decoders, fencing, keys, the handler history) is in
//! [`super::shared`]. A fenced write checks its fence first in its write transaction, and
//! the one writer serializes it with every advance.

mod apply;
mod events;
mod finalize;
mod rows;
mod tasks;
#[cfg(test)]
mod tests;
mod units;

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Sqlite, Transaction};

use super::shared::sqlite as shared;
use super::{
    ApplyReport, Attempt, AttemptOutcome, Cancelled, Created, Delivery, EventCursor, EventPage,
    EventScope, Fence, FinalizeRelease, HandlerVersionRow, NewDelivery, NewTask, PoolStatusCount,
    QueueStanding, SlotLog, StoreError, StoreResult, TaskFilter, TaskPage, TaskRecord, UnitEvent,
    UnitUpdate,
};
use slotd_core::model::Unit;

/// The schema, embedded at build time from `migrations/sqlite`.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite");

/// How long a statement waits for another process's lock before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Reader connections beside the single writer (the machine has few cores; reads are short).
pub const READERS: u32 = 4;

/// [`TaskStore`] over one SQLite file.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    /// One connection: every write transaction goes through it, in turn.
    writer: SqlitePool,
    /// Reads that need no transaction. The same pool as `writer` for an in-memory database,
    /// which a second connection could not see.
    reader: SqlitePool,
}

impl SqliteStore {
    /// Open (creating the file if missing) the database a `sqlite://…` URL names, in WAL mode
    /// with `synchronous=NORMAL` (durable against a process crash; a power cut may lose the last
    /// commits but never corrupts), foreign keys on, and a busy timeout. Does not migrate.
    pub async fn connect(url: &str) -> anyhow::Result<SqliteStore> {
        let shown = slotd_core::redact::redact_url(url);
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| anyhow::anyhow!("database_url {shown:?} is not a SQLite URL: {e}"))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            // An in-memory database lives only as long as its connection.
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options.clone())
            .await
            .map_err(|e| anyhow::anyhow!("opening SQLite database {shown:?}: {e}"))?;
        let reader = if in_memory {
            writer.clone()
        } else {
            SqlitePoolOptions::new()
                .max_connections(READERS)
                .connect_with(options)
                .await
                .map_err(|e| anyhow::anyhow!("opening SQLite database {shown:?} for reads: {e}"))?
        };
        Ok(SqliteStore { writer, reader })
    }

    /// Close both pools, waiting for connections in use to be returned (shutdown).
    pub async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }

    /// The writer connection, for tests that change its per-connection pragmas (a full disk
    /// with `max_page_count`, a short `busy_timeout`).
    #[cfg(any(test, feature = "testing"))]
    pub fn writer_for_tests(&self) -> &SqlitePool {
        &self.writer
    }

    /// Reads that need no transaction.
    fn reader(&self) -> &SqlitePool {
        &self.reader
    }

    /// Single-statement writes: the one writer connection.
    fn writer(&self) -> &SqlitePool {
        &self.writer
    }

    /// Reads that take their rows as an array (PostgreSQL plans these apart): the readers.
    fn array_reader(&self) -> &SqlitePool {
        &self.reader
    }

    /// Writes that take their rows as arrays: the one writer connection.
    fn array_writer(&self) -> &SqlitePool {
        &self.writer
    }

    /// A write transaction on the writer connection.
    async fn begin(&self) -> StoreResult<Transaction<'static, Sqlite>> {
        Ok(self.writer.begin_with("BEGIN IMMEDIATE").await?)
    }
}

/// The row lock of the submit marker's budget check. One writer: no other transaction can
/// change a budget row between the check and the marker, so the check takes no lock.
const BUDGET_ROW_LOCK: &str = "";

// The methods both drivers share are written once in `one_impl.rs`; these are SQLite's own.
// SQLite's differences: every write transaction queues on the one writer, so the batch create,
// finalization's moves and the fence advance each take one; a fenced write checks its fence
// inside it and nothing else can interleave.
crate::one_impl::impl_task_store!(SqliteStore, sqlite, "SQLite", records: {
    async fn pool_fence_advance(&self, pool: &str, token: i64) -> StoreResult<bool> {
        // One writer: the advance is serialized with every fenced write by the transaction.
        let mut tx = self.begin().await?;
        let current = shared::fence_raise(&mut tx, pool, token).await?;
        tx.commit().await?;
        Ok(current <= token)
    }
}, units: {
    async fn task_create_batch(&self, tasks: &[NewTask]) -> StoreResult<Vec<Created>> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        tasks::task_create_batch(self.begin().await?, tasks).await
    }

    async fn unit_apply(
        &self,
        updates: &[UnitUpdate],
        now: i64,
        fence: Option<&Fence>,
    ) -> StoreResult<ApplyReport> {
        let (updates, refused) = crate::split_illegal(updates);
        if updates.is_empty() {
            return Ok(ApplyReport {
                refused,
                ..ApplyReport::default()
            });
        }
        let mut tx = self.begin().await?;
        if let Some(fence) = fence {
            shared::fence_check(&mut tx, fence).await?;
        }
        let mut report = apply::unit_apply(&mut tx, &updates, now).await?;
        let settle = crate::terms::settlements(&updates, &report.applied);
        crate::terms::budgets::sqlite::budget_settle(&mut tx, &settle, now).await?;
        tx.commit().await?;
        report.refused = refused;
        Ok(report)
    }

    async fn unit_claim_finalize(
        &self,
        owner: &str,
        lease_until: i64,
        now: i64,
        limit: u32,
    ) -> StoreResult<Vec<Unit>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        finalize::unit_claim_finalize(self.begin().await?, owner, lease_until, now, limit).await
    }

    async fn unit_complete_many(
        &self,
        owner: &str,
        done: &[(String, String)],
        now: i64,
    ) -> StoreResult<Vec<String>> {
        if done.is_empty() {
            return Ok(Vec::new());
        }
        finalize::unit_complete_many(self.begin().await?, owner, done, now).await
    }

    async fn unit_finalize_release(
        &self,
        release: FinalizeRelease<'_>,
        now: i64,
    ) -> StoreResult<bool> {
        finalize::unit_finalize_release(self.begin().await?, release, now).await
    }
});
