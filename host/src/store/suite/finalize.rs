//! Finalization leases: claims of succeeded units, rescue of expired leases, completion and
//! release by the lease's owner only.

use super::*;

pub(crate) async fn finalize_lease(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 1, 0)).await;
    succeed(&store, "t1-u0").await;
    assert!(
        store
            .unit_claim_finalize("a", T0 + 1000, T0 + 5, 10)
            .await
            .unwrap()
            .is_empty(),
        "not due yet"
    );
    let claimed = store
        .unit_claim_finalize("a", T0 + 1000, T0 + 10, 10)
        .await
        .unwrap();
    assert_eq!(ids(&claimed), ["t1-u0"]);
    assert_eq!(claimed[0].status, UnitStatus::Finalizing);
    assert!(
        store
            .unit_claim_finalize("b", T0 + 2000, T0 + 999, 10)
            .await
            .unwrap()
            .is_empty(),
        "lease held"
    );
    assert!(
        !store
            .unit_complete("t1-u0", "b", "{}", T0 + 999)
            .await
            .unwrap()
    );

    // a dies; its lease expires and b rescues the unit.
    let rescued = store
        .unit_claim_finalize("b", T0 + 3000, T0 + 1000, 10)
        .await
        .unwrap();
    assert_eq!(ids(&rescued), ["t1-u0"]);
    assert!(
        !store
            .unit_complete("t1-u0", "a", "{}", T0 + 1001)
            .await
            .unwrap(),
        "a lost the lease"
    );
    assert!(
        store
            .unit_complete("t1-u0", "b", r#"{"object_key":"k"}"#, T0 + 1002)
            .await
            .unwrap()
    );
    let u = unit(&store, "t1", 0).await;
    assert_eq!(
        (u.status, u.result.as_deref()),
        (UnitStatus::Completed, Some(r#"{"object_key":"k"}"#))
    );
    assert!(
        !store
            .unit_complete("t1-u0", "b", "{}", T0 + 1003)
            .await
            .unwrap(),
        "only once"
    );

    let events = store.unit_events("t1").await.unwrap();
    let tail: Vec<_> = events.iter().rev().take(3).rev().collect();
    assert_eq!(
        tail.iter()
            .map(|e| (e.from_status.as_deref(), e.to_status.as_str()))
            .collect::<Vec<_>>(),
        [
            (Some("succeeded"), "finalizing"),
            (Some("finalizing"), "finalizing"),
            (Some("finalizing"), "completed")
        ]
    );
    assert!(tail[1].detail.as_deref().unwrap_or("").contains("expired"));
}

pub(crate) async fn finalize_release(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 1, 0)).await;
    succeed(&store, "t1-u0").await;
    assert_eq!(
        store
            .unit_claim_finalize("a", T0 + 100, T0 + 10, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        !store
            .unit_finalize_release("t1-u0", "b", "{}", T0 + 50, false, T0 + 11)
            .await
            .unwrap()
    );
    let err = r#"{"message":"download 503"}"#;
    assert!(
        store
            .unit_finalize_release("t1-u0", "a", err, T0 + 50, false, T0 + 11)
            .await
            .unwrap()
    );
    let u = unit(&store, "t1", 0).await;
    assert_eq!(
        (u.status, u.next_at, u.error.as_deref()),
        (UnitStatus::Succeeded, T0 + 50, Some(err))
    );
    assert!(
        store
            .unit_claim_finalize("a", T0 + 100, T0 + 49, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .unit_claim_finalize("a", T0 + 200, T0 + 50, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .unit_finalize_release("t1-u0", "a", err, 0, true, T0 + 60)
            .await
            .unwrap()
    );
    let u = unit(&store, "t1", 0).await;
    assert_eq!(u.status, UnitStatus::Failed);
    assert_eq!(
        store
            .unit_events("t1")
            .await
            .unwrap()
            .last()
            .unwrap()
            .error
            .as_deref(),
        Some(err)
    );
    assert!(
        store
            .unit_claim_finalize("a", T0 + 900, T0 + 800, 10)
            .await
            .unwrap()
            .is_empty()
    );
}
