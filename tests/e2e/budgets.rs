//! Tenant budgets: a tenant whose budget covers 10 units of cost gets exactly 10
//! shots submitted; the rest wait `pending` with the reason `budget` until the budget is
//! raised; the ledger settles every reservation with the provider's reported cost, also when
//! the calls that submitted were cut off after their reservation (a crash's effect).

use std::time::Duration;

use serde_json::{Value, json};
use slotd_core::config::{BudgetConfig, TenantConfig};

use crate::kling::{Run, sim_options, video_payload};
use crate::support::*;

/// What `tenant` may spend: `limit` per day.
fn budget(limit: f64) -> impl FnOnce(&mut slotd_core::config::Config) {
    move |c: &mut slotd_core::config::Config| {
        c.tenants.insert(
            "local".into(),
            TenantConfig {
                budget: Some(BudgetConfig {
                    limit,
                    period: Duration::from_secs(86_400),
                }),
                ..TenantConfig::default()
            },
        );
    }
}

async fn usage(run: &Run) -> Value {
    get_json(&run.client, &format!("{}/v1/tenants/local/usage", run.base))
        .await
        .unwrap_or(Value::Null)
}

/// Units of the task by status and wait reason.
fn waiting_for_budget(view: &Value) -> usize {
    view["results"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["status"] == "pending" && r["wait_reason"] == "budget")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_of_ten_submits_ten_and_holds_the_rest_until_it_is_raised() {
    let run = Run::start_with(sim_options(61), 18, true, budget(10.0)).await;
    // 15 standard 5-second shots: 1 unit of cost each by Kling's price list.
    let id = run.submit("video", video_payload(15)).await;
    let held = eventually(Duration::from_secs(60), "10 done, 5 held", async || {
        let v = run.task(&id).await;
        (v["completed"] == 10 && waiting_for_budget(&v) == 5).then_some(v)
    })
    .await;
    assert_eq!(held["status"], "running", "{held}");
    assert_eq!(held["cost_estimate"], 15.0, "{held}");
    assert_eq!(
        run.sim.stats().creates,
        10,
        "exactly the budget's worth was submitted"
    );
    let u = usage(&run).await;
    assert_eq!(u["budget"]["limit"], 10.0, "{u}");
    assert_eq!(
        u["period"]["spent"], 10.0,
        "the provider's reported costs: {u}"
    );
    assert_eq!(u["period"]["reserved"], 0.0, "{u}");
    assert_eq!(u["remaining"], 0.0, "{u}");

    // Nothing more goes out while the budget is spent.
    let still = run.task(&id).await;
    assert_eq!(waiting_for_budget(&still), 5, "{still}");
    assert_eq!(run.sim.stats().creates, 10);

    // Raising the budget releases them.
    let r = run
        .client
        .put(format!("{}/v1/tenants/local/budget", run.base))
        .json(&json!({"limit": 20.0, "period": "1d"}))
        .send()
        .await
        .expect("put");
    let status = r.status();
    let body: Value = r.json().await.expect("json");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["budget"]["source"], "api", "{body}");
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    assert_eq!(run.sim.stats().creates, 15);
    let u = usage(&run).await;
    assert_eq!(u["period"]["spent"], 15.0, "{u}");
    assert_eq!(u["period"]["reserved"], 0.0, "{u}");
    assert_eq!(u["remaining"], 5.0, "{u}");
    assert_eq!(
        u["period"]["submissions"], 15,
        "one ledger row per submission: {u}"
    );
    run.stop().await;
}

