//! `[handlers.NAME]` and `[[api_keys]]`: the two sections whose values may be secrets, and the
//! [`Secret`] that holds them.
//!
//! A handler's section is open: besides the keys the host reads itself ([`HOST_KEYS`]), every
//! key is a setting of the handler's own. A value written `{ env = "VAR" }` has been replaced
//! by `{ value = "…" }` before it gets here (`file.rs`); both forms are
//! secrets.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use anyhow::{Context, anyhow, bail};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// The keys of a handler's section that the host reads itself: never readable by the guest,
/// and never given as `{ env = "VAR" }`.
pub(super) const HOST_KEYS: [&str; 4] = ["allowed_hosts", "record", "file", "sha256"];

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
    /// any other value is used as written. Checked at start-up ([`super::Config::validate`]),
    /// so a malformed `whsec_` secret is refused there, naming its key, not at the first
    /// callback.
    pub fn signing_key(&self) -> Result<Cow<'_, [u8]>, String> {
        if !self.0.starts_with("whsec_") {
            return Ok(Cow::Borrowed(self.expose()));
        }
        crate::standard_webhooks::webhook_key(&self.0)
            .map(Cow::Owned)
            .map_err(|e| format!("{e:#}"))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Any form a handler setting takes: a string, a number, a boolean or `{ value = "…" }`.
impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = toml::Value::deserialize(d)?;
        let (text, _) = value_text("", &value).map_err(|e| D::Error::custom(format!("{e:#}")))?;
        Ok(Secret(text))
    }
}

/// An API key and the tenant it acts for (`Debug` shows the key as `Secret(***)`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    pub key: Secret,
    pub tenant: String,
    /// `admin = true`: this key also reads and acts on every tenant's tasks (the operator
    /// console's view). Default false: a key sees only its own tenant.
    #[serde(default)]
    pub admin: bool,
    /// `publish = ["runway-video"]`: the handler names this key may publish as releases
    /// (`POST /v1/handlers`, `slotd plugin publish`). An admin key may publish any.
    #[serde(default)]
    pub publish: Vec<String>,
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
    /// `[[handlers.NAME.accounts]]`: the provider accounts its pools draw on. Empty: one
    /// implicit account, the section itself.
    pub accounts: Vec<Account>,
}

/// One provider account of a handler: its name, its limit in each of the handler's pools, and
/// its settings (the handler's, overridden by the account's own).
#[derive(Clone, Debug)]
pub struct Account {
    pub name: String,
    pub max_slots: u32,
    /// Creates per window on this account, in each pool it serves (`rate = "100/min"`).
    pub rate: Option<super::Quota>,
    /// Creates per day on this account, in each pool it serves (`daily = 1000`).
    pub daily: Option<super::Quota>,
    /// The most this account's creates may cost per period, over every pool it serves (a
    /// provider's credits are the organization's): `spend = { limit = 5000.0, period = "30d" }`.
    pub spend: Option<super::BudgetConfig>,
    /// The handler's settings, secrets and hosts with this account's on top.
    pub config: std::sync::Arc<HandlerConfig>,
}

