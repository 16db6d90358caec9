//! The scheduler's unit queries: fill order, the write-ahead submit marker, due polls, slot
//! reconciliation, webhook lookup, metrics counts and the event log.

use std::collections::HashMap;

use sqlx::sqlite::SqlitePool;
use sqlx::{Sqlite, Transaction};

use super::rows::{
    UNIT_COLS, json_list, unit_from_row, unit_json_cols, units_from_json, units_from_rows,
};
use crate::StoreResult;
use slotd_core::model::Unit;

/// The fill-order query (see [`unit_list_pending`]); `?1` pool, `?2` now, `?3` JSON array of
/// task types, `?4` limit.
///
/// No window over the whole backlog: a (priority, tenant) group can place at most `limit`
/// units in the answer, so each group's first `limit` due units are read (`g` finds the groups
/// on the `units_fill` index, and each group's candidates come from the same index, FIFO), and
/// only those are numbered and sorted. Only the `limit` winners are read from the table, and
/// they come back as one JSON array (see [`unit_json_cols`]).
/// `+next_at` keeps the planner off the `next_at` range of `units_pool_status_next`: almost
/// every pending unit is due, so that range filters nothing and would cost a second sort.
pub(super) fn pending_sql() -> String {
    format!(
        "WITH g AS ( \
             SELECT DISTINCT priority AS p, tenant AS t FROM units \
             WHERE pool = ?1 AND status = 'pending' \
               AND tenant NOT IN (SELECT value FROM json_each(?5)) \
         ), c AS ( \
             SELECT units.rowid AS rid, units.priority AS p, units.tenant AS t, \
                 units.deadline_at AS d, units.task_seq AS s, units.idx AS i \
             FROM g JOIN units ON units.rowid IN ( \
                 SELECT rowid FROM units \
                 WHERE pool = ?1 AND status = 'pending' AND priority = g.p AND tenant = g.t \
                   AND +next_at <= ?2 AND task_type IN (SELECT value FROM json_each(?3)) \
                 ORDER BY deadline_at, task_seq, idx LIMIT ?4) \
         ), w AS ( \
             SELECT rid, p, t, d, s, i, \
                 ROW_NUMBER() OVER (PARTITION BY p, t ORDER BY d, s, i) AS rn \
             FROM c \
         ), fill AS ( \
             SELECT w.rid, w.p, w.rn, w.d, COALESCE(sv.last_at, -1) AS served, w.s, w.i FROM w \
             LEFT JOIN pool_tenant_served AS sv ON sv.pool = ?1 AND sv.tenant = w.t \
             ORDER BY w.p DESC, w.rn, w.d, served, w.s, w.i LIMIT ?4 \
         ) \
         SELECT json_group_array({json} \
             ORDER BY fill.p DESC, fill.rn, fill.d, fill.served, fill.s, fill.i) \
         FROM fill JOIN units ON units.rowid = fill.rid",
        json = unit_json_cols()
    )
}

/// The due-poll query, answered as one JSON array (see [`unit_json_cols`]); parameters as in
/// [`pending_sql`].
pub(super) fn due_sql() -> String {
    format!(
        "SELECT json_group_array({json} ORDER BY next_at, id) FROM ( \
             SELECT {UNIT_COLS} FROM units \
             WHERE pool = ?1 AND status = 'submitted' AND next_at <= ?2 \
               AND task_type IN (SELECT value FROM json_each(?3)) \
             ORDER BY next_at LIMIT ?4 \
         )",
        json = unit_json_cols()
    )
}

/// Fill order in one statement. Each (priority, tenant)'s due units are numbered FIFO;
/// ordering by that number interleaves tenants round-robin within a priority, and among equal
/// numbers the tenant served longest ago (`pool_tenant_served`) goes first, so round-robin
/// holds across ticks too, when slots free one at a time.
pub(super) async fn unit_list_pending(
    pool: &SqlitePool,
    sched_pool: &str,
    task_types: &[String],
    now: i64,
    limit: u32,
    except_tenants: &[String],
) -> StoreResult<Vec<Unit>> {
    if task_types.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let text: String = sqlx::query_scalar(&pending_sql())
        .bind(sched_pool)
        .bind(now)
        .bind(json_list(task_types)?)
        .bind(i64::from(limit))
        .bind(json_list(except_tenants)?)
        .fetch_one(pool)
        .await?;
    units_from_json(&text)
}

