//! The demo's second provider: the Runway simulator (`slotd_sim::runway`) and the
//! `runway-video` handler (contract 1.1: a bearer key the host inserts, one pool per model
//! sized by the tier, provider-side cancel), so the demo shows two providers side by side.

use serde_json::{Value, json};

use slotd_core::config::{Config, HandlerConfig, Secret};
use slotd_sim::runway::{API_KEY_DEFAULT, RunwayOptions, RunwaySimHandle, RunwayStats};

/// The handler's file and name.
pub const HANDLER: &str = "runway-video";
/// The operator's tier in the demo: 5 concurrent generations per model.
const TIER: &str = "3";
/// Concurrency per model the simulated organization allows (tier 3).
pub const SLOTS_PER_MODEL: u32 = 5;

/// Start the Runway simulator at `time_scale`.
pub async fn start(time_scale: f64, seed: u64) -> anyhow::Result<RunwaySimHandle> {
    slotd_sim::runway::spawn(RunwayOptions {
        listen: "127.0.0.1:0".parse()?,
        concurrency: SLOTS_PER_MODEL,
        daily_limit: DAILY_LIMIT,
        time_scale,
        seed,
        ..RunwayOptions::default()
    })
    .await
}

/// `[handlers.runway-video]` pointing at the simulator. The key is a secret: the handler only
/// names it, and the host writes `Authorization: Bearer …` on the way out.
pub fn configure(c: &mut Config, sim: &RunwaySimHandle, time_scale: f64) {
    let mut h = HandlerConfig::default();
    h.settings
        .insert("base_url".into(), sim.base_url().to_string());
    h.settings.insert("tier".into(), TIER.into());
    h.settings
        .insert("expected_duration_scale".into(), time_scale.to_string());
    h.secrets
        .insert("api_key".into(), Secret::new(API_KEY_DEFAULT));
    h.allowed_hosts.push(sim.addr().to_string());
    c.handlers.insert(HANDLER.into(), h);
    // Runway's daily generation limit as a quota: counted by slotd, so no create is refused.
    c.pools.insert(
        "runway:gen4_turbo".into(),
        slotd_core::config::PoolConfig {
            daily: slotd_core::config::parse_rate(&format!("{DAILY_LIMIT}/day")).ok(),
            ..slotd_core::config::PoolConfig::default()
        },
    );
}

/// The demo's daily generation limit per model (tier 3's video figure, RUNWAY_API.md).
const DAILY_LIMIT: u32 = 1_000;

/// One line per quota of the pools `GET /v1/pools` answered with.
pub fn quota_lines(pools: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in pools.as_array().into_iter().flatten() {
        for q in p["quotas"].as_array().into_iter().flatten() {
            out.push(format!(
                "quota {} {}: {} of {} used ({}){}",
                p["name"].as_str().unwrap_or("?"),
                q["dimension"].as_str().unwrap_or("?"),
                q["used"],
                q["limit"],
                q["window"].as_str().unwrap_or("?"),
                match p["closed_until"].as_i64() {
                    Some(_) => "; closed now",
                    None => "",
                }
            ));
        }
    }
    out
}

fn shots(n: u32, subject: &str) -> Vec<Value> {
    (0..n)
        .map(|i| {
            json!({
                "prompt_image": format!(
                    "https://example.com/storyboard/{}-{}.png",
                    subject.replace(' ', "-"),
                    i + 1
                ),
                "prompt_text": format!("{subject}, shot {}: the camera slowly pushes in", i + 1),
            })
        })
        .collect()
}

/// The Runway part of the workload: (tenant, task type, label, payload, units).
pub fn workload() -> Vec<(&'static str, &'static str, String, Value, u32)> {
    vec![
        (
            "studio-a",
            "runway_video",
            "runway gen4_turbo, 12 shots".into(),
            json!({"model": "gen4_turbo", "ratio": "1280:720", "duration": 5,
                   "shots": shots(12, "harbour at dawn")}),
            12,
        ),
        (
            "studio-c",
            "runway_video",
            "runway gen4.5, 3 shots".into(),
            json!({"model": "gen4.5", "ratio": "720:1280", "duration": 5,
                   "shots": shots(3, "product on a turntable")}),
            3,
        ),
    ]
}

/// The summary line: what the Runway simulator saw.
pub fn summary(stats: &RunwayStats) -> String {
    let held: Vec<String> = stats
        .models
        .iter()
        .filter(|(_, m)| m.creates > 0)
        .map(|(name, m)| {
            format!(
                "{name}: {} created, at most {} held of {} (throttled now {})",
                m.creates, m.max_held_seen, m.concurrency, m.throttled
            )
        })
        .collect();
    format!(
        "runway: {} requests ({} creates, {} task reads, {} deletes, {} downloads, {} credits); {}",
        stats.requests,
        stats.creates,
        stats.gets,
        stats.deletes,
        stats.downloads,
        stats.credits_charged,
        held.join("; ")
    )
}
