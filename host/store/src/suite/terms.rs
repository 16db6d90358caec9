//! Accounts, deadlines and budgets in the store: accounts recorded by the submit marker, earliest deadline first
//! inside the fill order, and the budget ledger (reserve with the marker, settle when the
//! submission ends, a crash in between leaving one open row that the resolution settles).

use super::*;
use crate::{Budget, Grant, TaskTerms};

fn grant(unit_id: &str, tenant: &str, account: Option<&str>, estimate: f64) -> Grant {
    Grant {
        unit_id: unit_id.into(),
        tenant: tenant.into(),
        account: account.map(str::to_string),
        estimate,
        submission: "main-0".into(),
        budget_retry_at: T0 + 60_000,
        quota_pool: None,
        spend: None,
        bind: None,
    }
}

/// A budget of `limit` per `period_ms`, set by `source` at `at`.
fn budget(tenant: &str, limit: f64, period_ms: i64, source: &str, at: i64) -> Budget {
    Budget {
        tenant: tenant.into(),
        limit,
        period_ms,
        source: source.into(),
        updated_at: at,
    }
}

const DAY: i64 = 86_400_000;

/// Tenant a's (spent, reserved, submissions) in the day containing `now`.
async fn day_of_a(store: &DynStore, now: i64) -> (f64, f64, u64) {
    let u = store.budget_usage("a", DAY, now).await.unwrap();
    (u.spent, u.reserved, u.submissions)
}

/// The ids of the pool's pending units in fill order, leaving out `except` tenants.
/// (No exception: through `unit_list_pending`, what the fill order's other readers call.)
async fn fill_order(store: &DynStore, except: &[String]) -> Vec<String> {
    let types = types(&[VIDEO]);
    let units = if except.is_empty() {
        store.unit_list_pending(POOL, &types, T0 + 10, 10).await
    } else {
        store
            .unit_list_fill(POOL, &types, T0 + 10, 10, except)
            .await
    };
    units.unwrap().into_iter().map(|u| u.id).collect()
}

/// A task whose units each estimate `cost`, with deadline terms.
fn costed(id: &str, tenant: &str, n: usize, cost: f64, terms: TaskTerms) -> NewTask {
    let mut t = task(id, tenant, VIDEO, POOL, n, 0);
    for u in &mut t.units {
        u.cost_estimate = Some(cost);
    }
    t.terms = terms;
    t
}

