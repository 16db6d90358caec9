//! The shared account's rule, run against each slot store (in process and Redis): what a
//! member may take, what is kept for a waiting member, borrowing and giving back as slots free.

use super::{OnShared, Share, SharedAccount, SlotStore};

pub(crate) fn ids(prefix: &str, r: std::ops::Range<u32>) -> Vec<String> {
    r.map(|i| format!("{prefix}{i}")).collect()
}

/// An account of 5: `a` (min 1, max 5) and `b` (min 2, max 3).
pub(crate) fn account() -> SharedAccount {
    SharedAccount {
        name: "acct".into(),
        limit: 5,
        members: vec![
            Share {
                key: "a".into(),
                pool: "pa".into(),
                min: 1,
                max: 5,
            },
            Share {
                key: "b".into(),
                pool: "pb".into(),
                min: 2,
                max: 3,
            },
        ],
    }
}

async fn take(
    s: &dyn SlotStore,
    acct: &SharedAccount,
    this: usize,
    want: &[String],
    now: i64,
) -> Vec<String> {
    let key = acct.members[this].key.clone();
    s.acquire_within(
        &key,
        want,
        100,
        &[],
        now,
        Some(OnShared {
            account: acct,
            this,
        }),
    )
    .await
    .expect("acquire")
}

/// The rule end to end on `s` (whose sets `a` and `b` are ready and empty).
pub(crate) async fn borrowing_and_giving_back(s: &dyn SlotStore) {
    let acct = account();
    let now = 1_000;
    // `a` alone borrows the whole account: `b` has nothing waiting.
    assert_eq!(
        take(s, &acct, 0, &ids("a", 0..10), now).await,
        ids("a", 0..5)
    );
    // `b` gets work: nothing is free, and nothing running is taken from `a`.
    s.set_waiting("acct", "b", now + 10_000)
        .await
        .expect("flag");
    assert_eq!(
        take(s, &acct, 1, &ids("b", 0..3), now).await,
        Vec::<String>::new()
    );
    // A slot of `a` frees: `a` may not take it back while `b` is owed its minimum…
    s.release("a", &ids("a", 0..1)).await.expect("release");
    assert_eq!(
        take(s, &acct, 0, &ids("a", 10..11), now).await,
        Vec::<String>::new()
    );
    // …and `b` gets it.
    assert_eq!(
        take(s, &acct, 1, &ids("b", 0..3), now).await,
        ids("b", 0..1)
    );
    // Two more free: `b` takes them up to its max of 3, not beyond.
    s.release("a", &ids("a", 1..3)).await.expect("release");
    assert_eq!(
        take(s, &acct, 1, &ids("b", 0..5), now).await,
        ids("b", 0..3)
    );
    assert_eq!(s.used("b").await.ok(), Some(3));
    // `a` is owed its minimum too once it waits: `b` above its own min leaves it alone.
    s.release("a", &ids("a", 3..5)).await.expect("release");
    assert_eq!(s.used("a").await.ok(), Some(0));
    s.set_waiting("acct", "a", now + 10_000)
        .await
        .expect("flag");
    s.release("b", &ids("b", 0..1)).await.expect("release");
    assert_eq!(
        take(s, &acct, 1, &ids("b", 5..6), now).await,
        ids("b", 5..6)
    );
    assert_eq!(
        take(s, &acct, 0, &ids("a", 20..30), now).await,
        ids("a", 20..22)
    );
    // `b` keeps one (below its min of 2): while its flag holds, `a` leaves one free for it…
    s.release("b", &ids("b", 1..3)).await.expect("release");
    assert_eq!(
        take(s, &acct, 0, &ids("a", 20..30), now).await,
        ids("a", 20..23)
    );
    // …and once the flag its scheduler stopped renewing lapses, `a` borrows that one too.
    let later = now + 20_000;
    assert_eq!(
        take(s, &acct, 0, &ids("a", 20..30), later).await,
        ids("a", 20..24)
    );
    let used = s.used_many(&["a".into(), "b".into()]).await.expect("used");
    assert_eq!(used, vec![Some(4), Some(1)]);
}

