//! Configuration: one typed [`Config`] with named defaults, read from `slotd.toml` (optional)
//! and `SLOTD_*` environment overrides, validated at start-up with messages that name the key
//! (SPEC section 15).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

mod api;
pub use self::api::{
    ApiConfig, HEADER_READ_TIMEOUT_DEFAULT, MAX_CONCURRENT_REQUESTS_DEFAULT,
    RATE_LIMIT_BURST_DEFAULT, RATE_LIMIT_PER_SECOND_DEFAULT, RateLimit,
};

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
pub const RETRY_BUDGET_DEFAULT: u32 = 5;
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
/// How long a scheduler's pool lease lasts unless renewed (with Redis; SPEC section 11).
pub const LEASE_TTL_DEFAULT: Duration = Duration::from_secs(10);
/// Prefix of every Redis key slotd writes, so several deployments (or tests) share a server.
pub const REDIS_PREFIX_DEFAULT: &str = "slotd:";
pub const ARTIFACT_MAX_BYTES_DEFAULT: u64 = 4 * 1024 * 1024 * 1024;
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

/// A secret value: never printed, never handed to a guest.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    /// The raw bytes, for the host's signing functions only.
    pub fn expose(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The HMAC key this secret stands for: a `whsec_<base64>` value is a Standard Webhooks
    /// signing key, whose key is the decoded bytes after the prefix (and must not be empty);
    /// any other value is used as written. Checked at start-up ([`Config::validate`]), so a
    /// malformed `whsec_` secret is refused there, naming its key, not at the first callback.
    pub fn signing_key(&self) -> Result<std::borrow::Cow<'_, [u8]>, String> {
        if !self.0.starts_with("whsec_") {
            return Ok(std::borrow::Cow::Borrowed(self.expose()));
        }
        crate::webhooks::webhook_key(&self.0)
            .map(std::borrow::Cow::Owned)
            .map_err(|e| format!("{e:#}"))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// The tick loop and its policies.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Longest wait between ticks of a pool; events (new task, freed slot, callback) wake it
    /// earlier.
    pub tick_interval: Duration,
    /// Shortest wait between the end of one tick and the start of the next.
    pub min_rest: Duration,
    /// First poll delay after a submit; grows by `poll_factor` up to `poll_max`.
    pub poll_initial: Duration,
    pub poll_max: Duration,
    pub poll_factor: f64,
    /// Most units handed to one handler call.
    pub max_batch: u32,
    /// Transient errors and handler faults a unit may spend per stage before it fails. A call
    /// cut off while awaiting a slow provider spends none of it.
    pub retry_budget: u32,
    /// Longest a unit may stay submitted in one stage, counted from the submit marker of the
    /// stage's current job (waiting in `pending` for a slot does not count). Past it the unit
    /// fails with a reason saying so; before it, a slow provider never fails a unit.
    pub stage_deadline: Duration,
    /// Backoff for retries: base doubled per attempt, capped.
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// How often slots are reconciled with the database's submitted units.
    pub reconcile_interval: Duration,
    /// Finalizations running at once (never on provider slots).
    pub finalize_concurrency: usize,
    /// How long a finalizer's lease lasts before another may take the unit over (a dead
    /// finalizer's); a live one renews it every third of this while it downloads.
    pub finalize_lease: Duration,
    /// Finalization attempts before giving up: the unit then stays `succeeded` with the
    /// reason, until `POST /v1/tasks/{id}/retry` finalizes it again.
    pub finalize_attempts: u32,
    /// A pool lease's lifetime (with Redis): renewed every third of it; a dead scheduler's
    /// pools are taken over within two lease periods.
    pub lease_ttl: Duration,
    /// Largest artifact a finalization downloads.
    pub artifact_max_bytes: u64,
    /// Timeout of one artifact download (the whole stream).
    pub artifact_timeout: Duration,
    /// With provider callbacks on, polling is only the safety net: a running unit is polled
    /// at most this often. `None` (no public URL): poll on the normal schedule. Set from
    /// `poll_max` when slotd has a public URL, unless configured.
    pub callback_safety_poll: Option<Duration>,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            tick_interval: TICK_INTERVAL_DEFAULT,
            min_rest: MIN_REST_DEFAULT,
            poll_initial: POLL_INITIAL_DEFAULT,
            poll_max: POLL_MAX_DEFAULT,
            poll_factor: 1.5,
            max_batch: MAX_BATCH_DEFAULT,
            retry_budget: RETRY_BUDGET_DEFAULT,
            stage_deadline: STAGE_DEADLINE_DEFAULT,
            retry_base: Duration::from_secs(2),
            retry_max: Duration::from_secs(120),
            reconcile_interval: Duration::from_secs(30),
            finalize_concurrency: FINALIZE_CONCURRENCY_DEFAULT,
            finalize_lease: FINALIZE_LEASE_DEFAULT,
            finalize_attempts: 8,
            lease_ttl: LEASE_TTL_DEFAULT,
            artifact_max_bytes: ARTIFACT_MAX_BYTES_DEFAULT,
            artifact_timeout: Duration::from_secs(600),
            callback_safety_poll: None,
        }
    }
}

