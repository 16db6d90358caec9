//! Event streams on SQLite: one writer, so ids are in commit order and the cursor is the last
//! id read (see `store/events.rs`).

use sqlx::Row;
use sqlx::sqlite::SqlitePool;

use crate::shared::sqlite::event_from_row;
use crate::shared::{EVENT_COLS, EVENT_SCOPE_ALL, EVENT_SCOPES, EVENT_TENANT};
use crate::{EventCursor, EventPage, EventScope, ScopePage, StoreResult};

pub(super) async fn unit_events_after(
    pool: &SqlitePool,
    scope: EventScope<'_>,
    after: EventCursor,
    limit: u32,
) -> StoreResult<EventPage> {
    // One task reads its own index, `(task_id, id)`; a tenant's stream the id range.
    let scoped = match scope.task_id {
        Some(_) => "e.task_id = $3",
        None => EVENT_SCOPE_ALL,
    };
    let rows = sqlx::query(&format!(
        "SELECT {EVENT_COLS} FROM unit_events e \
         WHERE {scoped} AND e.id > $1 AND {EVENT_TENANT} ORDER BY e.id LIMIT $4"
    ))
    .bind(after.id)
    .bind(scope.tenant)
    .bind(scope.task_id)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    let events = rows
        .iter()
        .map(|row| {
            let e = event_from_row(row)?;
            let cursor = EventCursor {
                id: e.id,
                ..EventCursor::default()
            };
            Ok((cursor, e))
        })
        .collect::<StoreResult<Vec<_>>>()?;
    let next = events.last().map_or(after, |(c, _)| *c);
    Ok(EventPage { events, next })
}

/// [`unit_events_after`] over every tenant's events, reading only which tasks they belong to
/// (the id range of the primary key, then each task's tenant by its key).
pub(super) async fn unit_event_scopes_after(
    pool: &SqlitePool,
    after: EventCursor,
    limit: u32,
) -> StoreResult<ScopePage> {
    let rows = sqlx::query(&EVENT_SCOPES.replace(
        "{page}",
        "SELECT e.id, e.task_id FROM unit_events e WHERE e.id > $1 ORDER BY e.id LIMIT $2",
    ))
    .bind(after.id)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    let mut scopes = Vec::with_capacity(rows.len());
    let (mut last, mut read) = (after.id, 0_i64);
    for row in &rows {
        last = last.max(row.try_get::<i64, _>("last")?);
        read += row.try_get::<i64, _>("n")?;
        // A task gone from `tasks` has no tenant, and no stream that could read its events.
        if let Some(tenant) = row.try_get::<Option<String>, _>("tenant")? {
            scopes.push((tenant, row.try_get("task_id")?));
        }
    }
    Ok(ScopePage {
        scopes,
        next: EventCursor {
            id: last,
            ..EventCursor::default()
        },
        more: read >= i64::from(limit) && read > 0,
    })
}

pub(super) async fn unit_events_head(pool: &SqlitePool) -> StoreResult<EventCursor> {
    let id: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM unit_events")
        .fetch_one(pool)
        .await?;
    Ok(EventCursor {
        id,
        ..EventCursor::default()
    })
}

pub(super) async fn unit_events_behind(
    pool: &SqlitePool,
    task_id: &str,
    cursor: EventCursor,
) -> StoreResult<bool> {
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM unit_events WHERE task_id = $1 AND id > $2)",
    )
    .bind(task_id)
    .bind(cursor.id)
    .fetch_one(pool)
    .await?)
}
