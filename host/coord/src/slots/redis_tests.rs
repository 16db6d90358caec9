//! Redis slots against the real Redis (`SLOTD_TEST_REDIS_URL`, else 127.0.0.1:6379), each test
//! under its own key prefix.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use super::*;
use crate::keyspace::testing;
use crate::slots::WindowCheck;

fn ids(r: std::ops::Range<u32>) -> Vec<String> {
    r.map(|i| format!("u{i}")).collect()
}

/// A store whose pool `p` is reconciled (empty), ready to grant.
async fn ready(keys: &Arc<Keyspace>) -> RedisSlots {
    let s = RedisSlots::new(keys.clone());
    s.reconcile("p", &[], Rebuild::default())
        .await
        .expect("reconcile");
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
                let (used, g) = s
                    .acquire_counted("p", &want, MAX, &[], 0, None)
                    .await
                    .expect("acquire");
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
    let mut r = s
        .reconcile("p", &ids(2..6), Rebuild::default())
        .await
        .expect("reconcile");
    r.restored.sort();
    assert_eq!(r.restored, ids(2..6));
    assert!(r.freed.is_empty());
    assert_eq!(s.used("p").await.ok(), Some(4));
    // And reconciliation frees what the database no longer has submitted.
    let r = s
        .reconcile("p", &ids(5..6), Rebuild::default())
        .await
        .expect("reconcile");
    assert_eq!(r.freed.len(), 3);
    assert_eq!(s.used("p").await.ok(), Some(1));
    testing::flush(&keys).await;
}

