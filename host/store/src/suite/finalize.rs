//! Finalization leases: claims of succeeded units, rescue of expired leases, completion and
//! release by the lease's owner only; renewal; giving up (parked) and the retry that
//! finalizes again.

use super::*;
use crate::FinalizeRelease;
use slotd_core::model::FINALIZE_PARKED_AT;

/// A pass's completions in one write: each unit gets its own result and event, a unit whose
/// lease another finalizer holds (or that is not finalizing at all) is left as it is, and
/// the ids returned are exactly the completed ones.
pub(crate) async fn finalize_complete_many(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 3, 0)).await;
    for id in ["t1-u0", "t1-u1", "t1-u2"] {
        succeed(&store, id).await;
    }
    let a = store
        .unit_claim_finalize("a", T0 + 1000, T0 + 10, 2)
        .await
        .unwrap();
    assert_eq!(ids(&a), ["t1-u0", "t1-u1"]);
    let b = store
        .unit_claim_finalize("b", T0 + 1000, T0 + 10, 2)
        .await
        .unwrap();
    assert_eq!(ids(&b), ["t1-u2"]);
    let row = |id: &str, r: &str| (id.to_string(), r.to_string());
    let mut done = store
        .unit_complete_many(
            "a",
            &[
                row("t1-u0", r#"{"object_key":"k0"}"#),
                row("t1-u2", r#"{"object_key":"stolen"}"#),
                row("t1-u1", r#"{"object_key":"k1"}"#),
                row("t9-u0", "{}"),
            ],
            T0 + 20,
        )
        .await
        .unwrap();
    done.sort();
    assert_eq!(done, ["t1-u0", "t1-u1"]);
    for (i, want) in [
        (0, (UnitStatus::Completed, r#"{"object_key":"k0"}"#)),
        (1, (UnitStatus::Completed, r#"{"object_key":"k1"}"#)),
        (2, (UnitStatus::Finalizing, r#"{"url":"https://x/y.mp4"}"#)),
    ] {
        let u = unit(&store, "t1", i).await;
        assert_eq!(
            (u.status, u.result.as_deref().unwrap_or("")),
            want,
            "unit {i}"
        );
    }
    let mut completed: Vec<String> = store
        .unit_events("t1")
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.to_status == "completed")
        .map(|e| format!("{} {}", e.unit_id, e.detail.unwrap_or_default()))
        .collect();
    completed.sort();
    assert_eq!(
        completed,
        ["t1-u0 finalized by a", "t1-u1 finalized by a"],
        "one event per completed unit"
    );
    assert!(
        store
            .unit_complete_many("a", &[], T0 + 21)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .unit_complete("t1-u2", "b", "{}", T0 + 22)
            .await
            .unwrap(),
        "b's lease held throughout"
    );
}

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
            .unit_finalize_release(release("t1-u0", "b", "{}", T0 + 50, false), T0 + 11)
            .await
            .unwrap()
    );
    let err = r#"{"message":"download 503"}"#;
    assert!(
        store
            .unit_finalize_release(release("t1-u0", "a", err, T0 + 50, false), T0 + 11)
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
    // The attempts are spent: the unit stays `succeeded` with its provider result and the
    // reason, parked where no finalizer claims it.
    assert!(
        store
            .unit_finalize_release(release("t1-u0", "a", err, 0, true), T0 + 60)
            .await
            .unwrap()
    );
    let u = unit(&store, "t1", 0).await;
    assert_eq!(
        (u.status, u.next_at, u.error.as_deref(), u.result.as_deref()),
        (
            UnitStatus::Succeeded,
            FINALIZE_PARKED_AT,
            Some(err),
            Some(r#"{"url":"https://x/y.mp4"}"#)
        )
    );
    assert!(u.finalize_parked());
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

/// A lease is renewed only by its owner, and a renewed lease keeps other finalizers out past
/// its first expiry.
pub(crate) async fn finalize_renew(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 1, 0)).await;
    succeed(&store, "t1-u0").await;
    assert!(
        !store
            .unit_finalize_renew("t1-u0", "a", T0 + 500)
            .await
            .unwrap(),
        "not finalizing yet"
    );
    let claimed = store
        .unit_claim_finalize("a", T0 + 100, T0 + 10, 10)
        .await
        .unwrap();
    assert_eq!(ids(&claimed), ["t1-u0"]);
    assert!(
        !store
            .unit_finalize_renew("t1-u0", "b", T0 + 500)
            .await
            .unwrap(),
        "b holds no lease"
    );
    assert!(
        store
            .unit_finalize_renew("t1-u0", "a", T0 + 500)
            .await
            .unwrap()
    );
    assert!(
        store
            .unit_claim_finalize("b", T0 + 900, T0 + 400, 10)
            .await
            .unwrap()
            .is_empty(),
        "the renewed lease holds past its first expiry"
    );
    // Left to expire, the lease is taken over; the old owner's renewal then fails.
    let rescued = store
        .unit_claim_finalize("b", T0 + 900, T0 + 500, 10)
        .await
        .unwrap();
    assert_eq!(ids(&rescued), ["t1-u0"]);
    assert!(
        !store
            .unit_finalize_renew("t1-u0", "a", T0 + 1000)
            .await
            .unwrap()
    );
    assert!(
        store
            .unit_finalize_renew("t1-u0", "b", T0 + 1000)
            .await
            .unwrap()
    );
}

/// Retry finalizes a parked unit again (attempts reset, provider job and result kept, no new
/// submit attempt) besides resubmitting failed units; the task reads `failed` while a unit is
/// parked.
pub(crate) async fn finalize_give_up_then_retry(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 3, 0)).await;
    succeed(&store, "t1-u0").await;
    // unit 1: failed at the provider; unit 2: completed.
    submit(&store, &["t1-u1"], T0 + 3).await;
    apply(
        &store,
        update("t1-u1", UnitStatus::Submitted, UnitStatus::Failed),
        T0 + 4,
    )
    .await;
    succeed(&store, "t1-u2").await;
    let claimed = store
        .unit_claim_finalize("a", T0 + 100, T0 + 10, 10)
        .await
        .unwrap();
    assert_eq!(ids(&claimed), ["t1-u0", "t1-u2"]);
    assert!(
        store
            .unit_complete("t1-u2", "a", "{}", T0 + 11)
            .await
            .unwrap()
    );
    let err = r#"{"code":"finalize","message":"object store: not a directory"}"#;
    assert!(
        store
            .unit_finalize_release(release("t1-u0", "a", err, 0, true), T0 + 12)
            .await
            .unwrap()
    );

    let t = store.task_get("acme", "t1").await.unwrap().unwrap();
    assert_eq!(
        (t.counts.succeeded, t.counts.parked, t.counts.failed),
        (1, 1, 1)
    );
    assert_eq!(
        t.counts.task_status(),
        slotd_core::model::TaskStatus::Failed
    );

    assert_eq!(
        store
            .task_retry_failed("acme", "t1", T0 + 20)
            .await
            .unwrap(),
        Some(2)
    );
    let u0 = unit(&store, "t1", 0).await;
    assert_eq!(
        (u0.status, u0.next_at, u0.submit_attempt),
        (UnitStatus::Succeeded, T0 + 20, 0)
    );
    assert_eq!(u0.result.as_deref(), Some(r#"{"url":"https://x/y.mp4"}"#));
    assert!(!u0.finalize_parked());
    let u1 = unit(&store, "t1", 1).await;
    assert_eq!((u1.status, u1.submit_attempt), (UnitStatus::Pending, 1));
    let t = store.task_get("acme", "t1").await.unwrap().unwrap();
    assert_eq!(t.counts.parked, 0);
    assert_eq!(
        t.counts.task_status(),
        slotd_core::model::TaskStatus::Running
    );

    // Due again, with its attempts reset: the claim starts finalization attempt 1.
    let again = store
        .unit_claim_finalize("b", T0 + 200, T0 + 20, 10)
        .await
        .unwrap();
    assert_eq!(ids(&again), ["t1-u0"]);
    assert_eq!(again[0].attempts, 1);
    assert!(
        store
            .unit_complete("t1-u0", "b", r#"{"object_key":"k"}"#, T0 + 21)
            .await
            .unwrap()
    );
    let events = store.unit_events("t1").await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.detail.as_deref() == Some("retry requested: finalize again")),
        "the retry is in the event log"
    );
    // Nothing parked: a second retry only resubmits failed units (none now).
    assert_eq!(
        store
            .task_retry_failed("acme", "t1", T0 + 30)
            .await
            .unwrap(),
        Some(0)
    );
}

fn release<'a>(
    id: &'a str,
    owner: &'a str,
    error: &'a str,
    next_at: i64,
    give_up: bool,
) -> FinalizeRelease<'a> {
    FinalizeRelease {
        id,
        owner,
        error,
        next_at,
        give_up,
    }
}
