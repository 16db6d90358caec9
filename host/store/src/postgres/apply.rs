//! The scheduler's batch write: guarded updates of many units, with their event rows, as one
//! statement.
//!
//! The updates travel as parallel arrays (`unnest(…) WITH ORDINALITY`), so a tick's whole
//! batch is one round trip and one prepared statement whatever its size or shape: every
//! `None` is a NULL that `COALESCE` turns into "leave the column alone", and the three columns
//! that can be cleared carry a flag beside their value. The guarded rows are locked in id
//! order first (as cancel and retry lock theirs), so concurrent writers queue instead of
//! deadlocking; the event rows read the status each unit is leaving from that lock. The input
//! travels through the lock step (`old` carries it), so the update joins `units` only by
//! primary key: a cached generic plan, which guesses ten rows for an array of any length, has
//! no second join to get wrong.
//!
//! The same statement settles the budget reservation of each unit whose submission it ends
//! or prices (`budget_ledger`, see `terms/budgets.rs`): atomic with the move without a
//! transaction around it, and an index probe that finds nothing where no tenant has a budget.

use std::collections::HashSet;

use sqlx::postgres::PgConnection;

use crate::{ApplyReport, Fence, StoreError, StoreResult, UnitUpdate};
use slotd_core::model::UnitStatus;

const APPLY_SQL: &str = concat!(
    "WITH ",
    fence_cte!("$33", "$34"),
    ", input AS ( \
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
             $6::text[], $7::bool[], $8::text[], $9::text[], $10::text[], $11::bool[], \
             $12::text[], $13::text[], $14::int8[], $15::int8[], $16::int8[], $17::int8[], \
             $18::bool[], $19::int8[], $20::text[], $21::bool[], $23::int8[], $24::bool[], \
             $25::bool[], $26::text[], $27::text[], $28::text[], $29::text[], $30::bool[], \
             $31::float8[], $32::bool[]) \
         WITH ORDINALITY AS u (id, from_status, from_stage, to_status, stage, pool, set_job, \
             job, state, result, set_error, error, cost, next_at, attempts, polls, \
             submit_attempt, set_submitted, submitted_at, detail, eventful, from_submitted, \
             no_cancel, set_wait, wait_reason, task_type, routing, job_release, settle, \
             settle_cost, settle_ok, ord) \
     ), old AS ( \
         SELECT units.status AS old_status, input.* FROM input \
         JOIN units ON units.id = input.id \
         WHERE (input.from_status IS NULL OR units.status = input.from_status) \
           AND (input.from_stage IS NULL OR units.stage = input.from_stage) \
           AND (input.from_submitted IS NULL OR units.submitted_at = input.from_submitted) \
           AND (NOT input.no_cancel OR units.cancel_requested_at IS NULL) \
           AND NOT EXISTS (SELECT 1 FROM fence WHERE fence.token > $34) \
         ORDER BY units.id FOR UPDATE OF units \
     ), moved AS ( \
         UPDATE units SET \
             status = COALESCE(i.to_status, units.status), \
             stage = COALESCE(i.stage, units.stage), \
             pool = COALESCE(i.pool, units.pool), \
             task_type = COALESCE(i.task_type, units.task_type), \
             routing = COALESCE(i.routing, units.routing), \
             provider_job_id = CASE WHEN i.set_job THEN i.job ELSE units.provider_job_id END, \
             job_release = COALESCE(i.job_release, units.job_release), \
             state = COALESCE(i.state, units.state), \
             result = COALESCE(i.result, units.result), \
             error = CASE WHEN i.set_error THEN i.error ELSE units.error END, \
             cost = COALESCE(i.cost, units.cost), \
             next_at = COALESCE(i.next_at, units.next_at), \
             attempts = COALESCE(i.attempts::int, units.attempts), \
             polls = COALESCE(i.polls::int, units.polls), \
             submit_attempt = COALESCE(i.submit_attempt::int, units.submit_attempt), \
             submitted_at = CASE WHEN i.set_submitted THEN i.submitted_at \
                 ELSE units.submitted_at END, \
             wait_reason = CASE WHEN i.set_wait THEN i.wait_reason \
                 ELSE units.wait_reason END, \
             lease_owner = CASE WHEN COALESCE(i.to_status, units.status) = 'finalizing' \
                 THEN units.lease_owner END, \
             lease_until = CASE WHEN COALESCE(i.to_status, units.status) = 'finalizing' \
                 THEN units.lease_until END, \
             updated_at = GREATEST($22, units.updated_at + 1) \
         FROM old AS i \
         WHERE units.id = i.id \
         RETURNING units.id, units.task_id, units.status, units.stage, \
             i.old_status AS from_status, i.detail, i.error, i.eventful, i.ord, i.settle, \
             i.settle_cost, i.settle_ok \
     ), event AS ( \
         INSERT INTO unit_events \
             (unit_id, task_id, at, from_status, to_status, stage, detail, error) \
         SELECT id, task_id, $22, from_status, status, stage, detail, error \
         FROM moved WHERE eventful ORDER BY ord \
     ), settled AS ( \
         UPDATE budget_ledger SET settled_at = $22, \
             spent = CASE WHEN m.settle_cost IS NOT NULL THEN m.settle_cost \
                 WHEN m.settle_ok THEN budget_ledger.reserved ELSE 0 END \
         FROM moved AS m \
         WHERE m.settle AND budget_ledger.unit_id = m.id \
           AND budget_ledger.settled_at IS NULL \
     ) \
     SELECT id, NULL::int8 AS fenced_by, ord FROM moved \
     UNION ALL SELECT NULL, token, 0 FROM fence WHERE token > $34 \
     ORDER BY ord"
);

