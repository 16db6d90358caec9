//! The hot cache against the real Redis, each test under its own key prefix.

use super::*;
use crate::keyspace::testing;

#[tokio::test]
async fn fill_then_hit_then_invalidate_misses() {
    let keys = testing::fresh();
    let hot = HotStatus::new(Some(keys.clone()), Default::default());
    let l = hot.lookup("t1").await.expect("redis answers");
    assert!(l.snapshot.is_none());
    assert!(hot.fill("t1", "ten", &l.generation, r#"{"v":1}"#).await);
    let l = hot.lookup("t1").await.expect("redis answers");
    assert_eq!(l.snapshot, Some(("ten".into(), r#"{"v":1}"#.into())));
    hot.invalidate(["t1"]).await;
    assert!(hot.lookup("t1").await.expect("redis").snapshot.is_none());
    testing::flush(&keys).await;
}

#[tokio::test]
async fn a_read_that_raced_a_commit_is_not_stored() {
    let keys = testing::fresh();
    let hot = HotStatus::new(Some(keys.clone()), Default::default());
    // A reader looks up (miss), reads the database (old state)…
    let seen = hot.lookup("t1").await.expect("redis").generation;
    // …meanwhile a writer commits and invalidates…
    hot.invalidate(["t1"]).await;
    // …and the reader's old view must not become the snapshot.
    assert!(!hot.fill("t1", "ten", &seen, r#"{"old":true}"#).await);
    assert!(hot.lookup("t1").await.expect("redis").snapshot.is_none());
    testing::flush(&keys).await;
}

#[tokio::test]
async fn a_flush_is_a_cold_cache_and_disabled_never_hits() {
    let keys = testing::fresh();
    let hot = HotStatus::new(Some(keys.clone()), Default::default());
    let g = hot.lookup("t1").await.expect("redis").generation;
    assert!(hot.fill("t1", "ten", &g, "{}").await);
    testing::flush(&keys).await;
    assert!(hot.lookup("t1").await.expect("redis").snapshot.is_none());
    let off = HotStatus::disabled();
    assert!(off.lookup("t1").await.is_none());
    assert!(!off.fill("t1", "ten", "", "{}").await);
}