pub(crate) async fn deadlines_fill_first_within_a_tenant(store: DynStore) {
    let later = TaskTerms {
        deadline_at: Some(T0 + 2_000_000),
        ..TaskTerms::default()
    };
    let sooner = TaskTerms {
        deadline_at: Some(T0 + 1_000_000),
        start_by: Some(T0 + 500_000),
        best_effort: true,
    };
    store
        .task_create(costed("t1", "a", 2, 1.0, TaskTerms::default()))
        .await
        .unwrap();
    store
        .task_create(costed("t2", "a", 2, 1.0, later))
        .await
        .unwrap();
    store
        .task_create(costed("t3", "a", 2, 1.0, sooner))
        .await
        .unwrap();
    assert_eq!(
        fill_order(&store, &[]).await,
        ["t3-u0", "t3-u1", "t2-u0", "t2-u1", "t1-u0", "t1-u1"]
    );
    // The terms come back on the units and the task.
    let units = store.task_units("t3").await.unwrap();
    assert_eq!(units[0].terms.deadline_at, Some(T0 + 1_000_000));
    assert_eq!(units[0].terms.start_by, Some(T0 + 500_000));
    assert!(units[0].terms.best_effort);
    assert_eq!(units[0].terms.cost_estimate, Some(1.0));
    let t3 = store.task_get("a", "t3").await.unwrap().unwrap();
    assert_eq!(t3.terms, sooner);
    // Only units with terms to enforce are swept: best effort ones too (their decision is
    // recorded), not t1's.
    let swept: Vec<String> = store
        .unit_list_deadlined(POOL, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.id)
        .collect();
    assert_eq!(swept, ["t3-u0", "t3-u1", "t2-u0", "t2-u1"]);
    // Still fair across tenants: b's unit (no deadline) takes its turn right after a's first,
    // ahead of a's other deadline units; at equal turns the deadline goes first.
    store
        .task_create(costed("t4", "b", 1, 1.0, TaskTerms::default()))
        .await
        .unwrap();
    assert_eq!(
        fill_order(&store, &[]).await,
        [
            "t3-u0", "t4-u0", "t3-u1", "t2-u0", "t2-u1", "t1-u0", "t1-u1"
        ]
    );
    // Leaving a tenant out of the fill (over budget) leaves out its units only.
    assert_eq!(fill_order(&store, &["a".to_string()]).await, ["t4-u0"]);
    // A unit that cannot meet its deadline fails from pending.
    let failed = store
        .unit_apply(
            &[UnitUpdate {
                unit_id: "t2-u1".into(),
                from: Some(UnitStatus::Pending),
                from_stage: Some("main".into()),
                to: Some(UnitStatus::Failed),
                error: Field::Set(r#"{"code":"deadline_unreachable","message":"late"}"#.into()),
                detail: Some("deadline unreachable".into()),
                ..UnitUpdate::default()
            }],
            T0 + 20,
            None,
        )
        .await
        .unwrap();
    assert_eq!(failed.applied, ["t2-u1"]);
}

/// What the deadline sweep counts to place its units in the fill order: the pending units
/// per (priority, tenant), and each unit's rank in its own group (deadline first, then FIFO).
pub(crate) async fn deadline_sweep_counts_follow_the_fill_order(store: DynStore) {
    let due = TaskTerms {
        deadline_at: Some(T0 + 1_000_000),
        ..TaskTerms::default()
    };
    let mut urgent = task("t4", "b", VIDEO, POOL, 1, 5);
    urgent.terms = due;
    for t in [
        costed("t1", "a", 3, 1.0, TaskTerms::default()),
        costed("t2", "a", 2, 1.0, due),
        costed("t3", "b", 2, 1.0, TaskTerms::default()),
        urgent,
    ] {
        store.task_create(t).await.unwrap();
    }
    let groups = |min: i32| {
        let store = store.clone();
        async move {
            let mut g: Vec<(i32, String, u64)> = store
                .unit_pending_groups(POOL, min)
                .await
                .unwrap()
                .into_iter()
                .map(|g| (g.priority, g.tenant, g.pending))
                .collect();
            g.sort();
            g
        }
    };
    assert_eq!(
        groups(0).await,
        [(0, "a".into(), 5), (0, "b".into(), 2), (5, "b".into(), 1)]
    );
    assert_eq!(groups(1).await, [(5, "b".into(), 1)]);
    assert_eq!(store.unit_pending_groups("other", 0).await.unwrap(), []);
    let rank = |id: &'static str, cap: u32| {
        let store = store.clone();
        async move { store.unit_rank_in_group(id, cap).await.unwrap() }
    };
    // a's deadline task goes before its older task; b's groups are its own.
    assert_eq!(rank("t2-u0", 100).await, 0);
    assert_eq!(rank("t2-u1", 100).await, 1);
    assert_eq!(rank("t1-u0", 100).await, 2);
    assert_eq!(rank("t1-u2", 100).await, 4);
    assert_eq!(rank("t3-u1", 100).await, 1);
    assert_eq!(rank("t4-u0", 100).await, 0);
    assert_eq!(rank("t1-u2", 3).await, 3, "counted no further than the cap");
    assert_eq!(rank("nonesuch", 100).await, 0);
    // A unit that leaves pending is no longer ahead of anyone, nor ranked itself.
    store
        .unit_apply(
            &[UnitUpdate {
                unit_id: "t2-u0".into(),
                from: Some(UnitStatus::Pending),
                from_stage: Some("main".into()),
                to: Some(UnitStatus::Failed),
                error: Field::Set(r#"{"code":"deadline_unreachable","message":"late"}"#.into()),
                ..UnitUpdate::default()
            }],
            T0 + 20,
            None,
        )
        .await
        .unwrap();
    assert_eq!(rank("t1-u0", 100).await, 1);
    assert_eq!(rank("t2-u0", 100).await, 0);
    assert_eq!(groups(0).await[0], (0, "a".into(), 4));
}

pub(crate) async fn marker_records_accounts_and_reserves_budgets(store: DynStore) {
    store
        .budget_set(&budget("a", 2.5, DAY, "config", T0))
        .await
        .unwrap();
    store
        .task_create(costed("t1", "a", 4, 1.0, TaskTerms::default()))
        .await
        .unwrap();
    store
        .task_create(costed("t2", "b", 1, 7.0, TaskTerms::default()))
        .await
        .unwrap();
    let grants = [
        grant("t1-u0", "a", Some("main"), 1.0),
        grant("t1-u1", "a", Some("backup"), 1.0),
        grant("t2-u0", "b", None, 7.0),
        grant("t1-u2", "a", Some("main"), 1.0),
        grant("t1-u3", "a", Some("main"), 1.0),
    ];
    let marked = store
        .unit_mark_granted(&grants, T0 + 1, T0 + 1, None)
        .await
        .unwrap();
    let ids: Vec<&str> = marked.units.iter().map(|u| u.id.as_str()).collect();
    // Tenant a's budget covers two of its 1.0 units; b has no budget.
    assert_eq!(ids, ["t1-u0", "t1-u1", "t2-u0"]);
    assert_eq!(marked.over_budget, ["t1-u2", "t1-u3"]);
    assert_eq!(marked.units[0].terms.account.as_deref(), Some("main"));
    assert_eq!(marked.units[1].terms.account.as_deref(), Some("backup"));
    assert_eq!(marked.units[2].terms.account, None);
    let held = store.task_units("t1").await.unwrap();
    assert_eq!(held[2].status, UnitStatus::Pending);
    assert_eq!(held[2].terms.wait_reason.as_deref(), Some("budget"));
    assert_eq!(held[2].next_at, T0 + 60_000, "held until the retry time");
    assert_eq!(day_of_a(&store, T0 + 2).await, (0.0, 2.0, 2));
    let submitted = store.unit_list_submitted_accounts(POOL).await.unwrap();
    assert_eq!(submitted.len(), 3);
    // Each submission is named by its marker's instant (the slot set's holder names).
    for s in &submitted {
        assert_eq!(s.submitted_at, T0 + 1, "{s:?}");
    }
    let on: Vec<(&str, Option<&str>)> = submitted
        .iter()
        .map(|s| (s.unit_id.as_str(), s.account.as_deref()))
        .collect();
    assert!(on.contains(&("t1-u1", Some("backup"))), "{on:?}");
    after_a_crash_the_resolution_settles(&store, &grants).await;
    budget_changes(&store).await;
}

/// Tenants with and without a budget, on two accounts, in one marker: the units of the tenant
/// without one are marked by the marker's single statement (PostgreSQL), the budgeted
/// tenant's go through the transaction that reserves; the answer keeps the grants' order. A
/// stale fence marks nothing by either way.
pub(crate) async fn marker_mixes_budgeted_and_plain_tenants(store: DynStore) {
    store
        .budget_set(&budget("a", 1.5, DAY, "config", T0))
        .await
        .unwrap();
    for (task, tenant) in [("t1", "a"), ("t2", "b")] {
        store
            .task_create(costed(task, tenant, 2, 1.0, TaskTerms::default()))
            .await
            .unwrap();
    }
    assert!(store.pool_fence_advance(POOL, 5).await.unwrap());
    let grants = [
        grant("t1-u0", "a", Some("main"), 1.0),
        grant("t2-u0", "b", Some("main"), 1.0),
        grant("t1-u1", "a", None, 1.0),
        grant("t2-u1", "b", Some("backup"), 1.0),
    ];
    let stale = crate::Fence {
        pool: POOL.into(),
        token: 4,
    };
    let err = store
        .unit_mark_granted(&grants, T0 + 1, T0 + 1, Some(&stale))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Fenced { current: 5, .. }),
        "{err:?}"
    );
    assert!(
        store
            .unit_list_submitted_accounts(POOL)
            .await
            .unwrap()
            .is_empty(),
        "a stale fence marked units"
    );
    let current = crate::Fence {
        pool: POOL.into(),
        token: 5,
    };
    let marked = store
        .unit_mark_granted(&grants, T0 + 1, T0 + 1, Some(&current))
        .await
        .unwrap();
    let ids: Vec<&str> = marked.units.iter().map(|u| u.id.as_str()).collect();
    assert_eq!(ids, ["t1-u0", "t2-u0", "t2-u1"]);
    assert_eq!(marked.over_budget, ["t1-u1"]);
    // Each on the account of its grant, as stored.
    let accounts: Vec<Option<String>> = marked
        .units
        .iter()
        .map(|u| u.terms.account.clone())
        .collect();
    let main = || Some("main".to_string());
    assert_eq!(accounts, [main(), main(), Some("backup".to_string())]);
    let stored = store.task_units("t2").await.unwrap();
    assert_eq!(stored[1].terms.account.as_deref(), Some("backup"));
    // One reservation, tenant a's; b reserves nothing.
    assert_eq!(day_of_a(&store, T0 + 2).await, (0.0, 1.0, 1));
    let b = store.budget_usage("b", DAY, T0 + 2).await.unwrap();
    assert_eq!((b.reserved, b.submissions), (0.0, 0));
    // Every move logged once.
    for task in ["t1", "t2"] {
        let marks = store
            .unit_events(task)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.to_status == "submitted")
            .count();
        assert_eq!(marks, if task == "t1" { 1 } else { 2 }, "{task}");
    }
}

