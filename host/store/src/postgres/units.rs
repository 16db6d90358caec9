//! The scheduler's unit queries: fill order, the write-ahead submit marker, due polls, slot
//! reconciliation, webhook lookup, metrics counts and the event log. The batch update is in
//! [`super::apply`].

use sqlx::postgres::{PgConnection, PgPool};

use super::rows::{
    UNIT_COLS, sort_like, unit_cols_of, unit_cols_of_units, unit_from_row, units_from_rows,
};
use crate::StoreResult;
use slotd_core::model::Unit;

/// The fill-order query: `$1` pool, `$2` now, `$3` task types, `$4` limit.
///
/// Each (priority, tenant)'s due units are numbered FIFO; ordering by that number interleaves
/// tenants round-robin within a priority, and among equal numbers the tenant served longest ago
/// (`pool_tenant_served`) goes first, so round-robin holds across ticks too. No window over the
/// whole backlog: a group can place at most `limit` units in the answer, so `g` finds the
/// groups by skipping along `units_fill` (one index probe per group), each group's first
/// `limit` due units are read from the same index already in order (numbered as they come,
/// no sort), only those narrow rows are sorted, and only the `limit` winners are read whole.
pub(super) fn pending_sql() -> String {
    format!(
        "WITH RECURSIVE g AS ( \
             (SELECT priority, tenant FROM units WHERE pool = $1 AND status = 'pending' \
              ORDER BY priority, tenant LIMIT 1) \
             UNION ALL \
             SELECT n.priority, n.tenant FROM g CROSS JOIN LATERAL ( \
                 SELECT priority, tenant FROM units \
                 WHERE pool = $1 AND status = 'pending' \
                   AND (priority, tenant) > (g.priority, g.tenant) \
                 ORDER BY priority, tenant LIMIT 1) AS n \
         ), fill AS ( \
             SELECT c.id, g.priority AS p, c.rn, c.deadline_at AS d, \
                 COALESCE(sv.last_at, -1) AS served, c.task_seq AS s, c.idx AS i \
             FROM g CROSS JOIN LATERAL ( \
                 SELECT id, deadline_at, task_seq, idx, \
                     ROW_NUMBER() OVER (ORDER BY deadline_at, task_seq, idx) AS rn \
                 FROM units \
                 WHERE pool = $1 AND status = 'pending' AND priority = g.priority \
                   AND tenant = g.tenant AND next_at <= $2 AND task_type = ANY($3) \
                 ORDER BY deadline_at, task_seq, idx LIMIT $4) AS c \
             LEFT JOIN pool_tenant_served AS sv ON sv.pool = $1 AND sv.tenant = g.tenant \
             WHERE NOT (g.tenant = ANY($5)) \
             ORDER BY p DESC, c.rn, d, served, s, i LIMIT $4 \
         ) \
         SELECT {cols} FROM fill CROSS JOIN LATERAL ( \
             SELECT {UNIT_COLS} FROM units WHERE units.id = fill.id) AS u \
         ORDER BY fill.p DESC, fill.rn, fill.d, fill.served, fill.s, fill.i",
        cols = unit_cols_of("u")
    )
}

/// The due-poll query; parameters as in [`pending_sql`].
pub(super) fn due_sql() -> String {
    format!(
        "SELECT {UNIT_COLS} FROM units \
         WHERE pool = $1 AND status = 'submitted' AND next_at <= $2 AND task_type = ANY($3) \
         ORDER BY next_at LIMIT $4"
    )
}

pub(super) async fn unit_list_pending(
    pool: &PgPool,
    sched_pool: &str,
    task_types: &[String],
    now: i64,
    limit: u32,
    except_tenants: &[String],
) -> StoreResult<Vec<Unit>> {
    if task_types.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let rows = sqlx::query(&pending_sql())
        .bind(sched_pool)
        .bind(now)
        .bind(task_types)
        .bind(i64::from(limit))
        .bind(except_tenants)
        .fetch_all(pool)
        .await?;
    units_from_rows(&rows)
}

/// The marker's statement over `$1` ids, each recorded on the account of `$4` beside it (`$2`
/// now, `$3` next due). `alone`:
/// it also raises and checks the pool's fence (`$5` pool, `$6` token, both NULL without a
/// fence; a higher stored token moves nothing) and leaves out the units whose tenant has a
/// budget (their reservation needs the marker's transaction).
fn mark_sql(alone: bool) -> String {
    let (fence, guard) = if alone {
        (
            concat!(fence_cte!("$5", "$6"), ", "),
            "AND NOT EXISTS (SELECT 1 FROM fence WHERE fence.token > $6) \
             AND NOT EXISTS (SELECT 1 FROM tenant_budgets b WHERE b.tenant = units.tenant) ",
        )
    } else {
        ("", "")
    };
    format!(
        "WITH {fence}picked AS ( \
             SELECT units.id, pick.account FROM unnest($1::text[], $4::text[]) AS pick (id, account) \
             JOIN units ON units.id = pick.id WHERE units.status = 'pending' {guard}\
             ORDER BY units.id FOR UPDATE OF units SKIP LOCKED \
         ), moved AS ( \
             UPDATE units SET status = 'submitted', provider_job_id = NULL, submitted_at = $2, \
                 updated_at = $2, next_at = $3, account = picked.account, wait_reason = NULL \
             FROM picked WHERE units.id = picked.id \
             RETURNING {} \
         ), event AS ( \
             INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage, detail) \
             SELECT id, task_id, $2, 'pending', 'submitted', stage, \
                 'submit marked: key ' || id || '-' || stage || '-' || submit_attempt \
                     || ' in pool ' || pool || COALESCE(' account ' || account, '') \
             FROM moved \
         ), served AS ( \
             INSERT INTO pool_tenant_served (pool, tenant, last_at) \
             SELECT DISTINCT pool, tenant, $2 FROM moved \
             ON CONFLICT (pool, tenant) DO UPDATE SET last_at = EXCLUDED.last_at \
         ) \
         SELECT {UNIT_COLS} FROM moved",
        unit_cols_of_units()
    )
}