/// The provider is slow to answer the first creates, so the calls that marked those units
/// submitted (and reserved their cost) are cut off at their deadline: the units are in doubt,
/// as after a crash between the reservation and the submit. They are resolved by key on the
/// same submission, so the ledger ends with one settled row per unit and nothing reserved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_cut_off_after_the_reservation_leave_the_ledger_consistent() {
    let opts = slotd_sim::kling::SimOptions {
        slow_first: 4,
        slow_ms: 2_500,
        ..sim_options(62)
    };
    let run = Run::start_with(opts, 18, false, budget(100.0)).await;
    let id = run.submit("video", video_payload(8)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(120))
        .await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    let stats = run.sim.stats();
    assert!(
        stats.creates_by_external_id.values().all(|&n| n == 1),
        "no unit submitted twice: {:?}",
        stats.creates_by_external_id
    );
    let u = usage(&run).await;
    assert_eq!(u["period"]["reserved"], 0.0, "{u}");
    assert_eq!(u["period"]["spent"], 8.0, "{u}");
    assert_eq!(u["period"]["submissions"], 8, "one row per unit: {u}");
    run.stop().await;
}

#[tokio::test]
async fn budgets_are_admin_only_and_usage_is_the_tenants_own() {
    let m = Manual::start_with(2, 10, |c| {
        c.api_keys = vec![
            slotd_core::config::ApiKey {
                key: slotd_core::config::Secret::new("key-tenant-a"),
                tenant: "a".into(),
                admin: false,
                publish: Vec::new(),
            },
            slotd_core::config::ApiKey {
                key: slotd_core::config::Secret::new("key-admin-ops"),
                tenant: "ops".into(),
                admin: true,
                publish: Vec::new(),
            },
        ];
    })
    .await;
    let body = json!({"limit": 5, "period": "1h"});
    let (status, v) = api_call_as(
        &m.services,
        "PUT",
        "/v1/tenants/a/budget",
        Some(body.clone()),
        Some("key-tenant-a"),
    )
    .await;
    assert_eq!(status, 403, "{v}");
    let (status, v) = api_call_as(
        &m.services,
        "PUT",
        "/v1/tenants/a/budget",
        Some(body),
        Some("key-admin-ops"),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["budget"]["period_ms"], 3_600_000, "{v}");
    let (status, v) = api_call_as(
        &m.services,
        "GET",
        "/v1/tenants/a/usage",
        None,
        Some("key-tenant-a"),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["remaining"], 5.0, "{v}");
    let (status, _) = api_call_as(
        &m.services,
        "GET",
        "/v1/tenants/ops/usage",
        None,
        Some("key-tenant-a"),
    )
    .await;
    assert_eq!(status, 403);
    let (status, v) = api_call_as(
        &m.services,
        "PUT",
        "/v1/tenants/a/budget",
        Some(json!({"limit": -1, "period": "1h"})),
        Some("key-admin-ops"),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    // A task of tenant a runs within its budget (the fixture gives no estimates: nothing is
    // reserved), so `slotd check` has units to audit.
    let id = m
        .submit_as("key-tenant-a", "fixture", json!({"count": 2, "polls": 1}))
        .await;
    m.run_until(&["fixture"], 100, async |m| {
        let (_, v) = api_call_as(
            &m.services,
            "GET",
            &format!("/v1/tasks/{id}"),
            None,
            Some("key-tenant-a"),
        )
        .await;
        v["status"] == "completed"
    })
    .await;
    let (_, v) = api_call_as(
        &m.services,
        "GET",
        "/v1/tenants/a/usage",
        None,
        Some("key-tenant-a"),
    )
    .await;
    assert_eq!(
        v["period"]["submissions"], 2,
        "each submission has its ledger row: {v}"
    );
    assert_eq!(v["period"]["spent"], 0.0, "{v}");
    m.check().await;
}

/// A provider spend limit on a pool (`[pools."kling:video"] spend`): Kling receives exactly
/// the limit's worth of creates (the Kling simulator counts them), the rest of the shots wait
/// `pending` with the reason `spend`, and `GET /v1/pools` shows the period spent and the pool
/// closed until the period ends. No tenant has a budget: the limit is the provider's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_spend_limit_holds_creates_at_the_provider() {
    let run = Run::start_with(sim_options(62), 18, true, |c| {
        c.pools
            .entry("kling:video".into())
            .or_insert_with(|| slotd_core::config::PoolConfig::slots(18))
            .spend = Some(BudgetConfig {
            limit: 6.0,
            period: Duration::from_secs(86_400),
        });
    })
    .await;
    // 10 standard 5-second shots: 1 unit of cost each by Kling's price list.
    let id = run.submit("video", video_payload(10)).await;
    let held = eventually(Duration::from_secs(60), "6 done, 4 held", async || {
        let v = run.task(&id).await;
        let spend = v["results"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["status"] == "pending" && r["wait_reason"] == "spend")
            .count();
        (v["completed"] == 6 && spend == 4).then_some(v)
    })
    .await;
    assert_eq!(held["status"], "running", "{held}");
    assert_eq!(
        run.sim.stats().creates,
        6,
        "exactly the limit's worth at Kling"
    );
    let pools = get_json(&run.client, &format!("{}/v1/pools", run.base))
        .await
        .expect("pools");
    let pool = pools
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "kling:video")
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(pool["spend"]["limit"], 6.0, "{pool}");
    assert_eq!(
        pool["spend"]["used"], 6.0,
        "settled at Kling's costs: {pool}"
    );
    assert_eq!(pool["spend"]["remaining"], 0.0, "{pool}");
    let resets = pool["spend"]["resets_at"].as_i64().expect("resets_at");
    assert_eq!(resets % 86_400_000, 0, "periods align to the epoch: {pool}");
    assert_eq!(pool["closed_until"], resets, "{pool}");
    // Nothing more goes out while the period is spent.
    let usage = usage(&run).await;
    assert!(usage["budget"].is_null(), "no tenant budget here: {usage}");
    assert_eq!(run.sim.stats().creates, 6);
    run.stop().await;
}

