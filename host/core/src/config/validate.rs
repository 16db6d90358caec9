//! Start-up checks of values that parse but make no sense, each naming its key.

use anyhow::{Context, bail};

use super::Config;

/// Longest tenant name (`api_keys[i].tenant`).
pub const TENANT_NAME_MAX: usize = 63;

impl Config {
    /// The tenants' `min_slots` of `pool` must add up to at most its `max` slots.
    pub fn check_minimums(&self, pool: &str, max: u32) -> anyhow::Result<()> {
        let sum: u64 = self
            .tenants
            .values()
            .filter_map(|t| t.min_slots.get(pool))
            .map(|m| u64::from(*m))
            .sum();
        if sum > u64::from(max) {
            bail!(
                "tenants' min_slots for pool {pool:?} add up to {sum}, more than its {max} slots"
            );
        }
        Ok(())
    }

    /// Check values that parse but make no sense, naming the key.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.scheduler.validate(self.limits.call_deadline)?;
        self.limits.validate()?;
        for (name, p) in &self.pools {
            if p.max_slots == Some(0) {
                bail!("pools.{name:?}.max_slots must be at least 1");
            }
            if p.max_slots.is_none() && p.rate.is_none() && p.daily.is_none() && p.spend.is_none() {
                bail!("pools.{name} sets nothing: give max_slots, rate, daily or spend");
            }
            if let Some(spend) = &p.spend {
                spend.check_spend(&format!("pools.{name:?}.spend"))?;
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
            for name in &k.publish {
                let ok = !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
                if !ok {
                    bail!(
                        "api_keys[{i}].publish: {name:?} is not a handler name (lowercase letters, \
                         digits and -)"
                    );
                }
            }
        }
        for (name, t) in &self.tenants {
            check_tenant_name(&format!("tenants.{name}"), name)?;
            if let Some(b) = &t.budget {
                b.check(&format!("tenants.{name}.budget"))?;
            }
            t.check_shares(&format!("tenants.{name}"))?;
        }
        // The minimums of a pool with a configured size must fit in it (pools sized by their
        // handler are checked once the handlers are loaded).
        for (pool, p) in &self.pools {
            if let Some(max) = p.max_slots {
                self.check_minimums(pool, max)?;
            }
        }
        super::check_routes(&self.routes, &self.pools)?;
        super::check_provider_accounts(&self.provider_accounts)?;
        self.api.validate()?;
        self.webhooks.validate()?;
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
