//! Units held back by their tenant's budget (or a spend limit), released when the budget
//! changes: a unit write like any other, so it ends with its follow-ups. The task snapshots
//! go (a task view would still say the units wait for the budget), and the units' pools wake,
//! a route's pools with them, so the fill decides anew at once rather than at the hold's end.

use slotd_store::StoreResult;

use super::follow_up::FollowUps;
use crate::services::Services;

/// Make `tenant`'s held-back units due at `now` and run the follow-ups; how many were held.
pub async fn release_holds(services: &Services, tenant: &str, now: i64) -> StoreResult<usize> {
    let held = services.units.store.unit_release_holds(tenant, now).await?;
    let mut follow = FollowUps::default();
    for (task, pool) in &held {
        follow.task(task);
        follow.wake_pool(pool);
    }
    super::tasks::run(services, follow).await;
    Ok(held.len())
}
