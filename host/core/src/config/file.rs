//! Reading `slotd.toml`, and the `deserialize_with` helpers for values written as text
//! (durations, addresses).
//!
//! The text is parsed into a TOML table first, for two reasons: `{ env = "VAR" }` references
//! are resolved in the table (deserializing has no environment to ask), and a table
//! deserializes with errors that end with the whole key path (``in `scheduler.min_rest` ``),
//! where errors read from text only show the line, not its section.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use super::Config;
use super::handler::HOST_KEYS;

/// Deserialize the file into a [`Config`] (defaults for what it leaves out), with the keys its
/// `[scheduler]` section sets (those timings do not follow the tick interval).
pub(super) fn read(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<(Config, BTreeSet<String>)> {
    let mut table: toml::Table = toml::from_str(text).context("config file")?;
    for (key, value) in &table {
        refuse_datetimes(key, value)?;
    }
    resolve_env_refs(&mut table, env)?;
    let scheduler_keys = match table.get("scheduler") {
        Some(toml::Value::Table(s)) => s.keys().cloned().collect(),
        _ => BTreeSet::new(),
    };
    let config = table.try_into().context("config file")?;
    Ok((config, scheduler_keys))
}

/// No setting is a date-time, and a table hands one to serde as a string (`1979-05-27`): refuse
/// them while the file's own types are still known.
fn refuse_datetimes(key: &str, value: &toml::Value) -> anyhow::Result<()> {
    match value {
        toml::Value::Datetime(_) => bail!("{key}: a date-time is not a valid value here"),
        toml::Value::Table(t) => t
            .iter()
            .try_for_each(|(k, v)| refuse_datetimes(&format!("{key}.{k}"), v)),
        toml::Value::Array(a) => a
            .iter()
            .enumerate()
            .try_for_each(|(i, v)| refuse_datetimes(&format!("{key}[{i}]"), v)),
        _ => Ok(()),
    }
}

/// Replace each `{ env = "VAR" }` where a secret may be written (a handler's own setting, an
/// API key) with `{ value = "<VAR's value>" }`, the literal form of a secret, naming the key
/// when `VAR` is not set.
fn resolve_env_refs(
    table: &mut toml::Table,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<()> {
    if let Some(toml::Value::Table(handlers)) = table.get_mut("handlers") {
        for (name, section) in handlers.iter_mut() {
            let Some(section) = section.as_table_mut() else {
                continue;
            };
            for (k, v) in section.iter_mut() {
                if k == "accounts" {
                    // `[[handlers.NAME.accounts]]`: each account's settings may be secrets too.
                    for (i, account) in v.as_array_mut().into_iter().flatten().enumerate() {
                        for (ak, av) in account.as_table_mut().into_iter().flatten() {
                            if !HOST_KEYS.contains(&ak.as_str()) {
                                let key = format!("handlers.{name}.accounts[{i}].{ak}");
                                resolve_env_ref(&key, av, env)?;
                            }
                        }
                    }
                } else if !HOST_KEYS.contains(&k.as_str()) {
                    resolve_env_ref(&format!("handlers.{name}.{k}"), v, env)?;
                }
            }
        }
    }
    if let Some(v) = table
        .get_mut("webhooks")
        .and_then(|w| w.as_table_mut())
        .and_then(|w| w.get_mut("secret"))
    {
        resolve_env_ref("webhooks.secret", v, env)?;
    }
    if let Some(toml::Value::Array(keys)) = table.get_mut("api_keys") {
        for (i, entry) in keys.iter_mut().enumerate() {
            if let Some(v) = entry.as_table_mut().and_then(|t| t.get_mut("key")) {
                resolve_env_ref(&format!("api_keys[{i}].key"), v, env)?;
            }
        }
    }
    Ok(())
}

fn resolve_env_ref(
    key: &str,
    value: &mut toml::Value,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<()> {
    let Some(var) = value.get("env").and_then(toml::Value::as_str) else {
        return Ok(());
    };
    let resolved =
        env(var).with_context(|| format!("{key}: environment variable {var} is not set"))?;
    let mut literal = toml::Table::new();
    literal.insert("value".into(), toml::Value::String(resolved));
    *value = toml::Value::Table(literal);
    Ok(())
}

/// Parse a duration such as `10s`, `50ms` or `1m 30s`, naming the key on error.
pub fn parse_duration(key: &str, text: &str) -> anyhow::Result<Duration> {
    duration_text(text).map_err(|e| anyhow!("{key}: {e}"))
}

pub(super) fn duration_text(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("{text:?} is not a duration (try \"10s\" or \"50ms\"): {e}"))
}

pub(super) fn listen_text(text: &str) -> Result<SocketAddr, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is not an address like 127.0.0.1:8080"))
}

/// A duration written as text (`"10s"`, `"50ms"`).
pub(super) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_text(&String::deserialize(d)?).map_err(D::Error::custom)
}

/// A listen address written as text (`"127.0.0.1:8080"`).
pub(super) fn socket_addr<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    listen_text(&String::deserialize(d)?).map_err(D::Error::custom)
}

/// An optional string where an empty one means unset (`redis_url = ""`).
pub(super) fn non_empty<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Some(String::deserialize(d)?).filter(|s| !s.is_empty()))
}

/// A size in MiB, as bytes (`memory_mb`).
pub(super) fn mebibytes<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    Ok(usize::deserialize(d)?.saturating_mul(1024 * 1024))
}
