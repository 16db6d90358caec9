//! Task queries: create (task, units and "created" events in one statement), read, list,
//! cancel and retry.
//!
//! Cancel and retry lock the task's units in id order (`ORDER BY id FOR UPDATE`) before
//! writing, as the scheduler's batch update does, so two writers of overlapping units always
//! queue instead of deadlocking.

use std::collections::HashSet;

use sqlx::postgres::PgPool;
use sqlx::{Postgres, Row, Transaction};

use super::rows::{TERMINAL_SQL, add_count, parse_status};
use crate::{CANCEL_WAIT_DETAIL, Cancelled, Created, NewTask, StoreError, StoreResult, TaskRecord};
use slotd_core::model::{FINALIZE_PARKED_AT, UnitStatus};

/// A batch of tasks, their units and the units' "created" events, as one statement (so no
/// transaction around it: one round trip and one commit). The task rows come as parallel
/// arrays in order (`$1`…`$11`), so their `seq` ascends in batch order; a task whose tenant's
/// idempotency key is taken, by a stored task or an earlier one of the batch, is not
/// inserted. The units come as parallel arrays carrying their task's tenant, type, priority
/// and time, and `t`, the position of their task in the batch: `seqs` is the batch's `seq`
/// by position (0 for a task not inserted, whose units are left out), so a unit finds its
/// task's `seq` by subscript. No join of units and tasks: a cached generic plan guesses ten
/// rows for any array, which could make such a join quadratic in the units; only the tasks
/// are joined to the tasks inserted (at most [`crate::group_commit::MAX_BATCH_TASKS`] each).
/// Returns the tasks inserted, `(id, seq)`.
const TASKS_INSERT_SQL: &str = "WITH task AS ( \
         INSERT INTO tasks (id, tenant, type, payload, idempotency_key, priority, callback_url, \
             created_at, updated_at, deadline_at, start_by, deadline_policy) \
         SELECT id, tenant, type, payload, idempotency_key, priority, callback_url, now, now, \
             deadline_at, start_by, deadline_policy \
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int4[], \
             $7::text[], $8::int8[], $9::int8[], $10::int8[], $11::text[]) WITH ORDINALITY \
             AS t (id, tenant, type, payload, idempotency_key, priority, callback_url, now, \
                 deadline_at, start_by, deadline_policy, ord) \
         ORDER BY ord \
         ON CONFLICT (tenant, idempotency_key) DO NOTHING \
         RETURNING id, seq \
     ), seqs AS ( \
         SELECT array_agg(COALESCE(task.seq, 0) ORDER BY a.ord) AS seq \
         FROM unnest($1::text[]) WITH ORDINALITY AS a (id, ord) \
         LEFT JOIN task ON task.id = a.id \
     ), unit AS ( \
         INSERT INTO units (id, task_id, idx, tenant, task_type, task_seq, priority, pool, \
             stage, status, spec, state, routes, routing, planned_release, next_at, created_at, \
             updated_at, deadline_at, start_by, best_effort, cost_estimate) \
         SELECT u.id, u.task_id, u.idx, u.tenant, u.task_type, seqs.seq[u.t], u.priority, \
             u.pool, u.stage, 'pending', u.spec, u.state, u.routes, u.routing, \
             u.planned_release, u.now, u.now, u.now, u.deadline_at, u.start_by, \
             u.best_effort, u.cost_estimate \
         FROM seqs CROSS JOIN unnest($12::text[], $13::text[], $14::int4[], $15::text[], \
             $16::text[], $17::int4[], $18::int4[], $19::text[], $20::text[], $21::text[], \
             $22::text[], $23::text[], $24::int8[], $25::text[], $26::text[], $27::int8[], \
             $28::int8[], $29::int4[], $30::float8[]) WITH ORDINALITY \
             AS u (id, task_id, idx, tenant, task_type, t, priority, pool, stage, spec, \
                 state, routes, now, routing, planned_release, deadline_at, start_by, \
                 best_effort, cost_estimate, ord) \
         WHERE seqs.seq[u.t] <> 0 \
         ORDER BY u.ord \
         RETURNING id, task_id, task_seq, idx, stage, created_at \
     ), event AS ( \
         INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage, detail) \
         SELECT id, task_id, created_at, NULL, 'pending', stage, 'created' FROM unit \
         ORDER BY task_seq, idx \
     ) \
     SELECT id, seq FROM task";

