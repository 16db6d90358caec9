//! The demo's third provider: Pika through fal's queue API. The fal simulator
//! (`slotd_sim::fal`) and the `fal-video` handler (contract 1.4: a `Key` the host inserts, a
//! pool per model, webhooks signed with Ed25519 and verified against the simulator's published
//! keys, jobs fal holds in its own queue shown and fed back into the pool's limit).

use serde_json::{Value, json};

use slotd_core::config::{Config, HandlerConfig, ProviderAccountConfig, Secret, ShareConfig};
use slotd_sim::fal::{ACCOUNT_DEFAULT, FalOptions, FalSimHandle, FalStats, KEY_DEFAULT};

/// The handler's file and name.
pub const HANDLER: &str = "fal-video";
/// Requests the simulated fal account runs at once.
pub const ACCOUNT_CONCURRENCY: u32 = 4;
/// The Pika models the handler serves, each its own pool (`fal:<model id>`), with the slots
/// kept for it while it has work: fal's concurrency is the account's over every model, so the
/// four pools share the account as one provider account (`[provider_accounts.fal]`), the two
/// the demo uses guaranteed one each, any of them borrowing what the others leave idle.
pub const POOLS: [(&str, u32); 4] = [
    ("fal-ai/pika/v2.2/text-to-video", 1),
    ("fal-ai/pika/v2.2/image-to-video", 1),
    ("fal-ai/pika/v2.2/pikascenes", 0),
    ("fal-ai/pika/v2.2/pikaframes", 0),
];

/// Start the fal simulator at `time_scale`.
pub async fn start(time_scale: f64, seed: u64) -> anyhow::Result<FalSimHandle> {
    slotd_sim::fal::spawn(FalOptions {
        listen: "127.0.0.1:0".parse()?,
        concurrency: ACCOUNT_CONCURRENCY,
        time_scale,
        seed,
        ..FalOptions::default()
    })
    .await
}

/// `[handlers.fal-video]` pointing every fal host (queue, history, signing keys) at the
/// simulator; the key is a secret the host sends as `Authorization: Key …`.
pub fn configure(c: &mut Config, sim: &FalSimHandle, time_scale: f64) {
    let mut h = HandlerConfig::default();
    for (k, v) in [
        ("base_url", sim.base_url().to_string()),
        ("history_url", sim.base_url().to_string()),
        ("jwks_url", sim.jwks_url()),
        ("concurrency", ACCOUNT_CONCURRENCY.to_string()),
        ("expected_duration_scale", time_scale.to_string()),
    ] {
        h.settings.insert(k.into(), v);
    }
    h.secrets.insert("api_key".into(), Secret::new(KEY_DEFAULT));
    h.allowed_hosts.push(sim.addr().to_string());
    c.handlers.insert(HANDLER.into(), h);
    c.provider_accounts.insert(
        "fal".into(),
        ProviderAccountConfig {
            max_slots: ACCOUNT_CONCURRENCY,
            pools: POOLS
                .iter()
                .map(|(model, min)| {
                    (
                        format!("fal:{model}"),
                        ShareConfig {
                            min: *min,
                            ..ShareConfig::default()
                        },
                    )
                })
                .collect(),
        },
    );
}

/// The Pika part of the workload: (tenant, task type, label, payload, units).
pub fn workload() -> Vec<(&'static str, &'static str, String, Value, u32)> {
    let text: Vec<Value> = (1..=6)
        .map(|i| {
            json!({"prompt": format!("origami cranes take off from a desk, shot {i}"),
                   "duration": 5, "resolution": "720p", "aspect_ratio": "16:9"})
        })
        .collect();
    let image: Vec<Value> = (1..=3)
        .map(|i| {
            json!({"image_url": format!("https://example.com/stills/lighthouse-{i}.png"),
                   "prompt": format!("waves break against the lighthouse, shot {i}"),
                   "resolution": "720p"})
        })
        .collect();
    vec![
        (
            "studio-b",
            "fal_video",
            "pika 2.2 text-to-video, 6 shots".into(),
            json!({"model": POOLS[0].0, "shots": text}),
            6,
        ),
        (
            "studio-c",
            "fal_video",
            "pika 2.2 image-to-video, 3 shots".into(),
            json!({"model": POOLS[1].0, "shots": image}),
            3,
        ),
    ]
}

/// The summary line: what the fal simulator saw.
pub fn summary(stats: &FalStats) -> String {
    let (submits, max_unfinished) = stats
        .accounts
        .get(ACCOUNT_DEFAULT)
        .map_or((0, 0), |a| (a.submits, a.max_unfinished));
    format!(
        "fal (pika): {} requests ({submits} submits, {} status reads, {} result reads, {} downloads, \
         {} webhooks delivered, {} cancelled), at most {max_unfinished} of ours unfinished at fal \
         (account runs {ACCOUNT_CONCURRENCY}), ${:.2} billed",
        stats.requests,
        stats.status_reads,
        stats.result_reads,
        stats.file_downloads,
        stats.webhooks_sent,
        stats.cancelled,
        stats.billed_usd,
    )
}
