//! The completion webhook outbox: its records and its statements (the same on both drivers):
//! a delivery per ended task with a `callback_url`, retried under a lease until delivered or
//! given up, every attempt kept.

use serde::Serialize;
use sqlx::Row;

use crate::StoreResult;
use crate::shared::{on_both_drivers, tenant_scope};

/// A delivery to queue (`RecordWrite::webhook_enqueue`).
#[derive(Clone, Debug)]
pub struct NewDelivery {
    /// The `webhook-id`: stable across attempts, so receivers can deduplicate.
    pub id: String,
    pub task_id: String,
    pub tenant: String,
    pub url: String,
    /// `task.completed`, `task.failed` or `task.cancelled`.
    pub event: String,
    /// The JSON body, fixed when queued.
    pub payload: String,
    pub now: i64,
}

/// A delivery as stored.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Delivery {
    pub id: String,
    pub task_id: String,
    #[serde(skip)]
    pub tenant: String,
    pub url: String,
    pub event: String,
    #[serde(skip)]
    pub payload: String,
    /// `pending`, `delivered` or `failed` (given up).
    pub status: String,
    /// Attempts made so far.
    #[serde(rename = "attempts_made")]
    pub attempts: i64,
    pub next_at: i64,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub created_at: i64,
    pub delivered_at: Option<i64>,
}

/// One attempt's outcome, recorded by the lease's owner (`RecordWrite::webhook_attempt`).
#[derive(Clone, Debug)]
pub struct AttemptOutcome<'a> {
    pub delivery_id: &'a str,
    pub owner: &'a str,
    pub at: i64,
    /// The receiver's HTTP status, if it answered.
    pub status: Option<i64>,
    /// Why it failed, if it did.
    pub error: Option<String>,
    pub duration_ms: i64,
    /// What happens next.
    pub next: AttemptNext,
}

/// After an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptNext {
    Delivered,
    RetryAt(i64),
    GiveUp,
}

/// One stored attempt (`GET /v1/tasks/{id}/webhooks`).
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Attempt {
    pub at: i64,
    pub status: Option<i64>,
    pub error: Option<String>,
    pub duration_ms: i64,
}

/// The columns of `webhook_deliveries` that make a [`Delivery`].
const DELIVERY_COLS: &str = "id, task_id, tenant, url, event, payload, status, attempts, \
     next_at, last_status, last_error, created_at, delivered_at";

