//! Fencing tokens (docs/operations.md): a stale token is refused with nothing written, a newer one
//! is accepted and raises the pool's token, concurrent advances leave the highest.

use super::fixtures::{T0, VIDEO, create, ids, task, types, unit, update};
use crate::{DynStore, Fence, StoreError};
use slotd_core::model::UnitStatus;

const POOL: &str = super::POOL;

fn fence(pool: &str, token: i64) -> Fence {
    Fence {
        pool: pool.into(),
        token,
    }
}

/// Assert `err` is a refusal of `token` for `POOL` with `current` in place.
#[track_caller]
fn assert_fenced(err: StoreError, token: i64, current: i64) {
    match err {
        StoreError::Fenced {
            pool,
            token: t,
            current: c,
        } => assert_eq!((pool.as_str(), t, c), (POOL, token, current)),
        other => panic!("expected Fenced({token} < {current}), got {other:?}"),
    }
}

pub(crate) async fn fence_stale_refused(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 2, 0)).await;
    assert!(store.pool_fence_advance(POOL, 5).await.unwrap());
    let before = store.unit_events("t1").await.unwrap().len();

    // A submit marker with an older token: refused, the units still pending.
    let asked = types(&["t1-u0", "t1-u1"]);
    let err = store
        .unit_mark_submitted(&asked, T0 + 1, T0 + 1, Some(&fence(POOL, 4)))
        .await
        .unwrap_err();
    assert_fenced(err, 4, 5);
    for i in 0..2 {
        assert_eq!(unit(&store, "t1", i).await.status, UnitStatus::Pending);
    }

    // Guarded updates with an older token: refused as a whole, nothing applied.
    let mut cancel = update("t1-u0", UnitStatus::Pending, UnitStatus::Cancelled);
    cancel.detail = Some("stale leader".into());
    let err = store
        .unit_apply(&[cancel], T0 + 2, Some(&fence(POOL, 1)))
        .await
        .unwrap_err();
    assert_fenced(err, 1, 5);
    assert_eq!(unit(&store, "t1", 0).await.status, UnitStatus::Pending);
    assert_eq!(store.unit_events("t1").await.unwrap().len(), before);

    // An older advance changes nothing; the current one is an idempotent yes.
    assert!(!store.pool_fence_advance(POOL, 3).await.unwrap());
    assert!(store.pool_fence_advance(POOL, 5).await.unwrap());
    let err = store
        .unit_mark_submitted(&asked, T0 + 3, T0 + 3, Some(&fence(POOL, 3)))
        .await
        .unwrap_err();
    assert_fenced(err, 3, 5);
}

pub(crate) async fn fence_newer_accepted(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 3, 0)).await;
    assert!(store.pool_fence_advance(POOL, 5).await.unwrap());

    // The current token writes.
    let moved = store
        .unit_mark_submitted(&types(&["t1-u0"]), T0 + 1, T0 + 1, Some(&fence(POOL, 5)))
        .await
        .unwrap();
    assert_eq!(ids(&moved), ["t1-u0"]);

    // A pure poll (a statement of its own) is fenced too: an older token writes nothing, the
    // current one writes.
    let mut poll = update("t1-u0", UnitStatus::Submitted, UnitStatus::Submitted);
    poll.polls = Some(3);
    poll.next_at = Some(T0 + 99);
    assert!(poll.is_pure_poll());
    let err = store
        .unit_apply(std::slice::from_ref(&poll), T0 + 2, Some(&fence(POOL, 4)))
        .await
        .unwrap_err();
    assert_fenced(err, 4, 5);
    assert_eq!(unit(&store, "t1", 0).await.polls, 0);
    let report = store
        .unit_apply(&[poll], T0 + 2, Some(&fence(POOL, 5)))
        .await
        .unwrap();
    assert_eq!(report.applied, ["t1-u0"]);
    let polled = unit(&store, "t1", 0).await;
    assert_eq!((polled.polls, polled.next_at), (3, T0 + 99));

    // A newer token writes too, and from then on is the pool's token.
    let report = store
        .unit_apply(
            &[update("t1-u0", UnitStatus::Submitted, UnitStatus::Failed)],
            T0 + 2,
            Some(&fence(POOL, 7)),
        )
        .await
        .unwrap();
    assert_eq!(report.applied, ["t1-u0"]);
    assert!(!store.pool_fence_advance(POOL, 6).await.unwrap());
    let err = store
        .unit_mark_submitted(&types(&["t1-u1"]), T0 + 3, T0 + 3, Some(&fence(POOL, 5)))
        .await
        .unwrap_err();
    assert_fenced(err, 5, 7);
    assert_eq!(unit(&store, "t1", 1).await.status, UnitStatus::Pending);

    // Fences are per pool, and an unfenced write (embedded mode) is never checked.
    let other = store
        .unit_mark_submitted(
            &types(&["t1-u1"]),
            T0 + 4,
            T0 + 4,
            Some(&fence("other:pool", 1)),
        )
        .await
        .unwrap();
    assert_eq!(ids(&other), ["t1-u1"]);
    let unfenced = store
        .unit_mark_submitted(&types(&["t1-u2"]), T0 + 5, T0 + 5, None)
        .await
        .unwrap();
    assert_eq!(ids(&unfenced), ["t1-u2"]);
    // Nothing to write: nothing checked either.
    assert!(
        store
            .unit_apply(&[], T0 + 6, Some(&fence(POOL, 1)))
            .await
            .unwrap()
            .applied
            .is_empty()
    );
}

pub(crate) async fn fence_concurrent_advance_monotonic(store: DynStore) {
    const N: i64 = 40;
    create(&store, task("t1", "acme", VIDEO, POOL, 1, 0)).await;
    // Tokens raced in an interleaved order, each followed by a fenced write of its own token:
    // every refusal names a higher current token, and the highest token wins in the end.
    let order: Vec<i64> = (1..=N).map(|i| (i * 17) % N + 1).collect();
    let racers = order.into_iter().map(|token| {
        let store = store.clone();
        tokio::spawn(async move {
            let advanced = store.pool_fence_advance(POOL, token).await.unwrap();
            let write = store
                .unit_apply(
                    &[update("t1-u0", UnitStatus::Pending, UnitStatus::Pending)],
                    T0 + token,
                    Some(&fence(POOL, token)),
                )
                .await;
            (token, advanced, write)
        })
    });
    for r in futures::future::join_all(racers).await {
        let (token, advanced, write) = r.unwrap();
        match write {
            Ok(_) => {}
            Err(StoreError::Fenced { current, .. }) => assert!(current > token),
            Err(other) => panic!("token {token}: unexpected {other:?}"),
        }
        if token == N {
            assert!(advanced, "the highest token always advances");
        }
    }
    assert!(!store.pool_fence_advance(POOL, N - 1).await.unwrap());
    assert!(store.pool_fence_advance(POOL, N).await.unwrap());
    let err = store
        .unit_apply(
            &[update("t1-u0", UnitStatus::Pending, UnitStatus::Pending)],
            T0,
            Some(&fence(POOL, N - 1)),
        )
        .await
        .unwrap_err();
    assert_fenced(err, N - 1, N);
}
