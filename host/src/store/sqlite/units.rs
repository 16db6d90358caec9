//! The scheduler's unit queries: fill order, the write-ahead submit marker, due polls, guarded
//! batch updates, slot reconciliation, webhook lookup, metrics counts and the event log.

use std::collections::HashMap;

use sqlx::sqlite::SqlitePool;
use sqlx::{Row, Sqlite, Transaction};

use super::rows::{UNIT_COLS, json_list, parse_status, unit_from_row, units_from_rows};
use crate::model::{Unit, UnitStatus};
use crate::store::{
    ApplyReport, MAX_LOOKUP_KEY_BYTES, PoolStatusCount, StoreError, StoreResult, UnitEvent,
    UnitUpdate,
};

/// The fill-order query (see [`unit_list_pending`]); `?1` pool, `?2` now, `?3` JSON array of
/// task types, `?4` limit.
pub(super) fn pending_sql() -> String {
    // The window runs over the covering `units_fill` index alone (rowid and sort keys); only
    // the `limit` winners are then read from the table.
    format!(
        "SELECT {UNIT_COLS} FROM ( \
             SELECT w.rid, w.p, w.rn, COALESCE(sv.last_at, -1) AS served, w.s, w.i FROM ( \
                 SELECT rowid AS rid, priority AS p, tenant AS t, task_seq AS s, idx AS i, \
                     ROW_NUMBER() OVER (PARTITION BY priority, tenant ORDER BY task_seq, idx) \
                         AS rn \
                 FROM units \
                 WHERE pool = ?1 AND status = 'pending' AND +next_at <= ?2 \
                   AND task_type IN (SELECT value FROM json_each(?3)) \
             ) AS w LEFT JOIN pool_tenant_served AS sv ON sv.pool = ?1 AND sv.tenant = w.t \
             ORDER BY w.p DESC, w.rn, served, w.s, w.i LIMIT ?4 \
         ) AS fill JOIN units ON units.rowid = fill.rid \
         ORDER BY fill.p DESC, fill.rn, fill.served, fill.s, fill.i"
    )
}

/// The due-poll query; parameters as in [`pending_sql`].
pub(super) fn due_sql() -> String {
    format!(
        "SELECT {UNIT_COLS} FROM units \
         WHERE pool = ?1 AND status = 'submitted' AND next_at <= ?2 \
           AND task_type IN (SELECT value FROM json_each(?3)) \
         ORDER BY next_at LIMIT ?4"
    )
}

/// Fill order in one statement. The window numbers each (priority, tenant)'s due units FIFO;
/// ordering by that number interleaves tenants round-robin within a priority, and among equal
/// numbers the tenant served longest ago (`pool_tenant_served`) goes first, so round-robin
/// holds across ticks too, when slots free one at a time. `units_fill`
/// delivers rows already in partition order, and the LIMIT keeps the final sort top-N.
/// `+next_at` keeps the planner off the `next_at` range of `units_pool_status_next`: almost
/// every pending unit is due, so that range filters nothing and would cost a second sort.
pub(super) async fn unit_list_pending(
    pool: &SqlitePool,
    sched_pool: &str,
    task_types: &[String],
    now: i64,
    limit: u32,
) -> StoreResult<Vec<Unit>> {
    if task_types.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let rows = sqlx::query(&pending_sql())
        .bind(sched_pool)
        .bind(now)
        .bind(json_list(task_types)?)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    units_from_rows(&rows)
}

/// `pending -> submitted` for those of `ids` still pending, returned in the order of `ids`.
pub(super) async fn unit_mark_submitted(
    mut tx: Transaction<'static, Sqlite>,
    ids: &[String],
    now: i64,
) -> StoreResult<Vec<Unit>> {
    let ids_json = json_list(ids)?;
    sqlx::query(
        "INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage, detail) \
         SELECT id, task_id, ?2, 'pending', 'submitted', stage, \
             'submit marked: key ' || id || '-' || stage || '-' || submit_attempt \
         FROM units WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'pending'",
    )
    .bind(&ids_json)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    let rows = sqlx::query(&format!(
        "UPDATE units SET status = 'submitted', provider_job_id = NULL, submitted_at = ?2, \
             updated_at = ?2 \
         WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'pending' \
         RETURNING {UNIT_COLS}"
    ))
    .bind(&ids_json)
    .bind(now)
    .fetch_all(&mut *tx)
    .await?;
    // The fair-share cursor: these tenants were served now (see migration 0007).
    sqlx::query(
        "INSERT INTO pool_tenant_served (pool, tenant, last_at) \
         SELECT DISTINCT pool, tenant, ?2 FROM units \
         WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'submitted' \
           AND submitted_at = ?2 \
         ON CONFLICT (pool, tenant) DO UPDATE SET last_at = excluded.last_at",
    )
    .bind(&ids_json)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    let mut units = units_from_rows(&rows)?;
    let order: HashMap<&str, usize> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), i))
        .collect();
    units.sort_by_key(|u| order.get(u.id.as_str()).copied().unwrap_or(usize::MAX));
    Ok(units)
}

