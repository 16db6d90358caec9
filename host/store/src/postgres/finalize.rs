//! Finalization leases: claim (`succeeded`, or `finalizing` under an expired lease, to
//! `finalizing` with an owner), renew, complete and release, all only by the lease's owner. Each is
//! one statement; claims skip rows another finalizer is locking (`FOR UPDATE SKIP LOCKED`),
//! so finalizers on many instances never wait on each other.

use sqlx::postgres::PgPool;

use super::rows::{UNIT_COLS, unit_cols_of_units, units_from_rows};
use crate::{FinalizeRelease, StoreResult};
use slotd_core::model::{FINALIZE_PARKED_AT, Unit};

/// The returned units' `attempts` is the finalization attempt this claim starts (1-based).
///
/// Each status is read on its own, in `next_at` order along `units_status_next`, so a claim
/// reads the units it takes and the leases still running, not every unit waiting to be
/// finalized (one condition over both statuses was a scan and a sort of all of them, the
/// largest share of PostgreSQL's CPU per unit in the saturated scale run). Rows the two reads
/// lock beyond the limit are released when the statement ends.
/// A `finalizing` unit with no recorded lease expiry counts as expired, so a unit can never be
/// stranded in `finalizing`; the event of a rescue names the dead owner.
pub(super) async fn unit_claim_finalize(
    pool: &PgPool,
    owner: &str,
    lease_until: i64,
    now: i64,
    limit: u32,
) -> StoreResult<Vec<Unit>> {
    let rows = sqlx::query(&format!(
        "WITH due AS ( \
             SELECT id, status AS old_status, lease_owner AS old_owner, next_at FROM units \
             WHERE status = 'succeeded' AND next_at <= $1 \
             ORDER BY next_at, id LIMIT $2 FOR UPDATE SKIP LOCKED \
         ), expired AS ( \
             SELECT id, status AS old_status, lease_owner AS old_owner, next_at FROM units \
             WHERE status = 'finalizing' AND (lease_until IS NULL OR lease_until <= $1) \
             ORDER BY next_at, id LIMIT $2 FOR UPDATE SKIP LOCKED \
         ), picked AS ( \
             SELECT * FROM (SELECT * FROM due UNION ALL SELECT * FROM expired) AS both_ \
             ORDER BY next_at, id LIMIT $2 \
         ), claimed AS ( \
             UPDATE units SET status = 'finalizing', lease_owner = $3, lease_until = $4, \
                 finalize_attempts = units.finalize_attempts + 1, \
                 attempts = units.finalize_attempts + 1, updated_at = $1 \
             FROM picked WHERE units.id = picked.id \
             RETURNING {}, picked.old_status, picked.old_owner \
         ), event AS ( \
             INSERT INTO unit_events \
                 (unit_id, task_id, at, from_status, to_status, stage, detail) \
             SELECT id, task_id, $1, old_status, 'finalizing', stage, \
                 CASE old_status WHEN 'finalizing' \
                     THEN 'lease of ' || COALESCE(old_owner, '?') || ' expired; claimed by ' \
                         || $3 \
                     ELSE 'finalization claimed by ' || $3 END \
             FROM claimed ORDER BY next_at, id \
         ) \
         SELECT {UNIT_COLS} FROM claimed ORDER BY next_at, id",
        unit_cols_of_units()
    ))
    .bind(now)
    .bind(i64::from(limit))
    .bind(owner)
    .bind(lease_until)
    .fetch_all(pool)
    .await?;
    units_from_rows(&rows)
}

/// `finalizing -> completed` with each unit's result, for the units `owner` still holds the
/// lease on: one statement for a pass's completions, their events included. Returns the ids
/// completed.
pub(super) async fn unit_complete_many(
    pool: &PgPool,
    owner: &str,
    done: &[(String, String)],
    now: i64,
) -> StoreResult<Vec<String>> {
    if done.is_empty() {
        return Ok(Vec::new());
    }
    let (ids, results): (Vec<&str>, Vec<&str>) = done
        .iter()
        .map(|(id, result)| (id.as_str(), result.as_str()))
        .unzip();
    let completed: Vec<String> = sqlx::query_scalar(
        "WITH input AS ( \
             SELECT * FROM unnest($1::text[], $2::text[]) AS i(id, result) \
         ), done AS ( \
             UPDATE units SET status = 'completed', result = input.result, error = NULL, \
                 lease_owner = NULL, lease_until = NULL, updated_at = $4 \
             FROM input \
             WHERE units.id = input.id AND units.status = 'finalizing' \
               AND units.lease_owner = $3 \
             RETURNING units.id, units.task_id, units.stage \
         ), event AS ( \
             INSERT INTO unit_events \
                 (unit_id, task_id, at, from_status, to_status, stage, detail) \
             SELECT id, task_id, $4, 'finalizing', 'completed', stage, 'finalized by ' || $3 \
             FROM done \
         ) \
         SELECT id FROM done",
    )
    .bind(&ids)
    .bind(&results)
    .bind(owner)
    .bind(now)
    .fetch_all(pool)
    .await?;
    Ok(completed)
}

/// `finalizing -> succeeded`, due again at `next_at` or parked, if `owner` still holds the
/// lease. The provider result stays.
pub(super) async fn unit_finalize_release(
    pool: &PgPool,
    r: FinalizeRelease<'_>,
    now: i64,
) -> StoreResult<bool> {
    let (next_at, detail) = if r.give_up {
        (
            FINALIZE_PARKED_AT,
            "finalization gave up (attempts spent); waiting for a retry",
        )
    } else {
        (r.next_at, "finalization released for retry")
    };
    let done: Option<i32> = sqlx::query_scalar(
        "WITH done AS ( \
             UPDATE units SET status = 'succeeded', error = $3, next_at = $4, \
                 lease_owner = NULL, lease_until = NULL, updated_at = $5 \
             WHERE id = $1 AND status = 'finalizing' AND lease_owner = $2 \
             RETURNING id, task_id, stage \
         ), event AS ( \
             INSERT INTO unit_events \
                 (unit_id, task_id, at, from_status, to_status, stage, detail, error) \
             SELECT id, task_id, $5, 'finalizing', 'succeeded', stage, $6 || ' by ' || $2, $3 \
             FROM done \
         ) \
         SELECT 1 FROM done",
    )
    .bind(r.id)
    .bind(r.owner)
    .bind(r.error)
    .bind(next_at)
    .bind(now)
    .bind(detail)
    .fetch_optional(pool)
    .await?;
    Ok(done.is_some())
}