/// Account names: what may follow `@` in a slot key and appear in URLs and metrics labels.
pub(super) fn valid_account_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl HandlerConfig {
    /// The settings a call for units of `account` runs with: that account's, or the section's
    /// own for the implicit account (and for an account no longer configured, whose units
    /// finish on the section's settings).
    pub fn for_account(self: &std::sync::Arc<Self>, account: Option<&str>) -> std::sync::Arc<Self> {
        account
            .and_then(|a| self.accounts.iter().find(|x| x.name == a))
            .map_or_else(|| self.clone(), |a| a.config.clone())
    }

    /// Set the accounts from `[[handlers.NAME.accounts]]` tables (as the file gives them, each
    /// merged over this section): for configurations built in code.
    pub fn set_accounts(&mut self, name: &str, accounts: &toml::Value) -> anyhow::Result<()> {
        self.accounts = self.read_accounts(name, accounts)?;
        Ok(())
    }

    /// `[[handlers.NAME.accounts]]` entries, each merged over the section.
    fn read_accounts(&self, name: &str, value: &toml::Value) -> anyhow::Result<Vec<Account>> {
        let list = value.as_array().with_context(|| {
            format!("handlers.{name}.accounts: expected [[handlers.{name}.accounts]] tables")
        })?;
        let mut out: Vec<Account> = Vec::with_capacity(list.len());
        for (i, entry) in list.iter().enumerate() {
            let at = format!("handlers.{name}.accounts[{i}]");
            let table = entry
                .as_table()
                .with_context(|| format!("{at}: expected a table with name and max_slots"))?;
            let account = table
                .get("name")
                .and_then(toml::Value::as_str)
                .with_context(|| format!("{at}.name: required, a string"))?;
            if !valid_account_name(account) {
                bail!(
                    "{at}.name: {account:?} is not an account name (1 to 64 letters, digits, \
                     '-' or '_')"
                );
            }
            if out.iter().any(|a| a.name == account) {
                bail!("{at}.name: account {account:?} is named twice in handlers.{name}");
            }
            let max_slots = table
                .get("max_slots")
                .and_then(toml::Value::as_integer)
                .with_context(|| format!("{at}.max_slots: required, a whole number"))?;
            let max_slots = u32::try_from(max_slots)
                .ok()
                .filter(|m| *m >= 1)
                .with_context(|| {
                    format!("{at}.max_slots: {max_slots} is not a slot count (1 or more)")
                })?;
            let rate = match table.get("rate") {
                None => None,
                Some(v) => {
                    let text = v
                        .as_str()
                        .with_context(|| format!("{at}.rate: expected text like \"100/min\""))?;
                    Some(super::quotas::parse_rate(text).map_err(|e| anyhow!("{at}.rate: {e}"))?)
                }
            };
            let daily = match table.get("daily") {
                None => None,
                Some(v) => {
                    Some(super::quotas::daily_of(v).map_err(|e| anyhow!("{at}.daily: {e}"))?)
                }
            };
            let spend = match table.get("spend") {
                None => None,
                Some(v) => {
                    let b = super::BudgetConfig::deserialize(v.clone()).map_err(|e| {
                        anyhow!("{at}.spend: expected {{ limit = 500.0, period = \"30d\" }}: {e}")
                    })?;
                    b.check_spend(&format!("{at}.spend"))?;
                    Some(b)
                }
            };
            let mut own = table.clone();
            own.remove("name");
            own.remove("max_slots");
            own.remove("rate");
            own.remove("daily");
            own.remove("spend");
            for pin in ["file", "sha256", "record", "accounts"] {
                if own.contains_key(pin) {
                    bail!("{at}.{pin}: belongs to the handler's section, not to an account");
                }
            }
            let mine = HandlerConfig::from_table(&format!("{name}.accounts[{i}]"), &own)?;
            let mut merged = self.clone();
            merged.accounts = Vec::new();
            // `config.get("account")` names the account a call runs for.
            merged
                .settings
                .insert("account".into(), account.to_string());
            merged.settings.extend(mine.settings);
            merged.secrets.extend(mine.secrets);
            for h in mine.allowed_hosts {
                if !merged.allowed_hosts.contains(&h) {
                    merged.allowed_hosts.push(h);
                }
            }
            out.push(Account {
                name: account.to_string(),
                max_slots,
                rate,
                daily,
                spend,
                config: std::sync::Arc::new(merged),
            });
        }
        Ok(out)
    }
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

    /// Read handler `name`'s section, naming `handlers.NAME.KEY` on error.
    fn from_table(name: &str, table: &toml::Table) -> anyhow::Result<HandlerConfig> {
        let mut out = HandlerConfig::default();
        for (k, v) in table {
            let key = format!("handlers.{name}.{k}");
            let text = || {
                v.as_str()
                    .with_context(|| format!("{key}: expected a string"))
            };
            match k.as_str() {
                // Read last, over the whole section.
                "accounts" => {}
                "allowed_hosts" => out.allowed_hosts = allowed_hosts(&key, v)?,
                "record" => {
                    let dir = v
                        .as_str()
                        .filter(|d| !d.is_empty())
                        .with_context(|| format!("{key}: expected a directory path"))?;
                    out.record = Some(dir.into());
                }
                "file" => out.file = Some(text()?.to_string()),
                "sha256" => out.sha256 = Some(text()?.to_ascii_lowercase()),
                _ => {
                    let (value, secret_form) = value_text(&key, v)?;
                    // `{ env = … }` values and anything named like a secret are secrets: the
                    // guest can sign with them but never read them.
                    if secret_form || named_like_a_secret(k) {
                        out.secrets.insert(k.clone(), Secret::new(value));
                    } else {
                        out.settings.insert(k.clone(), value);
                    }
                }
            }
        }
        if let Some(accounts) = table.get("accounts") {
            out.accounts = out.read_accounts(name, accounts)?;
        }
        Ok(out)
    }
}

/// `deserialize_with` for [`super::Config::handlers`]: every section, by handler name.
pub(super) fn handlers<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, HandlerConfig>, D::Error> {
    let tables = BTreeMap::<String, toml::Table>::deserialize(d)?;
    tables
        .iter()
        .map(|(name, table)| {
            let handler = HandlerConfig::from_table(name, table)
                .map_err(|e| D::Error::custom(format!("{e:#}")))?;
            Ok((name.clone(), handler))
        })
        .collect()
}

fn named_like_a_secret(key: &str) -> bool {
    ["secret", "password", "api_key", "token"]
        .iter()
        .any(|word| key.contains(word))
}

/// `allowed_hosts = ["host", "host:port"]`, lowercased.
fn allowed_hosts(key: &str, value: &toml::Value) -> anyhow::Result<Vec<String>> {
    let expected = || format!("{key}: expected a list of host names");
    let list = value.as_array().with_context(expected)?;
    let mut hosts = Vec::with_capacity(list.len());
    for h in list {
        let h = h.as_str().with_context(expected)?;
        if h.is_empty() || h.contains('/') {
            bail!("{key}: {h:?} is not a host name (give \"host\" or \"host:port\")");
        }
        hosts.push(h.to_ascii_lowercase());
    }
    Ok(hosts)
}

/// The text of a value that may be a secret, and whether it was written in the secret form
/// (`{ value = "…" }`, which is also what `{ env = "VAR" }` became). Numbers and booleans are
/// taken as written.
fn value_text(key: &str, value: &toml::Value) -> anyhow::Result<(String, bool)> {
    let prefix = if key.is_empty() {
        String::new()
    } else {
        format!("{key}: ")
    };
    match value {
        toml::Value::String(s) => Ok((s.clone(), false)),
        toml::Value::Table(t) => match t.get("value") {
            Some(toml::Value::String(v)) => Ok((v.clone(), true)),
            _ => bail!("{prefix}expected a string or {{ env = \"VAR\" }}"),
        },
        toml::Value::Integer(i) => Ok((i.to_string(), false)),
        toml::Value::Float(f) => Ok((f.to_string(), false)),
        toml::Value::Boolean(b) => Ok((b.to_string(), false)),
        _ => bail!("{prefix}expected a string, a number, a boolean or {{ env = \"VAR\" }}"),
    }
}
