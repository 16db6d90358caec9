//! The PostgreSQL store: for scale-out, many API and scheduler instances on one database.
//!
//! Every transition is a single statement where it can be: `UPDATE … RETURNING` in a
//! data-modifying `WITH` that also appends the event rows, so a write is one round trip and
//! commits on its own. Rows are claimed with `FOR UPDATE SKIP LOCKED` (the submit marker,
//! finalization claims) so instances never wait on each other's claims; writers that must
//! wait lock their units in id order, so they queue instead of deadlocking. Lists are bound as
//! arrays (`= ANY($1)`, `unnest($1, …)`), one prepared statement whatever the length.
//!
//! A fenced write ([`Fence`]) checks the fence first: in the statement itself where the write
//! is one statement (the `fence` CTE of [`fence_cte!`]), else first in its transaction.
//!
//! The pool tests each connection before handing it out, so connections a restarted server
//! dropped are replaced rather than failing a request; while the server is unreachable every
//! call fails fast (within [`ACQUIRE_TIMEOUT`]) with [`StoreError::Unavailable`].
//!
//! The queries live by concern: [`tasks`], [`units`] (scheduler reads, submit marker),
//! [`apply`] (the batch update) and [`finalize`] (leases); what both stores share (row
//! decoders, fencing, keys, the handler history) is in [`super::shared`].

/// The `fence` CTE of a fenced single statement, over the parameters `$pool` and `$token`
/// (both NULL: no fence, nothing written): the pool's token raised to `$token` unless the
/// stored one is higher, and the token after. A stored token equal to `$token` (every write
/// of a lease holder after its first) is locked but not rewritten, and the CTE then returns no
/// row: a row version of `pool_fences` per statement was WAL and a dead tuple for nothing.
/// The row stays locked until the statement commits, rewritten or not (PostgreSQL locks the
/// conflicting row before it reads the `WHERE` of `DO UPDATE`), as `fence_check` holds it to
/// the end of a transaction; the statement's writes are guarded by
/// `NOT EXISTS (SELECT 1 FROM fence WHERE fence.token > $token)`.
macro_rules! fence_cte {
    ($pool:literal, $token:literal) => {
        concat!(
            "fence AS ( INSERT INTO pool_fences (pool, token) SELECT ",
            $pool,
            "::text, ",
            $token,
            "::int8 WHERE ",
            $pool,
            "::text IS NOT NULL ON CONFLICT (pool) DO UPDATE \
             SET token = GREATEST(pool_fences.token, excluded.token) \
             WHERE pool_fences.token <> excluded.token RETURNING token )"
        )
    };
}

mod apply;
mod events;
mod finalize;
mod rows;
mod tasks;
#[cfg(test)]
mod tests;
mod units;

use std::str::FromStr;
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, Transaction};

use super::shared::postgres as shared;
use super::{
    ApplyReport, Attempt, AttemptOutcome, Cancelled, Created, Delivery, EventCursor, EventPage,
    EventScope, Fence, FinalizeRelease, HandlerVersionRow, NewDelivery, NewTask, PoolStatusCount,
    QueueStanding, SlotLog, StoreError, StoreResult, TaskFilter, TaskPage, TaskRecord, UnitEvent,
    UnitUpdate,
};
use slotd_core::model::Unit;

/// The schema, embedded at build time from `migrations/postgres`.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/postgres");

/// Connections per instance: enough for the API's concurrent writes to group-commit and for
/// the scheduler's ticks and finalizers beside them, few enough for many instances to share
/// one server's `max_connections`. The array statements' pool adds half as many
/// (docs/operations.md).
pub const MAX_CONNECTIONS: u32 = 16;
/// How long a call waits for a connection before reporting the database unavailable.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

