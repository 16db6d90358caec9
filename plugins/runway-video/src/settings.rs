//! What the handler declares (`describe`, `stage-pools`) and its configuration
//! (`[handlers.runway-video]`): where Runway is, how the key is sent, the account's tier and
//! the scale of poll hints.

use slotd_sdk::client::Client;
use slotd_sdk::jobs;
use slotd_sdk::settings::Settings;
use slotd_sdk::{Credential, HandlerInfo, Host, StagePool};

use crate::models::Model;
use crate::payload::TASK_TYPE;

pub const HANDLER: &str = "runway-video";
/// The handler's own version.
pub const VERSION: &str = "1.0.0";
/// The one stage of a `runway_video` unit.
pub const STAGE: &str = "main";
/// The stage's default pool (units are routed to their model's pool in `plan-routed`).
pub const DEFAULT_MODEL: Model = Model::Gen4Turbo;

/// Runway's API host (not `api.runwayml.com`).
pub const BASE_URL_DEFAULT: &str = "https://api.dev.runwayml.com";
/// The API version every request names (`X-Runway-Version`).
pub const API_VERSION: &str = "2024-11-06";
/// The secret holding the API key; the host sends it as `Authorization: Bearer <key>`.
pub const API_KEY_SECRET: &str = "api_key";
/// The tier assumed when `tier` is not set (or not usable).
pub const TIER_DEFAULT: u32 = 1;

/// Runway's concurrency limit per model for tiers 1 to 5 (RUNWAY_API.md "Concurrency"): the
/// default slots of each model's pool. Tier 1 is documented as "1–2"; we take 1.
const TIER_SLOTS: [u32; 5] = [1, 3, 5, 10, 20];

/// `describe`: one task type, one stage on the `gen4_turbo` pool. It proposes no pool sizes:
/// describe cannot read the tier, and `stage-pools` proposes every model's pool (this one
/// included) sized by it. Proposing the default pool here too would conflict at tiers above 1,
/// and the host refuses a pool proposed twice with different sizes.
pub fn describe() -> HandlerInfo {
    jobs::one_stage(HANDLER, VERSION, TASK_TYPE, STAGE, &DEFAULT_MODEL.pool())
}

/// `stage-pools`: every model's pool for the stage, with the tier's concurrency as its
/// default size (the operator's `[pools."runway:<model>"] max_slots` wins).
pub fn stage_pools(host: &dyn Host) -> Vec<StagePool> {
    let pools = Model::ALL.into_iter().map(Model::pool);
    jobs::stage_pools(TASK_TYPE, STAGE, pools, tier_slots(tier(host)))
}

/// The configured tier (`tier`, 1 to 5); anything else is logged and read as tier 1.
pub fn tier(host: &dyn Host) -> u32 {
    let Some(raw) = host.config("tier") else {
        return TIER_DEFAULT;
    };
    match raw.trim().parse::<u32>() {
        Ok(t) if (1..=5).contains(&t) => t,
        _ => {
            host.warn(&format!(
                "handlers.{HANDLER}.tier must be 1, 2, 3, 4 or 5, got {raw:?}; using tier \
                 {TIER_DEFAULT} ({} slot per model)",
                tier_slots(TIER_DEFAULT)
            ));
            TIER_DEFAULT
        }
    }
}

/// Runway's concurrency per model at `tier` (1 to 5).
pub fn tier_slots(tier: u32) -> u32 {
    let i = usize::try_from(tier.clamp(1, 5) - 1).unwrap_or(0);
    TIER_SLOTS[i]
}

/// The settings a call needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Runway's base URL, without a trailing slash.
    pub base_url: String,
    /// `expected_duration_scale`: multiplies poll hints and the outcome-unknown hold, for a
    /// simulator running faster than Runway (0.001 against a 1000× one).
    pub scale: f64,
    /// `request_timeout_ms`, if set (the host caps it).
    pub timeout_ms: Option<u32>,
    /// `day_secs`: the length of Runway's rolling day for the daily limit, in seconds of slotd
    /// time, when set (a simulator with a shortened day); else 24 h times `scale`.
    pub day_secs: Option<f64>,
}

