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
/// 22 eventful, 23 ord, 24 set_wait, 25 wait_reason, 26 task_type, 27 routing, 28 job_release.
///
/// Each row is read out of `json_each` once, as JSONB (`r`): `json_each` renders its `value`
/// column afresh as text on every reference, and taking 28 fields from it directly rendered
/// and parsed every row 28 times, which was most of the statement's time.
const INPUT: &str = "WITH r AS MATERIALIZED (SELECT jsonb(value) AS v FROM json_each(?1)), \
     i AS MATERIALIZED (SELECT v->>0 AS id, v->>1 AS from_status, v->>2 AS from_stage, \
         v->>3 AS from_submitted, v->>4 AS no_cancel, v->>5 AS to_status, \
         v->>6 AS stage, v->>7 AS pool, v->>8 AS set_job, v->>9 AS job, \
         v->>10 AS state, v->>11 AS result, v->>12 AS set_error, \
         v->>13 AS error, v->>14 AS cost, v->>15 AS next_at, \
         v->>16 AS attempts, v->>17 AS polls, v->>18 AS submit_attempt, \
         v->>19 AS set_submitted, v->>20 AS submitted_at, v->>21 AS detail, \
         v->>22 AS eventful, v->>23 AS ord, v->>24 AS set_wait, \
         v->>25 AS wait_reason, v->>26 AS task_type, v->>27 AS routing, \
         v->>28 AS job_release \
     FROM r)";

/// The guard of one input row `i` on `units`.
const GUARD: &str = "(i.from_status IS NULL OR units.status = i.from_status) \
     AND (i.from_stage IS NULL OR units.stage = i.from_stage) \
     AND (i.from_submitted IS NULL OR units.submitted_at = i.from_submitted) \
     AND (NOT i.no_cancel OR units.cancel_requested_at IS NULL)";

fn event_sql() -> String {
    format!(
        "{INPUT} \
         INSERT INTO unit_events \
             (unit_id, task_id, at, from_status, to_status, stage, detail, error) \
         SELECT units.id, units.task_id, ?2, units.status, COALESCE(i.to_status, units.status), \
             COALESCE(i.stage, units.stage), i.detail, i.error \
         FROM i JOIN units ON units.id = i.id \
         WHERE i.eventful AND {GUARD} ORDER BY i.ord"
    )
}

/// The update over a batch: only the columns some update of the batch sets are written (SQLite
/// rewrites every index holding a column the statement assigns, whatever its value: a batch of
/// "accepted" answers then leaves the fill order's and the finalization claims' indexes
/// alone). The lease follows the status, and `updated_at` always moves.
fn update_sql(updates: &[&UnitUpdate]) -> String {
    let any = |f: fn(&UnitUpdate) -> bool| updates.iter().any(|u| f(u));
    let columns: [(bool, &str); 17] = [
        (
            any(|u| u.to.is_some()),
            "status = COALESCE(i.to_status, units.status)",
        ),
        (
            any(|u| u.stage.is_some()),
            "stage = COALESCE(i.stage, units.stage)",
        ),
        (
            any(|u| u.pool.is_some()),
            "pool = COALESCE(i.pool, units.pool)",
        ),
        (
            any(|u| u.task_type.is_some()),
            "task_type = COALESCE(i.task_type, units.task_type)",
        ),
        (
            any(|u| u.routing.is_some()),
            "routing = COALESCE(i.routing, units.routing)",
        ),
        (
            any(|u| !u.provider_job_id.is_keep()),
            "provider_job_id = CASE WHEN i.set_job THEN i.job ELSE units.provider_job_id END",
        ),
        (
            any(|u| u.job_release.is_some()),
            "job_release = COALESCE(i.job_release, units.job_release)",
        ),
        (
            any(|u| u.state.is_some()),
            "state = COALESCE(i.state, units.state)",
        ),
        (
            any(|u| u.result.is_some()),
            "result = COALESCE(i.result, units.result)",
        ),
        (
            any(|u| !u.error.is_keep()),
            "error = CASE WHEN i.set_error THEN i.error ELSE units.error END",
        ),
        (
            any(|u| u.cost.is_some()),
            "cost = COALESCE(i.cost, units.cost)",
        ),
        (
            any(|u| u.next_at.is_some()),
            "next_at = COALESCE(i.next_at, units.next_at)",
        ),
        (
            any(|u| u.attempts.is_some()),
            "attempts = COALESCE(i.attempts, units.attempts)",
        ),
        (
            any(|u| u.polls.is_some()),
            "polls = COALESCE(i.polls, units.polls)",
        ),
        (
            any(|u| u.submit_attempt.is_some()),
            "submit_attempt = COALESCE(i.submit_attempt, units.submit_attempt)",
        ),
        (
            any(|u| !u.submitted_at.is_keep()),
            "submitted_at = CASE WHEN i.set_submitted THEN i.submitted_at \
                 ELSE units.submitted_at END",
        ),
        (
            any(|u| !u.wait_reason.is_keep()),
            "wait_reason = CASE WHEN i.set_wait THEN i.wait_reason ELSE units.wait_reason END",
        ),
    ];
    let mut set: Vec<&str> = columns
        .iter()
        .filter(|(written, _)| *written)
        .map(|(_, sql)| *sql)
        .collect();
    set.extend([
        "lease_owner = CASE WHEN COALESCE(i.to_status, units.status) = 'finalizing' \
             THEN units.lease_owner END",
        "lease_until = CASE WHEN COALESCE(i.to_status, units.status) = 'finalizing' \
             THEN units.lease_until END",
        "updated_at = MAX(?2, units.updated_at + 1)",
    ]);
    format!(
        "{INPUT} \
         UPDATE units SET {} \
         FROM i WHERE units.id = i.id AND {GUARD} \
         RETURNING units.id",
        set.join(", ")
    )
}

/// Pure polls (see [`UnitUpdate::is_pure_poll`]): only `state`, `next_at`, `polls` and
/// `updated_at` are written, so SQLite maintains only the indexes holding `next_at`, and no
/// event row is written. Rows: 0 id, 1 from_stage, 2 from_submitted_at,
/// 3 unless_cancel_requested, 4 state, 5 next_at, 6 polls.
const POLL_SQL: &str = "WITH r AS MATERIALIZED (SELECT jsonb(value) AS v FROM json_each(?1)), \
     i AS MATERIALIZED ( \
         SELECT v->>0 AS id, v->>1 AS from_stage, v->>2 AS from_submitted, \
             v->>3 AS no_cancel, v->>4 AS state, v->>5 AS next_at, \
             v->>6 AS polls \
         FROM r \
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
        u.job_release,
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
    let ids: Vec<String> = sqlx::query_scalar(&update_sql(&others))
        .bind(&input)
        .bind(now)
        .fetch_all(&mut **tx)
        .await?;
    done.extend(ids);
    Ok(done)
}
