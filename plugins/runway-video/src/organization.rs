//! Contract 1.3 `provider`: what the handler knows of Runway beyond one unit.
//!
//! - `durations`: a task's expected run from its model and clip length (RUNWAY_API.md
//!   "Timing": 6–15 s of generation per second of clip, slower models more), so a fresh slotd
//!   has ETAs and deadline decisions before its first job has ended.
//! - `limits`: `GET /v1/organization`, the account's authoritative numbers: per model
//!   `tier.models[m].maxConcurrentGenerations` (the pool's slots), `.maxDailyGenerations`
//!   (creates per rolling 24 h) and `usage.models[m].dailyGenerations` (today's creates by
//!   every client of the key), so a pool starts a day knowing what it has left. The same
//!   figures tell a create's 429 for the daily limit from one for Runway's rate limit
//!   ([`crate::rate_limit`]).

use serde_json::Value;
use slotd_sdk::client::{Call, transport_error};
use slotd_sdk::{ExpectedDuration, Host, LimitsContext, PoolLimits, StatedQuota};

use crate::answers;
use crate::models::Model;
use crate::settings::Config;
use crate::spec::Spec;

/// Runway's organization endpoint.
pub const ORGANIZATION_PATH: &str = "/v1/organization";

/// A unit's expected run: the median halfway through its model's range for its clip length,
/// the 95th percentile near the top of it; both times `expected_duration_scale`.
pub fn expected(cfg: &Config, spec: &str) -> Option<ExpectedDuration> {
    let spec = Spec::read(spec).ok()?;
    let (lo, hi) = spec.model.expected_secs(spec.duration);
    let p50 = cfg.scaled_ms(lo + (hi - lo) * 0.5).max(1);
    let p95 = cfg.scaled_ms(lo + (hi - lo) * 0.95).max(p50);
    Some(ExpectedDuration {
        p50_ms: p50,
        p95_ms: p95,
    })
}

/// The account's limits per model pool, read from Runway.
pub fn limits(host: &dyn Host, _ctx: &LimitsContext) -> Result<Vec<PoolLimits>, String> {
    // `read_organization = "false"`: publish nothing (the configuration stands).
    if host
        .config("read_organization")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("false"))
    {
        return Ok(Vec::new());
    }
    let cfg = Config::read(host)?;
    Ok(of_organization(&cfg, &read(host, &cfg)?))
}

/// `GET /v1/organization`'s body, read with the account's key; an error says what failed
/// (`reading /v1/organization: HTTP 503: busy`).
pub fn read(host: &dyn Host, cfg: &Config) -> Result<Value, String> {
    let answer = cfg
        .client(host)
        .send(&[Call::Get(ORGANIZATION_PATH.into())])
        .pop()
        .unwrap_or_else(|| Err(slotd_sdk::HttpError::Transport("no answer".into())));
    let r = answer.map_err(|e| {
        format!(
            "reading {ORGANIZATION_PATH}: {}",
            transport_error(&e).message
        )
    })?;
    if !(200..300).contains(&r.status) {
        return Err(format!(
            "reading {ORGANIZATION_PATH}: HTTP {}: {}",
            r.status,
            answers::error(&r).message
        ));
    }
    serde_json::from_slice(&r.body)
        .map_err(|e| format!("reading {ORGANIZATION_PATH}: the answer is not JSON: {e}"))
}

/// A model's generations in Runway's rolling 24 hours and its daily limit, as the
/// organization states them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Daily {
    /// `usage.models[m].dailyGenerations` (0 when the model is not in `usage`: none today).
    pub used: u32,
    /// `tier.models[m].maxDailyGenerations`.
    pub limit: u32,
}

/// `model`'s [`Daily`] figures in an organization object; `None` when Runway does not state
/// its daily limit as a whole number.
pub fn daily(body: &Value, model: Model) -> Option<Daily> {
    let key = pointer_key(model.as_str());
    let limit = count(body.pointer(&format!("/tier/models/{key}/maxDailyGenerations")))?;
    let used = count(body.pointer(&format!("/usage/models/{key}/dailyGenerations")));
    Some(Daily {
        used: used.unwrap_or(0),
        limit,
    })
}

/// A whole number of the organization object (missing, negative or too large: `None`).
fn count(v: Option<&Value>) -> Option<u32> {
    v.and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
}