/// The units of a batch's tasks, as the parallel arrays of [`TASKS_INSERT_SQL`] (`positions`:
/// each unit's task, by its 1-based position in the batch).
#[derive(Default)]
struct UnitArrays<'a> {
    ids: Vec<&'a str>,
    tasks: Vec<&'a str>,
    idx: Vec<i32>,
    tenants: Vec<&'a str>,
    types: Vec<&'a str>,
    positions: Vec<i32>,
    priorities: Vec<i32>,
    pools: Vec<&'a str>,
    stages: Vec<&'a str>,
    specs: Vec<&'a str>,
    states: Vec<&'a str>,
    routes: Vec<Option<&'a str>>,
    nows: Vec<i64>,
    routing: Vec<Option<&'a str>>,
    planned_release: Vec<Option<&'a str>>,
    deadlines: Vec<i64>,
    start_by: Vec<Option<i64>>,
    best_effort: Vec<i32>,
    cost_estimates: Vec<Option<f64>>,
}

impl<'a> UnitArrays<'a> {
    fn of(tasks: &[&'a NewTask]) -> StoreResult<UnitArrays<'a>> {
        let mut a = UnitArrays::default();
        for (position, t) in tasks.iter().enumerate() {
            let position = i32::try_from(position + 1).map_err(|_| {
                StoreError::Other(format!("task {}: batch position out of range", t.id))
            })?;
            let (deadline, start_by, best_effort) = crate::terms::deadlines::unit_terms(t);
            for (i, u) in t.units.iter().enumerate() {
                a.ids.push(&u.id);
                a.tasks.push(&t.id);
                a.idx.push(i32::try_from(i).map_err(|_| {
                    StoreError::Other(format!("task {}: unit index {i} out of range", t.id))
                })?);
                a.tenants.push(&t.tenant);
                a.types.push(&t.task_type);
                a.positions.push(position);
                a.priorities.push(t.priority);
                a.pools.push(&u.pool);
                a.stages.push(&u.stage);
                a.specs.push(&u.spec);
                a.states.push(&u.state);
                a.routes.push(u.routes.as_deref());
                a.nows.push(t.now);
                a.routing.push(u.routing.as_deref());
                a.planned_release.push(u.planned_release.as_deref());
                a.deadlines.push(deadline);
                a.start_by.push(start_by);
                a.best_effort.push(best_effort);
                a.cost_estimates.push(u.cost_estimate);
            }
        }
        Ok(a)
    }
}

/// Store a batch of tasks (group commit): each unless its tenant's idempotency key is taken
/// (then the holder is reported), with its units and their "created" events. One statement
/// whatever the batch size (it commits on its own), then a lookup per task whose key was
/// taken. `ON CONFLICT DO NOTHING` waits for a concurrent insert of the same key to commit,
/// so the lookup finds the holder; should the holder have gone by then (deleted), the task
/// is written again, as a lone create would have been.
pub(super) async fn task_create_batch(
    conn: &mut sqlx::PgConnection,
    tasks: &[NewTask],
) -> StoreResult<Vec<Created>> {
    let mut out: Vec<Option<Created>> = vec![None; tasks.len()];
    let mut left: Vec<usize> = (0..tasks.len()).collect();
    for _ in 0..KEY_ATTEMPTS {
        let batch: Vec<&NewTask> = left.iter().filter_map(|&i| tasks.get(i)).collect();
        let inserted = tasks_insert(conn, &batch).await?;
        let mut again = Vec::new();
        for i in left {
            let Some(task) = tasks.get(i) else { continue };
            let answer = if inserted.contains(task.id.as_str()) {
                Some(Created::New(task.id.clone()))
            } else {
                crate::shared::postgres::task_with_key(&mut *conn, task)
                    .await?
                    .map(Created::Existing)
            };
            match answer {
                Some(c) => out[i] = Some(c),
                None => again.push(i),
            }
        }
        if again.is_empty() {
            return Ok(out.into_iter().flatten().collect());
        }
        left = again;
    }
    Err(StoreError::Other(format!(
        "{} tasks were not stored and no task holds their idempotency keys",
        left.len()
    )))
}

/// How many times a batch's tasks whose idempotency key was taken, and whose holder was gone
/// when looked up, are written again.
const KEY_ATTEMPTS: usize = 3;

/// [`TASKS_INSERT_SQL`] over `tasks`: the ids of those inserted.
async fn tasks_insert(
    conn: &mut sqlx::PgConnection,
    tasks: &[&NewTask],
) -> StoreResult<HashSet<String>> {
    let text = |f: fn(&NewTask) -> Option<&str>| -> Vec<Option<&str>> {
        tasks.iter().map(|t| f(t)).collect()
    };
    let terms: Vec<_> = tasks
        .iter()
        .map(|t| crate::terms::deadlines::task_terms(t))
        .collect();
    let u = UnitArrays::of(tasks)?;
    let rows: Vec<(String, i64)> = sqlx::query_as(TASKS_INSERT_SQL)
        .bind(text(|t| Some(t.id.as_str())))
        .bind(text(|t| Some(t.tenant.as_str())))
        .bind(text(|t| Some(t.task_type.as_str())))
        .bind(text(|t| Some(t.payload.as_str())))
        .bind(text(|t| t.idempotency_key.as_deref()))
        .bind(tasks.iter().map(|t| t.priority).collect::<Vec<i32>>())
        .bind(text(|t| t.completion_webhook_url.as_deref()))
        .bind(tasks.iter().map(|t| t.now).collect::<Vec<i64>>())
        .bind(terms.iter().map(|t| t.0).collect::<Vec<_>>())
        .bind(terms.iter().map(|t| t.1).collect::<Vec<_>>())
        .bind(terms.iter().map(|t| t.2).collect::<Vec<_>>())
        .bind(u.ids)
        .bind(u.tasks)
        .bind(u.idx)
        .bind(u.tenants)
        .bind(u.types)
        .bind(u.positions)
        .bind(u.priorities)
        .bind(u.pools)
        .bind(u.stages)
        .bind(u.specs)
        .bind(u.states)
        .bind(u.routes)
        .bind(u.nows)
        .bind(u.routing)
        .bind(u.planned_release)
        .bind(u.deadlines)
        .bind(u.start_by)
        .bind(u.best_effort)
        .bind(u.cost_estimates)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows.into_iter().map(|(id, _)| id).collect())
}

/// Unit counts by status for each task, in one grouped query.
pub(super) async fn counts_for(pool: &PgPool, tasks: &mut [TaskRecord]) -> StoreResult<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    let rows = sqlx::query(
        "SELECT task_id, status, (status = 'succeeded' AND next_at >= $2) AS parked, \
             COUNT(*) AS n FROM units \
         WHERE task_id = ANY($1) GROUP BY task_id, status, parked",
    )
    .bind(&ids)
    .bind(FINALIZE_PARKED_AT)
    .fetch_all(pool)
    .await?;
    for row in rows {
        let task_id: String = row.try_get("task_id")?;
        let status: String = row.try_get("status")?;
        let parked: bool = row.try_get("parked")?;
        let n: i64 = row.try_get("n")?;
        if let Some(task) = tasks.iter_mut().find(|t| t.id == task_id) {
            add_count(&mut task.counts, &task_id, &status, parked, n)?;
        }
    }
    Ok(())
}