pub(super) async fn unit_list_due(
    pool: &SqlitePool,
    sched_pool: &str,
    task_types: &[String],
    now: i64,
    limit: u32,
) -> StoreResult<Vec<Unit>> {
    if task_types.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let rows = sqlx::query(&due_sql())
        .bind(sched_pool)
        .bind(now)
        .bind(json_list(task_types)?)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    units_from_rows(&rows)
}

/// The event row of one guarded update, written only if the guard holds (it reads the old
/// status, so it runs before the update; the single writer keeps the two consistent).
const APPLY_EVENT_SQL: &str = "INSERT INTO unit_events \
         (unit_id, task_id, at, from_status, to_status, stage, detail, error) \
     SELECT id, task_id, ?1, status, COALESCE(?2, status), COALESCE(?3, stage), ?4, ?5 \
     FROM units WHERE id = ?6 AND (?7 IS NULL OR status = ?7) AND (?8 IS NULL OR stage = ?8) \
         AND (?9 IS NULL OR submitted_at = ?9) AND (NOT ?10 OR cancel_requested_at IS NULL)";

/// One guarded update. Every `?n IS NULL`/flag pair leaves a column alone; one static
/// statement serves every shape of update. Leaving `finalizing` drops the lease.
const APPLY_UNIT_SQL: &str = "UPDATE units SET \
         status = COALESCE(?1, status), \
         stage = COALESCE(?2, stage), \
         pool = COALESCE(?3, pool), \
         provider_job_id = CASE WHEN ?4 THEN ?5 ELSE provider_job_id END, \
         state = COALESCE(?6, state), \
         result = COALESCE(?7, result), \
         error = CASE WHEN ?8 THEN ?9 ELSE error END, \
         cost = COALESCE(?10, cost), \
         next_at = COALESCE(?11, next_at), \
         attempts = COALESCE(?12, attempts), \
         polls = COALESCE(?13, polls), \
         submit_attempt = COALESCE(?14, submit_attempt), \
         submitted_at = CASE WHEN ?15 THEN ?16 ELSE submitted_at END, \
         lease_owner = CASE WHEN COALESCE(?1, status) = 'finalizing' THEN lease_owner END, \
         lease_until = CASE WHEN COALESCE(?1, status) = 'finalizing' THEN lease_until END, \
         updated_at = MAX(?17, updated_at + 1) \
     WHERE id = ?18 AND (?19 IS NULL OR status = ?19) AND (?20 IS NULL OR stage = ?20) \
         AND (?21 IS NULL OR submitted_at = ?21) AND (NOT ?22 OR cancel_requested_at IS NULL)";

