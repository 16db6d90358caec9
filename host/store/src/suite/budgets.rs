//! Budgets and spend limits under load and at their edges: many submit markers reserving
//! against one budget (or one pool's and one account's spend) at once never reserve past its
//! limit; a settled cost above the estimate counts in full; a unit without a cost estimate
//! reserves nothing, is counted at its settled cost, and takes nothing from a period already
//! spent (docs/accounts-deadlines-budgets.md "Tenant budgets").

use std::collections::HashSet;
use std::sync::Arc;

use super::*;
use crate::{Budget, Grant, SpendLimit, SpendScope, SpendTerms};

const DAY: i64 = 86_400_000;
/// Markers racing for one budget: more than the PostgreSQL pool's connections, so some wait
/// for one while others are inside their transactions.
const RACERS: usize = 24;

fn budget(tenant: &str, limit: f64) -> Budget {
    Budget {
        tenant: tenant.into(),
        limit,
        period_ms: DAY,
        source: "config".into(),
        updated_at: T0,
    }
}

/// A grant of one unit (its first submission), due again at `T0 + 60 s` when refused.
fn grant(unit_id: &str, tenant: &str, estimate: f64) -> Grant {
    Grant {
        unit_id: unit_id.into(),
        tenant: tenant.into(),
        account: None,
        estimate,
        submission: "main-0".into(),
        budget_retry_at: T0 + 60_000,
        quota_pool: None,
        spend: None,
        bind: None,
    }
}

/// A task of `n` units, each estimated at `estimate` (`None`: its handler gives none).
fn costed(id: &str, tenant: &str, n: usize, estimate: Option<f64>) -> NewTask {
    let mut t = task(id, tenant, VIDEO, POOL, n, 0);
    for u in &mut t.units {
        u.cost_estimate = estimate;
    }
    t
}

/// The start of the day containing `T0`.
fn day_start() -> i64 {
    T0 - T0.rem_euclid(DAY)
}

/// Run every grant in a marker of its own, all at once (they start together behind a
/// barrier, on connections opened beforehand); the ids marked and those refused.
async fn race(store: &DynStore, grants: Vec<Grant>) -> (Vec<String>, Vec<String>) {
    // Open the pool's connections first (PostgreSQL opens them lazily), so the markers do not
    // start one connection handshake apart.
    let warm = (0..grants.len()).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { store.ping().await })
    });
    for r in futures::future::join_all(warm).await {
        r.unwrap().unwrap();
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(grants.len()));
    let markers = grants.into_iter().map(|g| {
        let (store, barrier) = (store.clone(), barrier.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            store.unit_mark_granted(&[g], T0 + 1, T0 + 1, None).await
        })
    });
    let (mut marked, mut refused) = (Vec::new(), Vec::new());
    for r in futures::future::join_all(markers).await {
        let m = r.unwrap().unwrap();
        marked.extend(m.units.into_iter().map(|u| u.id));
        refused.extend(m.over_budget);
        refused.extend(m.over_spend);
    }
    (marked, refused)
}

/// 24 markers at once, one unit each, against a tenant's budget of 2.5 with estimates of 0.5:
/// exactly 5 are marked, the ledger reserves 2.5 and no more, the other 19 wait `budget`.
/// (PostgreSQL: the budget row is locked for the check, so the markers take turns; without
/// the lock several read the same total and all fit.)
pub(crate) async fn concurrent_reservations_never_overrun_a_budget(store: DynStore) {
    store.budget_set(&budget("a", 2.5)).await.unwrap();
    create(&store, costed("t1", "a", RACERS, Some(0.5))).await;
    let grants = (0..RACERS)
        .map(|i| grant(&format!("t1-u{i}"), "a", 0.5))
        .collect();
    let (marked, refused) = race(&store, grants).await;
    let usage = store.budget_usage("a", DAY, T0 + 2).await.unwrap();
    assert!(
        usage.reserved <= 2.5 + 1e-9,
        "the ledger reserves {} against a budget of 2.5 (marked {marked:?})",
        usage.reserved
    );
    assert_eq!(marked.len(), 5, "exactly the budget's worth: {marked:?}");
    assert_eq!(refused.len(), RACERS - 5, "{refused:?}");
    assert_eq!((usage.reserved, usage.submissions), (2.5, 5));
    let units = store.task_units("t1").await.unwrap();
    let submitted: HashSet<&str> = units
        .iter()
        .filter(|u| u.status == UnitStatus::Submitted)
        .map(|u| u.id.as_str())
        .collect();
    assert_eq!(submitted, marked.iter().map(String::as_str).collect());
    for u in units.iter().filter(|u| u.status == UnitStatus::Pending) {
        assert_eq!(u.terms.wait_reason.as_deref(), Some("budget"), "{}", u.id);
    }
}

