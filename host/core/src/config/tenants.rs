//! `[tenants.NAME]`: per-tenant settings. Today one: `budget = { limit = 500.0, period = "1d" }`,
//! what the tenant's units may cost per period (README "Tenant budgets").

use std::time::Duration;

use anyhow::bail;
use serde::{Deserialize, Deserializer};

/// One tenant's section.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    pub budget: Option<BudgetConfig>,
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
    super::file::duration(d)
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

    /// The period in milliseconds.
    pub fn period_ms(&self) -> i64 {
        i64::try_from(self.period.as_millis()).unwrap_or(i64::MAX)
    }
}
