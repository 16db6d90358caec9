//! The create log of pools with quotas (docs/accounts-deadlines-budgets.md "Quotas"): one row
//! per submit marker of a pool that has a `rate` or `daily` quota, written in the marker's
//! transaction, so the count of creates in a window survives a restart and rebuilds the slot
//! store's window logs (in memory or in Redis) when they were lost.

use crate::StoreResult;
use crate::shared::on_both_drivers;

/// Rows of one create-log insert (four parameters each, far below both databases' limits).
const CREATES_PER_STATEMENT: usize = 250;

/// One recorded create: the unit, its account and when its submit marker was written.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct Create {
    pub unit_id: String,
    pub account: Option<String>,
    pub at: i64,
}

on_both_drivers! {
    /// Record the creates of the grants that were marked (`moved`) and name a quota pool,
    /// at `now`, in the marker's transaction.
    pub(crate) async fn record_marked(
        conn: &mut Conn,
        grants: &[crate::Grant],
        moved: &[slotd_core::model::Unit],
        now: i64,
    ) -> StoreResult<()> {
        if grants.iter().all(|g| g.quota_pool.is_none()) {
            return Ok(());
        }
        let marked: std::collections::HashSet<&str> = moved.iter().map(|u| u.id.as_str()).collect();
        let rows: Vec<(&str, Option<&str>, &str)> = grants
            .iter()
            .filter(|g| marked.contains(g.unit_id.as_str()))
            .filter_map(|g| {
                Some((g.quota_pool.as_deref()?, g.account.as_deref(), g.unit_id.as_str()))
            })
            .collect();
        // One statement per chunk of rows: a fill marks up to a thousand units at once.
        for chunk in rows.chunks(CREATES_PER_STATEMENT) {
            let values: Vec<String> = (0..chunk.len())
                .map(|i| format!("(${}, ${}, ${}, ${})", 4 * i + 1, 4 * i + 2, 4 * i + 3, 4 * i + 4))
                .collect();
            let sql = format!(
                "INSERT INTO pool_creates (pool, account, at, unit_id) VALUES {}",
                values.join(", ")
            );
            let mut q = sqlx::query(&sql);
            for (quota_pool, account, unit_id) in chunk {
                q = q.bind(*quota_pool).bind(*account).bind(now).bind(*unit_id);
            }
            q.execute(&mut *conn).await?;
        }
        Ok(())
    }

    /// The creates of `quota_pool` at or after `since`, oldest first.
    pub(crate) async fn since(pool: &Pool, quota_pool: &str, since: i64) -> StoreResult<Vec<Create>> {
        Ok(sqlx::query_as(
            "SELECT unit_id, account, at FROM pool_creates WHERE pool = $1 AND at >= $2 \
             ORDER BY at, unit_id",
        )
        .bind(quota_pool)
        .bind(since)
        .fetch_all(pool)
        .await?)
    }

    /// Forget `quota_pool`'s creates older than `before` (no window reaches them).
    pub(crate) async fn prune(pool: &Pool, quota_pool: &str, before: i64) -> StoreResult<u64> {
        Ok(sqlx::query("DELETE FROM pool_creates WHERE pool = $1 AND at < $2")
            .bind(quota_pool)
            .bind(before)
            .execute(pool)
            .await?
            .rows_affected())
    }
}
