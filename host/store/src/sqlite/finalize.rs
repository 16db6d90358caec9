//! Finalization leases: claim (`succeeded`, or `finalizing` under an expired lease, to
//! `finalizing` with an owner), renew, complete and release, all only by the lease's owner.

use sqlx::{Row, Sqlite, Transaction};

use super::rows::{UNIT_COLS, json_list, units_from_rows};
use crate::{FinalizeRelease, StoreResult};
use slotd_core::model::{FINALIZE_PARKED_AT, Unit};

/// The condition of the partial index `units_status_next` (migration 0010), word for word.
const FINALIZE_INDEXED: &str = "status IN ('succeeded', 'finalizing')";

/// The units a finalizer may claim (`?1` now, `?2` how many): two indexed ranges of
/// `units_status_next` (succeeded and due; finalizing under an expired lease), merged. Each
/// branch states the partial index's condition ([`FINALIZE_INDEXED`]), which is what lets
/// SQLite use that index.
pub(super) fn claim_due_sql() -> String {
    format!(
        "SELECT id, next_at FROM units WHERE {FINALIZE_INDEXED} \
             AND status = 'succeeded' AND next_at <= ?1 \
         UNION ALL \
         SELECT id, next_at FROM units WHERE {FINALIZE_INDEXED} AND status = 'finalizing' \
             AND (lease_until IS NULL OR lease_until <= ?1) \
         ORDER BY next_at, id LIMIT ?2"
    )
}

/// The returned units' `attempts` is the finalization attempt this claim starts (1-based).
///
/// Pick due units, log the claim (rescues name the dead owner), then move them, in one
/// transaction. A `finalizing` unit with no recorded lease expiry counts as expired, so a unit
/// can never be stranded in `finalizing`.
pub(super) async fn unit_claim_finalize(
    mut tx: Transaction<'static, Sqlite>,
    owner: &str,
    lease_until: i64,
    now: i64,
    limit: u32,
) -> StoreResult<Vec<Unit>> {
    let rows = sqlx::query(&claim_due_sql())
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
    if rows.is_empty() {
        tx.rollback().await?;
        return Ok(Vec::new());
    }
    let ids = rows
        .iter()
        .map(|r| r.try_get::<String, _>("id"))
        .collect::<Result<Vec<_>, _>>()?;
    let ids = json_list(&ids)?;
    sqlx::query(
        "INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage, detail) \
         SELECT id, task_id, ?2, status, 'finalizing', stage, \
             CASE status WHEN 'finalizing' \
                 THEN 'lease of ' || COALESCE(lease_owner, '?') || ' expired; claimed by ' || ?3 \
                 ELSE 'finalization claimed by ' || ?3 END \
         FROM units WHERE id IN (SELECT value FROM json_each(?1))",
    )
    .bind(&ids)
    .bind(now)
    .bind(owner)
    .execute(&mut *tx)
    .await?;
    let rows = sqlx::query(&format!(
        "UPDATE units SET status = 'finalizing', lease_owner = ?2, lease_until = ?3, \
             finalize_attempts = finalize_attempts + 1, \
             attempts = finalize_attempts + 1, updated_at = ?4 \
         WHERE id IN (SELECT value FROM json_each(?1)) \
         RETURNING {UNIT_COLS}"
    ))
    .bind(&ids)
    .bind(owner)
    .bind(lease_until)
    .bind(now)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    let mut units = units_from_rows(&rows)?;
    units.sort_by(|a, b| (a.next_at, &a.id).cmp(&(b.next_at, &b.id)));
    Ok(units)
}

/// `finalizing -> completed` with each unit's result, for the units `owner` still holds the
/// lease on, in one transaction. Returns the ids completed.
pub(super) async fn unit_complete_many(
    mut tx: Transaction<'static, Sqlite>,
    owner: &str,
    done: &[(String, String)],
    now: i64,
) -> StoreResult<Vec<String>> {
    let mut completed = Vec::with_capacity(done.len());
    for (id, result) in done {
        let held = sqlx::query(
            "INSERT INTO unit_events \
                 (unit_id, task_id, at, from_status, to_status, stage, detail) \
             SELECT id, task_id, ?3, 'finalizing', 'completed', stage, 'finalized by ' || ?2 \
             FROM units WHERE id = ?1 AND status = 'finalizing' AND lease_owner = ?2",
        )
        .bind(id)
        .bind(owner)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if held == 0 {
            continue;
        }
        sqlx::query(
            "UPDATE units SET status = 'completed', result = ?2, error = NULL, \
                 lease_owner = NULL, lease_until = NULL, updated_at = ?3 \
             WHERE id = ?1",
        )
        .bind(id)
        .bind(result)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        completed.push(id.clone());
    }
    tx.commit().await?;
    Ok(completed)
}

/// `finalizing -> succeeded`, due again at `next_at` or parked, if `owner` still holds the
/// lease. The provider result stays.
pub(super) async fn unit_finalize_release(
    mut tx: Transaction<'static, Sqlite>,
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
    let held = sqlx::query(
        "INSERT INTO unit_events \
             (unit_id, task_id, at, from_status, to_status, stage, detail, error) \
         SELECT id, task_id, ?3, 'finalizing', 'succeeded', stage, ?4 || ' by ' || ?2, ?5 \
         FROM units WHERE id = ?1 AND status = 'finalizing' AND lease_owner = ?2",
    )
    .bind(r.id)
    .bind(r.owner)
    .bind(now)
    .bind(detail)
    .bind(r.error)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if held == 0 {
        tx.rollback().await?;
        return Ok(false);
    }
    sqlx::query(
        "UPDATE units SET status = 'succeeded', error = ?2, next_at = ?3, \
             lease_owner = NULL, lease_until = NULL, updated_at = ?4 \
         WHERE id = ?1",
    )
    .bind(r.id)
    .bind(r.error)
    .bind(next_at)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}
