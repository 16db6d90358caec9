//! `[tenants.NAME]`: per-tenant settings: `budget = { limit = 500.0, period = "1d" }`, what the
//! tenant's units may cost per period, and per pool `min_slots` (capacity reserved while it has
//! pending work there) and `max_slots` (a cap) (docs/accounts-deadlines-budgets.md).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::bail;
use serde::{Deserialize, Deserializer};

/// One tenant's section.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    pub budget: Option<BudgetConfig>,
    /// Slots of each named pool reserved for this tenant while it has pending units there:
    /// `min_slots = { "kling:video" = 4 }`. Lent to others while it has none.
    #[serde(default)]
    pub min_slots: BTreeMap<String, u32>,
    /// At most this many slots of each named pool: `max_slots = { "kling:video" = 10 }`.
    #[serde(default)]
    pub max_slots: BTreeMap<String, u32>,
}

impl TenantConfig {
    /// Check the shares, naming `key` (`tenants.NAME`) on error.
    pub fn check_shares(&self, key: &str) -> anyhow::Result<()> {
        for (pool, max) in &self.max_slots {
            if *max == 0 {
                bail!(
                    "{key}.max_slots.{pool:?} must be at least 1 (leave the pool out for no cap)"
                );
            }
        }
        for (pool, min) in &self.min_slots {
            if let Some(max) = self.max_slots.get(pool)
                && min > max
            {
                bail!("{key}.min_slots.{pool:?} ({min}) is above its max_slots ({max})");
            }
        }
        Ok(())
    }
}

/// A budget: at most `limit` (in the provider's cost unit) per `period`.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    pub limit: f64,
    #[serde(deserialize_with = "period")]
    pub period: Duration,
}

/// The shortest budget period: a second (periods are whole milliseconds aligned to the epoch).
pub const PERIOD_MIN: Duration = Duration::from_secs(1);
/// The longest: 366 days.
pub const PERIOD_MAX: Duration = Duration::from_secs(366 * 24 * 3600);

fn period<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    super::values::duration(d)
}

impl BudgetConfig {
    /// Check the numbers, naming `key` on error.
    pub fn check(&self, key: &str) -> anyhow::Result<()> {
        if !self.limit.is_finite() || self.limit < 0.0 {
            bail!(
                "{key}.limit: {} is not a budget (a number, 0 or more)",
                self.limit
            );
        }
        if self.period < PERIOD_MIN || self.period > PERIOD_MAX {
            bail!(
                "{key}.period: {:?} is out of range (1s to 366d)",
                humantime::format_duration(self.period).to_string()
            );
        }
        Ok(())
    }

    /// [`BudgetConfig::check`] for a provider's `spend` (a pool's, an account's): a limit of
    /// 0 would hold every create for good, so it must be above 0.
    pub fn check_spend(&self, key: &str) -> anyhow::Result<()> {
        self.check(key)?;
        if self.limit <= 0.0 {
            bail!(
                "{key}.limit: a spend limit must be above 0 (remove the pool's work or its \
                 handler to stop its creates)"
            );
        }
        Ok(())
    }

    /// The period in milliseconds.
    pub fn period_ms(&self) -> i64 {
        i64::try_from(self.period.as_millis()).unwrap_or(i64::MAX)
    }
}
