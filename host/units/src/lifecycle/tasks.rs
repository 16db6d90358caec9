//! A client's moves on a whole task: cancel and retry. The API authorizes (the task is the
//! caller's) and calls these; they write and run their follow-ups.

use slotd_core::model::UnitStatus;
use slotd_store::{Cancelled, StoreResult};

use super::follow_up::FollowUps;
use crate::services::Services;

/// Cancel `tenant`'s task `id`: pending, succeeded and finalizing units end `cancelled` now;
/// `submitted` units are marked cancel-requested and end when their provider jobs do (they
/// keep their slots until then, so no slot frees here). `None`: no such task.
pub async fn cancel_task(
    services: &Services,
    tenant: &str,
    id: &str,
    now: i64,
) -> StoreResult<Option<Cancelled>> {
    let Some(cancelled) = services.units.store.task_cancel(tenant, id, now).await? else {
        return Ok(None);
    };
    tracing::info!(
        task_id = %id,
        units = cancelled.units,
        waiting = cancelled.waiting,
        "task cancelled"
    );
    let mut follow = FollowUps::default();
    follow.task(id);
    if cancelled.units > 0 {
        // Units ended now: the task may have ended with them.
        follow.task_ended();
    }
    run(services, follow).await;
    Ok(Some(cancelled))
}

/// Retry `tenant`'s task `id`: its failed units go back to pending with the next submit
/// attempt (their pools wake), and units whose finalization gave up are finalized again (the
/// finalizer wakes). Returns how many units were retried; `None`: no such task.
pub async fn retry_task(
    services: &Services,
    tenant: &str,
    id: &str,
    now: i64,
) -> StoreResult<Option<u32>> {
    let Some(retried) = services
        .units
        .store
        .task_retry_failed(tenant, id, now)
        .await?
    else {
        return Ok(None);
    };
    if retried == 0 {
        return Ok(Some(0));
    }
    let mut follow = FollowUps::default();
    follow.task(id);
    for unit in services.store.task_units(id).await? {
        match unit.status {
            UnitStatus::Pending => follow.wake_pool(&unit.pool),
            UnitStatus::Succeeded => follow.wake_finalizer(),
            _ => {}
        }
    }
    run(services, follow).await;
    tracing::info!(task_id = %id, retried, "failed units retried");
    Ok(Some(retried))
}

/// Run follow-ups that free no slot: nothing in them can fail but a wake, which the tick
/// interval covers.
pub(super) async fn run(services: &Services, follow: FollowUps) {
    if let Err(e) = follow.run(services).await {
        tracing::debug!(error = %e, "follow-ups of a task write failed");
    }
}