/// "Crash" after the marker, then the in-doubt resolution of the two submissions.
async fn after_a_crash_the_resolution_settles(store: &DynStore, grants: &[Grant]) {
    // "Crash" after the marker: nothing was sent. The restarted scheduler marks nothing
    // twice and reserves nothing twice.
    let again = store
        .unit_mark_granted(grants, T0 + 3, T0 + 3, None)
        .await
        .unwrap();
    assert!(again.units.is_empty(), "{:?}", again.units);
    assert_eq!(day_of_a(store, T0 + 4).await, (0.0, 2.0, 2));

    // The in-doubt resolution: one job found and ended with the provider's cost; the other
    // never reached the provider (back to pending, nothing spent).
    let done = UnitUpdate {
        unit_id: "t1-u0".into(),
        from: Some(UnitStatus::Submitted),
        from_stage: Some("main".into()),
        to: Some(UnitStatus::Succeeded),
        cost: Some("0.8".into()),
        result: Some("{}".into()),
        ..UnitUpdate::default()
    };
    let back = UnitUpdate {
        unit_id: "t1-u1".into(),
        from: Some(UnitStatus::Submitted),
        from_stage: Some("main".into()),
        to: Some(UnitStatus::Pending),
        submitted_at: Field::Clear,
        ..UnitUpdate::default()
    };
    let applied = store.unit_apply(&[done, back], T0 + 5, None).await.unwrap();
    assert_eq!(applied.applied.len(), 2);
    assert_eq!(day_of_a(store, T0 + 6).await, (0.8, 0.0, 2));
}

