//! Fencing tokens per pool (SPEC section 11): advancing a pool's token, and the check a fenced
//! write runs first in its transaction.
//!
//! Both are one upsert that raises the stored token to the caller's if that is higher and
//! returns the token in place. The upsert locks the pool's fence row until the transaction
//! ends, so an advance by a new leader waits for a fenced write in flight to commit, and any
//! write of the old leader that starts after the advance sees the higher token and is refused.

use sqlx::postgres::{PgConnection, PgPool};

use crate::store::{Fence, StoreError, StoreResult};

const FENCE_RAISE_SQL: &str = "INSERT INTO pool_fences (pool, token) VALUES ($1, $2) \
     ON CONFLICT (pool) DO UPDATE SET token = GREATEST(pool_fences.token, excluded.token) \
     RETURNING token";

/// Raise `fence.pool`'s token to `fence.token`, or fail with [`StoreError::Fenced`] if the
/// stored one is higher. `conn` is a transaction, which the caller drops (rolling back) on
/// error.
pub(super) async fn fence_check(conn: &mut PgConnection, fence: &Fence) -> StoreResult<()> {
    let current: i64 = sqlx::query_scalar(FENCE_RAISE_SQL)
        .bind(&fence.pool)
        .bind(fence.token)
        .fetch_one(conn)
        .await?;
    if current > fence.token {
        return Err(StoreError::Fenced {
            pool: fence.pool.clone(),
            token: fence.token,
            current,
        });
    }
    Ok(())
}

/// See [`crate::store::TaskStore::pool_fence_advance`].
pub(super) async fn pool_fence_advance(pool: &PgPool, name: &str, token: i64) -> StoreResult<bool> {
    let current: i64 = sqlx::query_scalar(FENCE_RAISE_SQL)
        .bind(name)
        .bind(token)
        .fetch_one(pool)
        .await?;
    Ok(current <= token)
}
