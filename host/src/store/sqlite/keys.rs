//! Host keys (`host_keys`): secrets slotd itself holds, shared by every instance through the
//! database (the callback token key, SPEC section 17).

use sqlx::sqlite::SqlitePool;

use crate::store::{StoreError, StoreResult};

/// The key named `name`, storing `candidate` first if there is none (one candidate wins).
pub(super) async fn host_key_get_or_create(
    pool: &SqlitePool,
    name: &str,
    candidate: &[u8],
    now: i64,
) -> StoreResult<Vec<u8>> {
    // Two statements on the one writer connection: the insert either stores the candidate or
    // leaves an earlier key alone, and the read returns whichever is stored.
    sqlx::query(
        "INSERT INTO host_keys (name, key, created_at) VALUES (?1, ?2, ?3) \
         ON CONFLICT (name) DO NOTHING",
    )
    .bind(name)
    .bind(candidate)
    .bind(now)
    .execute(pool)
    .await?;
    sqlx::query_scalar("SELECT key FROM host_keys WHERE name = ?1")
        .bind(name)
        .fetch_optional(pool)
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("host key {name:?} vanished after insert")))
}
