//! Tenants' shares of a pool (docs/accounts-deadlines-budgets.md "Tenant guarantees"): a
//! `min_slots` reservation taken from the first slots that free while the tenant waits, lent to
//! others while it has nothing pending; a `max_slots` cap. The real fixture handler, the real
//! store, the scheduler driven by hand with a manual clock.

use std::collections::BTreeMap;

use serde_json::json;
use slotd_core::config::{ApiKey, Secret, TenantConfig};

use crate::support::*;

const POOL: &str = "fixture";
const KEY_A: &str = "key-of-tenant-a";
const KEY_B: &str = "key-of-tenant-b";

/// Tenants `a` and `b` with API keys; `a` and `b` take the given shares of the pool.
fn tenants(a: TenantConfig, b: TenantConfig) -> impl FnOnce(&mut slotd_core::config::Config) {
    move |c| {
        c.api_keys = vec![
            ApiKey {
                key: Secret::new(KEY_A),
                tenant: "a".into(),
                admin: false,
                publish: Vec::new(),
            },
            ApiKey {
                key: Secret::new(KEY_B),
                tenant: "b".into(),
                admin: false,
                publish: Vec::new(),
            },
        ];
        c.tenants.insert("a".into(), a);
        c.tenants.insert("b".into(), b);
    }
}

fn share(min: Option<u32>, max: Option<u32>) -> TenantConfig {
    TenantConfig {
        min_slots: min
            .map(|m| BTreeMap::from([(POOL.to_string(), m)]))
            .unwrap_or_default(),
        max_slots: max
            .map(|m| BTreeMap::from([(POOL.to_string(), m)]))
            .unwrap_or_default(),
        ..TenantConfig::default()
    }
}

/// `count` quick units (accepted, then succeeded at their first poll) as `key`'s tenant.
async fn submit(m: &Manual, key: &str, count: u32, priority: i32) {
    let (status, body) = api_call_as(
        &m.services,
        "POST",
        "/v1/tasks/fixture",
        Some(json!({"payload": {"count": count, "behavior": "quick"}, "priority": priority})),
        Some(key),
    )
    .await;
    assert_eq!(status, 202, "{body}");
}

/// Whether tenant a's task has any unit still waiting for or holding a slot.
async fn a_waits_or_runs(m: &Manual, id: &str) -> bool {
    let (status, body) = api_call_as(
        &m.services,
        "GET",
        &format!("/v1/tasks/{id}"),
        None,
        Some(KEY_A),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["results"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r["status"] == "pending" || r["status"] == "submitted")
}

/// Slots each tenant holds now.
async fn held(m: &Manual) -> (u64, u64) {
    let by: BTreeMap<String, u64> = m
        .services
        .store
        .unit_count_submitted_by_tenant(POOL)
        .await
        .expect("count")
        .into_iter()
        .collect();
    (
        by.get("a").copied().unwrap_or(0),
        by.get("b").copied().unwrap_or(0),
    )
}

/// Tenant a has `min_slots = 4` of 20; b's 200-shot backlog of higher priority holds all 20
/// while a has nothing pending. a submits 10: at the first fill after slots free, a takes its
/// 4 (priority alone would give b every slot), never more while b waits, and keeps taking 4
/// until its 10 have run; then b has all 20 again.
#[tokio::test]
async fn a_minimum_is_taken_from_the_first_slots_that_free_and_lent_while_idle() {
    let m = Manual::start_with(
        20,
        100,
        tenants(share(Some(4), None), TenantConfig::default()),
    )
    .await;
    submit(&m, KEY_B, 200, 10).await;
    m.round(&[POOL], 10).await;
    assert_eq!(
        held(&m).await,
        (0, 20),
        "a has nothing pending: b uses all 20"
    );

    let a_task = {
        let (status, body) = api_call_as(
            &m.services,
            "POST",
            "/v1/tasks/fixture",
            Some(json!({"payload": {"count": 10, "behavior": "quick"}})),
            Some(KEY_A),
        )
        .await;
        assert_eq!(status, 202, "{body}");
        body["task_id"].as_str().unwrap_or_default().to_string()
    };
    // Its queue position counts its reservation: its first unit goes at the first free slot,
    // not behind b's 180 waiting units of higher priority.
    let (_, view) = api_call_as(
        &m.services,
        "GET",
        &format!("/v1/tasks/{a_task}"),
        None,
        Some(KEY_A),
    )
    .await;
    assert_eq!(view["queue_position"], 0, "{view}");
    let mut seen = Vec::new();
    for _ in 0..60 {
        m.round(&[POOL], 10).await;
        seen.push(held(&m).await);
        if !a_waits_or_runs(&m, &a_task).await && seen.last() == Some(&(0, 20)) {
            break;
        }
    }
    let first = seen.iter().position(|(a, _)| *a > 0).expect("a got slots");
    assert_eq!(
        seen[first],
        (4, 16),
        "a's 4 from the first slots that free: {seen:?}"
    );
    assert!(
        seen[..first].iter().all(|(_, b)| *b == 20 || *b == 0),
        "no fill before it gave b slots a was owed: {seen:?}"
    );
    assert!(
        seen.iter().all(|(a, _)| *a <= 4),
        "b waits, so a gets its 4 only: {seen:?}"
    );
    assert!(!a_waits_or_runs(&m, &a_task).await, "a's 10 went through");
    assert_eq!(
        seen.last(),
        Some(&(0, 20)),
        "a done: its slots are b's: {seen:?}"
    );
    m.check().await;
}

/// b's `max_slots = 12` of 20: however much b queues, it holds at most 12; the other 8 go to a
/// (lower priority) when a has work, and stay free otherwise. (Quick units end at the poll of
/// the round after their fill, so each round's fill sees the other group's slots still held.)
#[tokio::test]
async fn a_cap_holds_a_tenant_below_it() {
    let m = Manual::start_with(
        20,
        100,
        tenants(TenantConfig::default(), share(None, Some(12))),
    )
    .await;
    submit(&m, KEY_B, 60, 10).await;
    m.round(&[POOL], 10).await;
    assert_eq!(
        held(&m).await,
        (0, 12),
        "b is capped at 12, the rest stays free"
    );
    submit(&m, KEY_A, 30, 0).await;
    // The next fill, with b's 12 still held: a takes the 8 that b may not.
    let r = m.round(&[POOL], 10).await;
    assert_eq!(r[0].claimed, 8, "{:?}", r[0]);
    assert_eq!(held(&m).await.0, 8);
    let mut seen = Vec::new();
    for _ in 0..8 {
        m.round(&[POOL], 10).await;
        seen.push(held(&m).await);
    }
    assert!(
        seen.iter().all(|(_, b)| *b <= 12),
        "b above its cap: {seen:?}"
    );
    assert!(seen.iter().any(|(a, _)| *a > 0), "{seen:?}");
    m.check().await;
}

/// Minimums that do not fit in a pool are refused at start-up, naming the pool.
#[tokio::test]
async fn minimums_above_the_pool_are_refused_at_start_up() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stub =
        slotd_testkit::stub::StubProvider::start(slotd_testkit::stub::StubOptions { limit: 10 })
            .await
            .expect("stub");
    let mut config = test_config(dir.path(), &stub, 6);
    tenants(share(Some(4), None), share(Some(3), None))(&mut config);
    let err = config.validate().expect_err("4 + 3 > 6");
    assert!(
        err.to_string().contains("\"fixture\"") && err.to_string().contains("7"),
        "{err}"
    );
    // A cap below the minimum is refused too.
    let mut config = test_config(dir.path(), &stub, 6);
    tenants(share(Some(4), Some(2)), TenantConfig::default())(&mut config);
    let err = config.validate().expect_err("min above max");
    assert!(err.to_string().contains("tenants.a.min_slots"), "{err}");
}

