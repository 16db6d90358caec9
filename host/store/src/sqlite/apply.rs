//! The scheduler's batch write: guarded updates of many units, with their event rows, as two
//! statements whatever the batch size (the SQLite twin of `postgres/apply.rs`).
//!
//! The updates travel as one JSON array of rows (`json_each(?1)`, each row a positional
//! array), so a tick's 1,000 polls are two prepared statements, not 2,000 round trips to the
//! database thread. Every `null` is a NULL that `COALESCE` turns into "leave the column alone";
//! the three columns that can be cleared carry a flag beside their value. The event rows are
//! written first, because they read the status each unit is leaving; the single writer
//! connection keeps the two statements consistent.

use std::collections::HashSet;

use serde_json::{Value, json};
use sqlx::{Sqlite, Transaction};

use crate::{ApplyReport, StoreError, StoreResult, UnitUpdate};
use slotd_core::model::UnitStatus;

/// The batch as rows. Positions (used by the statements below):
/// 0 id, 1 from, 2 from_stage, 3 from_submitted_at, 4 unless_cancel_requested, 5 to, 6 stage,
/// 7 pool, 8 set_job, 9 job, 10 state, 11 result, 12 set_error, 13 error, 14 cost, 15 next_at,
/// 16 attempts, 17 polls, 18 submit_attempt, 19 set_submitted, 20 submitted_at, 21 detail,
/// 22 eventful, 23 ord, 24 set_wait, 25 wait_reason, 26 task_type, 27 routing.
const INPUT: &str = "SELECT value->>0 AS id, value->>1 AS from_status, value->>2 AS from_stage, \
         value->>3 AS from_submitted, value->>4 AS no_cancel, value->>5 AS to_status, \
         value->>6 AS stage, value->>7 AS pool, value->>8 AS set_job, value->>9 AS job, \
         value->>10 AS state, value->>11 AS result, value->>12 AS set_error, \
         value->>13 AS error, value->>14 AS cost, value->>15 AS next_at, \
         value->>16 AS attempts, value->>17 AS polls, value->>18 AS submit_attempt, \
         value->>19 AS set_submitted, value->>20 AS submitted_at, value->>21 AS detail, \
         value->>22 AS eventful, value->>23 AS ord, value->>24 AS set_wait, \
         value->>25 AS wait_reason, value->>26 AS task_type, value->>27 AS routing \
     FROM json_each(?1)";

/// The guard of one input row `i` on `units`.
const GUARD: &str = "(i.from_status IS NULL OR units.status = i.from_status) \
     AND (i.from_stage IS NULL OR units.stage = i.from_stage) \
     AND (i.from_submitted IS NULL OR units.submitted_at = i.from_submitted) \
     AND (NOT i.no_cancel OR units.cancel_requested_at IS NULL)";

fn event_sql() -> String {
    format!(
        "WITH i AS MATERIALIZED ({INPUT}) \
         INSERT INTO unit_events \
             (unit_id, task_id, at, from_status, to_status, stage, detail, error) \
         SELECT units.id, units.task_id, ?2, units.status, COALESCE(i.to_status, units.status), \
             COALESCE(i.stage, units.stage), i.detail, i.error \
         FROM i JOIN units ON units.id = i.id \
         WHERE i.eventful AND {GUARD} ORDER BY i.ord"
    )
}

fn update_sql() -> String {
    format!(
        "WITH i AS MATERIALIZED ({INPUT}) \
         UPDATE units SET \
             status = COALESCE(i.to_status, units.status), \
             stage = COALESCE(i.stage, units.stage), \
             pool = COALESCE(i.pool, units.pool), \
             task_type = COALESCE(i.task_type, units.task_type), \
             routing = COALESCE(i.routing, units.routing), \
             provider_job_id = CASE WHEN i.set_job THEN i.job ELSE units.provider_job_id END, \
             state = COALESCE(i.state, units.state), \
             result = COALESCE(i.result, units.result), \
             error = CASE WHEN i.set_error THEN i.error ELSE units.error END, \
             cost = COALESCE(i.cost, units.cost), \
             next_at = COALESCE(i.next_at, units.next_at), \
             attempts = COALESCE(i.attempts, units.attempts), \
             polls = COALESCE(i.polls, units.polls), \
             submit_attempt = COALESCE(i.submit_attempt, units.submit_attempt), \
             submitted_at = CASE WHEN i.set_submitted THEN i.submitted_at \
                 ELSE units.submitted_at END, \
             wait_reason = CASE WHEN i.set_wait THEN i.wait_reason \
                 ELSE units.wait_reason END, \
             lease_owner = CASE WHEN COALESCE(i.to_status, units.status) = 'finalizing' \
                 THEN units.lease_owner END, \
             lease_until = CASE WHEN COALESCE(i.to_status, units.status) = 'finalizing' \
                 THEN units.lease_until END, \
             updated_at = MAX(?2, units.updated_at + 1) \
         FROM i WHERE units.id = i.id AND {GUARD} \
         RETURNING units.id"
    )
}