/// Raised limits, the file against the API, pruning, a new period, the all-time totals.
async fn budget_changes(store: &DynStore) {
    // A raised limit changes no unit by itself; the lifecycle then makes the held units due
    // at once (each with its task and pool, for the follow-ups).
    store
        .budget_set(&budget("a", 10.0, DAY, "api", T0 + 7))
        .await
        .unwrap();
    let held = store.task_units("t1").await.unwrap();
    assert_eq!(held[2].terms.wait_reason.as_deref(), Some("budget"));
    let released = store.unit_release_holds("a", T0 + 7).await.unwrap();
    assert!(
        released.contains(&("t1".to_string(), POOL.to_string())),
        "{released:?}"
    );
    assert!(
        store
            .unit_release_holds("b", T0 + 7)
            .await
            .unwrap()
            .is_empty()
    );
    let held = store.task_units("t1").await.unwrap();
    assert_eq!(
        (held[2].terms.wait_reason.clone(), held[2].next_at),
        (None, T0 + 7)
    );
    // The file's budget does not replace one set through the API.
    store
        .budget_set(&budget("a", 1.0, 3_600_000, "config", T0 + 8))
        .await
        .unwrap();
    let b = store.budget_get("a").await.unwrap().unwrap();
    assert_eq!((b.limit, b.source.as_str()), (10.0, "api"));
    // A budget the file set goes when the file no longer names its tenant; an API one stays.
    store
        .budget_set(&budget("c", 3.0, 3_600_000, "config", T0 + 8))
        .await
        .unwrap();
    assert_eq!(store.budget_prune_config(&[]).await.unwrap(), ["c"]);
    assert!(store.budget_get("c").await.unwrap().is_none());
    assert!(
        store.budget_get("a").await.unwrap().is_some(),
        "set through the API"
    );
    // A new period starts afresh.
    let next_day = store.budget_usage("a", DAY, T0 + DAY).await.unwrap();
    assert_eq!(next_day.submissions, 0);
    let totals = store.cost_by_tenant().await.unwrap();
    let a = totals.iter().find(|(t, ..)| t == "a").unwrap();
    assert_eq!((a.1, a.2, a.3), (0.8, 4.0, 1));
}