/// Lock the tenant's task row (so the answer holds for the transaction), or `false`.
async fn task_lock_owned(
    tx: &mut Transaction<'static, Postgres>,
    tenant: &str,
    id: &str,
) -> StoreResult<bool> {
    let found: Option<i32> =
        sqlx::query_scalar("SELECT 1 FROM tasks WHERE id = $1 AND tenant = $2 FOR UPDATE")
            .bind(id)
            .bind(tenant)
            .fetch_optional(&mut **tx)
            .await?;
    Ok(found.is_some())
}

/// Cancel with the task row and its live units locked: the request recorded on the task
/// (first time kept), the units without a provider job cancelled, the `submitted` ones marked.
/// A unit being marked submitted concurrently is either locked here first (and then skipped by
/// the marker) or read here already `submitted`; it is never missed.
pub(super) async fn task_cancel(
    mut tx: Transaction<'static, Postgres>,
    tenant: &str,
    id: &str,
    now: i64,
) -> StoreResult<Option<Cancelled>> {
    if !task_lock_owned(&mut tx, tenant, id).await? {
        tx.rollback().await?;
        return Ok(None);
    }
    let first = crate::shared::postgres::task_request_cancel(&mut tx, id, now).await?;
    let rows = sqlx::query(&format!(
        "SELECT id, status, cancel_requested_at FROM units \
         WHERE task_id = $1 AND status NOT IN {TERMINAL_SQL} ORDER BY id FOR UPDATE"
    ))
    .bind(id)
    .fetch_all(&mut *tx)
    .await?;
    let mut ends = Vec::new();
    let mut waits = Vec::new();
    for row in &rows {
        let unit_id: String = row.try_get("id")?;
        let status: String = row.try_get("status")?;
        let requested: Option<i64> = row.try_get("cancel_requested_at")?;
        match parse_status(&format!("unit {unit_id}"), &status)? {
            UnitStatus::Submitted if requested.is_none() => waits.push(unit_id),
            UnitStatus::Submitted => {}
            _ => ends.push(unit_id),
        }
    }
    // The locked rows cannot change under us, so the events read the statuses being left.
    sqlx::query(
        "INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage, detail) \
         SELECT id, task_id, $2, status, 'cancelled', stage, 'cancelled by client' \
         FROM units WHERE id = ANY($1) ORDER BY idx",
    )
    .bind(&ends)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage, detail) \
         SELECT id, task_id, $2, status, status, stage, $3 \
         FROM units WHERE id = ANY($1) ORDER BY idx",
    )
    .bind(&waits)
    .bind(now)
    .bind(CANCEL_WAIT_DETAIL)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE units SET status = 'cancelled', lease_owner = NULL, lease_until = NULL, \
             updated_at = $2 \
         WHERE id = ANY($1)",
    )
    .bind(&ends)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    // `updated_at` stays: an untouched in-doubt unit (submitted_at = updated_at) may still be
    // in the call of the instance that marked it, and must keep looking so.
    // Due at once: a handler with provider-side cancel asks the provider at the next tick.
    sqlx::query(
        "UPDATE units SET cancel_requested_at = $2, next_at = LEAST(next_at, $2) \
         WHERE id = ANY($1)",
    )
    .bind(&waits)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    if first > 0 || !ends.is_empty() || !waits.is_empty() {
        crate::shared::postgres::task_touch(&mut tx, id, now).await?;
    }
    tx.commit().await?;
    let count = |n: usize| {
        u32::try_from(n).map_err(|_| StoreError::Corrupt(format!("task {id}: {n} units cancelled")))
    };
    Ok(Some(Cancelled {
        units: count(ends.len())?,
        waiting: count(waits.len())?,
    }))
}

