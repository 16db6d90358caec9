//! The submit marker: before any provider request, granted units move `pending -> submitted`
//! without a job id, with their submit attempt (the idempotency key the provider sees) and
//! their account, and their budget reservation in the same transaction. After a crash such
//! a unit is resolved by asking the provider for that key, never by submitting twice.

use std::collections::{BTreeMap, HashMap, HashSet};

use slotd_store::{Fence, Grant, Marked};

use super::LifecycleError;
use super::follow_up::FollowUps;
use crate::services::Services;
use slotd_coord::slots::holder;
use slotd_pools::pool_state::slot_key;

/// What [`mark_submitted`] wrote and gave back.
#[derive(Debug, Default)]
pub struct Submitted {
    pub marked: Marked,
    /// Grants that did not become markers (a unit another writer moved meanwhile, or over its
    /// tenant's budget), by account: their slots are already released.
    pub unused: HashMap<Option<String>, u32>,
}

/// Write the submit markers of `grants` (slots of `pool` already taken for them), due again
/// at `hold` should the call that submits them never answer, fenced by `fence`, then run the
/// follow-ups: the marked units' tasks are running now, so their snapshots go; the slots of
/// the grants that were not marked go back to their slot sets at once, and no pool is woken
/// (the tick that granted them goes on filling).
pub async fn mark_submitted(
    services: &Services,
    pool: &str,
    grants: &[Grant],
    now: i64,
    hold: i64,
    fence: Option<&Fence>,
) -> Result<Submitted, LifecycleError> {
    let marked = services
        .units
        .store
        .unit_mark_granted(grants, now, hold, fence)
        .await?;
    let mut follow = FollowUps::default();
    for u in &marked.units {
        follow.task(&u.task_id);
    }
    let moved: HashSet<&str> = marked.units.iter().map(|u| u.id.as_str()).collect();
    let mut unused: BTreeMap<Option<&str>, Vec<String>> = BTreeMap::new();
    for g in grants
        .iter()
        .filter(|g| !moved.contains(g.unit_id.as_str()))
    {
        unused
            .entry(g.account.as_deref())
            .or_default()
            .push(holder(&g.unit_id, now));
    }
    let mut counts = HashMap::new();
    for (account, ids) in unused {
        counts.insert(
            account.map(str::to_string),
            u32::try_from(ids.len()).unwrap_or(u32::MAX),
        );
        follow.give_back(slot_key(pool, account), ids);
    }
    follow.run(services).await?;
    Ok(Submitted {
        marked,
        unused: counts,
    })
}
