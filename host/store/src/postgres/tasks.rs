//! Task queries: create (task, units and "created" events in one statement), read, list,
//! cancel and retry.
//!
//! Cancel and retry lock the task's units in id order (`ORDER BY id FOR UPDATE`) before
//! writing, as the scheduler's batch update does, so two writers of overlapping units always
//! queue instead of deadlocking.

use std::collections::HashMap;

use sqlx::postgres::PgPool;
use sqlx::{Postgres, Row, Transaction};

use super::rows::{TERMINAL_SQL, add_count, parse_status};
use crate::{CANCEL_WAIT_DETAIL, Cancelled, Created, NewTask, StoreError, StoreResult, TaskRecord};
use slotd_core::model::{FINALIZE_PARKED_AT, UnitStatus};

/// The task rows of a batch (parallel arrays, in order, so their `seq` ascends in batch order).
/// A task whose tenant's idempotency key is taken, by a stored task or an earlier one of the
/// batch, is not inserted.
const TASKS_INSERT_SQL: &str = "INSERT INTO tasks (id, tenant, type, payload, idempotency_key, \
         priority, callback_url, created_at, updated_at, deadline_at, start_by, deadline_policy) \
     SELECT id, tenant, type, payload, idempotency_key, priority, callback_url, now, now, \
         deadline_at, start_by, deadline_policy \
     FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int4[], \
         $7::text[], $8::int8[], $9::int8[], $10::int8[], $11::text[]) WITH ORDINALITY \
         AS t (id, tenant, type, payload, idempotency_key, priority, callback_url, now, \
             deadline_at, start_by, deadline_policy, ord) \
     ORDER BY ord \
     ON CONFLICT (tenant, idempotency_key) DO NOTHING \
     RETURNING id, seq";

/// The units of the tasks inserted (parallel arrays carrying their task's tenant, type,
/// priority, seq and time), and one "created" event per unit. No join: a cached generic plan
/// guesses ten rows for any array, which would make a join of tasks and units quadratic.
const UNITS_INSERT_SQL: &str = "WITH unit AS ( \
         INSERT INTO units (id, task_id, idx, tenant, task_type, task_seq, priority, pool, \
             stage, status, spec, state, routes, routing, planned_release, next_at, created_at, \
             updated_at, deadline_at, start_by, best_effort, cost_estimate) \
         SELECT id, task_id, idx, tenant, task_type, task_seq, priority, pool, stage, \
             'pending', spec, state, routes, routing, planned_release, now, now, now, \
             deadline_at, start_by, best_effort, cost_estimate \
         FROM unnest($1::text[], $2::text[], $3::int4[], $4::text[], $5::text[], $6::int8[], \
             $7::int4[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], \
             $13::int8[], $14::text[], $15::text[], $16::int8[], $17::int8[], $18::int4[], \
             $19::float8[]) WITH ORDINALITY \
             AS u (id, task_id, idx, tenant, task_type, task_seq, priority, pool, stage, spec, \
                 state, routes, now, routing, planned_release, deadline_at, start_by, \
                 best_effort, cost_estimate, ord) \
         ORDER BY ord \
         RETURNING id, task_id, task_seq, idx, stage, created_at \
     ) \
     INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage, detail) \
     SELECT id, task_id, created_at, NULL, 'pending', stage, 'created' FROM unit \
     ORDER BY task_seq, idx";

/// The units of `tasks` that were inserted (`seq` by task id), as the parallel arrays of
/// [`UNITS_INSERT_SQL`].
#[derive(Default)]
struct UnitArrays<'a> {
    ids: Vec<&'a str>,
    tasks: Vec<&'a str>,
    idx: Vec<i32>,
    tenants: Vec<&'a str>,
    types: Vec<&'a str>,
    seqs: Vec<i64>,
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
    fn of(tasks: &'a [NewTask], seqs: &HashMap<String, i64>) -> StoreResult<UnitArrays<'a>> {
        let mut a = UnitArrays::default();
        for t in tasks {
            let Some(&seq) = seqs.get(&t.id) else {
                continue;
            };
            let (deadline, start_by, best_effort) = crate::terms::deadlines::unit_terms(t);
            for (i, u) in t.units.iter().enumerate() {
                a.ids.push(&u.id);
                a.tasks.push(&t.id);
                a.idx.push(i32::try_from(i).map_err(|_| {
                    StoreError::Other(format!("task {}: unit index {i} out of range", t.id))
                })?);
                a.tenants.push(&t.tenant);
                a.types.push(&t.task_type);
                a.seqs.push(seq);
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
/// (then the holder is reported), with its units and their "created" events. Two statements
/// whatever the batch size, one transaction, then a lookup per task whose key was taken.
/// `ON CONFLICT DO NOTHING` waits for a concurrent insert of the same key to commit, so the
/// lookup finds the holder.
pub(super) async fn task_create_batch(
    conn: &mut sqlx::PgConnection,
    tasks: &[NewTask],
) -> StoreResult<Vec<Created>> {
    use sqlx::Connection;
    let text =
        |f: fn(&NewTask) -> Option<&str>| -> Vec<Option<&str>> { tasks.iter().map(f).collect() };
    let terms: Vec<_> = tasks
        .iter()
        .map(crate::terms::deadlines::task_terms)
        .collect();
    let mut tx = conn.begin().await?;
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
        .fetch_all(&mut *tx)
        .await?;
    let seqs: HashMap<String, i64> = rows.into_iter().collect();
    let u = UnitArrays::of(tasks, &seqs)?;
    if !u.ids.is_empty() {
        sqlx::query(UNITS_INSERT_SQL)
            .bind(u.ids)
            .bind(u.tasks)
            .bind(u.idx)
            .bind(u.tenants)
            .bind(u.types)
            .bind(u.seqs)
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
            .execute(&mut *tx)
            .await?;
    }
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        if seqs.contains_key(&task.id) {
            out.push(Created::New(task.id.clone()));
            continue;
        }
        out.push(Created::Existing(
            crate::shared::postgres::task_holding_key(&mut tx, task).await?,
        ));
    }
    tx.commit().await?;
    Ok(out)
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
