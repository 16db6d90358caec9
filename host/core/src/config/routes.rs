//! `[routes.NAME]`: a task type several handlers serve (docs/routes.md). Each target names a
//! handler and one of its models; the policy picks among the targets that have room when a
//! slot frees:
//!
//! ```toml
//! [routes.clip]
//! policy = "ordered"          # ordered (default) | cheapest | fastest | weights
//! targets = [
//!   { handler = "kling-video", model = "kling-v1-6" },
//!   { handler = "runway-video", model = "gen4_turbo" },
//! ]
//! ```

use std::collections::{BTreeMap, HashSet};

use anyhow::bail;
use serde::{Deserialize, Serialize};

/// Most targets one route may name.
pub const ROUTE_TARGETS_MAX: usize = 16;
/// Longest route name (it is a task type: `POST /v1/tasks/{route}`).
pub const ROUTE_NAME_MAX: usize = 63;

/// How a route picks among the targets that can take a unit now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RoutePolicy {
    /// The first target (in the order given) with room.
    #[default]
    Ordered,
    /// The target whose handler estimates the unit cheapest, among those with room.
    Cheapest,
    /// The target expected to end the unit soonest (its pool's expected duration), among
    /// those with room.
    Fastest,
    /// Spread by each target's `weight`, among those with room.
    Weights,
}

impl RoutePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            RoutePolicy::Ordered => "ordered",
            RoutePolicy::Cheapest => "cheapest",
            RoutePolicy::Fastest => "fastest",
            RoutePolicy::Weights => "weights",
        }
    }
}

/// One target of a route: a handler and one of the models it serves in routes.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RouteTarget {
    pub handler: String,
    pub model: String,
    /// Its share under `policy = "weights"` (at least 1); read only by that policy.
    #[serde(default)]
    pub weight: Option<u32>,
}

impl RouteTarget {
    /// `handler/model`, as logs, events and metrics name the target.
    pub fn label(&self) -> String {
        format!("{}/{}", self.handler, self.model)
    }
}

/// One route's section.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    #[serde(default)]
    pub policy: RoutePolicy,
    pub targets: Vec<RouteTarget>,
}

impl RouteConfig {
    /// Check the section, naming `routes.NAME` on error.
    pub fn check(&self, name: &str) -> anyhow::Result<()> {
        let key = format!("routes.{name}");
        check_route_name(&key, name)?;
        if self.targets.is_empty() {
            bail!("{key}.targets is empty: name at least one {{ handler, model }}");
        }
        if self.targets.len() > ROUTE_TARGETS_MAX {
            bail!(
                "{key}.targets names {} targets; at most {ROUTE_TARGETS_MAX}",
                self.targets.len()
            );
        }
        let mut seen = HashSet::new();
        for (i, t) in self.targets.iter().enumerate() {
            let at = format!("{key}.targets[{i}]");
            if t.handler.trim().is_empty() {
                bail!("{at}.handler is empty");
            }
            if t.model.trim().is_empty() {
                bail!("{at}.model is empty");
            }
            if !seen.insert((t.handler.as_str(), t.model.as_str())) {
                bail!("{at} repeats {} (each target once)", t.label());
            }
            match (self.policy, t.weight) {
                (RoutePolicy::Weights, None) => {
                    bail!("{at}.weight is missing: policy = \"weights\" needs one per target")
                }
                (RoutePolicy::Weights, Some(0)) => {
                    bail!("{at}.weight must be at least 1 (leave the target out instead)")
                }
                (RoutePolicy::Weights, Some(_)) | (_, None) => {}
                (other, Some(_)) => bail!(
                    "{at}.weight is read only with policy = \"weights\", not {:?}",
                    other.as_str()
                ),
            }
        }
        Ok(())
    }
}

/// A route name: it is a task type, so 1 to [`ROUTE_NAME_MAX`] lowercase ASCII letters,
/// digits, `-` or `_`.
fn check_route_name(key: &str, name: &str) -> anyhow::Result<()> {
    if name.is_empty() || name.len() > ROUTE_NAME_MAX {
        bail!("{key}: a route name must be 1 to {ROUTE_NAME_MAX} characters long");
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '_'))
    {
        bail!("{key}: the route name contains {bad:?}; use a-z, 0-9, '-' and '_' only");
    }
    Ok(())
}

/// Check every route, and that no pool is configured under a route's pool name.
pub fn check_routes(
    routes: &BTreeMap<String, RouteConfig>,
    pools: &BTreeMap<String, super::PoolConfig>,
) -> anyhow::Result<()> {
    for (name, r) in routes {
        r.check(name)?;
    }
    if let Some(pool) = pools
        .keys()
        .find(|p| p.starts_with(crate::model::ROUTE_POOL_PREFIX))
    {
        bail!(
            "pools.{pool:?}: names starting {:?} are where routed units wait; pick another",
            crate::model::ROUTE_POOL_PREFIX
        );
    }
    Ok(())
}
