//! fal's concurrency belongs to the account, over every model (FAL_API.md): with the three
//! Pika models' pools on one `[provider_accounts.fal]` of 4, three busy models never put more
//! than 4 of ours at fal, so none of ours ever waits `IN_QUEUE` behind our own; without it each
//! model's pool takes its own 4 and fal queues the excess (shown first, in the same test, so
//! the figure that matters is seen to move).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use slotd_core::config::{ProviderAccountConfig, ShareConfig};
use slotd_sim::fal::{ACCOUNT_DEFAULT, FalAccountStats, FalOptions};

use crate::fal::{Run, sim_options};

/// The account's limit at fal, and the most slotd is configured to hold there.
const ACCOUNT: u32 = 4;
const MODELS: [&str; 3] = [
    "fal-ai/pika/v2.2/text-to-video",
    "fal-ai/pika/v2.2/image-to-video",
    "fal-ai/pika/v2.2/pikascenes",
];

/// `shots` shots for `model`, with the inputs its schema needs.
fn payload(model: &str, shots: usize) -> Value {
    let shots: Vec<Value> = (0..shots)
        .map(|i| {
            let mut s = json!({"prompt": format!("{model} shot {i}: a kite over a beach"),
                               "resolution": "720p", "seed": i});
            if model.ends_with("image-to-video") {
                s["image_url"] = json!("https://example.com/kite.png");
            }
            if model.ends_with("pikascenes") {
                s["image_urls"] = json!(["https://example.com/kite.png"]);
            }
            s
        })
        .collect();
    json!({"model": model, "shots": shots})
}

/// 8 shots on each of the three models at once, to the end; the account's figures at fal.
async fn three_busy_models(share: bool) -> FalAccountStats {
    let opts = FalOptions {
        concurrency: ACCOUNT,
        ..sim_options()
    };
    let run = Run::start(opts, |c, _| {
        c.pools.clear();
        if share {
            let pools = MODELS
                .iter()
                .map(|m| {
                    (
                        format!("fal:{m}"),
                        ShareConfig {
                            min: 1,
                            ..ShareConfig::default()
                        },
                    )
                })
                .collect::<BTreeMap<_, _>>();
            c.provider_accounts.insert(
                "fal".into(),
                ProviderAccountConfig {
                    max_slots: ACCOUNT,
                    pools,
                },
            );
        }
    })
    .await;
    let mut ids = Vec::new();
    for m in MODELS {
        ids.push(run.submit(payload(m, 8)).await);
    }
    let views = run.wait_terminal(&ids, Duration::from_secs(180)).await;
    for v in &views {
        assert_eq!(v["status"], "completed", "{v}");
    }
    let stats = run.sim.stats();
    let account = stats.accounts[ACCOUNT_DEFAULT].clone();
    assert_eq!(account.submits, 24, "each shot submitted once");
    run.stop().await.shutdown().await.expect("sim stop");
    account
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_busy_models_never_put_more_than_the_accounts_limit_at_fal() {
    // Each model's pool on its own: 3 × 4 proposed, fal queues what is over its 4.
    let apart = three_busy_models(false).await;
    assert!(
        apart.max_unfinished > u64::from(ACCOUNT),
        "without the account the pools together exceed it: {apart:?}"
    );
    // On one account of 4: never more than 4 of ours at fal, so none waited IN_QUEUE.
    let shared = three_busy_models(true).await;
    assert!(
        shared.max_unfinished <= u64::from(ACCOUNT),
        "fal held {} of ours at once; the account runs {ACCOUNT}",
        shared.max_unfinished
    );
    assert_eq!(
        shared.max_in_progress,
        u64::from(ACCOUNT),
        "the account was used to its limit"
    );
    println!(
        "fal account of {ACCOUNT}, three models busy: ours at fal at once {} apart (queued \
         behind our own), {} on one provider account",
        apart.max_unfinished, shared.max_unfinished
    );
}