/// 24 markers at once, each of another tenant (no budgets: nothing but the spend is shared),
/// half on account `h/main` (spend 3.0), half on the implicit account, all in a pool whose
/// spend is 7.0, each estimating 1.0: at most 3 on the account, exactly 7 in all, and the
/// ledger holds no more than either limit. (PostgreSQL: an advisory lock per scope.)
pub(crate) async fn concurrent_reservations_never_overrun_a_spend_limit(store: DynStore) {
    let limit = |limit| SpendLimit {
        limit,
        period_ms: DAY,
    };
    let on_main = Arc::new(SpendTerms {
        pool: POOL.into(),
        pool_limit: Some(limit(7.0)),
        account: Some("h/main".into()),
        account_limit: Some(limit(3.0)),
    });
    let implicit = Arc::new(SpendTerms {
        pool: POOL.into(),
        pool_limit: Some(limit(7.0)),
        account: None,
        account_limit: None,
    });
    let mut grants = Vec::with_capacity(RACERS);
    for i in 0..RACERS {
        let tenant = format!("tenant{i}");
        create(&store, costed(&format!("t{i}"), &tenant, 1, Some(1.0))).await;
        let main = i.is_multiple_of(2);
        grants.push(Grant {
            account: main.then(|| "main".into()),
            spend: Some(if main { &on_main } else { &implicit }.clone()),
            ..grant(&format!("t{i}-u0"), &tenant, 1.0)
        });
    }
    let (marked, refused) = race(&store, grants).await;
    let pool = store
        .spend_used(&SpendScope::Pool(POOL.into()), day_start())
        .await
        .unwrap();
    let account = store
        .spend_used(&SpendScope::Account("h/main".into()), day_start())
        .await
        .unwrap();
    assert!(
        pool <= 7.0 && account <= 3.0,
        "the ledger holds {pool} in the pool (limit 7) and {account} on the account \
         (limit 3): marked {marked:?}"
    );
    assert_eq!(marked.len(), 7, "the pool's spend, exactly: {marked:?}");
    assert_eq!(refused.len(), RACERS - 7);
    assert_eq!(pool, 7.0);
    let on_account = marked
        .iter()
        .filter(|id| {
            let i: usize = id[1..id.len() - 3].parse().unwrap();
            i.is_multiple_of(2)
        })
        .count();
    assert_eq!(account, on_account as f64);
    assert!(on_account <= 3, "{marked:?}");
}

/// A submission that settles above its estimate counts at what the provider reported: the
/// tenant's `spent` and the pool's spend use the actual cost, and the next reservation sees
/// it (a grant that fitted the estimates no longer fits).
pub(crate) async fn settled_costs_above_the_estimate_count_in_full(store: DynStore) {
    store.budget_set(&budget("a", 4.0)).await.unwrap();
    create(&store, costed("t1", "a", 3, Some(1.0))).await;
    let spend = Arc::new(SpendTerms {
        pool: POOL.into(),
        pool_limit: Some(SpendLimit {
            limit: 100.0,
            period_ms: DAY,
        }),
        account: None,
        account_limit: None,
    });
    let grant = |id: &str| Grant {
        spend: Some(spend.clone()),
        ..grant(id, "a", 1.0)
    };
    let marked = store
        .unit_mark_granted(&[grant("t1-u0"), grant("t1-u1")], T0 + 1, T0 + 1, None)
        .await
        .unwrap();
    assert_eq!(marked.units.len(), 2);

    // t1-u0's job ends at 2.5, over its estimate of 1.0.
    let done = UnitUpdate {
        unit_id: "t1-u0".into(),
        from: Some(UnitStatus::Submitted),
        from_stage: Some("main".into()),
        to: Some(UnitStatus::Succeeded),
        cost: Some("2.5".into()),
        result: Some("{}".into()),
        ..UnitUpdate::default()
    };
    apply(&store, done, T0 + 2).await;
    let usage = store.budget_usage("a", DAY, T0 + 3).await.unwrap();
    assert_eq!(
        (usage.spent, usage.reserved, usage.submissions),
        (2.5, 1.0, 2),
        "spent at the provider's cost, not the estimate"
    );
    let pool = SpendScope::Pool(POOL.into());
    assert_eq!(store.spend_used(&pool, day_start()).await.unwrap(), 3.5);

    // 2.5 spent + 1.0 reserved + 1.0 asked > 4.0: refused (by the estimates alone, 1.0 + 1.0
    // + 1.0 would fit).
    let again = store
        .unit_mark_granted(&[grant("t1-u2")], T0 + 4, T0 + 4, None)
        .await
        .unwrap();
    assert!(again.units.is_empty(), "{:?}", again.units);
    assert_eq!(again.over_budget, ["t1-u2"]);
    assert_eq!(
        unit(&store, "t1", 2).await.terms.wait_reason.as_deref(),
        Some("budget")
    );
    // t1-u1 ends without a job: its reservation goes, and t1-u2's 1.0 fits beside the 2.5.
    let back = UnitUpdate {
        unit_id: "t1-u1".into(),
        from: Some(UnitStatus::Submitted),
        from_stage: Some("main".into()),
        to: Some(UnitStatus::Pending),
        submitted_at: Field::Clear,
        ..UnitUpdate::default()
    };
    apply(&store, back, T0 + 5).await;
    let again = store
        .unit_mark_granted(&[grant("t1-u2")], T0 + 6, T0 + 6, None)
        .await
        .unwrap();
    assert_eq!(ids(&again.units), ["t1-u2"]);
    let usage = store.budget_usage("a", DAY, T0 + 7).await.unwrap();
    assert_eq!((usage.spent, usage.reserved), (2.5, 1.0));
    assert_eq!(store.spend_used(&pool, day_start()).await.unwrap(), 3.5);
}

