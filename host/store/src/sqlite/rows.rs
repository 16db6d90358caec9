//! SQLite's own row encodings: units read back as one JSON array, and list parameters bound
//! as JSON for `json_each(?)`. The row decoders and column lists both stores share are in
//! [`crate::shared`], re-exported here.
//!
//! Everything read back from the database is checked: an unknown status string or a negative
//! counter is reported as [`StoreError::Corrupt`] naming the unit, never a panic.

use serde::Serialize;

use crate::{StoreError, StoreResult};
use slotd_core::model::Unit;

pub(super) use crate::shared::sqlite::{unit_from_row, units_from_rows};
pub(super) use crate::shared::{TERMINAL_SQL, UNIT_COLS, add_count, counter, parse_status};

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
    account: Option<String>,
    deadline_at: i64,
    start_by: Option<i64>,
    best_effort: i64,
    cost_estimate: Option<f64>,
    wait_reason: Option<String>,
    routing: Option<String>,
    planned_release: Option<String>,
    job_release: Option<String>,
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
                routing: r.routing,
                terms: slotd_core::model::UnitTerms {
                    account: r.account,
                    deadline_at: crate::shared::deadline_of(r.deadline_at),
                    start_by: r.start_by,
                    best_effort: r.best_effort != 0,
                    cost_estimate: r.cost_estimate,
                    wait_reason: r.wait_reason,
                },
                releases: slotd_core::model::UnitReleases {
                    planned_release: r.planned_release,
                    job_release: r.job_release,
                },
                created_at: r.created_at,
                updated_at: r.updated_at,
                id: r.id,
            })
        })
        .collect()
}

/// A JSON array for `json_each(?)`: one bound parameter and one cached statement, whatever the
/// list length (an `IN (?, ?, …)` list would prepare a new statement per length).
pub(super) fn json_list<T: Serialize + ?Sized>(items: &T) -> StoreResult<String> {
    serde_json::to_string(items)
        .map_err(|e| StoreError::Other(format!("encoding a parameter list: {e}")))
}
