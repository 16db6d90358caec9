//! Leases against the real Redis, each test under its own key prefix.

use super::*;
use crate::keyspace::testing;

#[tokio::test]
async fn one_holder_at_a_time_with_increasing_tokens() {
    let keys = testing::fresh();
    let ttl = Duration::from_secs(5);
    let a = Leases::new(keys.clone(), "a", ttl);
    let b = Leases::new(keys.clone(), "b", ttl);
    let t1 = a
        .try_acquire("p", 1)
        .await
        .expect("redis")
        .expect("free lease");
    assert_eq!(b.try_acquire("p", 1).await.expect("redis"), None);
    assert!(a.renew("p").await.expect("redis"));
    assert!(!b.renew("p").await.expect("redis"), "b holds nothing");
    assert!(
        !b.release("p").await.expect("redis"),
        "b cannot drop a's lease"
    );
    assert!(a.release("p").await.expect("redis"));
    let t2 = b
        .try_acquire("p", 1)
        .await
        .expect("redis")
        .expect("released lease");
    assert!(t2 > t1, "tokens increase: {t1} then {t2}");
    assert!(!a.renew("p").await.expect("redis"), "a lost it");
    testing::flush(&keys).await;
}

#[tokio::test]
async fn an_expired_lease_is_taken_over() {
    let keys = testing::fresh();
    let a = Leases::new(keys.clone(), "a", Duration::from_millis(150));
    let b = Leases::new(keys.clone(), "b", Duration::from_millis(150));
    let t1 = a.try_acquire("p", 1).await.expect("redis").expect("free");
    // Poll with a deadline until Redis expires a's lease (a does not renew: it is "paused").
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let t2 = loop {
        if let Some(t) = b.try_acquire("p", 1).await.expect("redis") {
            break t;
        }
        assert!(std::time::Instant::now() < deadline, "lease never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(t2 > t1);
    assert!(
        !a.renew("p").await.expect("redis"),
        "the paused ex-holder cannot renew"
    );
    testing::flush(&keys).await;
}

#[tokio::test]
async fn tokens_keep_increasing_across_a_flush() {
    let keys = testing::fresh();
    let a = Leases::new(keys.clone(), "a", Duration::from_secs(5));
    let t1 = a
        .try_acquire("p", 1_000)
        .await
        .expect("redis")
        .expect("free");
    testing::flush(&keys).await;
    let t2 = a
        .try_acquire("p", 2_000)
        .await
        .expect("redis")
        .expect("free again");
    assert!(t2 > t1, "after a flush: {t1} then {t2}");
    testing::flush(&keys).await;
}

#[tokio::test]
async fn heartbeats_count_live_instances() {
    let keys = testing::fresh();
    let a = Leases::new(keys.clone(), "a", Duration::from_secs(5));
    let b = Leases::new(keys.clone(), "b", Duration::from_secs(5));
    let first = a.heartbeat().await.expect("redis");
    assert_eq!((first.count, first.next_expiry), (1, None));
    let second = b.heartbeat().await.expect("redis");
    assert_eq!(second.count, 2);
    // a announced itself first: it runs out within a lease period.
    let a_expires = second.next_expiry.expect("a is another live instance");
    assert!(a_expires <= Duration::from_secs(5), "{a_expires:?}");
    b.leave().await.expect("redis");
    assert_eq!(a.heartbeat().await.expect("redis").count, 1);
    testing::flush(&keys).await;
}

/// The time a pool spends without a holder is counted between tenures: none on a first take,
/// about nothing on a hand-over by release, the wait after an expiry otherwise; and a pool held
/// by another says how long its lease still runs.
#[tokio::test]
async fn time_without_a_holder_is_counted_between_tenures() {
    let keys = testing::fresh();
    let ttl = Duration::from_millis(200);
    let a = Leases::new(keys.clone(), "a", ttl);
    let b = Leases::new(keys.clone(), "b", ttl);
    let Acquire::Won { unheld, .. } = a.acquire("p", 1).await.expect("redis") else {
        panic!("a free pool is taken");
    };
    assert_eq!(unheld, None, "never held before");
    match b.acquire("p", 1).await.expect("redis") {
        Acquire::Held { expires_in } => assert!(expires_in <= ttl, "{expires_in:?}"),
        won => panic!("a held pool is not taken: {won:?}"),
    }
    assert_eq!(
        lease_view(&keys, "p")
            .await
            .expect("redis")
            .holder
            .as_deref(),
        Some("a")
    );
    // A hand-over by release: the next holder finds the pool free at once.
    assert!(a.release("p").await.expect("redis"));
    let Acquire::Won { unheld, .. } = b.acquire("p", 1).await.expect("redis") else {
        panic!("a released pool is taken");
    };
    let handover = unheld.expect("held before");
    assert!(handover < Duration::from_secs(1), "{handover:?}");
    // b stops renewing (dies): a takes over after the lease ran out, and the wait is counted.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let gap = loop {
        match a.acquire("p", 1).await.expect("redis") {
            Acquire::Won { unheld, .. } => break unheld.expect("held before"),
            Acquire::Held { expires_in } => {
                assert!(std::time::Instant::now() < deadline, "lease never expired");
                // Come back when it runs out, plus a little: this is how the coordinator waits.
                tokio::time::sleep(expires_in + Duration::from_millis(30)).await;
            }
        }
    };
    assert!(gap < Duration::from_secs(1), "{gap:?}");
    let view = lease_view(&keys, "p").await.expect("redis");
    assert_eq!(view.holder.as_deref(), Some("a"));
    let total = Duration::from_millis(view.unheld_ms_total);
    assert_eq!(total, handover + gap, "the total adds the tenures' gaps");
    testing::flush(&keys).await;
}