/// The create log of a pool with quotas: the marker records the creates it marked (not those
/// its budget check refused, nor grants without a quota pool) in its transaction; reads go
/// from an instant on, oldest first; old records are pruned.
pub(crate) async fn marker_records_creates_of_pools_with_quotas(store: DynStore) {
    store
        .budget_set(&budget("a", 1.0, DAY, "config", T0))
        .await
        .unwrap();
    store
        .task_create(costed("t1", "a", 3, 1.0, TaskTerms::default()))
        .await
        .unwrap();
    store
        .task_create(costed("t2", "b", 2, 1.0, TaskTerms::default()))
        .await
        .unwrap();
    let quota = |mut g: Grant| {
        g.quota_pool = Some(POOL.into());
        g
    };
    let grants = [
        quota(grant("t1-u0", "a", Some("main"), 1.0)),
        // Over a's budget: not marked, not recorded.
        quota(grant("t1-u1", "a", Some("main"), 1.0)),
        quota(grant("t2-u0", "b", None, 1.0)),
        // No quota pool: marked, not recorded.
        grant("t2-u1", "b", None, 1.0),
    ];
    let marked = store
        .unit_mark_granted(&grants, T0 + 5, T0 + 5, None)
        .await
        .unwrap();
    assert_eq!(marked.units.len(), 3);
    let creates = store.quota_creates_since(POOL, T0).await.unwrap();
    let got: Vec<(&str, Option<&str>, i64)> = creates
        .iter()
        .map(|c| (c.unit_id.as_str(), c.account.as_deref(), c.at))
        .collect();
    assert_eq!(
        got,
        [("t1-u0", Some("main"), T0 + 5), ("t2-u0", None, T0 + 5)]
    );
    assert!(
        store
            .quota_creates_since(POOL, T0 + 6)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .quota_creates_since("other", T0)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.quota_creates_prune(POOL, T0 + 5).await.unwrap(), 0);
    assert_eq!(store.quota_creates_prune("other", T0 + 6).await.unwrap(), 0);
    assert_eq!(store.quota_creates_prune(POOL, T0 + 6).await.unwrap(), 2);
    assert!(store.quota_creates_since(POOL, 0).await.unwrap().is_empty());
}

