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
    assert_eq!(a.heartbeat().await.expect("redis"), 1);
    assert_eq!(b.heartbeat().await.expect("redis"), 2);
    b.leave().await.expect("redis");
    assert_eq!(a.heartbeat().await.expect("redis"), 1);
    testing::flush(&keys).await;
}
