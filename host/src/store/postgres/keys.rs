//! Host keys on PostgreSQL (`host_keys`), the same statements as the SQLite store's.

use sqlx::PgPool;

use crate::store::{StoreError, StoreResult};

/// The key named `name`, storing `candidate` first if there is none (one candidate wins).
pub(super) async fn host_key_get_or_create(
    pool: &PgPool,
    name: &str,
    candidate: &[u8],
    now: i64,
) -> StoreResult<Vec<u8>> {
    // A concurrent insert of the same name waits for the first to commit, then does nothing;
    // the read (a statement of its own, so it sees that commit) returns the stored key.
    sqlx::query(
        "INSERT INTO host_keys (name, key, created_at) VALUES ($1, $2, $3) \
         ON CONFLICT (name) DO NOTHING",
    )
    .bind(name)
    .bind(candidate)
    .bind(now)
    .execute(pool)
    .await?;
    sqlx::query_scalar("SELECT key FROM host_keys WHERE name = $1")
        .bind(name)
        .fetch_optional(pool)
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("host key {name:?} vanished after insert")))
}
