//! Task queries: create (with its units and their "created" events), read, list, cancel and
//! retry. Writes take a transaction already begun on the writer connection and commit it.

use serde::Serialize;
use sqlx::sqlite::SqlitePool;
use sqlx::{Row, Sqlite, Transaction};

use super::rows::{TERMINAL_SQL, add_count, json_list};
use crate::{CANCEL_WAIT_DETAIL, Cancelled, Created, NewTask, StoreError, StoreResult, TaskRecord};
use slotd_core::model::FINALIZE_PARKED_AT;

/// A task as bound into the `json_each` of the tasks insert.
#[derive(Serialize)]
struct TaskJson<'a> {
    id: &'a str,
    tenant: &'a str,
    task_type: &'a str,
    payload: &'a str,
    idempotency_key: Option<&'a str>,
    priority: i32,
    completion_webhook_url: Option<&'a str>,
    now: i64,
    deadline_at: Option<i64>,
    start_by: Option<i64>,
    deadline_policy: Option<&'static str>,
}

/// A unit as bound into the `json_each` of the units insert.
#[derive(Serialize)]
struct UnitJson<'a> {
    id: &'a str,
    task_id: &'a str,
    idx: usize,
    pool: &'a str,
    stage: &'a str,
    spec: &'a str,
    state: &'a str,
    routes: Option<&'a str>,
    routing: Option<&'a str>,
    planned_release: Option<&'a str>,
    now: i64,
    deadline_at: i64,
    start_by: Option<i64>,
    best_effort: i32,
    cost_estimate: Option<f64>,
}

/// Each row is read out of `json_each` once, as JSONB (`r`): `json_each` renders its `value`
/// afresh on every reference, so taking each field from it directly rendered and parsed the
/// row once per field.
///
/// The tasks of a batch, in order; a task whose tenant's idempotency key is taken (by a stored
/// task or an earlier one of the batch) is not inserted. `WHERE true` tells the parser the
/// `ON CONFLICT` belongs to the insert, not to a join of the select.
const TASKS_INSERT_SQL: &str = "WITH r AS MATERIALIZED (SELECT key, jsonb(value) AS v FROM json_each(?1)) \
     INSERT INTO tasks (id, tenant, type, payload, idempotency_key, \
         priority, callback_url, created_at, updated_at, deadline_at, start_by, \
         deadline_policy) \
     SELECT v ->> '$.id', v ->> '$.tenant', v ->> '$.task_type', \
         v ->> '$.payload', v ->> '$.idempotency_key', v ->> '$.priority', \
         v ->> '$.completion_webhook_url', v ->> '$.now', v ->> '$.now', \
         v ->> '$.deadline_at', v ->> '$.start_by', v ->> '$.deadline_policy' \
     FROM r WHERE true ORDER BY key \
     ON CONFLICT (tenant, idempotency_key) DO NOTHING \
     RETURNING id";

/// The units of the tasks inserted, with the task's tenant, type, priority and seq copied.
const UNITS_INSERT_SQL: &str = "WITH r AS MATERIALIZED (SELECT key, jsonb(value) AS v FROM json_each(?1)) \
     INSERT INTO units (id, task_id, idx, tenant, task_type, \
         task_seq, priority, pool, stage, status, spec, state, routes, routing, \
         planned_release, next_at, created_at, updated_at, deadline_at, start_by, \
         best_effort, cost_estimate) \
     SELECT u.v ->> '$.id', t.id, u.v ->> '$.idx', t.tenant, t.type, t.seq, t.priority, \
         u.v ->> '$.pool', u.v ->> '$.stage', 'pending', u.v ->> '$.spec', \
         u.v ->> '$.state', u.v ->> '$.routes', u.v ->> '$.routing', \
         u.v ->> '$.planned_release', \
         u.v ->> '$.now', u.v ->> '$.now', u.v ->> '$.now', \
         u.v ->> '$.deadline_at', u.v ->> '$.start_by', u.v ->> '$.best_effort', \
         u.v ->> '$.cost_estimate' \
     FROM r AS u JOIN tasks AS t ON t.id = u.v ->> '$.task_id' \
     ORDER BY u.key";

/// One "created" event per unit of the tasks inserted.
const EVENTS_INSERT_SQL: &str = "INSERT INTO unit_events \
         (unit_id, task_id, at, from_status, to_status, stage, detail) \
     SELECT id, task_id, created_at, NULL, 'pending', stage, 'created' FROM units \
     WHERE task_id IN (SELECT value FROM json_each(?1)) ORDER BY task_seq, idx";