/// Many concurrent grants on both members never put the account above its limit or a member
/// above its max, and every member gets its minimum when it waits.
pub(crate) async fn never_above_the_limit_under_concurrent_grants(
    stores: [std::sync::Arc<dyn SlotStore>; 2],
) {
    let acct = std::sync::Arc::new(account());
    for (i, m) in acct.members.iter().enumerate() {
        stores[i % 2]
            .set_waiting("acct", &m.key, i64::MAX)
            .await
            .expect("flag");
    }
    let mut joins = Vec::new();
    for t in 0..6u32 {
        let s = stores[(t % 2) as usize].clone();
        let acct = acct.clone();
        joins.push(tokio::spawn(async move {
            let this = (t % 2) as usize;
            let key = acct.members[this].key.clone();
            let mut worst = 0u32;
            for round in 0..30u32 {
                let want = ids(&format!("t{t}-"), round * 2..round * 2 + 2);
                let got = s
                    .acquire_within(
                        &key,
                        &want,
                        100,
                        &[],
                        0,
                        Some(OnShared {
                            account: &acct,
                            this,
                        }),
                    )
                    .await
                    .expect("acquire");
                let used = s.used_many(&["a".into(), "b".into()]).await.expect("used");
                let total: u32 = used.iter().map(|n| n.unwrap_or(0)).sum();
                worst = worst.max(total);
                assert!(used[1].unwrap_or(0) <= 3, "b above its max: {used:?}");
                tokio::task::yield_now().await;
                s.release(&key, &got).await.expect("release");
            }
            worst
        }));
    }
    let mut worst = 0;
    for j in joins {
        worst = worst.max(j.await.expect("granter"));
    }
    assert!(worst <= 5, "the account held {worst} > 5");
    assert!(worst > 0, "something was granted");
}

/// Submissions as holders, on `s` (whose set `p` is ready and empty): a unit submitted again
/// is a new holder that takes a slot of its own, a release of its earlier submission frees only
/// that one, and each grant is counted in a create log under the unit's name at its instant
/// (`log_entry`), so a grant that was not used is forgotten by that name.
pub(crate) async fn submissions_are_released_alone(s: &dyn SlotStore) {
    use super::{CreateLog, WindowCheck, holder, log_entry};
    let log = CreateLog {
        key: "p-log".into(),
        checks: vec![WindowCheck {
            limit: 10,
            since: 0,
        }],
        keep_since: 0,
    };
    let first = holder("u1", 1_000);
    let got = s
        .acquire_within(
            "p",
            std::slice::from_ref(&first),
            2,
            std::slice::from_ref(&log),
            1_000,
            None,
        )
        .await
        .expect("acquire");
    assert_eq!(got, std::slice::from_ref(&first));
    // The same grant asked again takes nothing more.
    s.acquire_within("p", std::slice::from_ref(&first), 2, &[], 1_000, None)
        .await
        .expect("acquire again");
    assert_eq!(s.used("p").await.expect("used"), 1);
    // Its next submission is a holder of its own.
    let second = holder("u1", 2_000);
    let got = s
        .acquire_within(
            "p",
            std::slice::from_ref(&second),
            2,
            std::slice::from_ref(&log),
            2_000,
            None,
        )
        .await
        .expect("acquire");
    assert_eq!(got, std::slice::from_ref(&second));
    assert_eq!(s.used("p").await.expect("used"), 2);
    // The late release of the first frees the first alone.
    s.release("p", std::slice::from_ref(&first))
        .await
        .expect("release");
    assert_eq!(s.used("p").await.expect("used"), 1);
    assert_eq!(s.log_count("p-log", 0).await.expect("count").count, 2);
    s.log_forget("p-log", &[log_entry("u1", 2_000)])
        .await
        .expect("forget");
    let left = s.log_count("p-log", 0).await.expect("count");
    assert_eq!((left.count, left.oldest), (1, Some(1_000)));
}
