//! What the two stores share, written once: the column lists, the row decoders, and every
//! statement whose text is the same on SQLite and PostgreSQL.
//!
//! Statements are written with `$N` placeholders, which both drivers bind by number (SQLite
//! reads `$1` as a numbered parameter too). [`on_both_drivers!`] compiles each function once
//! per driver, into [`sqlite`] and [`postgres`], where the names below differ:
//! - `Pool`, `Conn`, `DbRow`: the driver's pool, connection and row types;
//! - `Count`: how an `INTEGER` counter column decodes (`i64` on SQLite, `i32` on PostgreSQL);
//! - `GREATEST`: the two-argument maximum (`MAX(a, b)` on SQLite, `GREATEST(a, b)` on
//!   PostgreSQL).
//!
//! The statements that differ in more than these (list parameters: `json_each(?)` against
//! `= ANY($1)`; row locks; batch updates) stay in each store's own modules.

use sqlx::Row;

use crate::{
    Fence, HandlerVersionRow, LIST_LIMIT_DEFAULT, NewTask, PAGE_ROWS_MAX, PoolStatusCount,
    QueueStanding, SlotEvent, SlotHolder, SlotLog, StoreError, StoreResult, TaskFilter, TaskPage,
    TaskRecord, UnitEvent,
};
use slotd_core::model::{Unit, UnitCounts, UnitStatus};

/// The columns of `units` that make a [`Unit`]. Used in `SELECT` and `RETURNING` lists so
/// that every query returns whole units.
pub(crate) const UNIT_COLS: &str = "id, task_id, idx, tenant, task_type, pool, stage, status, \
     priority, spec, state, provider_job_id, submit_attempt, attempts, polls, next_at, \
     submitted_at, error, result, cost, cancel_requested_at, routes, created_at, updated_at, \
     account, deadline_at, start_by, best_effort, cost_estimate, wait_reason, routing, \
     planned_release, job_release";

/// A stored `deadline_at`: [`slotd_core::model::NO_DEADLINE`] means none.
pub(crate) fn deadline_of(stored: i64) -> Option<i64> {
    (stored != slotd_core::model::NO_DEADLINE).then_some(stored)
}

/// The columns of `tasks` that make a [`TaskRecord`] (counts are filled separately).
pub(crate) const TASK_COLS: &str = "seq, id, tenant, type, payload, idempotency_key, priority, \
     callback_url, cancel_requested_at, created_at, updated_at, deadline_at, start_by, \
     deadline_policy";

/// The columns of `unit_events` (as `e`) that make a [`UnitEvent`].
pub(crate) const EVENT_COLS: &str = "e.id, e.unit_id, e.task_id, e.at, e.from_status, \
     e.to_status, e.stage, e.detail, e.error";

/// The tenant condition of an event stream (events as `e`, the tenant `$2`): a task must be
/// the tenant's for its events to be read.
pub(crate) const EVENT_TENANT: &str =
    "EXISTS (SELECT 1 FROM tasks t WHERE t.id = e.task_id AND t.tenant = $2)";

/// Which tasks a page of events belongs to, with their tenant: `{page}` selects `id, task_id`
/// of the page's events (in log order, limited); each task comes once, with how many of the
/// page's events are its and the last one's id (so the caller knows where the page ended and
/// whether it was full). Events of a task no longer in `tasks` come with a NULL tenant.
pub(crate) const EVENT_SCOPES: &str = "SELECT p.task_id, t.tenant, MAX(p.id) AS last, \
     COUNT(*) AS n FROM ({page}) p LEFT JOIN tasks t ON t.id = p.task_id \
     GROUP BY p.task_id, t.tenant";

/// The scope condition of a tenant-wide event stream: `$3` (the task) is bound as NULL.
pub(crate) const EVENT_SCOPE_ALL: &str = "CAST($3 AS TEXT) IS NULL";

/// The tenant condition of a list that an admin may widen to every tenant: `$1` is the
/// tenant, or NULL for all. Two texts rather than `($1 IS NULL OR tenant = $1)`, so that the
/// tenant's own list keeps its `(tenant, …)` index (a planner cannot use an index through
/// that `OR`).
pub(crate) fn tenant_scope(tenant: Option<&str>) -> &'static str {
    match tenant {
        Some(_) => "tenant = $1",
        None => "CAST($1 AS TEXT) IS NULL",
    }
}

