//! Finalization's writes: a finalizer claims `succeeded` units under a lease
//! (`succeeded -> finalizing`), and ends each either `completed` with its stored artifacts or
//! back to `succeeded` for another attempt (parked once its attempts are spent). The work in
//! between (the handler's `finalize`, downloads into the object store) is the scheduler's.

use slotd_core::model::Unit;
use slotd_store::{FinalizeRelease, StoreResult};

use super::UnitWriter;
use super::follow_up::FollowUps;
use crate::services::Services;

/// Claim up to `limit` units due for finalization for `owner`, leased until `lease_until`.
/// A task's snapshot keeps showing `succeeded` until the unit ends: finalizing is not a
/// change a client acts on.
pub async fn claim_finalize(
    services: &Services,
    owner: &str,
    lease_until: i64,
    now: i64,
    limit: u32,
) -> StoreResult<Vec<Unit>> {
    services
        .units
        .store
        .unit_claim_finalize(owner, lease_until, now, limit)
        .await
}

/// End finalizations `completed`: each unit with its result (its artifacts merged in), for
/// the units `owner` still holds the lease on, in one write. Returns the ids completed; the
/// others' leases were lost and nothing of theirs was written.
pub async fn complete_finalize_many(
    services: &Services,
    owner: &str,
    done: &[(Unit, String)],
    now: i64,
) -> StoreResult<Vec<String>> {
    let rows: Vec<(String, String)> = done
        .iter()
        .map(|(u, result)| (u.id.clone(), result.clone()))
        .collect();
    let completed = services
        .units
        .store
        .unit_complete_many(owner, &rows, now)
        .await?;
    let mut follow = FollowUps::default();
    for (u, _) in done.iter().filter(|(u, _)| completed.contains(&u.id)) {
        follow.task(&u.task_id);
    }
    if !completed.is_empty() {
        follow.task_ended();
        if let Err(e) = follow.run(services).await {
            tracing::debug!(error = %e, "follow-ups of finalizations failed");
        }
    }
    Ok(completed)
}

/// Extend the finalization lease `owner` holds on unit `id` to `lease_until` (a finalizer
/// still at work). `false`: the lease was lost and nothing was written. No follow-up: no
/// reader sees a lease.
pub async fn renew_finalize(
    units: &UnitWriter,
    id: &str,
    owner: &str,
    lease_until: i64,
) -> StoreResult<bool> {
    units
        .store
        .unit_finalize_renew(id, owner, lease_until)
        .await
}

/// Give `unit`'s finalization up for now (back to `succeeded`, due at `release.next_at`) or
/// for good (`release.give_up`: parked until the task is retried), if the lease still holds.
pub async fn release_finalize(
    services: &Services,
    unit: &Unit,
    release: FinalizeRelease<'_>,
    now: i64,
) -> StoreResult<bool> {
    let done = services
        .units
        .store
        .unit_finalize_release(release, now)
        .await?;
    if done {
        // A finalization given up for good parks its unit: its task may have ended.
        task_changed(services, &unit.task_id, release.give_up).await;
    }
    Ok(done)
}

/// The follow-ups of a finalization's end: the task's snapshot goes, and the completion
/// webhooks look at the task when its unit `ended`.
async fn task_changed(services: &Services, task_id: &str, ended: bool) {
    let mut follow = FollowUps::default();
    follow.task(task_id);
    if ended {
        follow.task_ended();
    }
    if let Err(e) = follow.run(services).await {
        tracing::debug!(error = %e, "follow-ups of a finalization failed");
    }
}
