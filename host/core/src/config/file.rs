//! Reading the configuration: `slotd.toml` (or no file), then the `SLOTD_*` overrides
//! (`env.rs`), then validation ([`Config::load`], [`Config::from_parts`]).
//!
//! The text is parsed into a TOML table first, for two reasons: `{ env = "VAR" }` references
//! are resolved in the table (deserializing has no environment to ask), and a table
//! deserializes with errors that end with the whole key path (``in `scheduler.min_rest` ``),
//! where errors read from text only show the line, not its section.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use super::Config;
use super::handler::HOST_KEYS;

/// Deserialize the file into a [`Config`] (defaults for what it leaves out), with the keys its
/// `[scheduler]` section sets (those timings do not follow the tick interval).
fn read(
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
    /// came from ([`super::SchedulerConfig::scaled_to`]): `SLOTD_TICK_INTERVAL=50ms` alone makes a
    /// fast test instance, while a timing the file sets keeps its value.
    pub fn from_parts(
        file_text: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Config> {
        let (mut c, scheduler_keys) = match file_text {
            Some(text) => read(text, env)?,
            None => (Config::default(), Default::default()),
        };
        c.apply_env(env)?;
        c.scheduler.follow_tick(&|key| scheduler_keys.contains(key));
        c.validate()?;
        Ok(c)
    }
}