/// Pure polls (see [`UnitUpdate::is_pure_poll`]): only `state`, `next_at`, `polls` and
/// `updated_at` are written, so SQLite maintains only the indexes holding `next_at`, and no
/// event row is written. Rows: 0 id, 1 from_stage, 2 from_submitted_at,
/// 3 unless_cancel_requested, 4 state, 5 next_at, 6 polls.
const POLL_SQL: &str = "WITH i AS MATERIALIZED ( \
         SELECT value->>0 AS id, value->>1 AS from_stage, value->>2 AS from_submitted, \
             value->>3 AS no_cancel, value->>4 AS state, value->>5 AS next_at, \
             value->>6 AS polls \
         FROM json_each(?1) \
     ) \
     UPDATE units SET state = COALESCE(i.state, units.state), \
         next_at = COALESCE(i.next_at, units.next_at), \
         polls = COALESCE(i.polls, units.polls), \
         updated_at = MAX(?2, units.updated_at + 1) \
     FROM i WHERE units.id = i.id AND units.status = 'submitted' \
         AND (i.from_stage IS NULL OR units.stage = i.from_stage) \
         AND (i.from_submitted IS NULL OR units.submitted_at = i.from_submitted) \
         AND (NOT i.no_cancel OR units.cancel_requested_at IS NULL) \
     RETURNING units.id";

/// One pure poll as a positional row (see [`POLL_SQL`]).
fn poll_row(u: &UnitUpdate) -> Value {
    json!([
        u.unit_id,
        u.from_stage,
        u.from_submitted_at,
        u.unless_cancel_requested,
        u.state,
        u.next_at,
        u.polls,
    ])
}

/// One update as a positional row (see [`INPUT`]).
fn row(u: &UnitUpdate, ord: usize) -> Value {
    let status = |s: Option<UnitStatus>| s.map(UnitStatus::as_str);
    json!([
        u.unit_id,
        status(u.from),
        u.from_stage,
        u.from_submitted_at,
        u.unless_cancel_requested,
        status(u.to),
        u.stage,
        u.pool,
        !u.provider_job_id.is_keep(),
        u.provider_job_id.value(),
        u.state,
        u.result,
        !u.error.is_keep(),
        u.error.value(),
        u.cost,
        u.next_at,
        u.attempts,
        u.polls,
        u.submit_attempt,
        !u.submitted_at.is_keep(),
        u.submitted_at.value(),
        u.detail,
        u.eventful(),
        ord,
        !u.wait_reason.is_keep(),
        u.wait_reason.value(),
        u.task_type,
        u.routing,
    ])
}

/// Apply each update under its guard, all in one transaction: an event row and the update for
/// each unit whose guard holds, nothing for the others. Ids normally appear once per batch
/// and the batch is two statements; if one repeats, the updates run one by one in order so
/// that each guard sees the previous update.
pub(super) async fn unit_apply(
    tx: &mut Transaction<'static, Sqlite>,
    updates: &[UnitUpdate],
    now: i64,
) -> StoreResult<ApplyReport> {
    let mut report = ApplyReport::default();
    if crate::has_repeats(updates) {
        for u in updates {
            let done = apply_batch(tx, std::slice::from_ref(u), now).await?;
            if done.is_empty() {
                report.skipped.push(u.unit_id.clone());
            } else {
                report.applied.push(u.unit_id.clone());
            }
        }
    } else {
        let done = apply_batch(tx, updates, now).await?;
        for u in updates {
            if done.contains(&u.unit_id) {
                report.applied.push(u.unit_id.clone());
            } else {
                report.skipped.push(u.unit_id.clone());
            }
        }
    }
    Ok(report)
}

/// The statements over `updates` (ids unique): one for the pure polls, two (events, then the
/// update) for the rest; the ids applied.
async fn apply_batch(
    tx: &mut Transaction<'static, Sqlite>,
    updates: &[UnitUpdate],
    now: i64,
) -> StoreResult<HashSet<String>> {
    let encode = |rows: &[Value]| {
        serde_json::to_string(rows)
            .map_err(|e| StoreError::Other(format!("encoding a batch of unit updates: {e}")))
    };
    let (polls, others): (Vec<&UnitUpdate>, Vec<&UnitUpdate>) =
        updates.iter().partition(|u| u.is_pure_poll());
    let mut done = HashSet::with_capacity(updates.len());
    if !polls.is_empty() {
        let rows: Vec<Value> = polls.iter().map(|u| poll_row(u)).collect();
        let ids: Vec<String> = sqlx::query_scalar(POLL_SQL)
            .bind(encode(&rows)?)
            .bind(now)
            .fetch_all(&mut **tx)
            .await?;
        done.extend(ids);
    }
    if others.is_empty() {
        return Ok(done);
    }
    let rows: Vec<Value> = others.iter().enumerate().map(|(i, u)| row(u, i)).collect();
    let input = encode(&rows)?;
    if others.iter().any(|u| u.eventful()) {
        sqlx::query(&event_sql())
            .bind(&input)
            .bind(now)
            .execute(&mut **tx)
            .await?;
    }
    let ids: Vec<String> = sqlx::query_scalar(&update_sql())
        .bind(&input)
        .bind(now)
        .fetch_all(&mut **tx)
        .await?;
    done.extend(ids);
    Ok(done)
}
