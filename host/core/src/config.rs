//! Configuration: one typed [`Config`] with named defaults, read from `slotd.toml` (optional)
//! and `SLOTD_*` environment overrides, validated at start-up with messages that name the key
//! (docs/interfaces.md).
//!
//! The file deserializes straight into these types: a key it leaves out keeps its `*_DEFAULT`,
//! an unknown key is refused so that a typo does not silently do nothing. Then the environment
//! overrides beat the file, and [`Config::validate`] refuses what parses but makes no sense.
//!
//! - `file.rs`: reading the file: `{ env = "VAR" }` references, durations, addresses.
//! - `env.rs`: the one table of `SLOTD_*` overrides.
//! - `scheduler.rs`, `limits.rs`, `api.rs`, `handler.rs`: the sections, each with its checks.
//! - `validate.rs`: the checks that span sections.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

mod api;
mod env;
mod file;
mod handler;
mod limits;
mod quotas;
mod routes;
mod scheduler;
mod tenants;
#[cfg(test)]
mod tests;
mod validate;
mod webhooks;

pub use self::api::{
    ApiConfig, HEADER_READ_TIMEOUT_DEFAULT, MAX_CONCURRENT_REQUESTS_DEFAULT,
    RATE_LIMIT_BURST_DEFAULT, RATE_LIMIT_PER_SECOND_DEFAULT, RateLimit,
};
pub use self::file::parse_duration;
pub use self::handler::{Account, ApiKey, HandlerConfig, Secret};
pub use self::limits::RuntimeLimits;
pub use self::quotas::{QUOTA_WINDOW_MAX, Quota, Window, calendar_day, parse_rate};
pub use self::routes::{
    ROUTE_NAME_MAX, ROUTE_TARGETS_MAX, RouteConfig, RoutePolicy, RouteTarget, check_routes,
};
pub use self::scheduler::SchedulerConfig;
pub use self::tenants::{BudgetConfig, TenantConfig};
pub use self::validate::check_tenant_name;
pub use self::webhooks::WebhooksConfig;

pub const LISTEN_DEFAULT: &str = "127.0.0.1:8080";
pub const DATABASE_URL_DEFAULT: &str = "sqlite://slotd.db";
pub const PLUGINS_DIR_DEFAULT: &str = "plugins";
pub const OBJECT_STORE_DEFAULT: &str = "file://./objects";
/// The seed's tick: the floor between ticks when nothing wakes the loop earlier.
pub const TICK_INTERVAL_DEFAULT: Duration = Duration::from_secs(10);
/// The seed's rest after an overrunning tick.
pub const MIN_REST_DEFAULT: Duration = Duration::from_secs(2);
pub const POLL_INITIAL_DEFAULT: Duration = Duration::from_secs(5);
pub const POLL_MAX_DEFAULT: Duration = Duration::from_secs(30);
/// Growth of the poll delay after each poll that finds a job still running.
pub const POLL_FACTOR_DEFAULT: f64 = 1.5;
pub const RETRY_BUDGET_DEFAULT: u32 = 5;
/// First retry backoff; doubled per attempt up to [`RETRY_MAX_DEFAULT`].
pub const RETRY_BASE_DEFAULT: Duration = Duration::from_secs(2);
pub const RETRY_MAX_DEFAULT: Duration = Duration::from_secs(120);
pub const RECONCILE_INTERVAL_DEFAULT: Duration = Duration::from_secs(30);
pub const MAX_BATCH_DEFAULT: u32 = 1000;
pub const MAX_BODY_BYTES_DEFAULT: usize = 1024 * 1024;
pub const MAX_UNITS_PER_TASK_DEFAULT: usize = 1000;
pub const HANDLER_MEMORY_DEFAULT: usize = 64 * 1024 * 1024;
pub const HANDLER_DEADLINE_DEFAULT: Duration = Duration::from_secs(30);
pub const HTTP_TIMEOUT_DEFAULT: Duration = Duration::from_secs(15);
pub const HTTP_MAX_RESPONSE_DEFAULT: u64 = 8 * 1024 * 1024;
pub const HTTP_BATCH_CONCURRENCY_DEFAULT: usize = 16;
/// Guest CPU a call may burn (epoch ticks while guest code runs), below the wall deadline so a
/// spinning guest is cut off before it holds a worker for the whole deadline.
pub const HANDLER_CPU_BUDGET_DEFAULT: Duration = Duration::from_secs(10);
/// Consecutive crashing calls (trap, CPU budget, memory cap, a deadline spent in guest code)
/// after which a handler version is quarantined; the provider's slowness does not count.
pub const QUARANTINE_AFTER_DEFAULT: u32 = 5;
/// How long a unit may stay submitted in one stage (from the submit marker of the stage's
/// current job) before it fails: the only limit on waiting out a slow provider.
pub const STAGE_DEADLINE_DEFAULT: Duration = Duration::from_secs(2 * 60 * 60);
pub const FINALIZE_CONCURRENCY_DEFAULT: usize = 8;
pub const FINALIZE_LEASE_DEFAULT: Duration = Duration::from_secs(300);
/// Finalization attempts before a unit stays `succeeded` with the reason (until a retry).
pub const FINALIZE_ATTEMPTS_DEFAULT: u32 = 8;
/// How long a scheduler's pool lease lasts unless renewed (with Redis; docs/operations.md).
pub const LEASE_TTL_DEFAULT: Duration = Duration::from_secs(10);
/// Prefix of every Redis key slotd writes, so several deployments (or tests) share a server.
pub const REDIS_PREFIX_DEFAULT: &str = "slotd:";
pub const ARTIFACT_MAX_BYTES_DEFAULT: u64 = 4 * 1024 * 1024 * 1024;
/// Timeout of one artifact download (the whole stream).
pub const ARTIFACT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(600);
/// Longest tenant name (`api_keys[i].tenant`).
pub const TENANT_NAME_MAX: usize = 63;