/// Pure polls (see [`UnitUpdate::is_pure_poll`]): locked in id order like every batch write,
/// then only `state`, `next_at`, `polls` and `updated_at` written (`status` is not touched,
/// so the state machine's trigger does not run), and no event row.
const POLL_SQL: &str = concat!(
    "WITH ",
    fence_cte!("$9", "$10"),
    ", input AS ( \
         SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::bool[], $5::text[], \
             $6::int8[], $7::int8[]) WITH ORDINALITY \
         AS u (id, from_stage, from_submitted, no_cancel, state, next_at, polls, ord) \
     ), old AS ( \
         SELECT input.* FROM input JOIN units ON units.id = input.id \
         WHERE units.status = 'submitted' \
           AND (input.from_stage IS NULL OR units.stage = input.from_stage) \
           AND (input.from_submitted IS NULL OR units.submitted_at = input.from_submitted) \
           AND (NOT input.no_cancel OR units.cancel_requested_at IS NULL) \
           AND NOT EXISTS (SELECT 1 FROM fence WHERE fence.token > $10) \
         ORDER BY units.id FOR UPDATE OF units \
     ), moved AS ( \
         UPDATE units SET state = COALESCE(i.state, units.state), \
             next_at = COALESCE(i.next_at, units.next_at), \
             polls = COALESCE(i.polls::int, units.polls), \
             updated_at = GREATEST($8, units.updated_at + 1) \
         FROM old AS i WHERE units.id = i.id \
         RETURNING units.id, i.ord \
     ) \
     SELECT id, NULL::int8 AS fenced_by, ord FROM moved \
     UNION ALL SELECT NULL, token, 0 FROM fence WHERE token > $10 \
     ORDER BY ord"
);

/// Whether [`unit_apply`] writes `updates` with more than one statement (and so needs a
/// transaction to stay atomic): some unit repeats, or pure polls and other updates mix.
pub(super) fn needs_transaction(updates: &[UnitUpdate]) -> bool {
    if crate::has_repeats(updates) {
        return true;
    }
    let polls = updates.iter().filter(|u| u.is_pure_poll()).count();
    polls > 0 && polls < updates.len()
}

/// Apply `updates` on `conn` (a transaction when [`needs_transaction`]), each statement
/// checking `fence` itself (`None` where the transaction checked it first). Ids normally
/// appear once per batch, and the batch is one statement; if one repeats, the updates run one
/// by one in order so that each guard sees the previous update.
pub(super) async fn unit_apply(
    conn: &mut PgConnection,
    updates: &[UnitUpdate],
    now: i64,
    fence: Option<&Fence>,
) -> StoreResult<ApplyReport> {
    if crate::has_repeats(updates) {
        let mut report = ApplyReport::default();
        for u in updates {
            let done = apply_batch(conn, &[u], now, fence).await?;
            if done.is_empty() {
                report.skipped.push(u.unit_id.clone());
            } else {
                report.applied.push(u.unit_id.clone());
            }
        }
        return Ok(report);
    }
    let (polls, others): (Vec<&UnitUpdate>, Vec<&UnitUpdate>) =
        updates.iter().partition(|u| u.is_pure_poll());
    let mut applied = Vec::with_capacity(updates.len());
    if !polls.is_empty() {
        applied.extend(apply_polls(conn, &polls, now, fence).await?);
    }
    if !others.is_empty() {
        applied.extend(apply_batch(conn, &others, now, fence).await?);
    }
    let done: HashSet<&str> = applied.iter().map(String::as_str).collect();
    let skipped = updates
        .iter()
        .filter(|u| !done.contains(u.unit_id.as_str()))
        .map(|u| u.unit_id.clone())
        .collect();
    Ok(ApplyReport {
        applied,
        skipped,
        refused: Vec::new(),
    })
}