/// The marker as one statement outside a transaction: not on SQLite, whose one writer makes
/// the marker's transaction cheap (`None`: the caller takes the transaction).
pub(super) async fn unit_mark_alone(
    _pool: &SqlitePool,
    _ids: &[String],
    _now: i64,
    _next_at: i64,
    _accounts: &[Option<&str>],
    _fence: Option<&crate::Fence>,
) -> StoreResult<Option<Vec<Unit>>> {
    Ok(None)
}

/// `pending -> submitted` for those of `ids` still pending, returned in the order of `ids`.
/// The account is recorded on each unit moved (and any budget wait reason cleared); the
/// caller commits.
pub(super) async fn unit_mark_submitted(
    tx: &mut Transaction<'static, Sqlite>,
    ids: &[String],
    now: i64,
    next_at: i64,
    account: Option<&str>,
) -> StoreResult<Vec<Unit>> {
    let ids_json = json_list(ids)?;
    sqlx::query(
        "INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage, detail) \
         SELECT id, task_id, ?2, 'pending', 'submitted', stage, \
             'submit marked: key ' || id || '-' || stage || '-' || submit_attempt \
                 || ' in pool ' || pool || COALESCE(' account ' || ?3, '') \
         FROM units WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'pending'",
    )
    .bind(&ids_json)
    .bind(now)
    .bind(account)
    .execute(&mut **tx)
    .await?;
    let moved: Vec<String> = sqlx::query_scalar(
        "UPDATE units SET status = 'submitted', provider_job_id = NULL, submitted_at = ?2, \
             updated_at = ?2, next_at = ?3, account = ?4, wait_reason = NULL \
         WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'pending' \
         RETURNING id",
    )
    .bind(&ids_json)
    .bind(now)
    .bind(next_at)
    .bind(account)
    .fetch_all(&mut **tx)
    .await?;
    // The units marked, read back as one JSON array (see `unit_json_cols`).
    let text: String = sqlx::query_scalar(&format!(
        "SELECT json_group_array({}) FROM units WHERE id IN (SELECT value FROM json_each(?1))",
        unit_json_cols()
    ))
    .bind(json_list(&moved)?)
    .fetch_one(&mut **tx)
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
    .execute(&mut **tx)
    .await?;
    let mut units = units_from_json(&text)?;
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
    let text: String = sqlx::query_scalar(&due_sql())
        .bind(sched_pool)
        .bind(now)
        .bind(json_list(task_types)?)
        .bind(i64::from(limit))
        .fetch_one(pool)
        .await?;
    units_from_json(&text)
}

/// The submitted units of `task_types` whose provider job is one of `jobs`, or whose
/// idempotency key is one of `keys`: one read for a batch of callbacks (the first unit per
/// job, as the single lookup keeps).
pub(super) async fn unit_find_by_provider_refs(
    pool: &SqlitePool,
    task_types: &[String],
    jobs: &[String],
    keys: &[String],
) -> StoreResult<Vec<Unit>> {
    let jobs: Vec<&str> = jobs
        .iter()
        .map(String::as_str)
        .filter(|j| !j.is_empty())
        .collect();
    let ids: Vec<&str> = keys.iter().flat_map(|k| crate::key_candidates(k)).collect();
    if task_types.is_empty() || (jobs.is_empty() && ids.is_empty()) {
        return Ok(Vec::new());
    }
    let rows = sqlx::query(&format!(
        "SELECT {UNIT_COLS} FROM units \
         WHERE provider_job_id IN (SELECT value FROM json_each(?1)) AND status = 'submitted' \
           AND task_type IN (SELECT value FROM json_each(?2)) \
         UNION ALL \
         SELECT {UNIT_COLS} FROM units \
         WHERE id IN (SELECT value FROM json_each(?3)) AND status = 'submitted' \
           AND task_type IN (SELECT value FROM json_each(?2))"
    ))
    .bind(json_list(&jobs)?)
    .bind(json_list(task_types)?)
    .bind(json_list(&ids)?)
    .fetch_all(pool)
    .await?;
    Ok(crate::provider_refs_found(
        units_from_rows(&rows)?,
        &jobs,
        keys,
    ))
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
    let Some(key) = idempotency_key else {
        return Ok(None);
    };
    let candidates = crate::key_candidates(key);
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
