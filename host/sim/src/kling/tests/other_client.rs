//! Another client of the account holding a share of its concurrency in bursts: slotd's creates
//! are refused 429/1303 while it holds its share, its hold ramps up as slotd's jobs free room,
//! and at the burst's end everything is released at once.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::*;

const TEXT2VIDEO: &str = "/v1/videos/text2video";

fn clip(ext: &str) -> Value {
    json!({"model_name": "kling-v1-6", "prompt": "p", "mode": "std", "duration": "5",
           "external_task_id": ext})
}

/// A job of 60 to 300 simulated seconds.
fn long_clip(ext: &str) -> Value {
    json!({"model_name": "kling-v1-6", "prompt": "p", "mode": "pro", "duration": "10",
           "external_task_id": ext})
}

/// Creates `ext`, expecting 429/1303.
async fn refused(c: &Client, ext: &str) -> anyhow::Result<()> {
    let (status, v) = c.post(TEXT2VIDEO, clip(ext)).await?;
    if (status, v["code"].as_i64()) != (StatusCode::TOO_MANY_REQUESTS, Some(1303)) {
        bail!("create {ext}: expected 429/1303, got {status} {v}");
    }
    Ok(())
}

/// Polls the stats until `done` holds, checking `each` on every snapshot on the way.
async fn stats_until(
    handle: &SimHandle,
    done: impl Fn(&SimStats) -> bool,
    each: impl Fn(&SimStats),
) -> anyhow::Result<SimStats> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let stats = handle.stats();
        each(&stats);
        if done(&stats) {
            return Ok(stats);
        }
        if Instant::now() > deadline {
            bail!("the stats did not get there in {DEADLINE:?}: {stats:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn burst_ended(stats: &SimStats) -> bool {
    stats
        .other_client_bursts
        .first()
        .is_some_and(|b| b.end.is_some())
}

#[tokio::test]
async fn creates_are_refused_while_the_other_client_holds_its_share() -> anyhow::Result<()> {
    // A burst of 20 simulated seconds (1 s here) from the first create.
    let handle = sim(SimOptions {
        concurrency: 2,
        time_scale: 0.05,
        long_tail_rate: 0.0,
        other_client_slots: 1,
        other_client_burst_secs: 20.0,
        other_client_gap_secs: 1e6,
        other_client_first_secs: Some(0.0),
        ..SimOptions::default()
    })
    .await?;
    let c = Client::new(&handle)?;
    c.create(TEXT2VIDEO, clip("a")).await?;
    refused(&c, "b").await?;
    let stats = handle.stats();
    assert_eq!(
        (
            stats.rate_limited_1303,
            stats.rate_limited_1303_other_client,
            stats.other_client_held
        ),
        (1, 1, 1)
    );
    let first = stats
        .other_client_bursts
        .first()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (first.start, first.end, first.slots, first.peak_held),
        (0.0, None, 1, 1)
    );

    // The burst ends 20 s after the first create: the same create goes through.
    let stats = stats_until(&handle, burst_ended, |_| {}).await?;
    assert_eq!(stats.other_client_held, 0);
    c.create(TEXT2VIDEO, clip("b")).await?;
    let stats = handle.stats();
    let bursts = &stats.other_client_bursts;
    let end = bursts.first().and_then(|b| b.end).unwrap_or_default();
    assert!((end - 20.0).abs() < 1e-6, "{bursts:?}");
    assert_eq!(bursts.len(), 1);

    // The other client's jobs are none of slotd's; the refill ran until "b" started.
    let jobs = handle.jobs();
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    let b_started = jobs
        .iter()
        .find(|j| j.external_task_id.as_deref() == Some("b"));
    let delays = refill_delays(&jobs, bursts, 2);
    let (Some(b), [Some(delay)]) = (b_started, delays.as_slice()) else {
        bail!("expected one delay and job b: {delays:?} {jobs:?}");
    };
    assert!(
        (delay - (b.started - end)).abs() < 1e-9 && *delay >= 0.0,
        "{delay}"
    );
    handle.shutdown().await
}