/// Store a batch of tasks (group commit): each unless its tenant's idempotency key is taken
/// (then the holder is reported), with its units (index = position in `task.units`) and one
/// "created" event per unit, deadline terms and cost estimates included. Three statements
/// whatever the batch size, one transaction.
pub(super) async fn task_create_batch(
    mut tx: Transaction<'static, Sqlite>,
    tasks: &[NewTask],
) -> StoreResult<Vec<Created>> {
    let rows: Vec<TaskJson<'_>> = tasks
        .iter()
        .map(|t| {
            let (deadline_at, start_by, deadline_policy) = crate::terms::deadlines::task_terms(t);
            TaskJson {
                id: &t.id,
                tenant: &t.tenant,
                task_type: &t.task_type,
                payload: &t.payload,
                idempotency_key: t.idempotency_key.as_deref(),
                priority: t.priority,
                completion_webhook_url: t.completion_webhook_url.as_deref(),
                now: t.now,
                deadline_at,
                start_by,
                deadline_policy,
            }
        })
        .collect();
    let inserted: std::collections::HashSet<String> = sqlx::query_scalar(TASKS_INSERT_SQL)
        .bind(json_list(&rows)?)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
    let new: Vec<&NewTask> = tasks.iter().filter(|t| inserted.contains(&t.id)).collect();
    let units: Vec<UnitJson<'_>> = new
        .iter()
        .flat_map(|t| {
            let (deadline_at, start_by, best_effort) = crate::terms::deadlines::unit_terms(t);
            t.units.iter().enumerate().map(move |(idx, u)| UnitJson {
                id: &u.id,
                task_id: &t.id,
                idx,
                pool: &u.pool,
                stage: &u.stage,
                spec: &u.spec,
                state: &u.state,
                routes: u.routes.as_deref(),
                routing: u.routing.as_deref(),
                planned_release: u.planned_release.as_deref(),
                now: t.now,
                deadline_at,
                start_by,
                best_effort,
                cost_estimate: u.cost_estimate,
            })
        })
        .collect();
    if !units.is_empty() {
        sqlx::query(UNITS_INSERT_SQL)
            .bind(json_list(&units)?)
            .execute(&mut *tx)
            .await?;
        let ids: Vec<&str> = new.iter().map(|t| t.id.as_str()).collect();
        sqlx::query(EVENTS_INSERT_SQL)
            .bind(json_list(&ids)?)
            .execute(&mut *tx)
            .await?;
    }
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        if inserted.contains(&task.id) {
            out.push(Created::New(task.id.clone()));
            continue;
        }
        out.push(Created::Existing(
            crate::shared::sqlite::task_holding_key(&mut tx, task).await?,
        ));
    }
    tx.commit().await?;
    Ok(out)
}

/// Unit counts by status for each task in `ids`, in one grouped query.
pub(super) async fn counts_for(pool: &SqlitePool, tasks: &mut [TaskRecord]) -> StoreResult<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    let rows = sqlx::query(
        "SELECT task_id, status, (status = 'succeeded' AND next_at >= ?2) AS parked, \
             COUNT(*) AS n FROM units \
         WHERE task_id IN (SELECT value FROM json_each(?1)) \
         GROUP BY task_id, status, parked",
    )
    .bind(json_list(&ids)?)
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

/// Whether the tenant owns the task (inside a write transaction, so the answer holds for it).
async fn task_owned(
    tx: &mut Transaction<'static, Sqlite>,
    tenant: &str,
    id: &str,
) -> StoreResult<bool> {
    let found: Option<i64> =
        sqlx::query_scalar("SELECT 1 FROM tasks WHERE id = ?1 AND tenant = ?2")
            .bind(id)
            .bind(tenant)
            .fetch_optional(&mut **tx)
            .await?;
    Ok(found.is_some())
}

