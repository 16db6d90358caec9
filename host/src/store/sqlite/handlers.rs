//! The handler version history (`handler_versions`, append-only): one row per state a version
//! of a handler file entered. Written by the plugins watcher, read by the API.

use sqlx::Row;
use sqlx::sqlite::SqlitePool;

use crate::store::{HandlerVersionRow, StoreResult};

/// Append one history row.
pub(super) async fn handler_version_record(
    pool: &SqlitePool,
    row: &HandlerVersionRow,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO handler_versions (at, path, name, version, sha256, state, reason) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
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
    pool: &SqlitePool,
    name: Option<&str>,
    limit: u32,
) -> StoreResult<Vec<HandlerVersionRow>> {
    let rows = sqlx::query(
        "SELECT id, at, path, name, version, sha256, state, reason FROM handler_versions \
         WHERE ?1 IS NULL OR name = ?1 ORDER BY id DESC LIMIT ?2",
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
