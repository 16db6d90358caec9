//! What authenticated callbacks need from the store: the host key, one per name, shared by
//! every caller (concurrent creators agree on one); and updates guarded by submit attempt, so a
//! callback for one attempt never lands on a resubmission.

use std::collections::HashSet;

use super::fixtures::{POOL, T0, VIDEO, create, submit, task, update};
use crate::DynStore;
use slotd_core::model::UnitStatus;

const RACERS: u8 = 8;

pub(crate) async fn host_key_shared(store: DynStore) {
    // Racers each offer their own candidate: exactly one candidate wins and all see it.
    let racers = (0..RACERS).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .host_key_get_or_create("callbacks", &[i; 32], T0)
                .await
        })
    });
    let mut seen = HashSet::new();
    for r in futures::future::join_all(racers).await {
        seen.insert(r.unwrap().unwrap());
    }
    assert_eq!(seen.len(), 1, "concurrent callers got different keys");
    let key = seen.into_iter().next().unwrap();
    assert_eq!(key.len(), 32);
    assert!(
        (0..RACERS).any(|i| key == [i; 32]),
        "the stored key is one of the candidates"
    );
    // Later callers (another instance, a restart) get the same key whatever they offer.
    let again = store
        .host_key_get_or_create("callbacks", &[0xAA; 32], T0 + 1)
        .await
        .unwrap();
    assert_eq!(again, key);
    // Another name is another key.
    let other = store
        .host_key_get_or_create("other", &[0xBB; 32], T0 + 2)
        .await
        .unwrap();
    assert_eq!(other, vec![0xBB; 32]);
}

pub(crate) async fn apply_guard_submit_attempt(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 1, 0)).await;
    submit(&store, &["t1-u0"], T0 + 1).await;
    // Guarded by another attempt's marker: skipped, no event.
    let mut stale = update("t1-u0", UnitStatus::Submitted, UnitStatus::Succeeded);
    stale.from_submitted_at = Some(T0);
    stale.result = Some("{}".into());
    let events = store.unit_events("t1").await.unwrap().len();
    let report = store
        .unit_apply(&[stale.clone()], T0 + 2, None)
        .await
        .unwrap();
    assert_eq!(report.skipped, vec!["t1-u0".to_string()]);
    assert!(report.applied.is_empty());
    let u = store.task_units("t1").await.unwrap().swap_remove(0);
    assert_eq!((u.status, u.result), (UnitStatus::Submitted, None));
    assert_eq!(store.unit_events("t1").await.unwrap().len(), events);
    // Guarded by the current one: applied.
    stale.from_submitted_at = Some(T0 + 1);
    let report = store.unit_apply(&[stale], T0 + 3, None).await.unwrap();
    assert_eq!(report.applied, vec!["t1-u0".to_string()]);
    let u = store.task_units("t1").await.unwrap().swap_remove(0);
    assert_eq!(u.status, UnitStatus::Succeeded);
}