pub(super) async fn task_retry_failed(
    mut tx: Transaction<'static, Postgres>,
    tenant: &str,
    id: &str,
    now: i64,
) -> StoreResult<Option<u32>> {
    if !task_lock_owned(&mut tx, tenant, id).await? {
        tx.rollback().await?;
        return Ok(None);
    }
    let ids: Vec<String> = sqlx::query_scalar(
        "SELECT id FROM units WHERE task_id = $1 AND status = 'failed' \
           AND NOT EXISTS (SELECT 1 FROM tasks WHERE id = $1 AND cancel_requested_at IS NOT NULL) \
         ORDER BY id FOR UPDATE",
    )
    .bind(id)
    .fetch_all(&mut *tx)
    .await?;
    if !ids.is_empty() {
        // The unit's error is cleared below; the event row keeps it.
        sqlx::query(
            "INSERT INTO unit_events \
                 (unit_id, task_id, at, from_status, to_status, stage, detail, error) \
             SELECT id, task_id, $2, 'failed', 'pending', stage, \
                 'retry requested: submit attempt ' || (submit_attempt + 1), error \
             FROM units WHERE id = ANY($1) ORDER BY idx",
        )
        .bind(&ids)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE units SET status = 'pending', submit_attempt = submit_attempt + 1, \
                 attempts = 0, polls = 0, provider_job_id = NULL, job_release = NULL, \
                 error = NULL, result = NULL, \
                 submitted_at = NULL, lease_owner = NULL, lease_until = NULL, \
                 finalize_attempts = 0, next_at = $2, updated_at = $2 \
             WHERE id = ANY($1)",
        )
        .bind(&ids)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    }
    // Units whose finalization gave up: due for finalization again, attempts reset, provider
    // job and result kept (the error stays until a finalization succeeds).
    let parked: Vec<String> = sqlx::query_scalar(
        "WITH moved AS ( \
             UPDATE units SET finalize_attempts = 0, attempts = 0, next_at = $2, \
                 updated_at = $2 \
             WHERE task_id = $1 AND status = 'succeeded' AND next_at >= $3 \
             RETURNING id, task_id, idx, stage, error \
         ), event AS ( \
             INSERT INTO unit_events \
                 (unit_id, task_id, at, from_status, to_status, stage, detail, error) \
             SELECT id, task_id, $2, 'succeeded', 'succeeded', stage, \
                 'retry requested: finalize again', error \
             FROM moved ORDER BY idx \
         ) \
         SELECT id FROM moved",
    )
    .bind(id)
    .bind(now)
    .bind(FINALIZE_PARKED_AT)
    .fetch_all(&mut *tx)
    .await?;
    let moved = ids.len() + parked.len();
    if moved > 0 {
        crate::shared::postgres::task_touch(&mut tx, id, now).await?;
        // The task will end again: that end gets its completion webhook too.
        crate::webhooks::postgres::webhook_reopen(&mut tx, id).await?;
    }
    tx.commit().await?;
    let moved = u32::try_from(moved)
        .map_err(|_| StoreError::Corrupt(format!("task {id}: {moved} units retried")))?;
    Ok(Some(moved))
}