/// A pool's spend of 3.0 per day and an account's of 2.0: the marker grants what fits both,
/// in order, holds the rest with `wait_reason = spend` until the period ends (or the retry
/// time, sooner), writes a ledger row per grant (tenants without a budget too), and frees
/// room as submissions settle below their estimates.
pub(crate) async fn marker_checks_spend_of_pools_and_accounts(store: DynStore) {
    use crate::{SpendLimit, SpendScope, SpendTerms};
    use std::sync::Arc;
    store
        .task_create(costed("t1", "a", 5, 1.0, TaskTerms::default()))
        .await
        .unwrap();
    let day = SpendLimit {
        limit: 3.0,
        period_ms: DAY,
    };
    let on = |account: Option<&str>| {
        Arc::new(SpendTerms {
            pool: POOL.into(),
            pool_limit: Some(day),
            account: account.map(|a| format!("h/{a}")),
            account_limit: account.map(|_| SpendLimit {
                limit: 2.0,
                period_ms: DAY,
            }),
        })
    };
    let spend = |id: &str, account: Option<&str>| Grant {
        spend: Some(on(account)),
        budget_retry_at: T0 + 10 * DAY,
        ..grant(id, "a", account, 1.0)
    };
    // t1-u0, t1-u1 on the account (its 2.0), t1-u2 on it refused (the account is spent),
    // t1-u3 on the implicit account (the pool's third), t1-u4 refused (the pool is spent).
    let grants = [
        spend("t1-u0", Some("main")),
        spend("t1-u1", Some("main")),
        spend("t1-u2", Some("main")),
        spend("t1-u3", None),
        spend("t1-u4", None),
    ];
    let marked = store
        .unit_mark_granted(&grants, T0 + 1, T0 + 1, None)
        .await
        .unwrap();
    let ids: Vec<&str> = marked.units.iter().map(|u| u.id.as_str()).collect();
    assert_eq!(ids, ["t1-u0", "t1-u1", "t1-u3"]);
    assert_eq!(marked.over_spend, ["t1-u2", "t1-u4"]);
    assert!(marked.over_budget.is_empty());
    let held = store.task_units("t1").await.unwrap();
    assert_eq!(held[2].terms.wait_reason.as_deref(), Some("spend"));
    let period_end = T0 - T0.rem_euclid(DAY) + DAY;
    assert_eq!(held[2].next_at, period_end, "due when the period ends");
    let pool = SpendScope::Pool(POOL.into());
    let account = SpendScope::Account("h/main".into());
    let since = T0 - T0.rem_euclid(DAY);
    assert_eq!(store.spend_used(&pool, since).await.unwrap(), 3.0);
    assert_eq!(store.spend_used(&account, since).await.unwrap(), 2.0);
    assert_eq!(store.spend_used(&pool, period_end).await.unwrap(), 0.0);
    let events = store.unit_events("t1").await.unwrap();
    assert!(
        events.iter().any(|e| e
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("account h/main"))),
        "the wait names the account: {events:?}"
    );

    // t1-u0 ends at a provider cost of 0.25: the account has 1.0 - 0.25 + ... room again.
    let done = UnitUpdate {
        unit_id: "t1-u0".into(),
        from: Some(UnitStatus::Submitted),
        from_stage: Some("main".into()),
        to: Some(UnitStatus::Succeeded),
        cost: Some("0.25".into()),
        result: Some("{}".into()),
        ..UnitUpdate::default()
    };
    store.unit_apply(&[done], T0 + 2, None).await.unwrap();
    assert_eq!(store.spend_used(&account, since).await.unwrap(), 1.25);
    let again = store
        .unit_mark_granted(&grants[2..3], T0 + 3, T0 + 3, None)
        .await
        .unwrap();
    assert!(
        again.units.is_empty(),
        "the pool (2.25 of 3.0) cannot cover it yet"
    );
    assert_eq!(again.over_spend, ["t1-u2"]);
}