/// The transitions into or out of `submitted` of pool `$1`'s units since `$2`, newest first,
/// at most `$3`. The id bound comes first: the newest event before the window, found by
/// reading the log backwards by id (its primary key), so only the window is scanned. Ids
/// follow time closely but not exactly across instances, hence the `at` condition too.
pub(crate) const SLOT_LOG_SQL: &str = "SELECT e.id, e.unit_id, e.task_id, u.tenant, e.at, e.from_status, \
         e.to_status, e.stage, e.detail \
     FROM unit_events e JOIN units u ON u.id = e.unit_id \
     WHERE e.id > COALESCE((SELECT b.id FROM unit_events b WHERE b.at < $2 \
                            ORDER BY b.id DESC LIMIT 1), 0) \
       AND e.at >= $2 AND u.pool = $1 \
       AND ((e.to_status = 'submitted' AND COALESCE(e.from_status, '') <> 'submitted') \
            OR (e.from_status = 'submitted' AND e.to_status <> 'submitted')) \
     ORDER BY e.id DESC LIMIT $3";

/// SQL list of the terminal statuses, for `status NOT IN (…)`.
pub(crate) const TERMINAL_SQL: &str = "('completed', 'failed', 'cancelled')";

// These spell `Result<_, StoreError>` rather than `StoreResult`: cargo-mutants only builds
// `Ok(...)` replacements for a return type it recognizes as a `Result`.

