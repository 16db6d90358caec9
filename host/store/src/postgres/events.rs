//! Event streams on PostgreSQL: events are read in batches of settled transactions (those
//! below the snapshot's `xmin`), each batch in id order (see `store/events.rs`).

use sqlx::Row;
use sqlx::postgres::PgPool;

use crate::shared::postgres::event_from_row;
use crate::shared::{EVENT_COLS, EVENT_SCOPE_ALL, EVENT_SCOPES, EVENT_TENANT};
use crate::{EventCursor, EventPage, EventScope, ScopePage, StoreResult};

/// The horizon now: every transaction below it has committed or rolled back.
const HORIZON_SQL: &str = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint";

/// The batch a read after `after` goes on with: the one being read, or the next one, up to
/// the horizon now; as `(horizon, id to read after)`, `None` when nothing has settled since.
async fn batch(pool: &PgPool, after: EventCursor) -> StoreResult<Option<(i64, i64)>> {
    let (horizon, from_id) = if after.horizon != 0 {
        (after.horizon, after.id)
    } else {
        let now: i64 = sqlx::query_scalar(HORIZON_SQL).fetch_one(pool).await?;
        (now, 0)
    };
    Ok((horizon > after.settled).then_some((horizon, from_id)))
}

/// Where a read of the batch up to `horizon` leaves off: at `last` when the page was full
/// (more of this batch may follow), else past the batch (everything below its horizon is read).
fn next_cursor(after: EventCursor, horizon: i64, full_at: Option<i64>) -> EventCursor {
    match full_at {
        Some(last) => EventCursor {
            settled: after.settled,
            horizon,
            id: last,
        },
        None => EventCursor {
            settled: horizon,
            horizon: 0,
            id: 0,
        },
    }
}

pub(super) async fn unit_events_after(
    pool: &PgPool,
    scope: EventScope<'_>,
    after: EventCursor,
    limit: u32,
) -> StoreResult<EventPage> {
    let Some((horizon, from_id)) = batch(pool, after).await? else {
        return Ok(EventPage {
            events: Vec::new(),
            next: after,
        });
    };
    let scoped = match scope.task_id {
        Some(_) => "e.task_id = $3",
        None => EVENT_SCOPE_ALL,
    };
    let rows = sqlx::query(&format!(
        "SELECT {EVENT_COLS} FROM unit_events e \
         WHERE {scoped} AND e.tx >= $5 AND e.tx < $6 AND e.id > $1 AND {EVENT_TENANT} \
         ORDER BY e.id LIMIT $4"
    ))
    .bind(from_id)
    .bind(scope.tenant)
    .bind(scope.task_id)
    .bind(i64::from(limit))
    .bind(after.settled)
    .bind(horizon)
    .fetch_all(pool)
    .await?;
    let full = rows.len() >= limit as usize;
    let events = rows
        .iter()
        .map(|row| {
            let e = event_from_row(row)?;
            let cursor = EventCursor {
                settled: after.settled,
                horizon,
                id: e.id,
            };
            Ok((cursor, e))
        })
        .collect::<StoreResult<Vec<_>>>()?;
    let full_at = events.last().filter(|_| full).map(|(c, _)| c.id);
    let next = next_cursor(after, horizon, full_at);
    Ok(EventPage { events, next })
}

/// [`unit_events_after`] over every tenant's events, reading only which tasks they belong to:
/// the same batches, the same pages, the same cursor.
pub(super) async fn unit_event_scopes_after(
    pool: &PgPool,
    after: EventCursor,
    limit: u32,
) -> StoreResult<ScopePage> {
    let Some((horizon, from_id)) = batch(pool, after).await? else {
        return Ok(ScopePage {
            scopes: Vec::new(),
            next: after,
            more: false,
        });
    };
    let rows = sqlx::query(&EVENT_SCOPES.replace(
        "{page}",
        "SELECT e.id, e.task_id FROM unit_events e \
         WHERE e.tx >= $2 AND e.tx < $3 AND e.id > $1 ORDER BY e.id LIMIT $4",
    ))
    .bind(from_id)
    .bind(after.settled)
    .bind(horizon)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    let mut scopes = Vec::with_capacity(rows.len());
    let (mut last, mut read) = (0_i64, 0_i64);
    for row in &rows {
        last = last.max(row.try_get::<i64, _>("last")?);
        read += row.try_get::<i64, _>("n")?;
        // A task gone from `tasks` has no tenant, and no stream that could read its events.
        if let Some(tenant) = row.try_get::<Option<String>, _>("tenant")? {
            scopes.push((tenant, row.try_get("task_id")?));
        }
    }
    let more = read >= i64::from(limit) && read > 0;
    let next = next_cursor(after, horizon, more.then_some(last));
    Ok(ScopePage { scopes, next, more })
}

pub(super) async fn unit_events_head(pool: &PgPool) -> StoreResult<EventCursor> {
    let horizon: i64 = sqlx::query_scalar(HORIZON_SQL).fetch_one(pool).await?;
    Ok(EventCursor {
        settled: horizon,
        horizon: 0,
        id: 0,
    })
}

/// An event is read once its transaction is below `settled`, or in the batch being read
/// (`settled <= tx < horizon`) at or below the cursor's id.
pub(super) async fn unit_events_behind(
    pool: &PgPool,
    task_id: &str,
    cursor: EventCursor,
) -> StoreResult<bool> {
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM unit_events WHERE task_id = $1 AND tx >= $2 \
             AND NOT ($3 <> 0 AND tx < $3 AND id <= $4))",
    )
    .bind(task_id)
    .bind(cursor.settled)
    .bind(cursor.horizon)
    .bind(cursor.id)
    .fetch_one(pool)
    .await?)
}
