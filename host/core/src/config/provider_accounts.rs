//! `[provider_accounts.NAME]`: one provider account whose concurrency limit spans several
//! pools (Kling's 20 over video and avatars; fal's account over every model). Each pool takes
//! a share: `min` (kept for it while it has work waiting) and `max` (the most it may hold);
//! idle slots are borrowed by pools with work (docs/accounts-deadlines-budgets.md "One
//! account, many pools").
//!
//! ```toml
//! [provider_accounts.kling]
//! max_slots = 20
//! pools."kling:video" = { min = 14, max = 20, account = "main" }
//! pools."kling:avatar" = { min = 2, max = 6 }
//! ```

use std::collections::BTreeMap;

use anyhow::bail;
use serde::Deserialize;

/// One provider account shared by pools.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderAccountConfig {
    /// What the provider runs at once for the account, over every pool.
    pub max_slots: u32,
    /// Each pool on the account and its share.
    pub pools: BTreeMap<String, ShareConfig>,
}

/// A pool's share of a provider account.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareConfig {
    /// Slots kept for the pool while it has work waiting (lent to the others while it has
    /// none; given back as their slots free, never by cancelling a running job).
    #[serde(default)]
    pub min: u32,
    /// The most it may hold. Unset: the account's `max_slots`.
    #[serde(default)]
    pub max: Option<u32>,
    /// Which of its handler's `[[handlers.NAME.accounts]]` serves the pool on this provider
    /// account. Unset: the handler's implicit account (a handler without `accounts`).
    #[serde(default)]
    pub account: Option<String>,
}

impl ShareConfig {
    /// The share's maximum within an account of `limit` slots.
    pub fn max_of(&self, limit: u32) -> u32 {
        self.max.unwrap_or(limit).min(limit)
    }
}

impl ProviderAccountConfig {
    /// Check the numbers, naming `key` (`provider_accounts.NAME`) on error.
    pub fn check(&self, key: &str) -> anyhow::Result<()> {
        if self.max_slots == 0 {
            bail!("{key}.max_slots must be at least 1");
        }
        if self.pools.is_empty() {
            bail!("{key}.pools names no pool: give each pool on the account its share");
        }
        let mut mins: u64 = 0;
        for (pool, share) in &self.pools {
            let at = format!("{key}.pools.{pool:?}");
            if let Some(max) = share.max {
                if max == 0 {
                    bail!("{at}.max must be at least 1");
                }
                if max > self.max_slots {
                    bail!(
                        "{at}.max ({max}) is above the account's max_slots ({})",
                        self.max_slots
                    );
                }
            }
            let max = share.max_of(self.max_slots);
            if share.min > max {
                bail!("{at}.min ({}) is above its max ({max})", share.min);
            }
            if let Some(a) = &share.account
                && !super::handler::valid_account_name(a)
            {
                bail!(
                    "{at}.account: {a:?} is not an account name (1 to 64 letters, digits, '-' or \
                     '_')"
                );
            }
            mins += u64::from(share.min);
        }
        if mins > u64::from(self.max_slots) {
            bail!(
                "{key}.pools: the shares' min add up to {mins}, more than the account's max_slots \
                 ({}): they could not all be kept",
                self.max_slots
            );
        }
        Ok(())
    }
}

/// Every provider account's checks, and no slot set (a pool and its handler's account) on two
/// provider accounts.
pub fn check_provider_accounts(
    accounts: &BTreeMap<String, ProviderAccountConfig>,
) -> anyhow::Result<()> {
    let mut seen: BTreeMap<(String, Option<String>), &str> = BTreeMap::new();
    for (name, a) in accounts {
        let key = format!("provider_accounts.{name}");
        if !super::handler::valid_account_name(name) {
            bail!("{key}: {name:?} is not an account name (1 to 64 letters, digits, '-' or '_')");
        }
        a.check(&key)?;
        for (pool, share) in &a.pools {
            if let Some(other) = seen.insert((pool.clone(), share.account.clone()), name) {
                bail!(
                    "{key}.pools.{pool:?}: the pool{} is already on provider account {other:?}; \
                     a pool's slots count against one provider account",
                    share
                        .account
                        .as_deref()
                        .map(|a| format!(" (account {a:?})"))
                        .unwrap_or_default()
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "provider_accounts_tests.rs"]
mod tests;