/// Apply each update under its guard, all in one transaction: an event row and the update for
/// each unit whose guard holds, nothing for the others.
pub(super) async fn unit_apply(
    mut tx: Transaction<'static, Sqlite>,
    updates: &[UnitUpdate],
    now: i64,
) -> StoreResult<ApplyReport> {
    let mut report = ApplyReport::default();
    for u in updates {
        let to = u.to.map(UnitStatus::as_str);
        // A poll that changes nothing but timing ("still running") is not an event: the log
        // records transitions and things worth reading, not every tick.
        let eventful = u.detail.is_some()
            || u.from.is_none()
            || u.to.is_some_and(|t| Some(t) != u.from)
            || u.stage.is_some()
            || matches!(u.error, Some(Some(_)));
        let guarded = if !eventful {
            1
        } else {
            sqlx::query(APPLY_EVENT_SQL)
                .bind(now)
                .bind(to)
                .bind(&u.stage)
                .bind(&u.detail)
                .bind(u.error.clone().flatten())
                .bind(&u.unit_id)
                .bind(u.from.map(UnitStatus::as_str))
                .bind(&u.from_stage)
                .bind(u.from_submitted_at)
                .bind(u.unless_cancel_requested)
                .execute(&mut *tx)
                .await?
                .rows_affected()
        };
        if guarded == 0 {
            report.skipped.push(u.unit_id.clone());
            continue;
        }
        let updated = sqlx::query(APPLY_UNIT_SQL)
            .bind(to)
            .bind(&u.stage)
            .bind(&u.pool)
            .bind(u.provider_job_id.is_some())
            .bind(u.provider_job_id.clone().flatten())
            .bind(&u.state)
            .bind(&u.result)
            .bind(u.error.is_some())
            .bind(u.error.clone().flatten())
            .bind(&u.cost)
            .bind(u.next_at)
            .bind(u.attempts.map(i64::from))
            .bind(u.polls.map(i64::from))
            .bind(u.submit_attempt.map(i64::from))
            .bind(u.submitted_at.is_some())
            .bind(u.submitted_at.flatten())
            .bind(now)
            .bind(&u.unit_id)
            .bind(u.from.map(UnitStatus::as_str))
            .bind(&u.from_stage)
            .bind(u.from_submitted_at)
            .bind(u.unless_cancel_requested)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if updated == 0 {
            report.skipped.push(u.unit_id.clone());
            continue;
        }
        report.applied.push(u.unit_id.clone());
    }
    tx.commit().await?;
    Ok(report)
}

pub(super) async fn unit_list_submitted_ids(
    pool: &SqlitePool,
    sched_pool: &str,
) -> StoreResult<Vec<String>> {
    Ok(
        sqlx::query_scalar("SELECT id FROM units WHERE pool = ?1 AND status = 'submitted'")
            .bind(sched_pool)
            .fetch_all(pool)
            .await?,
    )
}

/// By provider job id first; failing that, by idempotency key. The key is
/// `{unit id}-{stage}-{attempt}` and both ids and stages may contain `-`, so every prefix
/// ending before a `-` is a candidate id, looked up by primary key and confirmed by rebuilding
/// the key from the unit.
pub(super) async fn unit_find_by_provider(
    pool: &SqlitePool,
    task_types: &[String],
    provider_job_id: Option<&str>,
    idempotency_key: Option<&str>,
) -> StoreResult<Option<Unit>> {
    if task_types.is_empty() {
        return Ok(None);
    }
    let types = json_list(task_types)?;
    if let Some(job) = provider_job_id.filter(|j| !j.is_empty()) {
        let row = sqlx::query(&format!(
            "SELECT {UNIT_COLS} FROM units \
             WHERE provider_job_id = ?1 AND status = 'submitted' \
               AND task_type IN (SELECT value FROM json_each(?2)) \
             LIMIT 1"
        ))
        .bind(job)
        .bind(&types)
        .fetch_optional(pool)
        .await?;
        if let Some(row) = row {
            return unit_from_row(&row).map(Some);
        }
    }
    let Some(key) = idempotency_key.filter(|k| k.len() <= MAX_LOOKUP_KEY_BYTES) else {
        return Ok(None);
    };
    let candidates: Vec<&str> = key.match_indices('-').map(|(i, _)| &key[..i]).collect();
    if candidates.is_empty() {
        return Ok(None);
    }
    let rows = sqlx::query(&format!(
        "SELECT {UNIT_COLS} FROM units \
         WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'submitted' \
           AND task_type IN (SELECT value FROM json_each(?2))"
    ))
    .bind(json_list(&candidates)?)
    .bind(&types)
    .fetch_all(pool)
    .await?;
    for unit in units_from_rows(&rows)? {
        if unit.idempotency_key() == key {
            return Ok(Some(unit));
        }
    }
    Ok(None)
}

pub(super) async fn unit_count_by_pool(pool: &SqlitePool) -> StoreResult<Vec<PoolStatusCount>> {
    let rows = sqlx::query(
        "SELECT pool, status, COUNT(*) AS n FROM units GROUP BY pool, status ORDER BY pool, status",
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

pub(super) async fn unit_events(pool: &SqlitePool, task_id: &str) -> StoreResult<Vec<UnitEvent>> {
    let rows = sqlx::query(
        "SELECT id, unit_id, task_id, at, from_status, to_status, stage, detail, error \
         FROM unit_events WHERE task_id = ?1 ORDER BY id",
    )
    .bind(task_id)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
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
        })
        .collect()
}
