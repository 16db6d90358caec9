//! Redis slots against the real Redis (`SLOTD_TEST_REDIS_URL`, else 127.0.0.1:6379), each test
//! under its own key prefix.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use super::*;
use crate::keyspace::testing;

fn ids(r: std::ops::Range<u32>) -> Vec<String> {
    r.map(|i| format!("u{i}")).collect()
}

/// A store whose pool `p` is reconciled (empty), ready to grant.
async fn ready(keys: &Arc<Keyspace>) -> RedisSlots {
    let s = RedisSlots::new(keys.clone());
    s.reconcile("p", &[]).await.expect("reconcile");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cap_holds_for_concurrent_acquirers_on_two_instances() {
    const MAX: u32 = 7;
    let keys = testing::fresh();
    // Two store instances (two connections), as two slotd processes would have.
    let a = Arc::new(ready(&keys).await);
    let b = Arc::new(RedisSlots::new(testing::fresh_like(&keys)));
    let done = Arc::new(AtomicBool::new(false));
    let worst = Arc::new(AtomicU32::new(0));
    // A sampler reading the set directly while the acquirers run.
    let sampler = {
        let keys = keys.clone();
        let done = done.clone();
        let worst = worst.clone();
        tokio::spawn(async move {
            let mut conn = keys.conn().await.expect("conn");
            let mut samples = 0u32;
            while !done.load(Ordering::SeqCst) {
                let n: u32 = redis::cmd("SCARD")
                    .arg(keys.key("slots:p"))
                    .query_async(&mut conn)
                    .await
                    .expect("SCARD");
                worst.fetch_max(n, Ordering::SeqCst);
                samples += 1;
                tokio::task::yield_now().await;
            }
            samples
        })
    };
    let mut joins = Vec::new();
    for t in 0..8u32 {
        let s = if t % 2 == 0 { a.clone() } else { b.clone() };
        joins.push(tokio::spawn(async move {
            let mut got = 0usize;
            for round in 0..40u32 {
                let want = ids(t * 1000 + round * 3..t * 1000 + round * 3 + 3);
                let (used, g) = s.acquire_counted("p", &want, MAX).await.expect("acquire");
                assert!(used <= MAX, "script counted {used} > {MAX}");
                got += g.len();
                tokio::task::yield_now().await;
                s.release("p", &g).await.expect("release");
            }
            got
        }));
    }
    let mut total = 0;
    for j in joins {
        total += j.await.expect("acquirer");
    }
    done.store(true, Ordering::SeqCst);
    let samples = sampler.await.expect("sampler");
    assert!(total > 0, "some acquirer must have been granted a slot");
    assert!(samples > 0, "the sampler must have sampled");
    assert!(worst.load(Ordering::SeqCst) <= MAX, "sampled above the cap");
    assert!(
        worst.load(Ordering::SeqCst) > 0,
        "the sampler saw slots in use"
    );
    assert_eq!(a.used("p").await.ok(), Some(0), "everything released");
    testing::flush(&keys).await;
}

#[tokio::test]
async fn acquire_is_idempotent_per_holder_and_capped() {
    let keys = testing::fresh();
    let s = ready(&keys).await;
    let a = ids(0..3);
    assert_eq!(s.acquire("p", &a, 3).await.ok(), Some(a.clone()));
    assert_eq!(s.acquire("p", &a, 3).await.ok(), Some(a.clone()));
    assert_eq!(s.acquire("p", &ids(3..4), 3).await.ok(), Some(vec![]));
    assert_eq!(s.used("p").await.ok(), Some(3));
    s.release("p", &ids(0..1)).await.expect("release");
    assert_eq!(s.acquire("p", &ids(3..6), 3).await.ok(), Some(ids(3..4)));
    testing::flush(&keys).await;
}

#[tokio::test]
async fn a_flushed_set_refuses_grants_until_reconciled() {
    let keys = testing::fresh();
    let s = ready(&keys).await;
    s.acquire("p", &ids(0..4), 10).await.expect("acquire");
    testing::flush(&keys).await;
    assert!(matches!(
        s.acquire("p", &ids(10..11), 10).await,
        Err(SlotError::NotReconciled(_))
    ));
    assert!(matches!(
        s.used("p").await,
        Err(SlotError::NotReconciled(_))
    ));
    // The database says u2..u5 are submitted: that is the set now.
    let mut r = s.reconcile("p", &ids(2..6)).await.expect("reconcile");
    r.restored.sort();
    assert_eq!(r.restored, ids(2..6));
    assert!(r.freed.is_empty());
    assert_eq!(s.used("p").await.ok(), Some(4));
    // And reconciliation frees what the database no longer has submitted.
    let r = s.reconcile("p", &ids(5..6)).await.expect("reconcile");
    assert_eq!(r.freed.len(), 3);
    assert_eq!(s.used("p").await.ok(), Some(1));
    testing::flush(&keys).await;
}

#[tokio::test]
async fn unreachable_redis_is_unavailable_not_a_hang() {
    // Nothing listens on port 1.
    let keys = Arc::new(Keyspace::new("redis://127.0.0.1:1", "x:").expect("url"));
    let s = RedisSlots::new(keys);
    assert!(matches!(s.used("p").await, Err(SlotError::Unavailable(_))));
}