/// Which parts of slotd a process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Api,
    Scheduler,
    All,
}

impl Role {
    pub fn runs_api(self) -> bool {
        matches!(self, Role::Api | Role::All)
    }
    pub fn runs_scheduler(self) -> bool {
        matches!(self, Role::Scheduler | Role::All)
    }
}

/// A pool's operator settings (`[pools."kling:video"] max_slots = 18`, and its quotas:
/// `rate = "100/min"`, `daily = 6`, `spend = { limit = 500.0, period = "30d" }`; see
/// `quotas.rs`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Unset: what the handler proposes.
    #[serde(default)]
    pub max_slots: Option<u32>,
    /// Creates per window.
    #[serde(default, deserialize_with = "quotas::rate")]
    pub rate: Option<Quota>,
    /// Creates per day (rolling 24 h unless the table says otherwise).
    #[serde(default, deserialize_with = "quotas::daily")]
    pub daily: Option<Quota>,
    /// The most the pool's creates may cost per period, in the provider's cost unit (the
    /// handlers' estimates, settled to what the provider reports).
    #[serde(default)]
    pub spend: Option<BudgetConfig>,
}

impl PoolConfig {
    /// A pool of `n` slots and no other quota.
    pub fn slots(n: u32) -> Self {
        PoolConfig {
            max_slots: Some(n),
            ..PoolConfig::default()
        }
    }
}

