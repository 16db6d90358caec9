//! Fencing tokens per pool (SPEC section 11): advancing a pool's token, and the check a fenced
//! write runs first in its transaction.
//!
//! SQLite has one writer, so the check and the write it guards are serialized with every
//! advance simply by sharing the write transaction.

use sqlx::{Sqlite, Transaction};

use crate::store::{Fence, StoreError, StoreResult};

/// Raise the pool's token to `?2` unless it is higher, returning the stored token after.
const FENCE_RAISE_SQL: &str = "INSERT INTO pool_fences (pool, token) VALUES (?1, ?2) \
     ON CONFLICT (pool) DO UPDATE SET token = MAX(token, excluded.token) \
     RETURNING token";

/// Raise `fence.pool`'s token to `fence.token`, or fail with [`StoreError::Fenced`] if the
/// stored one is higher. Runs first in a write transaction, which the caller drops (rolling
/// back) on error.
pub(super) async fn fence_check(
    tx: &mut Transaction<'static, Sqlite>,
    fence: Option<&Fence>,
) -> StoreResult<()> {
    let Some(fence) = fence else {
        return Ok(());
    };
    let current: i64 = sqlx::query_scalar(FENCE_RAISE_SQL)
        .bind(&fence.pool)
        .bind(fence.token)
        .fetch_one(&mut **tx)
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
pub(super) async fn pool_fence_advance(
    mut tx: Transaction<'static, Sqlite>,
    pool: &str,
    token: i64,
) -> StoreResult<bool> {
    let current: i64 = sqlx::query_scalar(FENCE_RAISE_SQL)
        .bind(pool)
        .bind(token)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(current <= token)
}
