//! The handler version history on PostgreSQL (`handler_versions`, append-only), the same queries
//! as the SQLite store's.

use sqlx::PgPool;
use sqlx::Row;

use crate::store::{HandlerVersionRow, StoreResult};

/// Append one history row.
pub(super) async fn handler_version_record(
    pool: &PgPool,
    row: &HandlerVersionRow,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO handler_versions (at, path, name, version, sha256, state, reason) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(row.at)
    .bind(&row.path)
    .bind(&row.name)
    .bind(&row.version)
    .bind(&row.sha256)
    .bind(&row.state)
    .bind(&row.reason)
    .execute(pool)
    .await?;
    Ok(())
}

/// The newest rows first, of one handler or all.
pub(super) async fn handler_version_list(
    pool: &PgPool,
    name: Option<&str>,
    limit: u32,
) -> StoreResult<Vec<HandlerVersionRow>> {
    let rows = sqlx::query(
        "SELECT id, at, path, name, version, sha256, state, reason FROM handler_versions \
         WHERE $1::TEXT IS NULL OR name = $1 ORDER BY id DESC LIMIT $2",
    )
    .bind(name)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(HandlerVersionRow {
                id: r.try_get("id")?,
                at: r.try_get("at")?,
                path: r.try_get("path")?,
                name: r.try_get("name")?,
                version: r.try_get("version")?,
                sha256: r.try_get("sha256")?,
                state: r.try_get("state")?,
                reason: r.try_get("reason")?,
            })
        })
        .collect()
}