/// A rebuild read from the database before a newer lease holder granted would take that
/// holder's grants out of the set (a paused scheduler resuming mid-rebuild, as CI saw: 19
/// submitted in a pool of 18). Under an older token it is refused and changes nothing; under
/// the current one it goes through.
#[tokio::test]
async fn a_rebuild_under_an_older_lease_token_is_refused() {
    let keys = testing::fresh();
    let old = crate::lease::Leases::new(keys.clone(), "old", std::time::Duration::from_millis(50));
    let crate::lease::Acquire::Won { token: t_old, .. } = old.acquire("p", 1).await.expect("lease")
    else {
        panic!("the free lease is won");
    };
    let s = ready(&keys).await;
    // The old holder read "nothing submitted"; the lease runs out and a new holder takes it.
    let newer = crate::lease::Leases::new(
        testing::fresh_like(&keys),
        "new",
        std::time::Duration::from_secs(10),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let t_new = loop {
        if let crate::lease::Acquire::Won { token, .. } =
            newer.acquire("p", 2).await.expect("lease")
        {
            break token;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the old lease never ran out"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(t_new > t_old);
    // The new holder grants two units and marks them.
    assert_eq!(
        s.acquire("p", &ids(0..2), 2).await.expect("acquire").len(),
        2
    );
    // The old holder's rebuild, from its earlier read, is refused; the set keeps the grants.
    let stale = Rebuild {
        fence: Some(("p", t_old)),
        only_if_lost: false,
    };
    let refused = s.reconcile("p", &[], stale).await;
    assert!(
        matches!(&refused, Err(SlotError::Fenced { pool, token, current }) if pool == "p" && *token == t_old && *current == t_new),
        "{refused:?}"
    );
    assert!(
        refused
            .as_ref()
            .err()
            .is_some_and(|e| e.to_string().contains("older than"))
    );
    assert_eq!(s.used("p").await.ok(), Some(2));
    // An account's set is fenced by its pool's token too.
    s.reconcile("p@a", &ids(5..6), Rebuild::default())
        .await
        .expect("rebuild p@a");
    let stale = Rebuild {
        fence: Some(("p", t_old)),
        only_if_lost: false,
    };
    assert!(matches!(
        s.reconcile("p@a", &[], stale).await,
        Err(SlotError::Fenced { .. })
    ));
    assert_eq!(s.used("p@a").await.ok(), Some(1));
    // The current holder's rebuild goes through.
    let current = Rebuild {
        fence: Some(("p", t_new)),
        only_if_lost: false,
    };
    let r = s
        .reconcile("p", &ids(1..2), current)
        .await
        .expect("rebuild");
    assert_eq!(r.freed, ids(0..1));
    assert_eq!(s.used("p").await.ok(), Some(1));
    testing::flush(&keys).await;
}

/// A lost set of a pool another process drives is rebuilt only while it is still lost: once
/// that process rebuilt it and granted, a rebuild from an older read leaves it alone.
#[tokio::test]
async fn a_rebuild_only_if_lost_keeps_a_set_rebuilt_since() {
    let keys = testing::fresh();
    let s = RedisSlots::new(keys.clone());
    let lost = Rebuild {
        fence: None,
        only_if_lost: true,
    };
    // Lost (never built): rebuilt.
    let r = s.reconcile("p", &ids(0..1), lost).await.expect("rebuild");
    assert_eq!(r.restored, ids(0..1));
    // Its driver grants more; a rebuild from an earlier read is kept out.
    s.acquire("p", &ids(1..3), 5).await.expect("acquire");
    let r = s.reconcile("p", &ids(0..1), lost).await.expect("kept");
    assert_eq!(r, Reconciled::default());
    assert_eq!(s.used("p").await.ok(), Some(3));
    testing::flush(&keys).await;
}

/// A tick reads every account's set in one call (the counts hash): each count as `used` gives
/// it, a set never reconciled (or lost) as `None`, in the order asked.
#[tokio::test]
async fn used_many_reads_each_set_in_one_call() {
    let keys = testing::fresh();
    let s = ready(&keys).await;
    s.reconcile("p@b", &ids(10..12), Rebuild::default())
        .await
        .expect("reconcile b");
    s.acquire("p", &ids(0..3), 10).await.expect("acquire");
    let pools = vec!["p@b".to_string(), "p@never".to_string(), "p".to_string()];
    assert_eq!(
        s.used_many(&pools).await.expect("used_many"),
        vec![Some(2), None, Some(3)]
    );
    assert_eq!(
        s.used_many(&[]).await.expect("none"),
        Vec::<Option<u32>>::new()
    );
    // A release moves the count read in one call.
    s.release("p", &ids(0..2)).await.expect("release");
    assert_eq!(
        s.used_many(&pools).await.expect("after release")[2],
        Some(1)
    );
    // A set changed before the counts hash existed (a slotd before it): read on its own.
    let mut conn = keys.conn().await.expect("conn");
    redis::cmd("HDEL")
        .arg(keys.key("slots:counts"))
        .arg(keys.key("slots:p"))
        .query_async::<()>(&mut conn)
        .await
        .expect("hdel");
    assert_eq!(s.used_many(&pools).await.expect("fallback")[2], Some(1));
    // Beyond one call's worth of keys, the answer is still one count per set in order.
    let many: Vec<String> = (0..(IDS_PER_CALL as u32))
        .map(|i| format!("q{i}"))
        .collect();
    s.reconcile(&many[7], &ids(0..5), Rebuild::default())
        .await
        .expect("reconcile q7");
    let counts = s.used_many(&many).await.expect("many");
    assert_eq!(counts.len(), many.len());
    assert_eq!(counts[7], Some(5));
    assert_eq!(
        counts.iter().filter(|c| c.is_none()).count(),
        many.len() - 1
    );
    // A flush loses the counts with the sets: nothing is trusted until reconciled.
    testing::flush(&keys).await;
    assert_eq!(
        s.used_many(&pools).await.expect("after flush"),
        vec![None, None, None]
    );
}

#[tokio::test]
async fn unreachable_redis_is_unavailable_not_a_hang() {
    // Nothing listens on port 1.
    let keys = Arc::new(Keyspace::new("redis://127.0.0.1:1", "x:").expect("url"));
    let s = RedisSlots::new(keys);
    assert!(matches!(s.used("p").await, Err(SlotError::Unavailable(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_window_holds_for_concurrent_acquirers_on_two_instances() {
    // 5 creates per window on a pool of 50 slots, 8 acquirers on two instances releasing at
    // once: the slots never bind, the window must.
    let keys = testing::fresh();
    let a = Arc::new(ready(&keys).await);
    let b = Arc::new(RedisSlots::new(testing::fresh_like(&keys)));
    let log = CreateLog {
        key: "p".into(),
        checks: vec![WindowCheck { limit: 5, since: 0 }],
        keep_since: 0,
    };
    let mut joins = Vec::new();
    for t in 0..8u32 {
        let s = if t % 2 == 0 { a.clone() } else { b.clone() };
        let log = log.clone();
        joins.push(tokio::spawn(async move {
            let mut got = 0usize;
            for round in 0..10u32 {
                let want = ids(t * 1000 + round * 2..t * 1000 + round * 2 + 2);
                let g = s
                    .acquire_within(
                        "p",
                        &want,
                        50,
                        std::slice::from_ref(&log),
                        1_000 + i64::from(round),
                        None,
                    )
                    .await
                    .expect("acquire");
                got += g.len();
                s.release("p", &g).await.expect("release");
            }
            got
        }));
    }
    let mut total = 0;
    for j in joins {
        total += j.await.expect("acquirer");
    }
    assert_eq!(total, 5, "exactly the window's five creates were granted");
    let n = a.log_count("p", 0).await.expect("count");
    assert_eq!(n.count, 5);
    assert!(n.oldest.is_some_and(|t| (1_000..1_010).contains(&t)));
    // Forgetting an unused grant makes room; a rebuild adds the record to the log.
    let members: Vec<String> = {
        let mut conn = keys.conn().await.expect("conn");
        redis::cmd("ZRANGE")
            .arg(keys.key("creates:p"))
            .arg(0)
            .arg(0)
            .query_async(&mut conn)
            .await
            .expect("ZRANGE")
    };
    a.log_forget("p", &members).await.expect("forget");
    assert_eq!(a.log_count("p", 0).await.expect("count").count, 4);
    a.log_restore("p", &[("x@7".into(), 7), ("y@9".into(), 9)])
        .await
        .expect("restore");
    // The rebuild adds the record to what the log holds (the 4 grants stay).
    let n = b.log_count("p", 8).await.expect("count");
    assert_eq!((n.count, n.oldest), (5, Some(9)));
    // The provider counts two fewer since 8: the two oldest there go, the one at 7 stays.
    assert_eq!(b.log_trim_oldest("p", 8, 2).await.ok(), Some(2));
    let n = b.log_count("p", 0).await.expect("count");
    assert_eq!((n.count, n.oldest), (4, Some(7)));
    assert_eq!(b.log_count("p", 8).await.expect("count").count, 3);
}

#[tokio::test]
async fn a_grant_passes_the_pools_log_and_its_accounts_and_counts_in_both() {
    let keys = testing::fresh();
    let s = RedisSlots::new(keys.clone());
    s.reconcile("p@a", &[], Rebuild::default())
        .await
        .expect("reconcile");
    s.reconcile("p@b", &[], Rebuild::default())
        .await
        .expect("reconcile");
    let log = |key: &str, limit: u32| CreateLog {
        key: key.into(),
        checks: vec![WindowCheck { limit, since: 0 }],
        keep_since: 0,
    };
    // The pool allows 5, account a 2: a's slot set gets 2; b (no quota of its own) the rest.
    let got = s
        .acquire_within(
            "p@a",
            &ids(0..4),
            10,
            &[log("p", 5), log("p@a", 2)],
            1,
            None,
        )
        .await
        .expect("acquire");
    assert_eq!(got, ids(0..2));
    let got = s
        .acquire_within("p@b", &ids(10..20), 10, &[log("p", 5)], 1, None)
        .await
        .expect("acquire");
    assert_eq!(got, ids(10..13));
    assert_eq!(s.log_count("p", 0).await.expect("count").count, 5);
    assert_eq!(s.log_count("p@a", 0).await.expect("count").count, 2);
}

#[tokio::test]
async fn submissions_are_released_alone() {
    let keys = testing::fresh();
    let s = RedisSlots::new(keys.clone());
    s.reconcile("p", &[], Rebuild::default())
        .await
        .expect("reconcile");
    crate::slots::shared_tests::submissions_are_released_alone(&s).await;
    testing::flush(&keys).await;
}

#[tokio::test]
async fn a_shared_account_lends_idle_slots_and_keeps_a_waiting_members_minimum() {
    let keys = testing::fresh();
    let s = RedisSlots::new(keys.clone());
    for set in ["a", "b"] {
        s.reconcile(set, &[], Rebuild::default())
            .await
            .expect("reconcile");
    }
    crate::slots::shared_tests::borrowing_and_giving_back(&s).await;
    testing::flush(&keys).await;
}

/// Two instances (two connections) granting on the two members at once: the script keeps the
/// account's limit across them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shared_account_holds_its_limit_across_two_instances() {
    let keys = testing::fresh();
    let a = RedisSlots::new(keys.clone());
    for set in ["a", "b"] {
        a.reconcile(set, &[], Rebuild::default())
            .await
            .expect("reconcile");
    }
    let b = RedisSlots::new(testing::fresh_like(&keys));
    crate::slots::shared_tests::never_above_the_limit_under_concurrent_grants([
        Arc::new(a),
        Arc::new(b),
    ])
    .await;
    testing::flush(&keys).await;
}

/// A member set lost (a flush) refuses the other members' grants too, naming the lost set, so
/// that an account is never judged on a count the flush emptied.
#[tokio::test]
async fn a_lost_member_set_refuses_the_shared_grant_naming_it() {
    use crate::slots::OnShared;
    let keys = testing::fresh();
    let s = RedisSlots::new(keys.clone());
    let acct = crate::slots::shared_tests::account();
    s.reconcile("a", &[], Rebuild::default())
        .await
        .expect("reconcile a");
    let on = Some(OnShared {
        account: &acct,
        this: 0,
    });
    match s.acquire_within("a", &ids(0..1), 10, &[], 0, on).await {
        Err(SlotError::NotReconciled(set)) => assert_eq!(set, "b"),
        other => panic!("expected the lost set b, got {other:?}"),
    }
    s.reconcile("b", &ids(50..52), Rebuild::default())
        .await
        .expect("reconcile b");
    // b holds 2 of 5 now: a may take 3.
    let got = s
        .acquire_within("a", &ids(0..5), 10, &[], 0, on)
        .await
        .expect("acquire");
    assert_eq!(got, ids(0..3));
    testing::flush(&keys).await;
}