/// [`TaskStore`] over a PostgreSQL connection pool.
#[derive(Clone, Debug)]
pub struct PostgresStore {
    pool: PgPool,
    /// The connections of the statements that take their rows as arrays (`unnest($1, …)`,
    /// `= ANY($1)`): the batch write, the submit marker, the completions, the callbacks' job
    /// lookups. Their sessions plan each statement once (`plan_cache_mode =
    /// force_generic_plan`). Given the array in a custom plan, the planner knows its length,
    /// so a plan for one or two rows always looks cheaper than the generic plan's guess, and
    /// every call was planned afresh: 0.65 ms a call for the batch write in the saturated
    /// scale run, more than its execution, for the one or two units a provider callback
    /// writes (docs/scale.md). Their generic plans are the ones the custom plans found: the
    /// input joined to `units` by primary key.
    arrays: PgPool,
    /// The task writer's connection between its batches ([`crate::group_commit`]), kept while
    /// creates keep coming: taking a connection from the pool and giving it back each cost a
    /// round trip (sqlx pings a connection on both), two beside the batch's one statement.
    /// One idle for [`TASK_CONNECTION_KEPT`] goes back to the pool, so a connection the server
    /// may have dropped meanwhile is tested before use as every other is.
    tasks: std::sync::Arc<tokio::sync::Mutex<Option<KeptConnection>>>,
}

/// A connection kept out of the pool, and when it was last used.
type KeptConnection = (PoolConnection<Postgres>, Instant);

/// How long the task writer keeps its connection after a batch (see `PostgresStore::tasks`).
const TASK_CONNECTION_KEPT: Duration = Duration::from_secs(1);

/// How long a session may sit idle inside a transaction before the server ends it.
const IDLE_IN_TRANSACTION_TIMEOUT: &str = "5s";
/// How long a statement waits for a row lock before failing.
const LOCK_TIMEOUT: &str = "3s";

impl PostgresStore {
    /// The pool settings the store uses; tests shorten the timeouts.
    pub fn pool_options() -> PgPoolOptions {
        PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .test_before_acquire(true)
    }

    /// Connect to the database a `postgres://…` URL names (`?options=-c search_path=…`
    /// selects a schema). Does not migrate.
    pub async fn connect(url: &str) -> anyhow::Result<PostgresStore> {
        let shown = slotd_core::redact::redact_url(url);
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| anyhow::anyhow!("database_url {shown:?} is not a PostgreSQL URL: {e}"))?
            // A process paused (or hung) inside a transaction must not hold its row locks
            // forever: the server ends such a session, which releases the pool's fence row for
            // the next leader. Waiting on a lock is bounded too, so a tick fails and retries
            // instead of hanging behind a stalled peer.
            .options([
                (
                    "idle_in_transaction_session_timeout",
                    IDLE_IN_TRANSACTION_TIMEOUT,
                ),
                ("lock_timeout", LOCK_TIMEOUT),
            ]);
        Self::connect_with(options, Self::pool_options())
            .await
            .map_err(|e| anyhow::anyhow!("connecting to PostgreSQL at {shown:?}: {e}"))
    }

    /// Connect with explicit options (one connection is opened now, to fail early). The
    /// array statements' pool has half of `pool`'s connections (at least one), opened as
    /// they are needed.
    pub async fn connect_with(
        options: PgConnectOptions,
        pool: PgPoolOptions,
    ) -> Result<PostgresStore, sqlx::Error> {
        let arrays = pool
            .clone()
            .max_connections((pool.get_max_connections() / 2).max(1))
            .min_connections(0)
            .connect_lazy_with(
                options
                    .clone()
                    .options([("plan_cache_mode", "force_generic_plan")]),
            );
        Ok(PostgresStore {
            pool: pool.connect_with(options).await?,
            arrays,
            tasks: Default::default(),
        })
    }

    /// Close the pools, waiting for connections in use to be returned (shutdown).
    pub async fn close(&self) {
        // The pool waits for every connection out of it, the task writer's too.
        drop(self.tasks.lock().await.take());
        self.pool.close().await;
        self.arrays.close().await;
    }

    /// The array statements' pool, for tests that look at how their statements are planned.
    #[cfg(test)]
    pub(crate) fn arrays_for_tests(&self) -> &PgPool {
        &self.arrays
    }

    /// Reads that need no transaction: the pool.
    fn reader(&self) -> &PgPool {
        &self.pool
    }

    /// Single-statement writes: the pool.
    fn writer(&self) -> &PgPool {
        &self.pool
    }

    /// Reads that take their rows as an array: planned once per connection.
    fn array_reader(&self) -> &PgPool {
        &self.arrays
    }

    /// Writes that take their rows as arrays: planned once per connection.
    fn array_writer(&self) -> &PgPool {
        &self.arrays
    }

    /// A write transaction on a pooled connection.
    async fn begin(&self) -> StoreResult<Transaction<'static, Postgres>> {
        Ok(self.pool.begin().await?)
    }
}