/// The pool is on a provider account of 20 with a share of at most 12 (the account's other 8
/// are another pool's, whose handler is not loaded here): account → pool → tenant. b's backlog
/// holds the pool's 12, not the account's 20; tenant a's `min_slots = 4` is taken inside those
/// 12 from the first slots that free, b keeps the other 8 while a waits, and the pool never
/// holds more than its share.
#[tokio::test]
async fn a_tenants_minimum_is_kept_inside_its_pools_share_of_a_provider_account() {
    let m = Manual::start_with(20, 100, |c: &mut slotd_core::config::Config| {
        tenants(share(Some(4), None), TenantConfig::default())(c);
        let part = |min, max| slotd_core::config::ShareConfig {
            min,
            max: Some(max),
            account: None,
        };
        c.provider_accounts.insert(
            "acct".into(),
            slotd_core::config::ProviderAccountConfig {
                max_slots: 20,
                pools: BTreeMap::from([
                    (POOL.to_string(), part(0, 12)),
                    ("elsewhere".to_string(), part(8, 8)),
                ]),
            },
        );
    })
    .await;
    submit(&m, KEY_B, 200, 10).await;
    m.round(&[POOL], 10).await;
    assert_eq!(held(&m).await, (0, 12), "the pool's share: 12 of the 20");
    submit(&m, KEY_A, 10, 0).await;
    let mut seen = Vec::new();
    for _ in 0..60 {
        m.round(&[POOL], 10).await;
        seen.push(held(&m).await);
        if seen.last() == Some(&(0, 12)) && seen.iter().any(|(a, _)| *a > 0) {
            break;
        }
    }
    assert!(
        seen.iter().all(|(a, b)| a + b <= 12),
        "never above the pool's share: {seen:?}"
    );
    let first = seen.iter().position(|(a, _)| *a > 0).expect("a got slots");
    assert_eq!(seen[first], (4, 8), "a's 4 inside the share: {seen:?}");
    assert!(
        seen.iter().all(|(a, _)| *a <= 4),
        "b waits, so a gets its 4 only: {seen:?}"
    );
    assert_eq!(seen.last(), Some(&(0, 12)), "a done: {seen:?}");
    m.check().await;
}