impl SchedulerConfig {
    /// Scale every time-based setting for a given tick interval, keeping the seed's ratios
    /// (10 s tick, 2 s rest, 5 s → 30 s polls). Used when only `SLOTD_TICK_INTERVAL` is set.
    pub fn scaled_to(tick: Duration) -> Self {
        let base = SchedulerConfig::default();
        let ratio = tick.as_secs_f64() / TICK_INTERVAL_DEFAULT.as_secs_f64();
        let scale = |d: Duration| Duration::from_secs_f64(d.as_secs_f64() * ratio);
        SchedulerConfig {
            tick_interval: tick,
            min_rest: scale(base.min_rest),
            poll_initial: scale(base.poll_initial),
            poll_max: scale(base.poll_max),
            retry_base: scale(base.retry_base),
            retry_max: scale(base.retry_max),
            reconcile_interval: scale(base.reconcile_interval),
            finalize_lease: scale(base.finalize_lease).max(Duration::from_millis(500)),
            ..base
        }
    }
}

/// Sandbox limits applied to every handler call (SPEC section 8).
#[derive(Clone, Debug)]
pub struct RuntimeLimits {
    /// Linear memory a call's store may grow to.
    pub memory_bytes: usize,
    /// Wall-clock deadline for one call, awaited HTTP included.
    pub call_deadline: Duration,
    /// Default and maximum per-request HTTP timeout.
    pub http_timeout: Duration,
    /// Largest HTTP response body a handler may receive.
    pub http_max_response_bytes: u64,
    /// Requests of one `send-batch` in flight at once.
    pub http_batch_concurrency: usize,
    /// Guest CPU time one call may use (awaited host I/O not counted).
    pub cpu_budget: Duration,
    /// Consecutive faulting calls after which a version is quarantined and the previous good
    /// version restored (`[limits] quarantine_after`).
    pub quarantine_after: u32,
}

impl Default for RuntimeLimits {
    fn default() -> Self {
        RuntimeLimits {
            memory_bytes: HANDLER_MEMORY_DEFAULT,
            call_deadline: HANDLER_DEADLINE_DEFAULT,
            http_timeout: HTTP_TIMEOUT_DEFAULT,
            http_max_response_bytes: HTTP_MAX_RESPONSE_DEFAULT,
            http_batch_concurrency: HTTP_BATCH_CONCURRENCY_DEFAULT,
            cpu_budget: HANDLER_CPU_BUDGET_DEFAULT,
            quarantine_after: QUARANTINE_AFTER_DEFAULT,
        }
    }
}

/// A pool's operator settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    pub max_slots: u32,
}

/// One handler's settings: what its guest may read, what it may sign with, where it may call.
#[derive(Clone, Debug, Default)]
pub struct HandlerConfig {
    /// Plain settings (`base_url`, `access_key`, …), readable by the guest through `config`.
    pub settings: BTreeMap<String, String>,
    /// Named secrets, usable by the guest only through `signing`.
    pub secrets: BTreeMap<String, Secret>,
    /// Hosts (`host` or `host:port`) the guest may reach. Empty: none.
    pub allowed_hosts: Vec<String>,
    /// `file = "kling-video.wasm"`: only this file in the plugins directory may serve the
    /// handler (its name and this section). Unset: the file that first served it owns it.
    pub file: Option<String>,
    /// `sha256 = "<64 hex>"`: with `file`, only this content may serve the handler (lowercase).
    pub sha256: Option<String>,
    /// `record = "DIR"`: append every call's provider exchanges (redacted) to
    /// `DIR/<handler>.jsonl`, for `slotd plugin replay`.
    pub record: Option<std::path::PathBuf>,
}

