//! What the handler declares (`describe`, `stage-pools`) and its configuration
//! (`[handlers.fal-video]`): where fal's queue, request history and webhook keys are, how the
//! key is sent, the account's concurrency, the scale of times, and optional submit headers.

use slotd_sdk::jobs;
use slotd_sdk::settings::Settings;
use slotd_sdk::{Credential, HandlerInfo, Host, StagePool};

use crate::models::{Model, TASK_TYPE};

pub const HANDLER: &str = "fal-video";
/// The handler's own version.
pub const VERSION: &str = "1.0.0";
/// The one stage of a `fal_video` unit.
pub const STAGE: &str = "main";
/// The stage's default pool (units are routed to their model's pool in `plan-routed`).
pub const DEFAULT_MODEL: Model = Model::TextToVideo;

pub const BASE_URL_DEFAULT: &str = "https://queue.fal.run";
pub const JWKS_URL_DEFAULT: &str = "https://rest.alpha.fal.ai/.well-known/jwks.json";
pub const HISTORY_URL_DEFAULT: &str = "https://api.fal.ai";
/// The secret holding the key (`<key_id>:<key_secret>`); the host sends it as
/// `Authorization: Key <key>`.
pub const API_KEY_SECRET: &str = "api_key";
/// New fal accounts may run 2 requests at once.
pub const CONCURRENCY_DEFAULT: u32 = 2;

/// `describe`: one task type, one stage on the text-to-video pool. It proposes no sizes:
/// `stage-pools` proposes every model's pool (this one included) sized by `concurrency`, and
/// the host refuses a pool proposed twice with different sizes.
pub fn describe() -> HandlerInfo {
    jobs::one_stage(HANDLER, VERSION, TASK_TYPE, STAGE, &DEFAULT_MODEL.pool())
}

/// `stage-pools`: every model's pool with the account's concurrency as its default size (the
/// operator's `[pools."fal:<model>"] max_slots` wins). A malformed `concurrency` cannot fail
/// this call: it is logged and read as the default.
pub fn stage_pools(host: &dyn Host) -> Vec<StagePool> {
    let slots = match concurrency(&Settings::new(host, HANDLER)) {
        Ok(n) => n,
        Err(e) => {
            host.warn(&format!(
                "{e}; proposing {CONCURRENCY_DEFAULT} slots per pool"
            ));
            CONCURRENCY_DEFAULT
        }
    };
    let pools = Model::ALL.into_iter().map(Model::pool);
    jobs::stage_pools(TASK_TYPE, STAGE, pools, slots)
}

fn concurrency(s: &Settings) -> Result<u32, String> {
    Ok(
        s.checked("concurrency", "a whole number from 1 to 1000", |n: &u32| {
            (1..=1000).contains(n)
        })?
        .unwrap_or(CONCURRENCY_DEFAULT),
    )
}

/// `X-Fal-Queue-Priority`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    Normal,
    Low,
}

impl Priority {
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Normal => "normal",
            Priority::Low => "low",
        }
    }
}

/// The settings a call needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// fal's queue, without a trailing slash.
    pub base_url: String,
    /// The JWKS of fal's webhook signing keys.
    pub jwks_url: String,
    /// The platform API serving the request history, without a trailing slash.
    pub history_url: String,
    /// The account's concurrency (the proposed pool size).
    pub concurrency: u32,
    /// `expected_duration_scale`: multiplies expected runs, poll hints and holds.
    pub scale: f64,
    /// `request_timeout_ms`, if set (the host caps it).
    pub timeout_ms: Option<u32>,
    /// `priority`: sent as `X-Fal-Queue-Priority` on submits.
    pub priority: Option<Priority>,
    /// `start_timeout_s`: sent as `X-Fal-Request-Timeout` on submits.
    pub start_timeout_s: Option<u32>,
    /// `media_ttl_s`: sent as `X-Fal-Object-Lifecycle-Preference` on submits.
    pub media_ttl_s: Option<u64>,
}