/// A unit whose handler gives no cost estimate, under a tenant's budget and under a pool's
/// spend: it reserves nothing (a ledger row of 0) and runs while the period has room; its
/// settled cost counts in full; it takes nothing from a period already spent, but waits
/// (`budget`, `spend`) with an event saying it has no estimate; once room frees it runs.
pub(crate) async fn a_unit_without_an_estimate_takes_nothing_from_a_spent_period(store: DynStore) {
    store.budget_set(&budget("a", 2.0)).await.unwrap();
    create(&store, costed("t1", "a", 2, Some(1.0))).await;
    create(&store, costed("t2", "a", 2, None)).await;
    let mark = |grants: Vec<Grant>, at: i64| {
        let store = store.clone();
        async move {
            store
                .unit_mark_granted(&grants, at, at, None)
                .await
                .unwrap()
        }
    };
    // Room left: the unestimated unit is marked and reserves nothing.
    let m = mark(vec![grant("t2-u0", "a", 0.0)], T0 + 1).await;
    assert_eq!(ids(&m.units), ["t2-u0"]);
    let usage = store.budget_usage("a", DAY, T0 + 1).await.unwrap();
    assert_eq!((usage.reserved, usage.submissions), (0.0, 1));
    // The estimated units take the whole budget.
    let m = mark(
        vec![grant("t1-u0", "a", 1.0), grant("t1-u1", "a", 1.0)],
        T0 + 2,
    )
    .await;
    assert_eq!(m.units.len(), 2);
    // Spent: the next unestimated unit waits, and says why.
    let m = mark(vec![grant("t2-u1", "a", 0.0)], T0 + 3).await;
    assert!(
        m.units.is_empty(),
        "a spent budget granted {:?}",
        ids(&m.units)
    );
    assert_eq!(m.over_budget, ["t2-u1"]);
    let held = unit(&store, "t2", 1).await;
    assert_eq!(
        (held.status, held.terms.wait_reason.as_deref()),
        (UnitStatus::Pending, Some("budget"))
    );
    let said = store.unit_events("t2").await.unwrap();
    let said = said.last().unwrap().detail.clone().unwrap_or_default();
    assert!(
        said.starts_with("waiting: budget (tenant a") && said.contains("no cost estimate"),
        "{said}"
    );
    // The first one settles at its provider's cost: counted in full.
    let mut done = UnitUpdate {
        unit_id: "t2-u0".into(),
        from: Some(UnitStatus::Submitted),
        to: Some(UnitStatus::Succeeded),
        cost: Some("0.75".into()),
        result: Some("{}".into()),
        ..UnitUpdate::default()
    };
    done.from_stage = Some("main".into());
    apply(&store, done, T0 + 4).await;
    let usage = store.budget_usage("a", DAY, T0 + 4).await.unwrap();
    assert_eq!((usage.spent, usage.reserved), (0.75, 2.0));
    // t1-u0 ends without a job: 0.25 of room, so the unestimated unit runs again.
    let mut back = update("t1-u0", UnitStatus::Submitted, UnitStatus::Pending);
    back.submitted_at = Field::Clear;
    apply(&store, back, T0 + 5).await;
    let m = mark(vec![grant("t2-u1", "a", 0.0)], T0 + 6).await;
    assert_eq!(ids(&m.units), ["t2-u1"]);

    // A pool's spend of 1.0, tenant b (no budget): the same at the provider's limit.
    let spend = Arc::new(SpendTerms {
        pool: "p:spend".into(),
        pool_limit: Some(SpendLimit {
            limit: 1.0,
            period_ms: DAY,
        }),
        account: None,
        account_limit: None,
    });
    create(&store, costed("t3", "b", 1, Some(1.0))).await;
    create(&store, costed("t4", "b", 1, None)).await;
    let spending = |id: &str, estimate: f64| Grant {
        spend: Some(spend.clone()),
        ..grant(id, "b", estimate)
    };
    let m = mark(vec![spending("t3-u0", 1.0), spending("t4-u0", 0.0)], T0 + 7).await;
    assert_eq!(ids(&m.units), ["t3-u0"]);
    assert_eq!(m.over_spend, ["t4-u0"]);
    let held = unit(&store, "t4", 0).await;
    assert_eq!(held.terms.wait_reason.as_deref(), Some("spend"));
    let said = store.unit_events("t4").await.unwrap();
    let said = said.last().unwrap().detail.clone().unwrap_or_default();
    assert!(
        said.contains("pool p:spend has 0.0000 of 1 left") && said.contains("no cost estimate"),
        "{said}"
    );
    let pool = SpendScope::Pool("p:spend".into());
    assert_eq!(store.spend_used(&pool, day_start()).await.unwrap(), 1.0);
}