impl Config {
    /// Read the configuration; an unusable setting is an error naming its key.
    pub fn read(host: &dyn Host) -> Result<Config, String> {
        let s = Settings::new(host, HANDLER);
        let base_url = s
            .get("base_url")
            .map(|v| v.trim().trim_end_matches('/').to_string())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| BASE_URL_DEFAULT.to_string());
        if !(base_url.starts_with("https://") || base_url.starts_with("http://")) {
            return Err(format!(
                "handlers.{HANDLER}.base_url must be an http(s) URL, got {base_url:?}"
            ));
        }
        let scale = s.positive("expected_duration_scale")?.unwrap_or(1.0);
        let timeout_ms = s.checked(
            "request_timeout_ms",
            "a positive whole number of milliseconds",
            |t: &u32| *t > 0,
        )?;
        let day_secs = s.positive("day_secs")?;
        Ok(Config {
            base_url,
            scale,
            timeout_ms,
            day_secs,
        })
    }

    /// A client for Runway: every request names the API version and carries the key, which
    /// the host inserts (`send-authorized`); the guest never holds it.
    pub fn client<'h>(&self, host: &'h dyn Host) -> Client<'h> {
        let mut client = Client::new(host, &self.base_url)
            .with_credential(Credential::bearer(API_KEY_SECRET))
            .with_timeout_ms(self.timeout_ms);
        client.set_header("X-Runway-Version", API_VERSION);
        client
    }

    /// Runway's rolling day (the daily limit's window) in milliseconds of slotd time.
    pub fn day_ms(&self) -> u64 {
        match self.day_secs {
            Some(secs) => (secs * 1000.0).round() as u64,
            None => self.scaled_ms(86_400.0),
        }
        .max(1)
    }

    /// `secs` of Runway time as milliseconds of slotd time (times [`Config::scale`]).
    pub fn scaled_ms(&self, secs: f64) -> u64 {
        // Rounded to the nearest millisecond (a scale like 0.001 is inexact in binary, so
        // rounding up could add one). `as` saturates; the values are small and positive.
        (secs * 1000.0 * self.scale).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slotd_sdk::testing::ScriptedHost;
    use slotd_sdk::{Level, StageInfo};

    #[test]
    fn tiers_size_every_model_pool() {
        for (tier, slots) in [("1", 1), ("2", 3), ("3", 5), ("4", 10), (" 5 ", 20)] {
            let host = ScriptedHost::new().with_config("tier", tier);
            let pools = stage_pools(&host);
            assert_eq!(pools.len(), Model::ALL.len());
            assert!(pools.iter().all(|p| p.pool.default_max_slots == slots
                && p.stage == STAGE
                && p.task_type == TASK_TYPE));
            assert!(host.logs().is_empty());
        }
        let names: Vec<String> = stage_pools(&ScriptedHost::new())
            .into_iter()
            .map(|p| p.pool.name)
            .collect();
        assert_eq!(
            names,
            [
                "runway:gen4_turbo",
                "runway:gen4.5",
                "runway:veo3",
                "runway:veo3.1",
                "runway:veo3.1_fast"
            ]
        );
    }

    #[test]
    fn an_invalid_tier_falls_back_to_1_with_a_warning() {
        for bad in ["0", "6", "two", ""] {
            let host = ScriptedHost::new().with_config("tier", bad);
            assert_eq!(tier(&host), 1, "{bad:?}");
            let logs = host.logs();
            assert_eq!(logs.len(), 1);
            assert_eq!(logs[0].0, Level::Warn);
            assert!(logs[0].1.contains("handlers.runway-video.tier"));
        }
        assert_eq!(tier(&ScriptedHost::new()), 1);
    }

    #[test]
    fn describe_names_the_stage_and_its_default_pool_only() {
        let info = describe();
        assert_eq!(info.name, "runway-video");
        assert_eq!(info.task_types[0].name, "runway_video");
        assert_eq!(
            info.task_types[0].stages,
            [StageInfo::new("main", "runway:gen4_turbo")]
        );
        assert!(info.pools.is_empty(), "stage-pools proposes the sizes");
    }

    #[test]
    fn config_defaults_and_errors_name_the_key() {
        let cfg = Config::read(&ScriptedHost::new());
        assert_eq!(
            cfg,
            Ok(Config {
                base_url: BASE_URL_DEFAULT.into(),
                scale: 1.0,
                timeout_ms: None,
                day_secs: None,
            })
        );
        let host = ScriptedHost::new()
            .with_config("base_url", "http://127.0.0.1:18091/")
            .with_config("expected_duration_scale", "0.001")
            .with_config("request_timeout_ms", "30000");
        let cfg = Config::read(&host);
        assert_eq!(
            cfg.as_ref().map(|c| c.base_url.as_str()),
            Ok("http://127.0.0.1:18091")
        );
        assert_eq!(cfg.as_ref().map(|c| c.scaled_ms(5.0)), Ok(5));
        assert_eq!(cfg.map(|c| c.timeout_ms), Ok(Some(30_000)));
        for (key, value) in [
            ("base_url", "api.dev.runwayml.com"),
            ("expected_duration_scale", "0"),
            ("request_timeout_ms", "-1"),
        ] {
            let host = ScriptedHost::new().with_config(key, value);
            let err = Config::read(&host).err().unwrap_or_default();
            assert!(
                err.contains(&format!("handlers.runway-video.{key}")),
                "{err}"
            );
        }
    }
}
