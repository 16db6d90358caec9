//! A pool's operator settings: `[pools."kling:video"]`.

use serde::Deserialize;

use super::{BudgetConfig, Quota, quotas};

/// A pool's operator settings (`[pools."kling:video"] max_slots = 18`, and its quotas:
/// `rate = "100/min"`, `daily = 6`, `spend = { limit = 500.0, period = "30d" }`; see
/// `quotas.rs`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Unset: what the handler proposes.
    #[serde(default)]
    pub max_slots: Option<u32>,
    /// Creates per window.
    #[serde(default, deserialize_with = "quotas::rate")]
    pub rate: Option<Quota>,
    /// Creates per day (rolling 24 h unless the table says otherwise).
    #[serde(default, deserialize_with = "quotas::daily")]
    pub daily: Option<Quota>,
    /// The most the pool's creates may cost per period, in the provider's cost unit (the
    /// handlers' estimates, settled to what the provider reports).
    #[serde(default)]
    pub spend: Option<BudgetConfig>,
}

impl PoolConfig {
    /// A pool of `n` slots and no other quota.
    pub fn slots(n: u32) -> Self {
        PoolConfig {
            max_slots: Some(n),
            ..PoolConfig::default()
        }
    }
}
