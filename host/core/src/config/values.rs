//! Values written as text in the file and the environment: durations (`"10s"`), listen
//! addresses, empty-means-unset strings and sizes in MiB, with the `deserialize_with` helpers
//! the settings' types name.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::anyhow;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

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