/// The row lock of the submit marker's budget check. Writers run side by side: the check
/// locks its tenants' budget rows, so two pools reserving for one tenant at once take turns.
const BUDGET_ROW_LOCK: &str = " FOR UPDATE";

// The methods both drivers share are written once in `one_impl.rs`; these are PostgreSQL's own.
// PostgreSQL's differences: writers run side by side, so claims lock rows (`FOR UPDATE SKIP
// LOCKED`), a refused fenced write rolls back at once to free the fence row, single statements
// commit without a transaction, and a budget check locks its tenants' budget rows.
crate::one_impl::impl_task_store!(PostgresStore, postgres, "PostgreSQL", records: {
    async fn pool_fence_advance(&self, pool: &str, token: i64) -> StoreResult<bool> {
        let mut conn = self.pool.acquire().await?;
        Ok(shared::fence_raise(&mut conn, pool, token).await? <= token)
    }
}, units: {
    async fn task_create_batch(&self, tasks: &[NewTask]) -> StoreResult<Vec<Created>> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        // The writer's kept connection, unless another create holds it or it sat idle.
        let mut kept = self.tasks.try_lock().ok();
        let reused = kept
            .as_mut()
            .and_then(|k| k.take())
            .filter(|(_, at)| at.elapsed() < TASK_CONNECTION_KEPT);
        let was_kept = reused.is_some();
        let mut conn = match reused {
            Some((conn, _)) => conn,
            None => self.pool.acquire().await?,
        };
        let mut created = tasks::task_create_batch(&mut conn, tasks).await;
        if was_kept && matches!(created, Err(StoreError::Unavailable(_))) {
            // The kept connection was not tested before use: one the server dropped since
            // is given up (sqlx tests it on its way back) and the batch written on a tested
            // one, as it would have been from the start.
            drop(conn);
            conn = self.pool.acquire().await?;
            created = tasks::task_create_batch(&mut conn, tasks).await;
        }
        if created.is_ok()
            && let Some(k) = kept.as_mut()
        {
            **k = Some((conn, Instant::now()));
        }
        created
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
        // The batch statements settle budget reservations and check the fence themselves
        // (`apply.rs`): one statement needs no transaction.
        if !apply::needs_transaction(&updates) {
            let mut conn = self.array_writer().acquire().await?;
            let mut report = apply::unit_apply(&mut conn, &updates, now, fence).await?;
            report.refused = refused;
            return Ok(report);
        }
        apply_in_transaction(self.array_writer(), &updates, now, fence, refused).await
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
        finalize::unit_claim_finalize(&self.pool, owner, lease_until, now, limit).await
    }

    async fn unit_complete_many(
        &self,
        owner: &str,
        done: &[(String, String)],
        now: i64,
    ) -> StoreResult<Vec<String>> {
        finalize::unit_complete_many(self.array_writer(), owner, done, now).await
    }

    async fn unit_finalize_release(
        &self,
        release: FinalizeRelease<'_>,
        now: i64,
    ) -> StoreResult<bool> {
        finalize::unit_finalize_release(&self.pool, release, now).await
    }
});

/// [`crate::UnitWrite::unit_apply`] in a transaction: the fence checked first, then the
/// batch statements (several when ids repeat, or pure polls and other updates mix).
async fn apply_in_transaction(
    pool: &PgPool,
    updates: &[UnitUpdate],
    now: i64,
    fence: Option<&Fence>,
    refused: Vec<crate::RefusedWrite>,
) -> StoreResult<ApplyReport> {
    let mut tx = pool.begin().await?;
    if let Some(fence) = fence
        && let Err(e) = shared::fence_check(&mut tx, fence).await
    {
        return Err(crate::rollback(tx, e).await);
    }
    let mut report = apply::unit_apply(&mut tx, updates, now, None).await?;
    tx.commit().await?;
    report.refused = refused;
    Ok(report)
}