/// `pending -> submitted` for those of `ids` still pending, returned in the order of `ids`:
/// one statement that locks (skipping rows another writer holds, e.g. a cancel in flight:
/// those are simply not marked), moves and logs. The ids are joined by primary key (an
/// `id = ANY($1)` filter let the planner scan every pending unit against the whole list).
pub(super) async fn unit_mark_submitted(
    conn: &mut PgConnection,
    ids: &[String],
    now: i64,
    next_at: i64,
    account: Option<&str>,
) -> StoreResult<Vec<Unit>> {
    let rows = sqlx::query(&mark_sql(false))
        .bind(ids)
        .bind(now)
        .bind(next_at)
        .bind(vec![account; ids.len()])
        .fetch_all(conn)
        .await?;
    let mut units = units_from_rows(&rows)?;
    sort_like(&mut units, ids);
    Ok(units)
}

/// The marker as one statement, outside a transaction, for grants that write nothing but the
/// move (no spend limit, route or create log; see `one_impl.rs`): the fence and the budget
/// lookup go into the statement. The units moved, in the order of `ids`; those left (a tenant
/// with a budget, a higher fence, a row another writer holds) go through the transaction.
pub(super) async fn unit_mark_alone(
    pool: &PgPool,
    ids: &[String],
    now: i64,
    next_at: i64,
    accounts: &[Option<&str>],
    fence: Option<&crate::Fence>,
) -> StoreResult<Option<Vec<Unit>>> {
    let rows = sqlx::query(&mark_sql(true))
        .bind(ids)
        .bind(now)
        .bind(next_at)
        .bind(accounts)
        .bind(fence.map(|f| f.pool.as_str()))
        .bind(fence.map(|f| f.token))
        .fetch_all(pool)
        .await?;
    let mut units = units_from_rows(&rows)?;
    sort_like(&mut units, ids);
    Ok(Some(units))
}

pub(super) async fn unit_list_due(
    pool: &PgPool,
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
        .bind(task_types)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    units_from_rows(&rows)
}

/// The submitted units of `task_types` whose provider job is one of `jobs`, or whose
/// idempotency key is one of `keys`: one read for a batch of callbacks. A job id is a
/// provider's, unique among the jobs it runs; should two submitted units name one all the
/// same, the first of them is kept (`provider_refs_found`), as the single lookup does.
pub(super) async fn unit_find_by_provider_refs(
    pool: &PgPool,
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
         WHERE provider_job_id = ANY($1) AND status = 'submitted' AND task_type = ANY($2) \
         UNION ALL \
         SELECT {UNIT_COLS} FROM units \
         WHERE id = ANY($3) AND status = 'submitted' AND task_type = ANY($2)"
    ))
    .bind(&jobs)
    .bind(task_types)
    .bind(&ids)
    .fetch_all(pool)
    .await?;
    Ok(crate::provider_refs_found(
        units_from_rows(&rows)?,
        &jobs,
        keys,
    ))
}

/// By provider job id first; failing that, by idempotency key (`{unit id}-{stage}-{attempt}`,
/// where ids and stages may contain `-`: every prefix ending before a `-` is a candidate id,
/// confirmed by rebuilding the key from the unit).
pub(super) async fn unit_find_by_provider(
    pool: &PgPool,
    task_types: &[String],
    provider_job_id: Option<&str>,
    idempotency_key: Option<&str>,
) -> StoreResult<Option<Unit>> {
    if task_types.is_empty() {
        return Ok(None);
    }
    if let Some(job) = provider_job_id.filter(|j| !j.is_empty()) {
        let row = sqlx::query(&format!(
            "SELECT {UNIT_COLS} FROM units \
             WHERE provider_job_id = $1 AND status = 'submitted' AND task_type = ANY($2) \
             LIMIT 1"
        ))
        .bind(job)
        .bind(task_types)
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
         WHERE id = ANY($1) AND status = 'submitted' AND task_type = ANY($2)"
    ))
    .bind(&candidates)
    .bind(task_types)
    .fetch_all(pool)
    .await?;
    for unit in units_from_rows(&rows)? {
        if unit.idempotency_key() == key {
            return Ok(Some(unit));
        }
    }
    Ok(None)
}
