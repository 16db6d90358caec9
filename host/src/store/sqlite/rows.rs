//! Turning SQLite rows into model records, and the few encodings the queries share.
//!
//! Everything read back from the database is checked: an unknown status string or a negative
//! counter is reported as [`StoreError::Corrupt`] naming the unit, never a panic.

use serde::Serialize;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use crate::model::{Unit, UnitCounts, UnitStatus};
use crate::store::{StoreError, StoreResult, TaskRecord};

/// The columns of `units` that make a [`Unit`], in the order [`unit_from_row`] reads them.
/// Used in `SELECT` and `RETURNING` lists so that every query returns whole units.
pub(super) const UNIT_COLS: &str = "id, task_id, idx, tenant, task_type, pool, stage, status, \
     priority, spec, state, provider_job_id, submit_attempt, attempts, polls, next_at, \
     submitted_at, error, result, cost, cancel_requested_at, routes, created_at, updated_at";

/// The columns of `tasks` that make a [`TaskRecord`] (counts are filled separately).
pub(super) const TASK_COLS: &str = "seq, id, tenant, type, payload, idempotency_key, priority, \
     callback_url, cancel_requested_at, created_at, updated_at";

/// SQL list of the terminal statuses, for `status NOT IN (…)`.
pub(super) const TERMINAL_SQL: &str = "('completed', 'failed', 'cancelled')";

/// Parse a stored status, naming `what` (e.g. "unit u1") if it is not one we know.
pub(super) fn parse_status(what: &str, raw: &str) -> StoreResult<UnitStatus> {
    raw.parse()
        .map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

/// A stored counter as `u32`; negative or oversized values are corruption, named.
fn counter(unit_id: &str, column: &str, value: i64) -> StoreResult<u32> {
    u32::try_from(value).map_err(|_| {
        StoreError::Corrupt(format!(
            "unit {unit_id}: column {column} holds {value}, not a count"
        ))
    })
}

/// Decode one row selected with [`UNIT_COLS`].
pub(super) fn unit_from_row(row: &SqliteRow) -> StoreResult<Unit> {
    let id: String = row.try_get("id")?;
    let status: String = row.try_get("status")?;
    let status = parse_status(&format!("unit {id}"), &status)?;
    let index = counter(&id, "idx", row.try_get("idx")?)?;
    let submit_attempt = counter(&id, "submit_attempt", row.try_get("submit_attempt")?)?;
    let attempts = counter(&id, "attempts", row.try_get("attempts")?)?;
    let polls = counter(&id, "polls", row.try_get("polls")?)?;
    Ok(Unit {
        task_id: row.try_get("task_id")?,
        index,
        tenant: row.try_get("tenant")?,
        task_type: row.try_get("task_type")?,
        pool: row.try_get("pool")?,
        stage: row.try_get("stage")?,
        status,
        priority: row.try_get("priority")?,
        spec: row.try_get("spec")?,
        state: row.try_get("state")?,
        provider_job_id: row.try_get("provider_job_id")?,
        submit_attempt,
        attempts,
        polls,
        next_at: row.try_get("next_at")?,
        submitted_at: row.try_get("submitted_at")?,
        error: row.try_get("error")?,
        result: row.try_get("result")?,
        cost: row.try_get("cost")?,
        cancel_requested_at: row.try_get("cancel_requested_at")?,
        routes: row.try_get("routes")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        id,
    })
}

/// [`UNIT_COLS`] as one JSON array per unit, for batch reads answered as a single JSON text
/// (`json_group_array(…)`): one row out of SQLite instead of one per unit, each decoded column
/// by column (a thousand due units read in about half the time).
pub(super) fn unit_json_cols() -> String {
    format!("json_array({UNIT_COLS})")
}

/// One unit as [`unit_json_cols`] writes it (fields in [`UNIT_COLS`] order).
#[derive(serde::Deserialize)]
struct UnitRow {
    id: String,
    task_id: String,
    idx: i64,
    tenant: String,
    task_type: String,
    pool: String,
    stage: String,
    status: String,
    priority: i32,
    spec: String,
    state: String,
    provider_job_id: Option<String>,
    submit_attempt: i64,
    attempts: i64,
    polls: i64,
    next_at: i64,
    submitted_at: Option<i64>,
    error: Option<String>,
    result: Option<String>,
    cost: Option<String>,
    cancel_requested_at: Option<i64>,
    routes: Option<String>,
    created_at: i64,
    updated_at: i64,
}

/// Decode a JSON array of units written with [`unit_json_cols`].
pub(super) fn units_from_json(text: &str) -> StoreResult<Vec<Unit>> {
    let rows: Vec<UnitRow> = serde_json::from_str(text)
        .map_err(|e| StoreError::Corrupt(format!("a batch of units did not decode: {e}")))?;
    rows.into_iter()
        .map(|r| {
            let status = parse_status(&format!("unit {}", r.id), &r.status)?;
            Ok(Unit {
                index: counter(&r.id, "idx", r.idx)?,
                submit_attempt: counter(&r.id, "submit_attempt", r.submit_attempt)?,
                attempts: counter(&r.id, "attempts", r.attempts)?,
                polls: counter(&r.id, "polls", r.polls)?,
                task_id: r.task_id,
                tenant: r.tenant,
                task_type: r.task_type,
                pool: r.pool,
                stage: r.stage,
                status,
                priority: r.priority,
                spec: r.spec,
                state: r.state,
                provider_job_id: r.provider_job_id,
                next_at: r.next_at,
                submitted_at: r.submitted_at,
                error: r.error,
                result: r.result,
                cost: r.cost,
                cancel_requested_at: r.cancel_requested_at,
                routes: r.routes,
                created_at: r.created_at,
                updated_at: r.updated_at,
                id: r.id,
            })
        })
        .collect()
}

/// Decode many rows selected with [`UNIT_COLS`].
pub(super) fn units_from_rows(rows: &[SqliteRow]) -> StoreResult<Vec<Unit>> {
    rows.iter().map(unit_from_row).collect()
}

/// Decode one row selected with [`TASK_COLS`], returning its `seq` too (the list cursor).
pub(super) fn task_from_row(row: &SqliteRow) -> StoreResult<(i64, TaskRecord)> {
    let seq: i64 = row.try_get("seq")?;
    let task = TaskRecord {
        id: row.try_get("id")?,
        tenant: row.try_get("tenant")?,
        task_type: row.try_get("type")?,
        payload: row.try_get("payload")?,
        idempotency_key: row.try_get("idempotency_key")?,
        priority: row.try_get("priority")?,
        callback_url: row.try_get("callback_url")?,
        cancel_requested_at: row.try_get("cancel_requested_at")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        counts: UnitCounts::default(),
    };
    Ok((seq, task))
}

/// Add one `(status, parked, count)` row of a grouped count query to `counts` (`parked`:
/// `succeeded` units whose finalization gave up, see [`crate::model::FINALIZE_PARKED_AT`]).
pub(super) fn add_count(
    counts: &mut UnitCounts,
    task_id: &str,
    status: &str,
    parked: bool,
    n: i64,
) -> StoreResult<()> {
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

/// A JSON array for `json_each(?)`: one bound parameter and one cached statement, whatever the
/// list length (an `IN (?, ?, …)` list would prepare a new statement per length).
pub(super) fn json_list<T: Serialize + ?Sized>(items: &T) -> StoreResult<String> {
    serde_json::to_string(items)
        .map_err(|e| StoreError::Other(format!("encoding a parameter list: {e}")))
}