/// Parse a stored status, naming `what` (e.g. "unit u1") if it is not one we know.
pub(crate) fn parse_status(what: &str, raw: &str) -> Result<UnitStatus, StoreError> {
    raw.parse()
        .map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

/// A stored counter as `u32`; negative or oversized values are corruption, named.
pub(crate) fn counter(unit_id: &str, column: &str, value: i64) -> Result<u32, StoreError> {
    u32::try_from(value).map_err(|_| {
        StoreError::Corrupt(format!(
            "unit {unit_id}: column {column} holds {value}, not a count"
        ))
    })
}

/// Add one `(status, parked, count)` row of a grouped count query to `counts` (`parked`:
/// `succeeded` units whose finalization gave up, see [`slotd_core::model::FINALIZE_PARKED_AT`]).
pub(crate) fn add_count(
    counts: &mut UnitCounts,
    task_id: &str,
    status: &str,
    parked: bool,
    n: i64,
) -> Result<(), StoreError> {
    let status = parse_status(&format!("a unit of task {task_id}"), status)?;
    let n = u32::try_from(n)
        .map_err(|_| StoreError::Corrupt(format!("task {task_id}: unit count {n} out of range")))?;
    if parked && status == UnitStatus::Succeeded {
        counts.add_parked(n);
    } else {
        counts.add(status, n);
    }
    Ok(())
}

/// Raise the pool's token to `$2` unless the stored one is higher; returns the token after.
/// Locks the pool's fence row until the transaction ends (PostgreSQL), so an advance by a new
/// leader waits for a fenced write in flight, and a write of the old leader that starts after
/// the advance sees the higher token.
fn fence_raise_sql(greatest: &str) -> String {
    format!(
        "INSERT INTO pool_fences (pool, token) VALUES ($1, $2) \
         ON CONFLICT (pool) DO UPDATE SET token = {greatest}(pool_fences.token, excluded.token) \
         RETURNING token"
    )
}

/// Compile the items once per driver (see the module documentation for the names that
/// differ). A block that calls the statements of another shared module on the same driver
/// starts with `use each <that module> as <name>;`: `name` is its `sqlite` module in the
/// SQLite copy and its `postgres` module in the PostgreSQL one.
macro_rules! on_both_drivers {
    (@with [$($sqlite:tt)*] [$($postgres:tt)*] $($item:item)*) => {
        /// The shared statements on SQLite.
        pub(crate) mod sqlite {
            // `Count` is `i64` here: widening it to `i64` is a no-op on this driver only.
            #![allow(dead_code, clippy::useless_conversion)]
            use super::*;
            pub(crate) type Pool = sqlx::SqlitePool;
            pub(crate) type Conn = sqlx::SqliteConnection;
            pub(crate) type DbRow = sqlx::sqlite::SqliteRow;
            type Count = i64;
            const GREATEST: &str = "MAX";
            /// SQLite has one writer at a time: a transaction needs no lock of its own.
            const ADVISORY_LOCK: Option<&str> = None;
            /// The newest event id: the end of the rowid B-tree.
            const LAST_EVENT_ID: &str = "SELECT COALESCE(MAX(id), 0) FROM unit_events";
            $($sqlite)*
            $($item)*
        }
        /// The shared statements on PostgreSQL.
        pub(crate) mod postgres {
            #![allow(dead_code)]
            use super::*;
            pub(crate) type Pool = sqlx::PgPool;
            pub(crate) type Conn = sqlx::PgConnection;
            pub(crate) type DbRow = sqlx::postgres::PgRow;
            type Count = i32;
            const GREATEST: &str = "GREATEST";
            /// Serializes transactions that name the same text (`$1`) until they end.
            const ADVISORY_LOCK: Option<&str> = Some("SELECT pg_advisory_xact_lock(hashtext($1))");
            /// The newest event id handed out: the identity's sequence (no B-tree holds the ids,
            /// migrations/postgres/0025_event_ids.sql).
            const LAST_EVENT_ID: &str = "SELECT COALESCE(pg_sequence_last_value(\
                 pg_get_serial_sequence('unit_events', 'id')::regclass), 0)";
            $($postgres)*
            $($item)*
        }
    };
    (use each $($module:ident)::+ as $name:ident; $($item:item)*) => {
        on_both_drivers! {
            @with [use $($module)::+::sqlite as $name;] [use $($module)::+::postgres as $name;]
            $($item)*
        }
    };
    ($($item:item)*) => {
        on_both_drivers! { @with [] [] $($item)* }
    };
}

/// For the other modules whose statements are the same on both stores (`terms.rs`).
pub(crate) use on_both_drivers;

on_both_drivers! {
    /// A stored counter column as `u32`.
    fn count_of(row: &DbRow, unit_id: &str, column: &str) -> StoreResult<u32> {
        let value: Count = row.try_get(column)?;
        counter(unit_id, column, i64::from(value))
    }

    /// Decode one row selected with [`UNIT_COLS`].
    pub(crate) fn unit_from_row(row: &DbRow) -> StoreResult<Unit> {
        let id: String = row.try_get("id")?;
        let status: String = row.try_get("status")?;
        Ok(Unit {
            status: parse_status(&format!("unit {id}"), &status)?,
            index: count_of(row, &id, "idx")?,
            submit_attempt: count_of(row, &id, "submit_attempt")?,
            attempts: count_of(row, &id, "attempts")?,
            polls: count_of(row, &id, "polls")?,
            task_id: row.try_get("task_id")?,
            tenant: row.try_get("tenant")?,
            task_type: row.try_get("task_type")?,
            pool: row.try_get("pool")?,
            stage: row.try_get("stage")?,
            priority: row.try_get("priority")?,
            spec: row.try_get("spec")?,
            state: row.try_get("state")?,
            provider_job_id: row.try_get("provider_job_id")?,
            next_at: row.try_get("next_at")?,
            submitted_at: row.try_get("submitted_at")?,
            error: row.try_get("error")?,
            result: row.try_get("result")?,
            cost: row.try_get("cost")?,
            cancel_requested_at: row.try_get("cancel_requested_at")?,
            routes: row.try_get("routes")?,
            routing: row.try_get("routing")?,
            terms: slotd_core::model::UnitTerms {
                account: row.try_get("account")?,
                deadline_at: deadline_of(row.try_get("deadline_at")?),
                start_by: row.try_get("start_by")?,
                best_effort: row.try_get::<i32, _>("best_effort")? != 0,
                cost_estimate: row.try_get("cost_estimate")?,
                wait_reason: row.try_get("wait_reason")?,
            },
            releases: slotd_core::model::UnitReleases {
                planned_release: row.try_get("planned_release")?,
                job_release: row.try_get("job_release")?,
            },
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
            id,
        })
    }

    /// Decode many rows selected with [`UNIT_COLS`].
    pub(crate) fn units_from_rows(rows: &[DbRow]) -> StoreResult<Vec<Unit>> {
        rows.iter().map(unit_from_row).collect()
    }

    /// Decode one row selected with [`TASK_COLS`], returning its `seq` too (the list cursor).
    pub(crate) fn task_from_row(row: &DbRow) -> StoreResult<(i64, TaskRecord)> {
        let seq: i64 = row.try_get("seq")?;
        let task = TaskRecord {
            id: row.try_get("id")?,
            tenant: row.try_get("tenant")?,
            task_type: row.try_get("type")?,
            payload: row.try_get("payload")?,
            idempotency_key: row.try_get("idempotency_key")?,
            priority: row.try_get("priority")?,
            completion_webhook_url: row.try_get("callback_url")?,
            cancel_requested_at: row.try_get("cancel_requested_at")?,
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
            counts: UnitCounts::default(),
            terms: slotd_core::model::TaskTerms {
                deadline_at: row.try_get("deadline_at")?,
                start_by: row.try_get("start_by")?,
                best_effort: row
                    .try_get::<Option<String>, _>("deadline_policy")?
                    .is_some_and(|p| p == "best_effort"),
            },
        };
        Ok((seq, task))
    }

    /// The tenant's task `id`, its unit counts not yet read (each driver reads them: a list
    /// parameter).
    pub(crate) async fn task_row(
        pool: &Pool,
        tenant: &str,
        id: &str,
    ) -> StoreResult<Option<TaskRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {TASK_COLS} FROM tasks WHERE id = $1 AND tenant = $2"
        ))
        .bind(id)
        .bind(tenant)
        .fetch_optional(pool)
        .await?;
        row.map(|row| task_from_row(&row).map(|(_, task)| task))
            .transpose()
    }

    /// A page of tasks, newest first by `seq`, their unit counts not yet read. `filter.limit`
    /// 0 means [`LIST_LIMIT_DEFAULT`]; it is capped at [`PAGE_ROWS_MAX`]. One row more than the
    /// page is read to know whether a next page exists. `tenant` `None`: every tenant's (see
    /// [`tenant_scope`] for why two texts).
    pub(crate) async fn task_page(
        pool: &Pool,
        tenant: Option<&str>,
        filter: &TaskFilter,
    ) -> StoreResult<TaskPage> {
        let limit = match filter.limit {
            0 => LIST_LIMIT_DEFAULT,
            n => n.min(PAGE_ROWS_MAX),
        };
        let scope = tenant_scope(tenant);
        let rows: Vec<DbRow> = sqlx::query(&format!(
            "SELECT {TASK_COLS} FROM tasks \
             WHERE {scope} \
               AND (CAST($2 AS TEXT) IS NULL OR type = $2) \
               AND (CAST($3 AS BIGINT) IS NULL OR seq < $3) \
               AND (CAST($4 AS TEXT) IS NULL OR EXISTS \
                    (SELECT 1 FROM units WHERE units.task_id = tasks.id AND units.status = $4)) \
             ORDER BY seq DESC LIMIT $5"
        ))
        .bind(tenant)
        .bind(&filter.task_type)
        .bind(filter.before)
        .bind(filter.unit_status.map(UnitStatus::as_str))
        .bind(i64::from(limit) + 1)
        .fetch_all(pool)
        .await?;
        let mut tasks = Vec::with_capacity(rows.len());
        let mut last_seq = None;
        for row in rows.iter().take(limit as usize) {
            let (seq, task) = task_from_row(row)?;
            last_seq = Some(seq);
            tasks.push(task);
        }
        let next = if rows.len() > limit as usize {
            last_seq
        } else {
            None
        };
        Ok(TaskPage { tasks, next })
    }

    /// The task holding `task`'s idempotency key for its tenant: a batch create did not store
    /// `task` because the key was taken. Not finding one is an error (the insert said taken).
    pub(crate) async fn task_holding_key(conn: &mut Conn, task: &NewTask) -> StoreResult<String> {
        task_with_key(conn, task).await?.ok_or_else(|| {
            StoreError::Other(format!(
                "task {} was not stored and no task holds its idempotency key",
                task.id
            ))
        })
    }

    /// The task that holds `task`'s tenant and idempotency key, if one does.
    pub(crate) async fn task_with_key(
        conn: &mut Conn,
        task: &NewTask,
    ) -> StoreResult<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT id FROM tasks WHERE tenant = $1 AND idempotency_key = $2")
                .bind(&task.tenant)
                .bind(&task.idempotency_key)
                .fetch_optional(&mut *conn)
                .await?,
        )
    }

    /// A task's units in index order.
    pub(crate) async fn task_units(pool: &Pool, task_id: &str) -> StoreResult<Vec<Unit>> {
        let rows = sqlx::query(&format!(
            "SELECT {UNIT_COLS} FROM units WHERE task_id = $1 ORDER BY idx"
        ))
        .bind(task_id)
        .fetch_all(pool)
        .await?;
        units_from_rows(&rows)
    }

    /// Units per pool and status (the pools view and the gauges).
    pub(crate) async fn unit_count_by_pool(pool: &Pool) -> StoreResult<Vec<PoolStatusCount>> {
        let rows = sqlx::query(
            "SELECT pool, status, COUNT(*) AS n FROM units \
             GROUP BY pool, status ORDER BY pool, status",
        )
        .fetch_all(pool)
        .await?;
        rows.iter()
            .map(|row| {
                let name: String = row.try_get("pool")?;
                let status: String = row.try_get("status")?;
                let n: i64 = row.try_get("n")?;
                Ok(PoolStatusCount {
                    status: parse_status(&format!("a unit of pool {name}"), &status)?,
                    count: u64::try_from(n).map_err(|_| {
                        StoreError::Corrupt(format!("pool {name}: unit count {n} out of range"))
                    })?,
                    pool: name,
                })
            })
            .collect()
    }

    /// [`crate::StoreRead::task_queue_standing`]. Fill order ties between tenants at
    /// the same rank go by who was served last, which this does not read: half of them are
    /// counted ahead.
    pub(crate) async fn task_queue_standing(
        pool: &Pool,
        task_id: &str,
    ) -> StoreResult<Option<QueueStanding>> {
        let own = sqlx::query(
            "SELECT pool, tenant, priority, task_seq, MIN(idx) AS lo, COUNT(*) AS n FROM units \
             WHERE task_id = $1 AND status = 'pending' \
             GROUP BY pool, tenant, priority, task_seq ORDER BY n DESC LIMIT 1",
        )
        .bind(task_id)
        .fetch_optional(pool)
        .await?;
        let Some(own) = own else {
            let running_pool: Option<String> = sqlx::query_scalar(
                "SELECT pool FROM units WHERE task_id = $1 AND status = 'submitted' LIMIT 1",
            )
            .bind(task_id)
            .fetch_optional(pool)
            .await?;
            let Some(name) = running_pool else {
                return Ok(None);
            };
            return Ok(Some(QueueStanding {
                running: running_in(pool, &name, task_id).await?,
                pool: name,
                ..QueueStanding::default()
            }));
        };
        let name: String = own.try_get("pool")?;
        let tenant: String = own.try_get("tenant")?;
        let priority: i64 = own.try_get::<Count, _>("priority")?.into();
        let seq: i64 = own.try_get("task_seq")?;
        let lo: i64 = own.try_get::<Count, _>("lo")?.into();
        let pending = count(own.try_get::<i64, _>("n")?);
        let earlier: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM units WHERE pool = $1 AND status = 'pending' \
             AND tenant = $2 AND priority = $3 AND (task_seq < $4 OR (task_seq = $4 AND idx < $5))",
        )
        .bind(&name)
        .bind(&tenant)
        .bind(priority)
        .bind(seq)
        .bind(lo)
        .fetch_one(pool)
        .await?;
        let higher: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM units WHERE pool = $1 AND status = 'pending' AND priority > $2",
        )
        .bind(&name)
        .bind(priority)
        .fetch_one(pool)
        .await?;
        let others: Vec<(String, i64)> = sqlx::query_as(
            "SELECT tenant, COUNT(*) FROM units WHERE pool = $1 AND status = 'pending' \
             AND priority = $2 AND tenant <> $3 GROUP BY tenant ORDER BY tenant",
        )
        .bind(&name)
        .bind(priority)
        .bind(&tenant)
        .fetch_all(pool)
        .await?;
        let earlier = count(earlier);
        let standing = QueueStanding {
            running: running_in(pool, &name, task_id).await?,
            pool: name,
            pending,
            tenant,
            rank_first: earlier,
            rank_last: earlier + pending.saturating_sub(1),
            higher: count(higher),
            others: others.into_iter().map(|(t, c)| (t, count(c))).collect(),
            ..QueueStanding::default()
        };
        Ok(Some(standing.with_reservations(&Default::default())))
    }

    /// A count as `u64` (a negative one reads as none).
    fn count(n: i64) -> u64 {
        u64::try_from(n).unwrap_or(0)
    }

    /// The units of `name` holding a slot: submit time and whether `task_id` is theirs.
    async fn running_in(pool: &Pool, name: &str, task_id: &str) -> StoreResult<Vec<(i64, bool)>> {
        let rows = sqlx::query(
            "SELECT task_id, submitted_at FROM units WHERE pool = $1 AND status = 'submitted'",
        )
        .bind(name)
        .fetch_all(pool)
        .await?;
        rows.iter()
            .map(|row| {
                let task: String = row.try_get("task_id")?;
                let at: Option<i64> = row.try_get("submitted_at")?;
                Ok((at.unwrap_or(0), task == task_id))
            })
            .collect()
    }

    /// Decode one row selected with [`EVENT_COLS`].
    pub(crate) fn event_from_row(row: &DbRow) -> StoreResult<UnitEvent> {
        Ok(UnitEvent {
            id: row.try_get("id")?,
            unit_id: row.try_get("unit_id")?,
            task_id: row.try_get("task_id")?,
            at: row.try_get("at")?,
            from_status: row.try_get("from_status")?,
            to_status: row.try_get("to_status")?,
            stage: row.try_get("stage")?,
            detail: row.try_get("detail")?,
            error: row.try_get("error")?,
        })
    }

    /// A task's unit events, oldest first.
    /// See [`crate::StoreRead::unit_events_recent_with`]: the last `scan` ids (a range of the
    /// rowid on SQLite, of the BRIN on `id` on PostgreSQL), then a prefix test (no `LIKE`: a
    /// route name's `_` would be a wildcard).
    pub(crate) async fn unit_events_recent_with(
        pool: &Pool,
        prefix: &str,
        scan: i64,
    ) -> StoreResult<Vec<UnitEvent>> {
        let rows = sqlx::query(&format!(
            "SELECT {EVENT_COLS} FROM unit_events e \
             WHERE e.id > ({LAST_EVENT_ID}) - $2 \
               AND substr(e.detail, 1, length($1)) = $1 ORDER BY e.id"
        ))
        .bind(prefix)
        .bind(scan)
        .fetch_all(pool)
        .await?;
        rows.iter().map(event_from_row).collect()
    }

    pub(crate) async fn unit_events(pool: &Pool, task_id: &str) -> StoreResult<Vec<UnitEvent>> {
        let rows = sqlx::query(&format!(
            "SELECT {EVENT_COLS} FROM unit_events e WHERE e.task_id = $1 ORDER BY e.id"
        ))
        .bind(task_id)
        .fetch_all(pool)
        .await?;
        rows.iter().map(event_from_row).collect()
    }

    /// The key named `name`, storing `candidate` first if there is none (one candidate wins).
    /// Two statements: the insert stores the candidate or leaves an earlier key alone (a
    /// concurrent insert of the same name waits for the first to commit, then does nothing),
    /// and the read returns whichever is stored.
    pub(crate) async fn host_key_get_or_create(
        pool: &Pool,
        name: &str,
        candidate: &[u8],
        now: i64,
    ) -> StoreResult<Vec<u8>> {
        sqlx::query(
            "INSERT INTO host_keys (name, key, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(candidate)
        .bind(now)
        .execute(pool)
        .await?;
        sqlx::query_scalar("SELECT key FROM host_keys WHERE name = $1")
            .bind(name)
            .fetch_optional(pool)
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("host key {name:?} vanished after insert")))
    }

    /// Append one row to the handler version history (`handler_versions`, append-only: one
    /// row per state a version of a handler file entered).
    pub(crate) async fn handler_version_record(
        pool: &Pool,
        row: &HandlerVersionRow,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO handler_versions (at, path, name, version, sha256, state, reason) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(row.at)
        .bind(&row.path)
        .bind(&row.name)
        .bind(&row.version)
        .bind(&row.sha256)
        .bind(&row.state)
        .bind(&row.reason)
        .execute(pool)
        .await?;
        Ok(())
    }

    /// The history's newest rows first, of one handler or all.
    pub(crate) async fn handler_version_list(
        pool: &Pool,
        name: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<HandlerVersionRow>> {
        let rows = sqlx::query(
            "SELECT id, at, path, name, version, sha256, state, reason FROM handler_versions \
             WHERE CAST($1 AS TEXT) IS NULL OR name = $1 ORDER BY id DESC LIMIT $2",
        )
        .bind(name)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(HandlerVersionRow {
                    id: r.try_get("id")?,
                    at: r.try_get("at")?,
                    path: r.try_get("path")?,
                    name: r.try_get("name")?,
                    version: r.try_get("version")?,
                    sha256: r.try_get("sha256")?,
                    state: r.try_get("state")?,
                    reason: r.try_get("reason")?,
                })
            })
            .collect()
    }

    /// Raise `name`'s fencing token to `token`; false if the stored one is already higher.
    /// `conn` is a write transaction's connection on SQLite (one writer); on PostgreSQL any.
    pub(crate) async fn fence_raise(conn: &mut Conn, name: &str, token: i64) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(&fence_raise_sql(GREATEST))
            .bind(name)
            .bind(token)
            .fetch_one(conn)
            .await?)
    }

    /// Raise `fence.pool`'s token to `fence.token`, or fail with [`StoreError::Fenced`] if
    /// the stored one is higher. Runs first in the transaction of the write it guards, which
    /// the caller drops (rolling back) on error.
    pub(crate) async fn fence_check(conn: &mut Conn, fence: &Fence) -> StoreResult<()> {
        let current = fence_raise(conn, &fence.pool, fence.token).await?;
        if current > fence.token {
            return Err(StoreError::Fenced {
                pool: fence.pool.clone(),
                token: fence.token,
                current,
            });
        }
        Ok(())
    }

    /// See [`crate::StoreRead::unit_list_submitted_ids`].
    pub(crate) async fn unit_list_submitted_ids(
        pool: &Pool,
        sched_pool: &str,
    ) -> StoreResult<Vec<String>> {
        Ok(
            sqlx::query_scalar("SELECT id FROM units WHERE pool = $1 AND status = 'submitted'")
                .bind(sched_pool)
                .fetch_all(pool)
                .await?,
        )
    }

    /// See [`crate::UnitWrite::unit_finalize_renew`]: one guarded statement (on SQLite it
    /// queues on the one writer like any write).
    pub(crate) async fn unit_finalize_renew(
        pool: &Pool,
        id: &str,
        owner: &str,
        lease_until: i64,
    ) -> StoreResult<bool> {
        let held = sqlx::query(
            "UPDATE units SET lease_until = $3 \
             WHERE id = $1 AND status = 'finalizing' AND lease_owner = $2",
        )
        .bind(id)
        .bind(owner)
        .bind(lease_until)
        .execute(pool)
        .await?
        .rows_affected();
        Ok(held > 0)
    }

    /// Record that task `id` changed at `now` (inside the write that changed it).
    pub(crate) async fn task_touch(conn: &mut Conn, id: &str, now: i64) -> StoreResult<()> {
        sqlx::query("UPDATE tasks SET updated_at = $2 WHERE id = $1")
            .bind(id)
            .bind(now)
            .execute(conn)
            .await?;
        Ok(())
    }

    /// Record a cancel request on task `id` (the first one is kept). Returns 1 when this is
    /// the first, else 0.
    pub(crate) async fn task_request_cancel(conn: &mut Conn, id: &str, now: i64) -> StoreResult<u64> {
        Ok(sqlx::query(
            "UPDATE tasks SET cancel_requested_at = $2 \
             WHERE id = $1 AND cancel_requested_at IS NULL",
        )
        .bind(id)
        .bind(now)
        .execute(conn)
        .await?
        .rows_affected())
    }

    /// See [`crate::StoreRead::unit_next_due`].
    pub(crate) async fn unit_next_due(
        pool: &Pool,
        name: &str,
        status: UnitStatus,
    ) -> StoreResult<Option<i64>> {
        // The status is written into the statement (it is one of the enum's names): the index
        // this reads is partial (live statuses, migrations/postgres/0024), and a prepared
        // statement's generic plan cannot prove a parameter's value inside its condition.
        Ok(sqlx::query_scalar(&format!(
            "SELECT MIN(next_at) FROM units WHERE pool = $1 AND status = '{}'",
            status.as_str()
        ))
        .bind(name)
        .fetch_one(pool)
        .await?)
    }

    /// See [`crate::StoreRead::unit_next_due_of_both`]: two index reads in one statement (the
    /// statuses written in, as in [`unit_next_due`]).
    pub(crate) async fn unit_next_due_of_both(
        pool: &Pool,
        name: &str,
        first: UnitStatus,
        second: UnitStatus,
    ) -> StoreResult<(Option<i64>, Option<i64>)> {
        Ok(sqlx::query_as(&format!(
            "SELECT (SELECT MIN(next_at) FROM units WHERE pool = $1 AND status = '{}'), \
                 (SELECT MIN(next_at) FROM units WHERE pool = $1 AND status = '{}')",
            first.as_str(),
            second.as_str()
        ))
        .bind(name)
        .fetch_one(pool)
        .await?)
    }

    /// See [`crate::StoreRead::unit_count_provider_queued`].
    pub(crate) async fn unit_count_provider_queued(
        pool: &Pool,
        name: &str,
        account: Option<&str>,
    ) -> StoreResult<u32> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM units WHERE pool = $1 AND status = 'submitted' \
             AND (wait_reason = $3 OR wait_reason LIKE $4) \
             AND (account = $2 OR ($2 IS NULL AND account IS NULL))",
        )
        .bind(name)
        .bind(account)
        .bind(crate::PROVIDER_QUEUE)
        .bind(format!("{} %", crate::PROVIDER_QUEUE))
        .fetch_one(pool)
        .await?;
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }

    /// See [`crate::StoreRead::task_tenant`].
    pub(crate) async fn task_tenant(pool: &Pool, id: &str) -> StoreResult<Option<String>> {
        Ok(sqlx::query_scalar("SELECT tenant FROM tasks WHERE id = $1")
            .bind(id)
            .fetch_optional(pool)
            .await?)
    }

    /// See [`crate::StoreRead::pool_slot_log`].
    pub(crate) async fn pool_slot_log(
        pool: &Pool,
        name: &str,
        since: i64,
        limit: u32,
    ) -> StoreResult<SlotLog> {
        let rows = sqlx::query(SLOT_LOG_SQL)
            .bind(name)
            .bind(since)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?;
        let truncated = rows.len() >= limit as usize;
        let mut events = rows
            .iter()
            .map(|r| {
                Ok(SlotEvent {
                    id: r.try_get("id")?,
                    unit_id: r.try_get("unit_id")?,
                    task_id: r.try_get("task_id")?,
                    tenant: r.try_get("tenant")?,
                    at: r.try_get("at")?,
                    from_status: r.try_get("from_status")?,
                    to_status: r.try_get("to_status")?,
                    stage: r.try_get("stage")?,
                    detail: r.try_get("detail")?,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        events.reverse();
        let holders = sqlx::query(
            "SELECT id, task_id, tenant, stage, COALESCE(submitted_at, updated_at) AS since \
             FROM units WHERE pool = $1 AND status = 'submitted' ORDER BY id",
        )
        .bind(name)
        .fetch_all(pool)
        .await?
        .iter()
        .map(|r| {
            Ok(SlotHolder {
                unit_id: r.try_get("id")?,
                task_id: r.try_get("task_id")?,
                tenant: r.try_get("tenant")?,
                stage: r.try_get("stage")?,
                since: r.try_get("since")?,
            })
        })
        .collect::<StoreResult<Vec<_>>>()?;
        Ok(SlotLog {
            events,
            holders,
            truncated,
        })
    }
}
