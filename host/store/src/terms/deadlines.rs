//! Deadlines: a task's deadline terms (request body `deadline`, `start_by`,
//! `deadline_policy`) as the task insert writes them, with its units' cost estimates, and the
//! deadline sweep's reads: the pending units with terms and where they stand in fill order.

use crate::StoreResult;
use crate::shared::on_both_drivers;

/// Pending units of one (priority, tenant) group of a pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingGroup {
    pub priority: i32,
    pub tenant: String,
    pub pending: u64,
}

/// The deadline columns of a task row: `deadline_at`, `start_by`, `deadline_policy` (all
/// NULL for a task without terms). Written by the task insert itself: an update after it
/// wrote every row of the task a second time.
pub(crate) fn task_terms(t: &crate::NewTask) -> (Option<i64>, Option<i64>, Option<&'static str>) {
    if t.terms.is_empty() {
        return (None, None, None);
    }
    let policy = if t.terms.best_effort {
        "best_effort"
    } else {
        "refuse"
    };
    (t.terms.deadline_at, t.terms.start_by, Some(policy))
}

/// The deadline columns of each unit row of `t`: `deadline_at` ([`NO_DEADLINE`] without
/// one), `start_by`, `best_effort` (0 or 1).
///
/// [`NO_DEADLINE`]: slotd_core::model::NO_DEADLINE
pub(crate) fn unit_terms(t: &crate::NewTask) -> (i64, Option<i64>, i32) {
    if t.terms.is_empty() {
        return (slotd_core::model::NO_DEADLINE, None, 0);
    }
    (
        t.terms
            .deadline_at
            .unwrap_or(slotd_core::model::NO_DEADLINE),
        t.terms.start_by,
        i32::from(t.terms.best_effort),
    )
}

on_both_drivers! {
    /// Pending units of `pool` that carry a deadline or a start-by time, earliest deadline
    /// first (the deadline sweep; best-effort ones too, whose decision is recorded). The
    /// condition repeats the partial index `units_deadline`'s, constant included, so the
    /// planner can use it.
    pub(crate) async fn deadlined_pending(
        pool: &Pool,
        sched_pool: &str,
        limit: i64,
    ) -> StoreResult<Vec<DbRow>> {
        Ok(sqlx::query(&format!(
            "SELECT {} FROM units \
             WHERE pool = $1 AND status = 'pending' \
               AND (deadline_at < {} OR start_by IS NOT NULL) \
             ORDER BY deadline_at, task_seq, idx LIMIT $2",
            crate::shared::UNIT_COLS,
            slotd_core::model::NO_DEADLINE
        ))
        .bind(sched_pool)
        .bind(limit)
        .fetch_all(pool)
        .await?)
    }

    /// Pending units per (priority, tenant) at or above `min_priority`: an index-only count
    /// on `units_fill`.
    pub(crate) async fn pending_groups(
        pool: &Pool,
        sched_pool: &str,
        min_priority: i32,
    ) -> StoreResult<Vec<PendingGroup>> {
        let rows: Vec<(Count, String, i64)> = sqlx::query_as(
            "SELECT priority, tenant, COUNT(*) FROM units \
             WHERE pool = $1 AND status = 'pending' AND priority >= $2 \
             GROUP BY priority, tenant",
        )
        .bind(sched_pool)
        .bind(min_priority)
        .fetch_all(pool)
        .await?;
        rows.into_iter()
            .map(|(priority, tenant, n)| {
                Ok(PendingGroup {
                    priority: i32::try_from(i64::from(priority))
                        .map_err(|_| crate::StoreError::Corrupt("unit priority out of range".into()))?,
                    tenant,
                    pending: u64::try_from(n).unwrap_or(0),
                })
            })
            .collect()
    }

    /// The pending units of the unit's (pool, priority, tenant) group before it in fill
    /// order, up to `cap` (a range of `units_fill`; a unit no longer pending has none).
    pub(crate) async fn rank_in_group(pool: &Pool, unit_id: &str, cap: u32) -> StoreResult<u64> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM (SELECT 1 FROM units AS u JOIN units AS x \
                 ON x.pool = u.pool AND x.status = 'pending' AND x.priority = u.priority \
                AND x.tenant = u.tenant \
                AND (x.deadline_at, x.task_seq, x.idx) < (u.deadline_at, u.task_seq, u.idx) \
             WHERE u.id = $1 AND u.status = 'pending' LIMIT $2) AS ahead",
        )
        .bind(unit_id)
        .bind(i64::from(cap))
        .fetch_one(pool)
        .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}