on_both_drivers! {
    fn delivery_from_row(row: &DbRow) -> StoreResult<Delivery> {
        Ok(Delivery {
            id: row.try_get("id")?,
            task_id: row.try_get("task_id")?,
            tenant: row.try_get("tenant")?,
            url: row.try_get("url")?,
            event: row.try_get("event")?,
            payload: row.try_get("payload")?,
            status: row.try_get("status")?,
            attempts: i64::from(row.try_get::<Count, _>("attempts")?),
            next_at: row.try_get("next_at")?,
            last_status: row.try_get::<Option<Count>, _>("last_status")?.map(i64::from),
            last_error: row.try_get("last_error")?,
            created_at: row.try_get("created_at")?,
            delivered_at: row.try_get("delivered_at")?,
        })
    }

    /// See [`crate::StoreRead::webhook_open_tasks`]; the condition is the partial
    /// index's, word for word (SQLite uses a partial index only then).
    pub(crate) async fn webhook_open_tasks(
        pool: &Pool,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<(i64, String, String, i64)>> {
        let rows = sqlx::query(
            "SELECT seq, tenant, id, webhook_ends FROM tasks t \
             WHERE callback_url IS NOT NULL AND webhook_done = 0 AND seq > $1 \
               AND NOT EXISTS (SELECT 1 FROM units u WHERE u.task_id = t.id \
                   AND u.status NOT IN ('completed', 'failed', 'cancelled') \
                   AND NOT (u.status = 'succeeded' AND u.next_at = $3)) \
             ORDER BY seq LIMIT $2",
        )
        .bind(after)
        .bind(i64::from(limit))
        .bind(slotd_core::model::FINALIZE_PARKED_AT)
        .fetch_all(pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get("seq")?,
                    row.try_get("tenant")?,
                    row.try_get("id")?,
                    i64::from(row.try_get::<Count, _>("webhook_ends")?),
                ))
            })
            .collect()
    }

    /// See [`crate::RecordWrite::webhook_enqueue_end`]. The delivery goes in whatever the
    /// task's count (its id is the end's own: a second sweep of the same end adds nothing);
    /// the task is closed only at the count the sweep read, so a sweep that read an end
    /// before a retry leaves the reopened task open.
    pub(crate) async fn webhook_enqueue_end(
        pool: &Pool,
        d: &NewDelivery,
        ends: i64,
    ) -> StoreResult<bool> {
        let mut tx = pool.begin().await?;
        sqlx::query(
            "INSERT INTO webhook_deliveries \
                 (id, task_id, tenant, url, event, payload, status, next_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $7) ON CONFLICT (id) DO NOTHING",
        )
        .bind(&d.id)
        .bind(&d.task_id)
        .bind(&d.tenant)
        .bind(&d.url)
        .bind(&d.event)
        .bind(&d.payload)
        .bind(d.now)
        .execute(&mut *tx)
        .await?;
        let closed = sqlx::query(
            "UPDATE tasks SET webhook_done = 1 WHERE id = $1 AND webhook_ends = $2",
        )
        .bind(&d.task_id)
        .bind(ends)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(closed > 0)
    }

    /// Reopen task `id`'s completion webhook for its next end (inside the retry that moved
    /// its units): not done, one more end counted.
    pub(crate) async fn webhook_reopen(conn: &mut Conn, id: &str) -> StoreResult<()> {
        sqlx::query(
            "UPDATE tasks SET webhook_done = 0, webhook_ends = webhook_ends + 1 WHERE id = $1",
        )
        .bind(id)
        .execute(conn)
        .await?;
        Ok(())
    }

    /// See [`crate::RecordWrite::webhook_claim`]. The lease condition is in the update's
    /// own `WHERE` too: of two instances picking the same delivery, the second finds it taken.
    pub(crate) async fn webhook_claim(
        pool: &Pool,
        owner: &str,
        lease_until: i64,
        now: i64,
        limit: u32,
    ) -> StoreResult<Vec<Delivery>> {
        let free = "status = 'pending' AND next_at <= $3 \
             AND (lease_until IS NULL OR lease_until <= $3)";
        let rows = sqlx::query(&format!(
            "UPDATE webhook_deliveries SET lease_owner = $1, lease_until = $2 \
             WHERE id IN (SELECT id FROM webhook_deliveries WHERE {free} \
                          ORDER BY next_at LIMIT $4) AND {free} \
             RETURNING {DELIVERY_COLS}"
        ))
        .bind(owner)
        .bind(lease_until)
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
        rows.iter().map(delivery_from_row).collect()
    }

    /// See [`crate::RecordWrite::webhook_attempt`].
    pub(crate) async fn webhook_attempt(pool: &Pool, a: &AttemptOutcome<'_>) -> StoreResult<bool> {
        let (status, next_at, delivered_at) = match a.next {
            AttemptNext::Delivered => ("delivered", a.at, Some(a.at)),
            AttemptNext::RetryAt(at) => ("pending", at, None),
            AttemptNext::GiveUp => ("failed", a.at, None),
        };
        let mut tx = pool.begin().await?;
        let held = sqlx::query(
            "UPDATE webhook_deliveries SET status = $3, attempts = attempts + 1, next_at = $4, \
                 last_status = $5, last_error = $6, delivered_at = $7, \
                 lease_owner = NULL, lease_until = NULL \
             WHERE id = $1 AND lease_owner = $2 AND status = 'pending'",
        )
        .bind(a.delivery_id)
        .bind(a.owner)
        .bind(status)
        .bind(next_at)
        .bind(a.status)
        .bind(&a.error)
        .bind(delivered_at)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if held == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO webhook_attempts (delivery_id, at, status, error, duration_ms) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(a.delivery_id)
        .bind(a.at)
        .bind(a.status)
        .bind(&a.error)
        .bind(a.duration_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// See [`crate::StoreRead::webhook_list`].
    pub(crate) async fn webhook_list(
        pool: &Pool,
        task_id: &str,
    ) -> StoreResult<Vec<(Delivery, Vec<Attempt>)>> {
        let rows = sqlx::query(&format!(
            "SELECT {DELIVERY_COLS} FROM webhook_deliveries WHERE task_id = $1 ORDER BY created_at, id"
        ))
        .bind(task_id)
        .fetch_all(pool)
        .await?;
        let mut out = Vec::new();
        for row in &rows {
            let d = delivery_from_row(row)?;
            let attempts = sqlx::query(
                "SELECT at, status, error, duration_ms FROM webhook_attempts \
                 WHERE delivery_id = $1 ORDER BY id",
            )
            .bind(&d.id)
            .fetch_all(pool)
            .await?
            .iter()
            .map(|r| {
                Ok(Attempt {
                    at: r.try_get("at")?,
                    status: r.try_get::<Option<Count>, _>("status")?.map(i64::from),
                    error: r.try_get("error")?,
                    duration_ms: r.try_get("duration_ms")?,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
            out.push((d, attempts));
        }
        Ok(out)
    }

    /// See [`crate::StoreRead::webhook_recent`].
    pub(crate) async fn webhook_recent(
        pool: &Pool,
        tenant: Option<&str>,
        status: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<Delivery>> {
        let rows = sqlx::query(&format!(
            "SELECT {DELIVERY_COLS} FROM webhook_deliveries \
             WHERE {} AND (CAST($2 AS TEXT) IS NULL OR status = $2) \
             ORDER BY created_at DESC, id DESC LIMIT $3",
            tenant_scope(tenant)
        ))
        .bind(tenant)
        .bind(status)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
        rows.iter().map(delivery_from_row).collect()
    }
}
