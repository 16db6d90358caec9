//! The account's runtime controls (`POST /_sim/account`): revoked credentials answer 401/1002
//! until restored; a balance is spent by accepted creates at the unit price and a create it
//! does not cover is refused 429/1102; succeeded tasks report that price as
//! `final_unit_deduction`; other clients taking the account's capacity for a while refuse
//! creates 429/1303 until they let go.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::*;

const TEXT2VIDEO: &str = "/v1/videos/text2video";

/// `POST /_sim/account` (no token needed: it is the simulator's own control surface).
async fn account(c: &Client, body: Value) -> anyhow::Result<(StatusCode, Value)> {
    let resp = c
        .http
        .post(format!("{}/_sim/account", c.base))
        .json(&body)
        .send()
        .await?;
    Ok((resp.status(), resp.json().await?))
}

fn clip(ext: &str, mode: &str, duration: &str) -> Value {
    json!({"model_name": "kling-v1-6", "prompt": "p", "mode": mode, "duration": duration,
           "external_task_id": ext})
}

#[tokio::test]
async fn revoked_credentials_are_refused_until_restored() -> anyhow::Result<()> {
    let handle = sim(frozen()).await?;
    let c = Client::new(&handle)?;
    let id = c.create(TEXT2VIDEO, clip("r1", "std", "5")).await?;

    let (status, v) = account(&c, json!({"revoked": true})).await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        v,
        json!({"revoked": true, "balance": null, "over_capacity_rate": 0.0,
               "other_client": null})
    );
    for (status, v) in [
        c.get(&format!("{TEXT2VIDEO}/{id}")).await?,
        c.post(TEXT2VIDEO, clip("r2", "std", "5")).await?,
    ] {
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{v}");
        assert_eq!(v["code"], 1002, "{v}");
        assert!(
            v["message"]
                .as_str()
                .unwrap_or_default()
                .contains("invalid"),
            "{v}"
        );
    }
    let stats = handle.stats();
    assert_eq!((stats.revoked_refusals, stats.auth_refusals), (2, 2));
    assert_eq!(stats.creates, 1, "nothing created while revoked");

    let (_, v) = account(&c, json!({"revoked": false})).await?;
    assert_eq!(v["revoked"], false);
    let (status, v) = c.get(&format!("{TEXT2VIDEO}/{id}")).await?;
    assert_eq!(
        (status, v["code"].clone()),
        (StatusCode::OK, json!(0)),
        "{v}"
    );
    c.create(TEXT2VIDEO, clip("r2", "std", "5")).await?;
    handle.shutdown().await
}

#[tokio::test]
async fn a_balance_is_spent_at_the_unit_price_then_refused_with_1102() -> anyhow::Result<()> {
    let handle = sim(frozen()).await?;
    let c = Client::new(&handle)?;
    let (_, v) = account(&c, json!({"balance": 4.5})).await?;
    assert_eq!(
        v,
        json!({"revoked": false, "balance": 4.5, "over_capacity_rate": 0.0,
               "other_client": null})
    );

    c.create(TEXT2VIDEO, clip("b1", "std", "5")).await?;
    c.create(TEXT2VIDEO, clip("b2", "pro", "5")).await?;
    let shown: Value = c
        .http
        .get(format!("{}/_sim/account", c.base))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(shown["balance"], 0.0, "4.5 − 1 (std 5 s) − 3.5 (pro 5 s)");

    let (status, v) = c.post(TEXT2VIDEO, clip("b3", "std", "5")).await?;
    assert_eq!(
        (status, v["code"].clone()),
        (StatusCode::TOO_MANY_REQUESTS, json!(1102)),
        "{v}"
    );
    let stats = handle.stats();
    assert_eq!((stats.balance_refusals, stats.creates), (1, 2));

    // Unlimited again: the same create goes through.
    let (_, v) = account(&c, json!({"balance": null})).await?;
    assert_eq!(v["balance"], Value::Null);
    c.create(TEXT2VIDEO, clip("b3", "std", "5")).await?;

    let (status, v) = account(&c, json!({"balance": -1})).await?;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    handle.shutdown().await
}

#[tokio::test]
async fn the_start_balance_comes_from_the_options() -> anyhow::Result<()> {
    let handle = sim(SimOptions {
        balance: Some(6.0),
        ..frozen()
    })
    .await?;
    let c = Client::new(&handle)?;
    let (status, v) = c.post(TEXT2VIDEO, clip("s1", "pro", "10")).await?;
    assert_eq!(
        (status, v["code"].clone()),
        (StatusCode::TOO_MANY_REQUESTS, json!(1102))
    );
    c.create(TEXT2VIDEO, clip("s2", "std", "10")).await?;
    let (_, v) = account(&c, json!({})).await?;
    assert_eq!(v["balance"], 4.0);
    handle.shutdown().await
}

#[tokio::test]
async fn succeeded_tasks_report_their_price_as_final_unit_deduction() -> anyhow::Result<()> {
    let handle = sim(fast()).await?;
    let c = Client::new(&handle)?;
    for (ext, mode, duration, price) in [
        ("p1", "std", "5", "1"),
        ("p2", "std", "10", "2"),
        ("p3", "pro", "5", "3.5"),
        ("p4", "pro", "10", "7"),
    ] {
        let id = c.create(TEXT2VIDEO, clip(ext, mode, duration)).await?;
        let task = c
            .wait_status(&format!("{TEXT2VIDEO}/{id}"), "succeed")
            .await?;
        assert_eq!(
            task["final_unit_deduction"], price,
            "{mode} {duration}s: {task}"
        );
    }
    handle.shutdown().await
}

#[tokio::test]
async fn other_clients_hold_the_capacity_for_a_while() -> anyhow::Result<()> {
    let handle = sim(frozen()).await?;
    let c = Client::new(&handle)?;
    let (_, v) = account(&c, json!({"over_capacity_rate": 1.0})).await?;
    assert_eq!(v["over_capacity_rate"], 1.0);
    let (status, v) = c.post(TEXT2VIDEO, clip("o1", "std", "5")).await?;
    assert_eq!(
        (status, v["code"].clone()),
        (StatusCode::TOO_MANY_REQUESTS, json!(1303)),
        "{v}"
    );
    // They let go: the same create goes through, once.
    account(&c, json!({"over_capacity_rate": 0})).await?;
    c.create(TEXT2VIDEO, clip("o1", "std", "5")).await?;
    let stats = handle.stats();
    assert_eq!((stats.rate_limited_1303, stats.creates), (1, 1));

    let (status, v) = account(&c, json!({"over_capacity_rate": 2})).await?;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    handle.shutdown().await
}