/// Cancel under the single writer: the request recorded on the task (first time kept), the
/// units without a provider job cancelled, the `submitted` ones marked. Each event insert reads
/// the statuses its update then changes, so it goes first, under the same guard.
pub(super) async fn task_cancel(
    mut tx: Transaction<'static, Sqlite>,
    tenant: &str,
    id: &str,
    now: i64,
) -> StoreResult<Option<Cancelled>> {
    if !task_owned(&mut tx, tenant, id).await? {
        tx.rollback().await?;
        return Ok(None);
    }
    let first = crate::shared::sqlite::task_request_cancel(&mut tx, id, now).await?;
    sqlx::query(&format!(
        "INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage, detail) \
         SELECT id, task_id, ?2, status, 'cancelled', stage, 'cancelled by client' \
         FROM units WHERE task_id = ?1 AND status NOT IN {TERMINAL_SQL} \
           AND status <> 'submitted' ORDER BY idx"
    ))
    .bind(id)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage, detail) \
         SELECT id, task_id, ?2, status, status, stage, ?3 \
         FROM units WHERE task_id = ?1 AND status = 'submitted' \
           AND cancel_requested_at IS NULL ORDER BY idx",
    )
    .bind(id)
    .bind(now)
    .bind(CANCEL_WAIT_DETAIL)
    .execute(&mut *tx)
    .await?;
    let units = sqlx::query(&format!(
        "UPDATE units SET status = 'cancelled', lease_owner = NULL, lease_until = NULL, \
             updated_at = ?2 \
         WHERE task_id = ?1 AND status NOT IN {TERMINAL_SQL} AND status <> 'submitted'"
    ))
    .bind(id)
    .bind(now)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    // `updated_at` stays: an untouched in-doubt unit (submitted_at = updated_at) may still be
    // in the call of the instance that marked it, and must keep looking so. Due at once: a
    // handler with provider-side cancel asks the provider at the next tick.
    let waiting = sqlx::query(
        "UPDATE units SET cancel_requested_at = ?2, next_at = MIN(next_at, ?2) \
         WHERE task_id = ?1 AND status = 'submitted' AND cancel_requested_at IS NULL",
    )
    .bind(id)
    .bind(now)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if first + units + waiting > 0 {
        crate::shared::sqlite::task_touch(&mut tx, id, now).await?;
    }
    tx.commit().await?;
    let count = |n: u64| {
        u32::try_from(n).map_err(|_| StoreError::Corrupt(format!("task {id}: {n} units cancelled")))
    };
    Ok(Some(Cancelled {
        units: count(units)?,
        waiting: count(waiting)?,
    }))
}

pub(super) async fn task_retry_failed(
    mut tx: Transaction<'static, Sqlite>,
    tenant: &str,
    id: &str,
    now: i64,
) -> StoreResult<Option<u32>> {
    if !task_owned(&mut tx, tenant, id).await? {
        tx.rollback().await?;
        return Ok(None);
    }
    // The unit's error is cleared below; the event row keeps it.
    sqlx::query(
        "INSERT INTO unit_events \
             (unit_id, task_id, at, from_status, to_status, stage, detail, error) \
         SELECT id, task_id, ?2, 'failed', 'pending', stage, \
             'retry requested: submit attempt ' || (submit_attempt + 1), error \
         FROM units WHERE task_id = ?1 AND status = 'failed' \
           AND NOT EXISTS (SELECT 1 FROM tasks WHERE id = ?1 AND cancel_requested_at IS NOT NULL) \
         ORDER BY idx",
    )
    .bind(id)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    let resubmitted = sqlx::query(
        "UPDATE units SET status = 'pending', submit_attempt = submit_attempt + 1, \
             attempts = 0, polls = 0, provider_job_id = NULL, job_release = NULL, \
             error = NULL, result = NULL, \
             submitted_at = NULL, lease_owner = NULL, lease_until = NULL, \
             finalize_attempts = 0, next_at = ?2, updated_at = ?2 \
         WHERE task_id = ?1 AND status = 'failed' \
           AND NOT EXISTS (SELECT 1 FROM tasks WHERE id = ?1 AND cancel_requested_at IS NOT NULL)",
    )
    .bind(id)
    .bind(now)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    // Units whose finalization gave up: due for finalization again, attempts reset, provider
    // job and result kept (the error stays until a finalization succeeds).
    sqlx::query(
        "INSERT INTO unit_events \
             (unit_id, task_id, at, from_status, to_status, stage, detail, error) \
         SELECT id, task_id, ?2, 'succeeded', 'succeeded', stage, \
             'retry requested: finalize again', error \
         FROM units WHERE task_id = ?1 AND status = 'succeeded' AND next_at >= ?3 \
         ORDER BY idx",
    )
    .bind(id)
    .bind(now)
    .bind(FINALIZE_PARKED_AT)
    .execute(&mut *tx)
    .await?;
    let refinalized = sqlx::query(
        "UPDATE units SET finalize_attempts = 0, attempts = 0, next_at = ?2, updated_at = ?2 \
         WHERE task_id = ?1 AND status = 'succeeded' AND next_at >= ?3",
    )
    .bind(id)
    .bind(now)
    .bind(FINALIZE_PARKED_AT)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let moved = resubmitted + refinalized;
    if moved > 0 {
        crate::shared::sqlite::task_touch(&mut tx, id, now).await?;
        // The task will end again: that end gets its completion webhook too.
        crate::webhooks::sqlite::webhook_reopen(&mut tx, id).await?;
    }
    tx.commit().await?;
    let moved = u32::try_from(moved)
        .map_err(|_| StoreError::Corrupt(format!("task {id}: {moved} units retried")))?;
    Ok(Some(moved))
}