/// One `POLL_SQL` over pure polls (ids unique); the ids applied. Fenced as `apply_batch` is.
async fn apply_polls(
    conn: &mut PgConnection,
    polls: &[&UnitUpdate],
    now: i64,
    fence: Option<&Fence>,
) -> StoreResult<Vec<String>> {
    let rows: Vec<(Option<String>, Option<i64>, i64)> = sqlx::query_as(POLL_SQL)
        .bind(polls.iter().map(|u| u.unit_id.as_str()).collect::<Vec<_>>())
        .bind(
            polls
                .iter()
                .map(|u| u.from_stage.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(
            polls
                .iter()
                .map(|u| u.from_submitted_at)
                .collect::<Vec<_>>(),
        )
        .bind(
            polls
                .iter()
                .map(|u| u.unless_cancel_requested)
                .collect::<Vec<_>>(),
        )
        .bind(polls.iter().map(|u| u.state.as_deref()).collect::<Vec<_>>())
        .bind(polls.iter().map(|u| u.next_at).collect::<Vec<_>>())
        .bind(
            polls
                .iter()
                .map(|u| u.polls.map(i64::from))
                .collect::<Vec<_>>(),
        )
        .bind(now)
        .bind(fence.map(|f| f.pool.as_str()))
        .bind(fence.map(|f| f.token))
        .fetch_all(conn)
        .await?;
    applied_or_fenced(rows, fence)
}

/// One `APPLY_SQL` over `updates` (ids unique); the ids applied, in input order. With a
/// `fence`, the same statement raises the pool's token first and writes nothing (failing
/// with [`StoreError::Fenced`]) when the stored one is higher: the fence row stays locked
/// until the statement commits, as `fence_check` holds it to the end of a transaction.
async fn apply_batch(
    conn: &mut PgConnection,
    updates: &[&UnitUpdate],
    now: i64,
    fence: Option<&Fence>,
) -> StoreResult<Vec<String>> {
    let col = |f: fn(&UnitUpdate) -> Option<String>| -> Vec<Option<String>> {
        updates.iter().map(|u| f(u)).collect()
    };
    let num = |f: fn(&UnitUpdate) -> Option<i64>| -> Vec<Option<i64>> {
        updates.iter().map(|u| f(u)).collect()
    };
    let flag = |f: fn(&UnitUpdate) -> bool| -> Vec<bool> { updates.iter().map(|u| f(u)).collect() };
    let status = |s: Option<UnitStatus>| s.map(|s| s.as_str().to_string());
    let ids: Vec<&str> = updates.iter().map(|u| u.unit_id.as_str()).collect();
    let settles: Vec<_> = updates
        .iter()
        .map(|u| crate::terms::settlement(u))
        .collect();
    let rows: Vec<(Option<String>, Option<i64>, i64)> = sqlx::query_as(APPLY_SQL)
        .bind(ids)
        .bind(col(|u| u.from.map(|s| s.as_str().to_string())))
        .bind(col(|u| u.from_stage.clone()))
        .bind(updates.iter().map(|u| status(u.to)).collect::<Vec<_>>())
        .bind(col(|u| u.stage.clone()))
        .bind(col(|u| u.pool.clone()))
        .bind(flag(|u| !u.provider_job_id.is_keep()))
        .bind(col(|u| u.provider_job_id.value().cloned()))
        .bind(col(|u| u.state.clone()))
        .bind(col(|u| u.result.clone()))
        .bind(flag(|u| !u.error.is_keep()))
        .bind(col(|u| u.error.value().cloned()))
        .bind(col(|u| u.cost.clone()))
        .bind(num(|u| u.next_at))
        .bind(num(|u| u.attempts.map(i64::from)))
        .bind(num(|u| u.polls.map(i64::from)))
        .bind(num(|u| u.submit_attempt.map(i64::from)))
        .bind(flag(|u| !u.submitted_at.is_keep()))
        .bind(num(|u| u.submitted_at.value().copied()))
        .bind(col(|u| u.detail.clone()))
        .bind(flag(UnitUpdate::eventful))
        .bind(now)
        .bind(num(|u| u.from_submitted_at))
        .bind(flag(|u| u.unless_cancel_requested))
        .bind(flag(|u| !u.wait_reason.is_keep()))
        .bind(col(|u| u.wait_reason.value().cloned()))
        .bind(col(|u| u.task_type.clone()))
        .bind(col(|u| u.routing.clone()))
        .bind(col(|u| u.job_release.clone()))
        .bind(settles.iter().map(Option::is_some).collect::<Vec<_>>())
        .bind(
            settles
                .iter()
                .map(|s| s.as_ref().and_then(|s| s.cost))
                .collect::<Vec<_>>(),
        )
        .bind(
            settles
                .iter()
                .map(|s| s.as_ref().is_some_and(|s| s.succeeded))
                .collect::<Vec<_>>(),
        )
        .bind(fence.map(|f| f.pool.as_str()))
        .bind(fence.map(|f| f.token))
        .fetch_all(conn)
        .await?;
    applied_or_fenced(rows, fence)
}

/// The ids a fenced statement applied, in input order, or [`StoreError::Fenced`] when its
/// fence row named a newer token (it then wrote nothing).
fn applied_or_fenced(
    rows: Vec<(Option<String>, Option<i64>, i64)>,
    fence: Option<&Fence>,
) -> StoreResult<Vec<String>> {
    let mut applied = Vec::with_capacity(rows.len());
    for (id, fenced_by, _) in rows {
        match (id, fenced_by, fence) {
            (_, Some(current), Some(f)) => {
                return Err(StoreError::Fenced {
                    pool: f.pool.clone(),
                    token: f.token,
                    current,
                });
            }
            (Some(id), ..) => applied.push(id),
            _ => {}
        }
    }
    Ok(applied)
}