/// Everything slotd needs to run. `Debug` redacts the passwords of the URLs it holds (see
/// [`crate::redact`]); API keys and handler secrets are [`Secret`]s.
///
/// The file's keys are these fields' names. It deserializes from a TOML table whose
/// `{ env = "VAR" }` references are already resolved ([`Config::from_parts`] does both).
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    #[serde(deserialize_with = "file::socket_addr")]
    pub listen: SocketAddr,
    pub database_url: String,
    /// Unset: in-process slots. An empty value is unset.
    #[serde(deserialize_with = "file::non_empty")]
    pub redis_url: Option<String>,
    /// Prefix of every Redis key (`SLOTD_REDIS_PREFIX`).
    pub redis_prefix: String,
    pub plugins_dir: PathBuf,
    /// Where compiled handler code is cached by content hash. Unset: `cache/` beside a SQLite
    /// database file, else no disk cache (see `runtime::cache_dir_for`).
    pub cache_dir: Option<PathBuf>,
    pub object_store: String,
    /// Base URL at which providers reach slotd's callbacks. Unset: polling only. An empty value
    /// is unset.
    #[serde(deserialize_with = "file::non_empty")]
    pub public_url: Option<String>,
    pub role: Role,
    /// Allow serving beyond loopback with no API keys: an explicit operator decision, made on
    /// the command line only, never in the file.
    #[serde(skip)]
    pub allow_unauthenticated: bool,
    pub scheduler: SchedulerConfig,
    pub limits: RuntimeLimits,
    pub pools: BTreeMap<String, PoolConfig>,
    #[serde(deserialize_with = "handler::handlers")]
    pub handlers: BTreeMap<String, HandlerConfig>,
    pub api_keys: Vec<ApiKey>,
    /// `[tenants.NAME]`: per-tenant settings (budgets).
    pub tenants: BTreeMap<String, TenantConfig>,
    /// `[routes.NAME]`: task types several handlers serve (docs/routes.md).
    pub routes: BTreeMap<String, RouteConfig>,
    pub api: ApiConfig,
    pub webhooks: WebhooksConfig,
    pub max_body_bytes: usize,
    pub max_units_per_task: usize,
    /// Emit JSON logs.
    pub log_json: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: LISTEN_DEFAULT
                .parse()
                .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 8080))),
            database_url: DATABASE_URL_DEFAULT.into(),
            redis_url: None,
            redis_prefix: REDIS_PREFIX_DEFAULT.into(),
            plugins_dir: PLUGINS_DIR_DEFAULT.into(),
            cache_dir: None,
            object_store: OBJECT_STORE_DEFAULT.into(),
            public_url: None,
            role: Role::All,
            allow_unauthenticated: false,
            scheduler: SchedulerConfig::default(),
            limits: RuntimeLimits::default(),
            pools: BTreeMap::new(),
            handlers: BTreeMap::new(),
            api_keys: Vec::new(),
            tenants: BTreeMap::new(),
            routes: BTreeMap::new(),
            api: ApiConfig::default(),
            webhooks: WebhooksConfig::default(),
            max_body_bytes: MAX_BODY_BYTES_DEFAULT,
            max_units_per_task: MAX_UNITS_PER_TASK_DEFAULT,
            log_json: false,
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::redact::redact_url;
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("database_url", &redact_url(&self.database_url))
            .field("redis_url", &self.redis_url.as_deref().map(redact_url))
            .field("redis_prefix", &self.redis_prefix)
            .field("plugins_dir", &self.plugins_dir)
            .field("cache_dir", &self.cache_dir)
            .field("object_store", &redact_url(&self.object_store))
            .field("public_url", &self.public_url.as_deref().map(redact_url))
            .field("role", &self.role)
            .field("allow_unauthenticated", &self.allow_unauthenticated)
            .field("scheduler", &self.scheduler)
            .field("limits", &self.limits)
            .field("pools", &self.pools)
            .field("handlers", &self.handlers)
            .field("api_keys", &self.api_keys)
            .field("routes", &self.routes)
            .field("api", &self.api)
            .field("webhooks", &self.webhooks)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_units_per_task", &self.max_units_per_task)
            .field("log_json", &self.log_json)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// Load from an optional file and the process environment.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Config> {
        let file = file
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("SLOTD_CONFIG").map(PathBuf::from));
        let text = match &file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading config file {}", path.display()))?,
            ),
            None => None,
        };
        Config::from_parts(text.as_deref(), &|k| std::env::var(k).ok())
    }

    /// Build from file text (if any) and an environment lookup; environment beats file.
    ///
    /// The scheduler's timings that the file leaves out follow the tick interval, wherever it
    /// came from ([`SchedulerConfig::scaled_to`]): `SLOTD_TICK_INTERVAL=50ms` alone makes a
    /// fast test instance, while a timing the file sets keeps its value.
    pub fn from_parts(
        file_text: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Config> {
        let (mut c, scheduler_keys) = match file_text {
            Some(text) => file::read(text, env)?,
            None => (Config::default(), Default::default()),
        };
        env::apply(&mut c, env)?;
        c.scheduler.follow_tick(&|key| scheduler_keys.contains(key));
        c.validate()?;
        Ok(c)
    }

    /// Derived settings: with a public URL (callbacks on), polling becomes a safety net at
    /// four times `poll_max` unless `callback_safety_poll` is set. Called once when slotd is
    /// assembled.
    pub fn finish(&mut self) {
        if self.public_url.is_some() && self.scheduler.callback_safety_poll.is_none() {
            self.scheduler.callback_safety_poll = Some(self.scheduler.poll_max.saturating_mul(4));
        }
    }

    /// The effective maximum of a pool: the operator's setting, else the handler's proposal.
    pub fn pool_max(&self, pool: &str, proposed: u32) -> u32 {
        self.pools
            .get(pool)
            .and_then(|p| p.max_slots)
            .unwrap_or(proposed)
            .max(1)
    }

    /// Refuse to listen beyond loopback without API keys unless explicitly allowed.
    pub fn check_exposure(&self) -> anyhow::Result<()> {
        if self.api_keys.is_empty()
            && !self.listen.ip().is_loopback()
            && !self.allow_unauthenticated
        {
            bail!(
                "listen: {} is not a loopback address and no [[api_keys]] are configured; \
                 add API keys or pass --allow-unauthenticated",
                self.listen
            );
        }
        Ok(())
    }
}