#[tokio::test]
async fn the_hold_ramps_as_room_frees_and_is_released_at_the_burst_end() -> anyhow::Result<()> {
    let handle = sim(SimOptions {
        concurrency: 3,
        time_scale: 0.002,
        long_tail_rate: 0.0,
        ..SimOptions::default()
    })
    .await?;
    let c = Client::new(&handle)?;
    for ext in ["j1", "j2", "j3"] {
        c.create(TEXT2VIDEO, long_clip(ext)).await?;
    }
    // A burst of 2500 simulated seconds (5 s here) begins now, with the account full.
    let plan = json!({"slots": 2, "burst_secs": 2500, "gap_secs": 1e6, "first_secs": 0});
    let (status, v) = account(&c, json!({ "other_client": plan })).await?;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["other_client"]["slots"], 2, "{v}");
    refused(&c, "full").await?;
    let stats = handle.stats();
    if stats.running == 3 {
        // No job ended yet (they last 120 ms at least): slotd's own jobs filled the account.
        let held = (
            stats.other_client_held,
            stats.rate_limited_1303_other_client,
        );
        assert_eq!(held, (0, 0));
    }

    // slotd's jobs end one by one and the other client takes each freed slot, up to 2.
    let stats = stats_until(
        &handle,
        |s| s.running == 0,
        |s| assert_eq!(s.other_client_held, 2.min(3 - s.running), "{s:?}"),
    )
    .await?;
    assert!(
        !burst_ended(&stats),
        "the burst outlasts the jobs: {stats:?}"
    );
    c.create(TEXT2VIDEO, clip("j4")).await?;
    refused(&c, "j5").await?;
    let refusals = handle.stats().rate_limited_1303_other_client;
    assert_eq!(refusals, stats.rate_limited_1303_other_client + 1);

    // At the burst's end everything is released at once.
    let stats = stats_until(&handle, burst_ended, |_| {}).await?;
    assert_eq!(stats.other_client_held, 0);
    c.create(TEXT2VIDEO, clip("j5")).await?;
    c.create(TEXT2VIDEO, clip("j6")).await?;
    let burst = stats
        .other_client_bursts
        .first()
        .cloned()
        .unwrap_or_default();
    assert_eq!((burst.slots, burst.peak_held), (2, 2));
    let length = burst.end.unwrap_or_default() - burst.start;
    assert!((length - 2500.0).abs() < 1e-6, "{burst:?}");

    let (_, v) = account(&c, json!({"other_client": null})).await?;
    assert_eq!(v["other_client"], Value::Null);
    let (status, v) = account(&c, json!({"other_client": {"slots": 3}})).await?;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert!(v["error"].to_string().contains("other_client.slots"), "{v}");
    assert_eq!(handle.stats().other_client_bursts.len(), 1);
    handle.shutdown().await
}

#[tokio::test]
async fn other_client_options_are_checked_naming_the_flag() -> anyhow::Result<()> {
    let base = SimOptions {
        concurrency: 4,
        other_client_slots: 2,
        ..frozen()
    };
    assert!(base.validate().is_ok());
    for (opts, flag) in [
        (
            SimOptions {
                other_client_slots: 4,
                ..base.clone()
            },
            "--other-client-slots",
        ),
        (
            SimOptions {
                other_client_burst_secs: 0.0,
                ..base.clone()
            },
            "--other-client-burst-secs",
        ),
        (
            SimOptions {
                other_client_gap_secs: -5.0,
                ..base.clone()
            },
            "--other-client-gap-secs",
        ),
        (
            SimOptions {
                other_client_first_secs: Some(f64::INFINITY),
                ..base.clone()
            },
            "--other-client-first-secs",
        ),
    ] {
        let err = match sim(opts).await {
            Ok(handle) => {
                handle.shutdown().await?;
                bail!("{flag}: accepted");
            }
            Err(e) => e.to_string(),
        };
        assert!(err.contains(flag), "{flag}: {err}");
    }
    Ok(())
}

/// `POST /_sim/account`.
async fn account(c: &Client, body: Value) -> anyhow::Result<(StatusCode, Value)> {
    let resp = c
        .http
        .post(format!("{}/_sim/account", c.base))
        .json(&body)
        .send()
        .await?;
    Ok((resp.status(), resp.json().await?))
}