/// The pools' limits in an organization object; models Runway does not list are left out
/// (their configuration stands), and so is any number that is missing or not a whole number.
pub fn of_organization(cfg: &Config, body: &Value) -> Vec<PoolLimits> {
    Model::ALL
        .into_iter()
        .filter_map(|model| {
            let tier = body.pointer(&format!("/tier/models/{}", pointer_key(model.as_str())))?;
            let quotas = daily(body, model)
                .map(|d| StatedQuota {
                    dimension: "daily".into(),
                    limit: d.limit,
                    window_ms: cfg.day_ms(),
                    used: Some(d.used),
                })
                .into_iter()
                .collect();
            Some(PoolLimits {
                pool: model.pool(),
                max_slots: count(tier.get("maxConcurrentGenerations")),
                quotas,
            })
        })
        .collect()
}

/// A JSON pointer segment for a key (`~` and `/` escaped; model names have neither today).
fn pointer_key(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg(scale: f64) -> Config {
        Config {
            base_url: "https://api.test".into(),
            scale,
            timeout_ms: None,
            day_secs: None,
        }
    }

    #[test]
    fn the_organization_sizes_each_listed_model_and_counts_todays_creates() {
        let body = json!({
            "creditBalance": 1000,
            "tier": {"maxMonthlyCreditSpend": 5000, "models": {
                "gen4_turbo": {"maxConcurrentGenerations": 2, "maxDailyGenerations": 50},
                "gen4.5": {"maxConcurrentGenerations": 3, "maxDailyGenerations": "lots"}
            }},
            "usage": {"models": {"gen4_turbo": {"dailyGenerations": 12}}}
        });
        let got = of_organization(&cfg(1.0), &body);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].pool, "runway:gen4_turbo");
        assert_eq!(got[0].max_slots, Some(2));
        assert_eq!(
            got[0].quotas,
            vec![StatedQuota {
                dimension: "daily".into(),
                limit: 50,
                window_ms: 86_400_000,
                used: Some(12),
            }]
        );
        // A daily limit that is not a number is left out; the concurrency still counts.
        assert_eq!(got[1].pool, "runway:gen4.5");
        assert_eq!(got[1].max_slots, Some(3));
        assert!(got[1].quotas.is_empty());
        // The window follows the scale of a faster simulator.
        let fast = of_organization(&cfg(0.001), &body);
        assert_eq!(fast[0].quotas[0].window_ms, 86_400);
        assert!(of_organization(&cfg(1.0), &json!({"tier": 3})).is_empty());
    }

    #[test]
    fn limits_read_the_organization_with_the_key_and_name_a_refusal() {
        use crate::tests::support::keyed_host;
        use slotd_sdk::testing::json_answer;
        let ctx = LimitsContext {
            now_ms: 0,
            account: None,
        };
        let host = keyed_host().on_request("GET", ORGANIZATION_PATH, |_| {
            json_answer(
                200,
                &json!({"tier": {"models": {"veo3": {"maxConcurrentGenerations": 1,
                    "maxDailyGenerations": 4}}}, "usage": {"models": {"veo3": {"dailyGenerations": 4}}}}),
            )
        });
        let got = limits(&host, &ctx).expect("read");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].pool, "runway:veo3");
        assert_eq!(got[0].quotas[0].used, Some(4));
        let sent = host.requests();
        assert_eq!(sent.len(), 1);
        let host = keyed_host().on_any(|_| json_answer(401, &json!({"error": "Invalid API key"})));
        let err = limits(&host, &ctx).expect_err("refused");
        assert!(
            err.contains("401") && err.contains("Invalid API key"),
            "{err}"
        );
    }

    #[test]
    fn expected_durations_follow_the_model_and_the_clip() {
        let body = json!({"model": "gen4_turbo", "duration": 5});
        let spec = Spec::write(
            crate::models::Endpoint::ImageToVideo,
            body.as_object().cloned().unwrap_or_default(),
        );
        let e = expected(&cfg(1.0), &spec).expect("known");
        // 6–15 s per clip second: 30–75 s for a 5 s clip.
        assert_eq!(e.p50_ms, 52_500);
        assert_eq!(e.p95_ms, 72_750);
        assert!(expected(&cfg(1.0), "not a spec").is_none());
    }
}
