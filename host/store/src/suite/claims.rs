//! Claims: the fill order when ids and submission order disagree, and concurrent claimants
//! (racing submit markers and finalization claims over the same units never hand one unit to
//! two of them, and together they take every unit).

use std::collections::HashSet;

use super::fixtures::{POOL, T0, VIDEO, apply, create, ids, task, types, update};
use crate::DynStore;
use slotd_core::model::UnitStatus;

/// Fill order is decided by submission, never by id: tenant `zeta` submits first with ids that
/// sort last, `alpha` after it with ids that sort first, then `zeta` again. Round-robin by
/// rank within each tenant, in order of submission: FIFO alone, "each tenant's first unit,
/// then FIFO" and id order all give other lists.
pub(crate) async fn fill_order_follows_submission_not_ids(store: DynStore) {
    create(&store, task("z9", "zeta", VIDEO, POOL, 3, 0)).await;
    create(&store, task("a1", "alpha", VIDEO, POOL, 2, 0)).await;
    create(&store, task("z0", "zeta", VIDEO, POOL, 1, 0)).await;
    let got = store
        .unit_list_pending(POOL, &types(&[VIDEO]), T0, 100)
        .await
        .unwrap();
    assert_eq!(
        ids(&got),
        ["z9-u0", "a1-u0", "z9-u1", "a1-u1", "z9-u2", "z0-u0"],
        "tenants in turn, each in its own submission order"
    );
}

/// A change applied in the very tick that marked the unit (same `now`) still makes it look
/// touched: the scheduler tells a unit whose marking call may still be running
/// (`submitted_at == updated_at`) from one whose call has answered by that equality, and a
/// unit answered with, say, a retry must not wait out the in-doubt grace.
pub(crate) async fn applied_in_the_marking_tick_looks_touched(store: DynStore) {
    create(&store, task("m1", "acme", VIDEO, POOL, 2, 0)).await;
    let ids = ["m1-u0".to_string(), "m1-u1".to_string()];
    store
        .unit_mark_submitted(&ids, T0 + 5, T0 + 5, None)
        .await
        .unwrap();
    let mut u = update("m1-u0", UnitStatus::Submitted, UnitStatus::Submitted);
    u.next_at = Some(T0 + 1_000);
    apply(&store, u, T0 + 5).await;
    let units = store.task_units("m1").await.unwrap();
    assert!(
        units[0].updated_at > units[0].submitted_at.unwrap_or(i64::MAX),
        "{:?}",
        units[0]
    );
    assert_eq!(
        units[1].submitted_at,
        Some(units[1].updated_at),
        "the other stays untouched"
    );
}

const RACERS: usize = 4;
const UNITS: usize = 40;

pub(crate) async fn concurrent_claims_are_disjoint(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, UNITS, 0)).await;
    let all: Vec<String> = (0..UNITS).map(|i| format!("t1-u{i}")).collect();

    // Every racer asks for every unit: each unit is marked exactly once.
    let markers = (0..RACERS).map(|_| {
        let (store, all) = (store.clone(), all.clone());
        tokio::spawn(async move { store.unit_mark_submitted(&all, T0 + 1, T0 + 1, None).await })
    });
    let mut marked = Vec::new();
    for r in futures::future::join_all(markers).await {
        marked.extend(r.unwrap().unwrap().into_iter().map(|u| u.id));
    }
    let distinct: HashSet<&String> = marked.iter().collect();
    assert_eq!(distinct.len(), marked.len(), "a unit was marked twice");
    // A racer may skip a unit another holds locked, so a unit can be left for a later tick;
    // submit the stragglers so every unit is in play for the finalization race.
    let left: Vec<String> = all
        .iter()
        .filter(|id| !distinct.contains(id))
        .cloned()
        .collect();
    store
        .unit_mark_submitted(&left, T0 + 1, T0 + 1, None)
        .await
        .unwrap();
    let events = store.unit_events("t1").await.unwrap();
    let submits = events.iter().filter(|e| e.to_status == "submitted").count();
    assert_eq!(submits, UNITS, "one submit event per unit");

    // Move them all to succeeded, then race finalization claims in small bites.
    for id in &all {
        succeed_submitted(&store, id).await;
    }
    let claimers = (0..RACERS).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            let owner = format!("f{i}");
            let mut mine = Vec::new();
            loop {
                let got = store
                    .unit_claim_finalize(&owner, T0 + 10_000, T0 + 10, 3)
                    .await
                    .unwrap();
                if got.is_empty() {
                    return mine;
                }
                mine.extend(got.into_iter().map(|u| u.id));
            }
        })
    });
    let mut claimed = Vec::new();
    for r in futures::future::join_all(claimers).await {
        claimed.extend(r.unwrap());
    }
    let distinct: HashSet<&String> = claimed.iter().collect();
    assert_eq!(distinct.len(), claimed.len(), "a unit was claimed twice");
    assert_eq!(claimed.len(), UNITS, "every due unit is claimed by someone");
}

/// `submitted -> succeeded`, due for finalization at `T0 + 10`.
async fn succeed_submitted(store: &DynStore, id: &str) {
    let mut u = update(id, UnitStatus::Submitted, UnitStatus::Succeeded);
    u.result = Some("{}".into());
    u.next_at = Some(T0 + 10);
    apply(store, u, T0 + 2).await;
}