impl Config {
    /// Read the configuration; an unusable setting is an error naming its key.
    pub fn read(host: &dyn Host) -> Result<Config, String> {
        let s = Settings::new(host, HANDLER);
        let priority = match s.get("priority").as_deref().map(str::trim) {
            None => None,
            Some("normal") => Some(Priority::Normal),
            Some("low") => Some(Priority::Low),
            Some(other) => {
                return Err(format!(
                    "handlers.{HANDLER}.priority must be \"normal\" or \"low\", got {other:?}"
                ));
            }
        };
        Ok(Config {
            base_url: url(&s, "base_url", BASE_URL_DEFAULT)?,
            jwks_url: url(&s, "jwks_url", JWKS_URL_DEFAULT)?,
            history_url: url(&s, "history_url", HISTORY_URL_DEFAULT)?,
            concurrency: concurrency(&s)?,
            scale: s.positive("expected_duration_scale")?.unwrap_or(1.0),
            timeout_ms: s.checked(
                "request_timeout_ms",
                "a positive whole number of milliseconds",
                |t: &u32| *t > 0,
            )?,
            priority,
            start_timeout_s: s.checked(
                "start_timeout_s",
                "a whole number of seconds above 1",
                |t: &u32| *t > 1,
            )?,
            media_ttl_s: s.checked(
                "media_ttl_s",
                "a positive whole number of seconds",
                |t: &u64| *t > 0,
            )?,
        })
    }

    /// The credential every request carries: the host inserts `Authorization: Key <api_key>`.
    pub fn credential() -> Credential {
        Credential {
            header: "Authorization".into(),
            secret: API_KEY_SECRET.into(),
            prefix: "Key ".into(),
        }
    }

    /// `secs` of fal time as milliseconds of slotd time (times [`Config::scale`]).
    pub fn scaled_ms(&self, secs: f64) -> u64 {
        // Rounded to the nearest millisecond; `as` saturates, the values are small.
        (secs * 1000.0 * self.scale).round() as u64
    }
}

/// An http(s) URL setting with a host, without a trailing slash.
fn url(s: &Settings, key: &str, default: &str) -> Result<String, String> {
    let v = s
        .get(key)
        .map(|v| v.trim().trim_end_matches('/').to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_string());
    let rest = v
        .strip_prefix("https://")
        .or_else(|| v.strip_prefix("http://"))
        .unwrap_or_default();
    if rest.is_empty() || rest.starts_with('/') || v.chars().any(char::is_whitespace) {
        return Err(format!(
            "handlers.{HANDLER}.{key} must be an http(s) URL, got {v:?}"
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use slotd_sdk::StageInfo;
    use slotd_sdk::testing::ScriptedHost;

    #[test]
    fn pools_are_sized_by_the_account_concurrency() {
        let pools = stage_pools(&ScriptedHost::new());
        assert_eq!(pools.len(), 4);
        assert!(pools.iter().all(|p| p.pool.default_max_slots == 2));
        assert_eq!(pools[0].pool.name, "fal:fal-ai/pika/v2.2/text-to-video");
        let host = ScriptedHost::new().with_config("concurrency", "10");
        assert!(
            stage_pools(&host)
                .iter()
                .all(|p| p.pool.default_max_slots == 10)
        );
        let bad = ScriptedHost::new().with_config("concurrency", "0");
        assert!(
            stage_pools(&bad)
                .iter()
                .all(|p| p.pool.default_max_slots == 2)
        );
        assert!(bad.logs()[0].1.contains("handlers.fal-video.concurrency"));
        let info = describe();
        assert_eq!(
            info.task_types[0].stages,
            [StageInfo::new("main", "fal:fal-ai/pika/v2.2/text-to-video")]
        );
    }

    #[test]
    fn defaults_and_errors_name_the_key() {
        let cfg = Config::read(&ScriptedHost::new());
        assert_eq!(
            cfg,
            Ok(Config {
                base_url: BASE_URL_DEFAULT.into(),
                jwks_url: JWKS_URL_DEFAULT.into(),
                history_url: HISTORY_URL_DEFAULT.into(),
                concurrency: 2,
                scale: 1.0,
                timeout_ms: None,
                priority: None,
                start_timeout_s: None,
                media_ttl_s: None,
            })
        );
        for (key, value) in [
            ("base_url", "queue.fal.run"),
            ("jwks_url", "https://"),
            ("history_url", "ftp://api.fal.ai"),
            ("concurrency", "two"),
            ("expected_duration_scale", "0"),
            ("request_timeout_ms", "-1"),
            ("priority", "high"),
            ("start_timeout_s", "1"),
            ("media_ttl_s", "0"),
        ] {
            let host = ScriptedHost::new().with_config(key, value);
            let err = Config::read(&host).err().unwrap_or_default();
            assert!(err.contains(&format!("handlers.fal-video.{key}")), "{err}");
        }
    }
}
