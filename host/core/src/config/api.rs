//! `[api]`: the HTTP front door's limits: how long a client may take over its headers, how
//! many requests run at once, and how fast each tenant may call (see `api/admission.rs` and
//! `serve.rs` for where they are enforced).

use std::time::Duration;

use anyhow::{Context, bail};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use super::values;

/// Longest a client may take to send a request's headers (slowloris); a kept-alive connection
/// idle this long between requests is closed too.
pub const HEADER_READ_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// Requests handled at once by one process; more are answered 503 with `Retry-After` at once
/// rather than queued.
pub const MAX_CONCURRENT_REQUESTS_DEFAULT: usize = 512;
/// Sustained requests per second one tenant may make (with API keys).
pub const RATE_LIMIT_PER_SECOND_DEFAULT: f64 = 100.0;
/// Requests one tenant may make in a burst above the sustained rate.
pub const RATE_LIMIT_BURST_DEFAULT: u32 = 200;

/// The HTTP front door (`[api]`): how long headers may take, how many requests run at once,
/// and how fast each tenant may call. The file's `[api]` keys are these fields' names.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiConfig {
    /// See [`HEADER_READ_TIMEOUT_DEFAULT`].
    #[serde(deserialize_with = "values::duration")]
    pub header_read_timeout: Duration,
    /// See [`MAX_CONCURRENT_REQUESTS_DEFAULT`].
    pub max_concurrent_requests: usize,
    /// Per-tenant token bucket, applied only when `[[api_keys]]` are configured (the single
    /// local tenant of a loopback slotd is not limited). `None`: off (`rate_limit = false`).
    #[serde(deserialize_with = "rate_limit")]
    pub rate_limit: Option<RateLimit>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            header_read_timeout: HEADER_READ_TIMEOUT_DEFAULT,
            max_concurrent_requests: MAX_CONCURRENT_REQUESTS_DEFAULT,
            rate_limit: Some(RateLimit::default()),
        }
    }
}

/// A token bucket: `burst` requests at once, refilled at `per_second`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    pub per_second: f64,
    pub burst: u32,
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit {
            per_second: RATE_LIMIT_PER_SECOND_DEFAULT,
            burst: RATE_LIMIT_BURST_DEFAULT,
        }
    }
}

impl ApiConfig {
    /// Check values that parse but make no sense, naming the key.
    pub(super) fn validate(&self) -> anyhow::Result<()> {
        if self.header_read_timeout < Duration::from_millis(10) {
            bail!("api.header_read_timeout must be at least 10ms");
        }
        if self.max_concurrent_requests == 0 {
            bail!("api.max_concurrent_requests must be at least 1");
        }
        if let Some(r) = &self.rate_limit {
            if !(r.per_second.is_finite() && r.per_second > 0.0) {
                bail!(
                    "api.rate_limit.per_second must be a positive number, got {}",
                    r.per_second
                );
            }
            if r.burst == 0 {
                bail!("api.rate_limit.burst must be at least 1");
            }
        }
        Ok(())
    }
}

/// `deserialize_with` for `[api] rate_limit`: `false` turns it off, `true` keeps the defaults,
/// a table sets `per_second` and/or `burst`.
fn rate_limit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RateLimit>, D::Error> {
    let value = toml::Value::deserialize(d)?;
    rate_limit_of(&value).map_err(|e| D::Error::custom(format!("{e:#}")))
}

fn rate_limit_of(value: &toml::Value) -> anyhow::Result<Option<RateLimit>> {
    const KEY: &str = "api.rate_limit";
    let table = match value {
        toml::Value::Boolean(false) => return Ok(None),
        toml::Value::Boolean(true) => return Ok(Some(RateLimit::default())),
        toml::Value::Table(t) => t,
        _ => bail!("{KEY}: expected false or {{ per_second = 100, burst = 200 }}"),
    };
    let mut limit = RateLimit::default();
    for (k, v) in table {
        match (k.as_str(), v) {
            ("per_second", toml::Value::Float(f)) => limit.per_second = *f,
            ("per_second", toml::Value::Integer(i)) => limit.per_second = *i as f64,
            ("burst", toml::Value::Integer(i)) => {
                limit.burst = u32::try_from(*i)
                    .with_context(|| format!("{KEY}.burst: {i} is out of range"))?;
            }
            ("per_second" | "burst", _) => bail!("{KEY}.{k}: expected a number"),
            _ => bail!("{KEY}: unknown key {k:?} (expected per_second, burst)"),
        }
    }
    Ok(Some(limit))
}
