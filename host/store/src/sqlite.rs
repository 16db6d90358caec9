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

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Sqlite, Transaction};

use super::shared::sqlite as shared;
use super::{
    ApplyReport, Attempt, AttemptOutcome, Cancelled, Created, Delivery, EventCursor, EventPage,
    EventScope, Fence, FinalizeRelease, HandlerVersionRow, NewDelivery, NewTask, PoolStatusCount,
    QueueStanding, SlotLog, StoreError, StoreResult, TaskFilter, TaskPage, TaskRecord, TaskStore,
    UnitEvent, UnitUpdate,
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

    /// A write transaction on the writer connection.
    async fn begin(&self) -> StoreResult<Transaction<'static, Sqlite>> {
        Ok(self.writer.begin_with("BEGIN IMMEDIATE").await?)
    }
}

#[async_trait]
impl TaskStore for SqliteStore {
    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR
            .run(&self.writer)
            .await
            .map_err(|e| StoreError::Other(format!("migrating the SQLite schema: {e}")))
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
    }

    async fn task_create_batch(&self, tasks: &[NewTask]) -> StoreResult<Vec<Created>> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        tasks::task_create_batch(self.begin().await?, tasks).await
    }

    async fn task_get(&self, tenant: &str, id: &str) -> StoreResult<Option<TaskRecord>> {
        tasks::task_get(&self.reader, tenant, id).await
    }

    async fn task_units(&self, task_id: &str) -> StoreResult<Vec<Unit>> {
        shared::task_units(&self.reader, task_id).await
    }

    async fn task_list(&self, tenant: &str, filter: &TaskFilter) -> StoreResult<TaskPage> {
        tasks::task_list(&self.reader, Some(tenant), filter).await
    }

    async fn task_list_any(
        &self,
        tenant: Option<&str>,
        filter: &TaskFilter,
    ) -> StoreResult<TaskPage> {
        tasks::task_list(&self.reader, tenant, filter).await
    }

    async fn task_tenant(&self, id: &str) -> StoreResult<Option<String>> {
        shared::task_tenant(&self.reader, id).await
    }

    async fn webhook_recent(
        &self,
        tenant: Option<&str>,
        status: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<Delivery>> {
        shared::webhook_recent(&self.reader, tenant, status, limit).await
    }

    async fn pool_slot_log(&self, pool: &str, since: i64, limit: u32) -> StoreResult<SlotLog> {
        shared::pool_slot_log(&self.reader, pool, since, limit).await
    }

    async fn task_cancel(
        &self,
        tenant: &str,
        id: &str,
        now: i64,
    ) -> StoreResult<Option<Cancelled>> {
        tasks::task_cancel(self.begin().await?, tenant, id, now).await
    }

    async fn task_retry_failed(
        &self,
        tenant: &str,
        id: &str,
        now: i64,
    ) -> StoreResult<Option<u32>> {
        tasks::task_retry_failed(self.begin().await?, tenant, id, now).await
    }

    async fn unit_list_fill(
        &self,
        pool: &str,
        task_types: &[String],
        now: i64,
        limit: u32,
        except_tenants: &[String],
    ) -> StoreResult<Vec<Unit>> {
        units::unit_list_pending(&self.reader, pool, task_types, now, limit, except_tenants).await
    }

    async fn unit_mark_granted(
        &self,
        grants: &[crate::Grant],
        now: i64,
        next_at: i64,
        fence: Option<&Fence>,
    ) -> StoreResult<crate::Marked> {
        use crate::terms::{self, sqlite as t};
        if grants.is_empty() {
            return Ok(crate::Marked::default());
        }
        let mut tx = self.begin().await?;
        if let Some(fence) = fence {
            shared::fence_check(&mut tx, fence).await?;
        }
        let budgeted = terms::budgeted(grants);
        let checked = if budgeted {
            t::budget_check(&mut tx, grants, now, "").await?
        } else {
            terms::Checked {
                fit: (0..grants.len()).collect(),
                ..terms::Checked::default()
            }
        };
        let mut moved = Vec::with_capacity(checked.fit.len());
        for (account, ids) in terms::by_account(grants, &checked.fit) {
            moved.extend(units::unit_mark_submitted(&mut tx, &ids, now, next_at, account).await?);
        }
        if budgeted {
            let ids: std::collections::HashSet<&str> =
                moved.iter().map(|u| u.id.as_str()).collect();
            t::budget_record(&mut tx, grants, &ids, &checked, now).await?;
        }
        tx.commit().await?;
        Ok(terms::marked(grants, moved, &checked.over))
    }

    async fn unit_list_submitted_accounts(
        &self,
        pool: &str,
    ) -> StoreResult<Vec<(String, Option<String>)>> {
        crate::terms::sqlite::submitted_by_account(&self.reader, pool).await
    }

    async fn unit_list_deadlined(&self, pool: &str, limit: u32) -> StoreResult<Vec<Unit>> {
        let rows =
            crate::terms::sqlite::deadlined_pending(&self.reader, pool, i64::from(limit)).await?;
        shared::units_from_rows(&rows)
    }

    async fn unit_pending_groups(
        &self,
        pool: &str,
        min_priority: i32,
    ) -> StoreResult<Vec<crate::PendingGroup>> {
        crate::terms::sqlite::pending_groups(&self.reader, pool, min_priority).await
    }

    async fn unit_rank_in_group(&self, unit_id: &str, cap: u32) -> StoreResult<u64> {
        crate::terms::sqlite::rank_in_group(&self.reader, unit_id, cap).await
    }

    async fn budget_get(&self, tenant: &str) -> StoreResult<Option<crate::Budget>> {
        crate::terms::sqlite::budget_get(&self.reader, tenant).await
    }

    async fn budget_set(&self, budget: &crate::Budget) -> StoreResult<()> {
        crate::terms::sqlite::budget_set(&self.writer, budget).await
    }

    async fn budget_prune_config(&self, keep: &[String]) -> StoreResult<Vec<String>> {
        crate::terms::sqlite::budget_prune_config(&self.writer, keep).await
    }

    async fn budget_usage(
        &self,
        tenant: &str,
        period_ms: i64,
        now: i64,
    ) -> StoreResult<crate::Usage> {
        crate::terms::sqlite::budget_usage(&self.reader, tenant, period_ms, now).await
    }

    async fn cost_by_tenant(&self) -> StoreResult<Vec<(String, f64, f64, i64)>> {
        crate::terms::sqlite::cost_by_tenant(&self.reader).await
    }

    async fn unit_list_due(
        &self,
        pool: &str,
        task_types: &[String],
        now: i64,
        limit: u32,
    ) -> StoreResult<Vec<Unit>> {
        units::unit_list_due(&self.reader, pool, task_types, now, limit).await
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
        crate::terms::sqlite::budget_settle(&mut tx, &settle, now).await?;
        tx.commit().await?;
        report.refused = refused;
        Ok(report)
    }

    async fn unit_next_due(
        &self,
        pool: &str,
        status: slotd_core::model::UnitStatus,
    ) -> StoreResult<Option<i64>> {
        Ok(
            sqlx::query_scalar("SELECT MIN(next_at) FROM units WHERE pool = ?1 AND status = ?2")
                .bind(pool)
                .bind(status.as_str())
                .fetch_one(&self.reader)
                .await?,
        )
    }

    async fn unit_list_submitted_ids(&self, pool: &str) -> StoreResult<Vec<String>> {
        units::unit_list_submitted_ids(&self.reader, pool).await
    }

    async fn unit_find_by_provider(
        &self,
        task_types: &[String],
        provider_job_id: Option<&str>,
        idempotency_key: Option<&str>,
    ) -> StoreResult<Option<Unit>> {
        units::unit_find_by_provider(&self.reader, task_types, provider_job_id, idempotency_key)
            .await
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

    async fn unit_complete(
        &self,
        id: &str,
        owner: &str,
        result: &str,
        now: i64,
    ) -> StoreResult<bool> {
        finalize::unit_complete(self.begin().await?, id, owner, result, now).await
    }

    async fn unit_finalize_renew(
        &self,
        id: &str,
        owner: &str,
        lease_until: i64,
    ) -> StoreResult<bool> {
        finalize::unit_finalize_renew(self.begin().await?, id, owner, lease_until).await
    }

    async fn unit_finalize_release(
        &self,
        release: FinalizeRelease<'_>,
        now: i64,
    ) -> StoreResult<bool> {
        finalize::unit_finalize_release(self.begin().await?, release, now).await
    }

    async fn pool_fence_advance(&self, pool: &str, token: i64) -> StoreResult<bool> {
        // One writer: the advance is serialized with every fenced write by the transaction.
        let mut tx = self.begin().await?;
        let current = shared::fence_raise(&mut tx, pool, token).await?;
        tx.commit().await?;
        Ok(current <= token)
    }

    async fn unit_count_by_pool(&self) -> StoreResult<Vec<PoolStatusCount>> {
        shared::unit_count_by_pool(&self.reader).await
    }

    async fn task_queue_standing(&self, task_id: &str) -> StoreResult<Option<QueueStanding>> {
        shared::task_queue_standing(&self.reader, task_id).await
    }

    async fn unit_events(&self, task_id: &str) -> StoreResult<Vec<UnitEvent>> {
        shared::unit_events(&self.reader, task_id).await
    }

    async fn unit_events_after(
        &self,
        scope: EventScope<'_>,
        after: EventCursor,
        limit: u32,
    ) -> StoreResult<EventPage> {
        events::unit_events_after(&self.reader, scope, after, limit).await
    }

    async fn unit_events_head(&self) -> StoreResult<EventCursor> {
        events::unit_events_head(&self.reader).await
    }

    async fn unit_events_behind(&self, task_id: &str, cursor: EventCursor) -> StoreResult<bool> {
        events::unit_events_behind(&self.reader, task_id, cursor).await
    }

    async fn webhook_open_tasks(
        &self,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<(i64, String, String)>> {
        shared::webhook_open_tasks(&self.reader, after, limit).await
    }

    async fn webhook_enqueue(&self, d: &NewDelivery) -> StoreResult<()> {
        shared::webhook_enqueue(&self.writer, d).await
    }

    async fn webhook_claim(
        &self,
        owner: &str,
        lease_until: i64,
        now: i64,
        limit: u32,
    ) -> StoreResult<Vec<Delivery>> {
        shared::webhook_claim(&self.writer, owner, lease_until, now, limit).await
    }

    async fn webhook_attempt(&self, a: &AttemptOutcome<'_>) -> StoreResult<bool> {
        shared::webhook_attempt(&self.writer, a).await
    }

    async fn webhook_list(&self, task_id: &str) -> StoreResult<Vec<(Delivery, Vec<Attempt>)>> {
        shared::webhook_list(&self.reader, task_id).await
    }

    async fn host_key_get_or_create(
        &self,
        name: &str,
        candidate: &[u8],
        now: i64,
    ) -> StoreResult<Vec<u8>> {
        shared::host_key_get_or_create(&self.writer, name, candidate, now).await
    }

    async fn handler_version_record(&self, row: &HandlerVersionRow) -> StoreResult<()> {
        shared::handler_version_record(&self.writer, row).await
    }

    async fn handler_version_list(
        &self,
        name: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<HandlerVersionRow>> {
        shared::handler_version_list(&self.reader, name, limit).await
    }
}