impl HandlerConfig {
    /// Check the pin (`file`, `sha256`) of handler `name`, naming the key.
    pub fn check_pin(&self, name: &str) -> anyhow::Result<()> {
        if let Some(f) = &self.file {
            let plain = !f.is_empty()
                && !f.contains(['/', '\\'])
                && f != "."
                && f != ".."
                && !f.starts_with('.')
                && f.ends_with(".wasm");
            if !plain {
                bail!(
                    "handlers.{name}.file: {f:?} must be the name of a *.wasm file directly in \
                     the plugins directory (no path, not hidden), like \"{name}.wasm\""
                );
            }
        }
        if let Some(sha) = &self.sha256 {
            if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
                bail!(
                    "handlers.{name}.sha256: {sha:?} is not a sha256 (64 hex digits, as printed \
                     by `sha256sum` or `slotd plugin check`)"
                );
            }
            if self.file.is_none() {
                bail!("handlers.{name}.sha256 needs handlers.{name}.file: pin the file too");
            }
        }
        Ok(())
    }
}

/// An API key and the tenant it acts for (`Debug` shows the key as `Secret(***)`).
#[derive(Clone, Debug)]
pub struct ApiKey {
    pub key: Secret,
    pub tenant: String,
}

/// Everything slotd needs to run. `Debug` redacts the passwords of the URLs it holds (see
/// [`crate::redact`]); API keys and handler secrets are [`Secret`]s.
#[derive(Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub database_url: String,
    /// Unset: in-process slots.
    pub redis_url: Option<String>,
    /// Prefix of every Redis key (`SLOTD_REDIS_PREFIX`).
    pub redis_prefix: String,
    pub plugins_dir: PathBuf,
    /// Where compiled handler code is cached by content hash. Unset: `cache/` beside a SQLite
    /// database file, else no disk cache (see `runtime::cache_dir_for`).
    pub cache_dir: Option<PathBuf>,
    pub object_store: String,
    /// Base URL at which providers reach slotd's callbacks. Unset: polling only.
    pub public_url: Option<String>,
    pub role: Role,
    /// Allow serving beyond loopback with no API keys (an explicit operator decision).
    pub allow_unauthenticated: bool,
    pub scheduler: SchedulerConfig,
    pub limits: RuntimeLimits,
    pub pools: BTreeMap<String, PoolConfig>,
    pub handlers: BTreeMap<String, HandlerConfig>,
    pub api_keys: Vec<ApiKey>,
    pub api: ApiConfig,
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
            api: ApiConfig::default(),
            max_body_bytes: MAX_BODY_BYTES_DEFAULT,
            max_units_per_task: MAX_UNITS_PER_TASK_DEFAULT,
            log_json: false,
        }
    }
}

