//! The whole configuration, [`Config`]: the top-level keys with their defaults, each section
//! in its own file, the process's [`Role`], and what is derived or checked once it is read.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::bail;
use serde::Deserialize;

use super::{
    ApiConfig, ApiKey, HandlerConfig, PoolConfig, RouteConfig, RuntimeLimits, SchedulerConfig,
    TenantConfig, WebhooksConfig, handler, values,
};

pub const LISTEN_DEFAULT: &str = "127.0.0.1:8080";
pub const DATABASE_URL_DEFAULT: &str = "sqlite://slotd.db";
pub const PLUGINS_DIR_DEFAULT: &str = "plugins";
pub const OBJECT_STORE_DEFAULT: &str = "file://./objects";
pub const MAX_BODY_BYTES_DEFAULT: usize = 1024 * 1024;
pub const MAX_UNITS_PER_TASK_DEFAULT: usize = 1000;
/// Prefix of every Redis key slotd writes, so several deployments (or tests) share a server.
pub const REDIS_PREFIX_DEFAULT: &str = "slotd:";

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

/// Everything slotd needs to run. `Debug` redacts the passwords of the URLs it holds (see
/// [`crate::redact`]); API keys and handler secrets are [`Secret`]s.
///
/// The file's keys are these fields' names. It deserializes from a TOML table whose
/// `{ env = "VAR" }` references are already resolved ([`Config::from_parts`] does both).
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    #[serde(deserialize_with = "values::socket_addr")]
    pub listen: SocketAddr,
    pub database_url: String,
    /// Unset: in-process slots. An empty value is unset.
    #[serde(deserialize_with = "values::non_empty")]
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
    #[serde(deserialize_with = "values::non_empty")]
    pub public_url: Option<String>,
    pub role: Role,
    /// Allow serving beyond loopback with no API keys: an explicit operator decision, made on
    /// the command line only, never in the file.
    #[serde(skip)]
    pub allow_unauthenticated: bool,
    pub scheduler: SchedulerConfig,
    pub limits: RuntimeLimits,
    pub pools: BTreeMap<String, PoolConfig>,
    /// `[provider_accounts.NAME]`: provider accounts whose limit spans several pools.
    pub provider_accounts: BTreeMap<String, super::ProviderAccountConfig>,
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
            provider_accounts: BTreeMap::new(),
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
            .field("provider_accounts", &self.provider_accounts)
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