/// Grants the marker refuses (here for the pool's spend) made no create: they are taken out of
/// the account's own create log as well as the pool's, so an account's `daily` counts only
/// what reached Kling. Account `main` allows 3 a day, the pool spends 2: of the 3 grants the
/// first fill makes, 2 are marked and the account's daily shows 2 used, 1 left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_grants_leave_no_trace_in_an_accounts_create_log() {
    let run = Run::start_with(sim_options(63), 18, true, |c| {
        c.pools
            .entry("kling:video".into())
            .or_insert_with(|| slotd_core::config::PoolConfig::slots(18))
            .spend = Some(BudgetConfig {
            limit: 2.0,
            period: Duration::from_secs(86_400),
        });
        let accounts: toml::Table =
            toml::from_str("[[accounts]]\nname = \"main\"\nmax_slots = 18\ndaily = 3\n")
                .expect("accounts TOML");
        let Some(h) = c.handlers.get_mut("kling-video") else {
            panic!("kling-video is configured");
        };
        h.set_accounts("kling-video", &accounts["accounts"])
            .expect("one account");
    })
    .await;
    let id = run.submit("video", video_payload(5)).await;
    let account = eventually(
        Duration::from_secs(60),
        "2 done, the rest held",
        async || {
            let v = run.task(&id).await;
            if v["completed"] != 2 {
                return None;
            }
            let pools = get_json(&run.client, &format!("{}/v1/pools", run.base)).await?;
            let pool = pools
                .as_array()?
                .iter()
                .find(|p| p["name"] == "kling:video")?
                .clone();
            let main = pool["accounts"]
                .as_array()?
                .iter()
                .find(|a| a["name"] == "main")?
                .clone();
            Some(main)
        },
    )
    .await;
    assert_eq!(run.sim.stats().creates, 2, "the spend's worth at Kling");
    let daily = account["quotas"]
        .as_array()
        .and_then(|q| q.iter().find(|q| q["dimension"] == "daily"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        daily["used"], 2,
        "only the creates Kling received: {account}"
    );
    assert_eq!(daily["remaining"], 1, "{account}");
    run.stop().await;
}