/// The file format. Unknown keys are refused so that a typo does not silently do nothing.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    database_url: Option<String>,
    redis_url: Option<String>,
    redis_prefix: Option<String>,
    plugins_dir: Option<PathBuf>,
    cache_dir: Option<PathBuf>,
    object_store: Option<String>,
    public_url: Option<String>,
    role: Option<Role>,
    log_json: Option<bool>,
    max_body_bytes: Option<usize>,
    max_units_per_task: Option<usize>,
    #[serde(default)]
    scheduler: FileScheduler,
    #[serde(default)]
    limits: FileLimits,
    #[serde(default)]
    pools: BTreeMap<String, FilePool>,
    #[serde(default)]
    handlers: BTreeMap<String, toml::Table>,
    #[serde(default)]
    api_keys: Vec<FileApiKey>,
    #[serde(default)]
    api: api::FileApi,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileScheduler {
    tick_interval: Option<String>,
    min_rest: Option<String>,
    poll_initial: Option<String>,
    poll_max: Option<String>,
    poll_factor: Option<f64>,
    max_batch: Option<u32>,
    retry_budget: Option<u32>,
    stage_deadline: Option<String>,
    retry_base: Option<String>,
    retry_max: Option<String>,
    reconcile_interval: Option<String>,
    finalize_concurrency: Option<usize>,
    finalize_lease: Option<String>,
    finalize_attempts: Option<u32>,
    lease_ttl: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLimits {
    memory_mb: Option<usize>,
    call_deadline: Option<String>,
    http_timeout: Option<String>,
    http_max_response_bytes: Option<u64>,
    http_batch_concurrency: Option<usize>,
    cpu_budget: Option<String>,
    quarantine_after: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePool {
    max_slots: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileApiKey {
    key: toml::Value,
    tenant: String,
}

/// Parse a duration such as `10s`, `50ms` or `1m 30s`, naming the key on error.
pub fn parse_duration(key: &str, text: &str) -> anyhow::Result<Duration> {
    humantime::parse_duration(text.trim())
        .with_context(|| format!("{key}: {text:?} is not a duration (try \"10s\" or \"50ms\")"))
}

/// Resolve a string-or-`{ env = "NAME" }` value; `env` looks variables up.
fn resolve_value(
    key: &str,
    value: &toml::Value,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<(String, bool)> {
    match value {
        toml::Value::String(s) => Ok((s.clone(), false)),
        toml::Value::Table(t) => {
            if let Some(toml::Value::String(var)) = t.get("env") {
                let v = env(var)
                    .with_context(|| format!("{key}: environment variable {var} is not set"))?;
                Ok((v, true))
            } else if let Some(toml::Value::String(v)) = t.get("value") {
                Ok((v.clone(), true))
            } else {
                bail!("{key}: expected a string or {{ env = \"VAR\" }}")
            }
        }
        toml::Value::Integer(i) => Ok((i.to_string(), false)),
        toml::Value::Float(f) => Ok((f.to_string(), false)),
        toml::Value::Boolean(b) => Ok((b.to_string(), false)),
        _ => bail!("{key}: expected a string, a number, a boolean or {{ env = \"VAR\" }}"),
    }
}

fn handler_config(
    name: &str,
    table: &toml::Table,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<HandlerConfig> {
    let mut out = HandlerConfig::default();
    for (k, v) in table {
        let key = format!("handlers.{name}.{k}");
        if k == "allowed_hosts" {
            let list = v
                .as_array()
                .with_context(|| format!("{key}: expected a list of host names"))?;
            for h in list {
                let h = h
                    .as_str()
                    .with_context(|| format!("{key}: expected a list of host names"))?;
                if h.is_empty() || h.contains('/') {
                    bail!("{key}: {h:?} is not a host name (give \"host\" or \"host:port\")");
                }
                out.allowed_hosts.push(h.to_ascii_lowercase());
            }
            continue;
        }
        if k == "record" {
            let dir = v
                .as_str()
                .filter(|d| !d.is_empty())
                .with_context(|| format!("{key}: expected a directory path"))?;
            out.record = Some(std::path::PathBuf::from(dir));
            continue;
        }
        if k == "file" || k == "sha256" {
            let text = v
                .as_str()
                .with_context(|| format!("{key}: expected a string"))?
                .to_string();
            if k == "file" {
                out.file = Some(text);
            } else {
                out.sha256 = Some(text.to_ascii_lowercase());
            }
            continue;
        }
        let (value, from_secret_form) = resolve_value(&key, v, env)?;
        // `{ env = … }` values and anything named like a secret are secrets: the guest can sign
        // with them but never read them.
        if from_secret_form
            || k.contains("secret")
            || k.contains("password")
            || k.contains("api_key")
            || k.contains("token")
        {
            out.secrets.insert(k.clone(), Secret::new(value));
        } else {
            out.settings.insert(k.clone(), value);
        }
    }
    Ok(out)
}

/// A tenant name: 1 to [`TENANT_NAME_MAX`] ASCII letters, digits, `-` or `_`. It becomes a
/// path segment of stored artifacts (`{tenant}/{task}/…`) and appears in logs, so nothing that
/// could climb a directory or break a line is allowed.
pub fn check_tenant_name(key: &str, name: &str) -> anyhow::Result<()> {
    if name.is_empty() || name.len() > TENANT_NAME_MAX {
        bail!(
            "{key}: {name:?} must be 1 to {TENANT_NAME_MAX} characters long, got {}",
            name.len()
        );
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        bail!("{key}: {name:?} contains {bad:?}; use letters, digits, '-' and '_' only");
    }
    Ok(())
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
            .field("api", &self.api)
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
    pub fn from_parts(
        file_text: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Config> {
        let file: FileConfig = match file_text {
            Some(t) => toml::from_str(t).context("config file")?,
            None => FileConfig::default(),
        };
        let mut c = Config::default();

        let listen = env("SLOTD_LISTEN").or(file.listen);
        if let Some(l) = listen {
            c.listen = l
                .parse()
                .with_context(|| format!("listen: {l:?} is not an address like 127.0.0.1:8080"))?;
        }
        if let Some(v) = env("SLOTD_DATABASE_URL").or(file.database_url) {
            c.database_url = v;
        }
        c.redis_url = env("SLOTD_REDIS_URL")
            .or(file.redis_url)
            .filter(|s| !s.is_empty());
        if let Some(v) = env("SLOTD_REDIS_PREFIX").or(file.redis_prefix) {
            c.redis_prefix = v;
        }
        if let Some(v) = env("SLOTD_PLUGINS_DIR")
            .map(PathBuf::from)
            .or(file.plugins_dir)
        {
            c.plugins_dir = v;
        }
        if let Some(v) = env("SLOTD_CACHE_DIR").map(PathBuf::from).or(file.cache_dir) {
            c.cache_dir = Some(v);
        }
        if let Some(v) = env("SLOTD_OBJECT_STORE").or(file.object_store) {
            c.object_store = v;
        }
        c.public_url = env("SLOTD_PUBLIC_URL")
            .or(file.public_url)
            .filter(|s| !s.is_empty());
        if let Some(r) = file.role {
            c.role = r;
        }
        if let Some(b) = file.log_json {
            c.log_json = b;
        }
        if let Some(v) = env("SLOTD_LOG_JSON") {
            c.log_json = matches!(v.as_str(), "1" | "true" | "yes");
        }
        if let Some(v) = file.max_body_bytes {
            c.max_body_bytes = v;
        }
        if let Some(v) = file.max_units_per_task {
            c.max_units_per_task = v;
        }

        // Scheduler: an environment tick interval scales the other timings with it, then the
        // file's explicit values win for everything but the interval itself.
        let s = &file.scheduler;
        let env_tick = env("SLOTD_TICK_INTERVAL");
        let tick = match (&env_tick, &s.tick_interval) {
            (Some(t), _) => Some(parse_duration("SLOTD_TICK_INTERVAL", t)?),
            (None, Some(t)) => Some(parse_duration("scheduler.tick_interval", t)?),
            _ => None,
        };
        if let Some(t) = tick {
            c.scheduler = SchedulerConfig::scaled_to(t);
        }
        let dur = |key: &str, v: &Option<String>, into: &mut Duration| -> anyhow::Result<()> {
            if let Some(t) = v {
                *into = parse_duration(&format!("scheduler.{key}"), t)?;
            }
            Ok(())
        };
        dur("min_rest", &s.min_rest, &mut c.scheduler.min_rest)?;
        dur(
            "poll_initial",
            &s.poll_initial,
            &mut c.scheduler.poll_initial,
        )?;
        dur("poll_max", &s.poll_max, &mut c.scheduler.poll_max)?;
        dur("retry_base", &s.retry_base, &mut c.scheduler.retry_base)?;
        dur("retry_max", &s.retry_max, &mut c.scheduler.retry_max)?;
        dur(
            "reconcile_interval",
            &s.reconcile_interval,
            &mut c.scheduler.reconcile_interval,
        )?;
        dur(
            "finalize_lease",
            &s.finalize_lease,
            &mut c.scheduler.finalize_lease,
        )?;
        dur("lease_ttl", &s.lease_ttl, &mut c.scheduler.lease_ttl)?;
        dur(
            "stage_deadline",
            &s.stage_deadline,
            &mut c.scheduler.stage_deadline,
        )?;
        if let Some(v) = s.poll_factor {
            c.scheduler.poll_factor = v;
        }
        if let Some(v) = s.max_batch {
            c.scheduler.max_batch = v;
        }
        if let Some(v) = s.retry_budget {
            c.scheduler.retry_budget = v;
        }
        if let Some(v) = s.finalize_concurrency {
            c.scheduler.finalize_concurrency = v;
        }
        if let Some(v) = s.finalize_attempts {
            c.scheduler.finalize_attempts = v;
        }

        let l = &file.limits;
        if let Some(mb) = l.memory_mb {
            c.limits.memory_bytes = mb.saturating_mul(1024 * 1024);
        }
        if let Some(t) = &l.call_deadline {
            c.limits.call_deadline = parse_duration("limits.call_deadline", t)?;
        }
        if let Some(t) = &l.http_timeout {
            c.limits.http_timeout = parse_duration("limits.http_timeout", t)?;
        }
        if let Some(v) = l.http_max_response_bytes {
            c.limits.http_max_response_bytes = v;
        }
        if let Some(v) = l.http_batch_concurrency {
            c.limits.http_batch_concurrency = v;
        }
        if let Some(t) = &l.cpu_budget {
            c.limits.cpu_budget = parse_duration("limits.cpu_budget", t)?;
        }
        if let Some(v) = l.quarantine_after {
            c.limits.quarantine_after = v;
        }

        c.api.apply(&file.api)?;

        for (name, p) in file.pools {
            c.pools.insert(
                name,
                PoolConfig {
                    max_slots: p.max_slots,
                },
            );
        }
        for (name, table) in &file.handlers {
            c.handlers
                .insert(name.clone(), handler_config(name, table, env)?);
        }
        for (i, k) in file.api_keys.iter().enumerate() {
            let (key, _) = resolve_value(&format!("api_keys[{i}].key"), &k.key, env)?;
            c.api_keys.push(ApiKey {
                key: Secret::new(key),
                tenant: k.tenant.clone(),
            });
        }
        c.validate()?;
        Ok(c)
    }

    /// Check values that parse but make no sense, naming the key.
    pub fn validate(&self) -> anyhow::Result<()> {
        let s = &self.scheduler;
        if s.tick_interval < Duration::from_millis(1) {
            bail!("scheduler.tick_interval must be at least 1ms");
        }
        if s.poll_initial.is_zero() || s.poll_max < s.poll_initial {
            bail!("scheduler.poll_initial must be > 0 and scheduler.poll_max >= poll_initial");
        }
        if !(1.0..=10.0).contains(&s.poll_factor) {
            bail!(
                "scheduler.poll_factor must be between 1.0 and 10.0, got {}",
                s.poll_factor
            );
        }
        if s.max_batch == 0 {
            bail!("scheduler.max_batch must be at least 1");
        }
        if s.lease_ttl < Duration::from_millis(100) {
            bail!("scheduler.lease_ttl must be at least 100ms");
        }
        if s.stage_deadline <= self.limits.call_deadline {
            bail!(
                "scheduler.stage_deadline ({:?}) must be longer than limits.call_deadline ({:?}): \
                 a unit must outlive at least one handler call",
                s.stage_deadline,
                self.limits.call_deadline
            );
        }
        if s.finalize_concurrency == 0 {
            bail!("scheduler.finalize_concurrency must be at least 1");
        }
        // Renewed every third of itself while a download streams: not a busy loop.
        if s.finalize_lease < Duration::from_millis(100) {
            bail!("scheduler.finalize_lease must be at least 100ms");
        }
        if self.limits.memory_bytes < 1024 * 1024 {
            bail!("limits.memory_mb must be at least 1");
        }
        if self.limits.http_batch_concurrency == 0 {
            bail!("limits.http_batch_concurrency must be at least 1");
        }
        if self.limits.quarantine_after == 0 {
            bail!("limits.quarantine_after must be at least 1");
        }
        if self.limits.cpu_budget < Duration::from_millis(10) {
            bail!("limits.cpu_budget must be at least 10ms");
        }
        for (name, p) in &self.pools {
            if p.max_slots == 0 {
                bail!("pools.{name:?}.max_slots must be at least 1");
            }
        }
        for (name, h) in &self.handlers {
            h.check_pin(name)?;
        }
        for (i, k) in self.api_keys.iter().enumerate() {
            if k.key.expose().len() < 8 {
                bail!("api_keys[{i}].key is too short (at least 8 characters)");
            }
            check_tenant_name(&format!("api_keys[{i}].tenant"), &k.tenant)?;
        }
        self.api.validate()?;
        if let Some(u) = &self.public_url {
            url::Url::parse(u).with_context(|| {
                format!(
                    "public_url: {:?} is not a URL",
                    crate::redact::redact_url(u)
                )
            })?;
        }
        self.check_secrets()?;
        if !(self.database_url.starts_with("sqlite:")
            || self.database_url.starts_with("postgres:")
            || self.database_url.starts_with("postgresql:"))
        {
            bail!(
                "database_url: {:?} is neither sqlite://… nor postgres://…",
                crate::redact::redact_url(&self.database_url)
            );
        }
        Ok(())
    }

    /// Refuse signing secrets that cannot key anything (a malformed `whsec_` value), naming
    /// the key. Part of [`Config::validate`]; also run when slotd is assembled from a
    /// [`Config`] built in code.
    pub fn check_secrets(&self) -> anyhow::Result<()> {
        for (handler, h) in &self.handlers {
            for (key, secret) in &h.secrets {
                if let Err(e) = secret.signing_key() {
                    bail!("handlers.{handler}.{key}: {e}");
                }
            }
        }
        Ok(())
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
            .map(|p| p.max_slots)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn no_config_at_all_is_embedded() {
        let c = Config::from_parts(None, &env_of(&[])).expect("defaults are valid");
        assert_eq!(c.database_url, DATABASE_URL_DEFAULT);
        assert_eq!(c.redis_url, None);
        assert_eq!(c.listen.to_string(), LISTEN_DEFAULT);
        assert_eq!(c.scheduler.tick_interval, TICK_INTERVAL_DEFAULT);
        assert!(c.check_exposure().is_ok());
    }

    #[test]
    fn environment_beats_file_and_scales_ticks() {
        let file = r#"
            listen = "127.0.0.1:9000"
            database_url = "sqlite://file.db"
            [pools."kling:video"]
            max_slots = 18
            [handlers.kling-video]
            base_url = "http://127.0.0.1:1"
            access_key = "AK"
            secret_key = { env = "KLING_SECRET_KEY" }
            allowed_hosts = ["127.0.0.1:1"]
            [[api_keys]]
            key = "key-of-tenant-a"
            tenant = "a"
        "#;
        let env = env_of(&[
            ("SLOTD_LISTEN", "127.0.0.1:9001"),
            ("SLOTD_TICK_INTERVAL", "50ms"),
            ("KLING_SECRET_KEY", "SK"),
        ]);
        let c = Config::from_parts(Some(file), &env).expect("valid");
        assert_eq!(c.listen.port(), 9001);
        assert_eq!(c.database_url, "sqlite://file.db");
        assert_eq!(c.scheduler.tick_interval, Duration::from_millis(50));
        assert_eq!(c.scheduler.poll_initial, Duration::from_millis(25));
        assert_eq!(c.pool_max("kling:video", 5), 18);
        assert_eq!(c.pool_max("other", 5), 5);
        let h = &c.handlers["kling-video"];
        assert_eq!(h.settings["access_key"], "AK");
        assert!(!h.settings.contains_key("secret_key"));
        assert_eq!(h.secrets["secret_key"].expose(), b"SK");
        assert_eq!(format!("{:?}", h.secrets["secret_key"]), "Secret(***)");
        assert_eq!(h.allowed_hosts, vec!["127.0.0.1:1".to_string()]);
    }

    #[test]
    fn errors_name_the_key() {
        let bad = |file: &str, env: &'static [(&'static str, &'static str)]| {
            format!(
                "{:#}",
                Config::from_parts(Some(file), &env_of(env)).expect_err("must fail")
            )
        };
        assert!(bad("", &[("SLOTD_TICK_INTERVAL", "often")]).contains("SLOTD_TICK_INTERVAL"));
        assert!(bad("[pools.p]\nmax_slots = 0", &[]).contains("pools.\"p\".max_slots"));
        assert!(bad("[handlers.h]\ns = { env = \"NOPE\" }", &[]).contains("handlers.h.s"));
        assert!(bad("tick = 3", &[]).contains("unknown field"));
        assert!(bad("database_url = \"mysql://x\"", &[]).contains("database_url"));
        assert!(bad("[[api_keys]]\nkey = \"short\"\ntenant = \"a\"", &[]).contains("api_keys[0]"));
        assert!(
            bad("[scheduler]\nstage_deadline = \"1s\"", &[]).contains("scheduler.stage_deadline")
        );
        assert!(
            bad("[handlers.h]\nfile = \"h.wasm\"\nsha256 = \"abc\"", &[])
                .contains("handlers.h.sha256")
        );
        assert!(bad("[handlers.h]\nfile = \"../h.wasm\"", &[]).contains("handlers.h.file"));
        assert!(
            bad(
                "[handlers.h]\nsha256 = \"{}\""
                    .replace("{}", &"a".repeat(64))
                    .as_str(),
                &[]
            )
            .contains("needs handlers.h.file")
        );
    }

    #[test]
    fn pins_and_stage_deadline_are_read() {
        let sha = "AB".repeat(32);
        let file = format!(
            "[scheduler]\nstage_deadline = \"3h\"\n[handlers.kling-video]\nfile = \"kling-video.wasm\"\nsha256 = \"{sha}\"\nbase_url = \"http://x\""
        );
        let c = Config::from_parts(Some(&file), &env_of(&[])).expect("valid");
        assert_eq!(c.scheduler.stage_deadline, Duration::from_secs(3 * 3600));
        let h = &c.handlers["kling-video"];
        assert_eq!(h.file.as_deref(), Some("kling-video.wasm"));
        assert_eq!(h.sha256.as_deref(), Some("ab".repeat(32).as_str()));
        // The pin is the host's, not a setting the guest can read.
        assert!(!h.settings.contains_key("file") && !h.settings.contains_key("sha256"));
        let d = Config::from_parts(None, &env_of(&[])).expect("defaults");
        assert_eq!(d.scheduler.stage_deadline, STAGE_DEADLINE_DEFAULT);
    }

    #[test]
    fn whsec_secrets_are_decoded_and_malformed_ones_refused_by_key() {
        // base64("hello") = "aGVsbG8="
        let key = |v: &str| Secret::new(v).signing_key().map(|k| k.into_owned());
        assert_eq!(key("whsec_aGVsbG8="), Ok(b"hello".to_vec()));
        assert_eq!(
            key("SK"),
            Ok(b"SK".to_vec()),
            "other secrets are used as written"
        );
        assert!(key("whsec_not base64!").is_err_and(|e| e.contains("base64")));
        assert!(key("whsec_").is_err_and(|e| e.contains("empty")));
        let bad = |value: &str| {
            let file = format!("[handlers.kling-video]\nwebhook_secret = \"{value}\"");
            Config::from_parts(Some(&file), &env_of(&[]))
                .map(|_| ())
                .map_err(|e| format!("{e:#}"))
        };
        assert!(bad("whsec_aGVsbG8=").is_ok());
        for value in ["whsec_%%%", "whsec_"] {
            let err = bad(value).expect_err("refused at start-up");
            assert!(err.contains("handlers.kling-video.webhook_secret"), "{err}");
            assert!(
                !err.contains(value) || value == "whsec_",
                "secret echoed: {err}"
            );
        }
    }

    #[test]
    fn tenant_names_are_checked_naming_the_key() {
        let keys = |tenants: &[&str]| {
            let mut file = String::new();
            for (i, t) in tenants.iter().enumerate() {
                file.push_str(&format!(
                    "[[api_keys]]\nkey = \"key-number-{i}\"\ntenant = {t:?}\n"
                ));
            }
            Config::from_parts(Some(&file), &env_of(&[])).map_err(|e| format!("{e:#}"))
        };
        let long = "t".repeat(TENANT_NAME_MAX);
        assert!(keys(&["team-a", "Team_B", "7", &long]).is_ok());
        let too_long = "t".repeat(TENANT_NAME_MAX + 1);
        for bad in ["", "a b", "../etc", "a/b", "tëam", "a.b", too_long.as_str()] {
            let err = keys(&["ok", "fine", bad]).expect_err(bad);
            assert!(err.contains("api_keys[2].tenant"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn debug_output_shows_no_secret() {
        let file = r#"
            database_url = "postgres://slotd:db-pass-123@db.internal:5432/slotd"
            redis_url = "redis://:redis-pass-456@cache.internal:6379/0"
            [handlers.kling-video]
            access_key = "AK"
            secret_key = { env = "KLING_SECRET_KEY" }
            webhook_secret = "whsec-value-789"
            [[api_keys]]
            key = "api-key-value-000"
            tenant = "a"
        "#;
        let env = env_of(&[("KLING_SECRET_KEY", "kling-secret-abc")]);
        let c = Config::from_parts(Some(file), &env).expect("valid");
        let shown = format!("{c:?} {c:#?}");
        for secret in [
            "db-pass-123",
            "redis-pass-456",
            "kling-secret-abc",
            "whsec-value-789",
            "api-key-value-000",
        ] {
            assert!(!shown.contains(secret), "{secret} leaked in {shown}");
        }
        assert!(shown.contains("postgres://slotd:***@db.internal:5432/slotd"));
        assert!(shown.contains("redis://:***@cache.internal:6379/0"));
    }

    #[test]
    fn loopback_rule() {
        let mut c =
            Config::from_parts(None, &env_of(&[("SLOTD_LISTEN", "0.0.0.0:8080")])).expect("valid");
        assert!(c.check_exposure().is_err());
        c.allow_unauthenticated = true;
        assert!(c.check_exposure().is_ok());
    }
}
