//! The provider's observed job durations, learned from completed units.
//!
//! Every unit that leaves `submitted` because its job succeeded tells how long the provider
//! took (submit marker to the answer that saw the end). Durations are kept per pool and per
//! *class*: the task type, the stage and, when the unit's spec names them, its `model` /
//! `model_name`, `mode` and `duration` (a 10 s Kling pro video takes longer than a 5 s std
//! one). The last [`KEEP`] of each class make an empirical distribution.
//!
//! The distributions are what poll rounds ([`crate::scheduler`]'s `rounds.rs`), ETAs
//! ([`crate::eta`]) and deadline projections read.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Deserialize;

use slotd_core::model::Unit;

/// Completions kept per class.
pub const KEEP: usize = 256;
/// Completions a class needs before its distribution is used.
pub const MIN_SAMPLES: usize = 4;

/// An empirical distribution of durations (ms): piecewise linear between the sorted samples,
/// 0 below the shortest, 1 from the longest on.
#[derive(Clone, Debug)]
pub struct Distribution {
    sorted: Vec<i64>,
}

impl Distribution {
    pub fn new(mut samples: Vec<i64>) -> Option<Distribution> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        Some(Distribution { sorted: samples })
    }

    /// P(duration ≤ `x` ms).
    pub fn cdf(&self, x: i64) -> f64 {
        let s = &self.sorted;
        let n = s.len();
        if n == 1 {
            return if x >= s[0] { 1.0 } else { 0.0 };
        }
        if x < s[0] {
            return 0.0;
        }
        if x >= s[n - 1] {
            return 1.0;
        }
        // The last sample ≤ x; x < s[n - 1], so k + 1 < n.
        let k = s.partition_point(|&v| v <= x) - 1;
        let span = (s[k + 1] - s[k]).max(1) as f64;
        (k as f64 + (x - s[k]) as f64 / span) / (n - 1) as f64
    }

    /// The longest duration seen.
    pub fn max(&self) -> i64 {
        self.sorted.last().copied().unwrap_or(0)
    }

    /// The `q` quantile (0..=1).
    pub fn quantile(&self, q: f64) -> i64 {
        let i = ((self.sorted.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
        self.sorted[i.min(self.sorted.len() - 1)]
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    /// The samples, shortest first.
    pub fn samples(&self) -> &[i64] {
        &self.sorted
    }

    /// The mean duration.
    pub fn mean(&self) -> i64 {
        let n = self.sorted.len().max(1) as i128;
        (self.sorted.iter().map(|&v| i128::from(v)).sum::<i128>() / n) as i64
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// P(the job ends within `delta` ms | it was running at age `age`). A job older than every
    /// sample (the long tail) ends at a rate of one per half the longest duration seen, so
    /// tail units are still looked at, just rarely.
    pub fn ends_within(&self, age: i64, delta: i64) -> f64 {
        let f0 = self.cdf(age);
        let alive = 1.0 - f0;
        if alive <= 1e-9 {
            let tail = (self.max() / 2).max(1) as f64;
            return (delta as f64 / tail).min(1.0);
        }
        ((self.cdf(age.saturating_add(delta)) - f0) / alive).clamp(0.0, 1.0)
    }
}

#[derive(Default)]
struct Samples {
    recent: VecDeque<i64>,
    snapshot: Option<Arc<Distribution>>,
}

/// What a pool's classes have taken; shared by ticks and callbacks.
#[derive(Default)]
pub struct Durations {
    classes: Mutex<HashMap<(String, String), Samples>>,
    /// Each pool's next poll round (Unix ms).
    pub(crate) rounds: Mutex<HashMap<String, i64>>,
}

impl std::fmt::Debug for Durations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durations").finish_non_exhaustive()
    }
}

impl Durations {
    /// One completed job of `class` in `pool` took `ms`.
    pub fn observe(&self, pool: &str, class: &str, ms: i64) {
        if ms < 0 {
            return;
        }
        let mut classes = self.classes.lock();
        let s = classes
            .entry((pool.to_string(), class.to_string()))
            .or_default();
        if s.recent.len() == KEEP {
            s.recent.pop_front();
        }
        s.recent.push_back(ms);
        s.snapshot = None;
    }

    /// The distribution of `class` in `pool`, once it has [`MIN_SAMPLES`].
    pub fn distribution(&self, pool: &str, class: &str) -> Option<Arc<Distribution>> {
        let mut classes = self.classes.lock();
        let s = classes.get_mut(&(pool.to_string(), class.to_string()))?;
        if s.recent.len() < MIN_SAMPLES {
            return None;
        }
        if s.snapshot.is_none() {
            s.snapshot = Distribution::new(s.recent.iter().copied().collect()).map(Arc::new);
        }
        s.snapshot.clone()
    }
}

impl Durations {
    /// Every class of `pool` together (what a unit of unknown class is expected to take),
    /// once it has [`MIN_SAMPLES`].
    pub fn pool_distribution(&self, pool: &str) -> Option<Distribution> {
        let classes = self.classes.lock();
        let samples: Vec<i64> = classes
            .iter()
            .filter(|((p, _), _)| p == pool)
            .flat_map(|(_, s)| s.recent.iter().copied())
            .collect();
        if samples.len() < MIN_SAMPLES {
            return None;
        }
        Distribution::new(samples)
    }
}

/// The fields of a unit's spec that make its class, when present.
#[derive(Deserialize)]
struct ClassFields {
    #[serde(default, alias = "model_name")]
    model: Option<serde_json::Value>,
    #[serde(default)]
    mode: Option<serde_json::Value>,
    #[serde(default)]
    duration: Option<serde_json::Value>,
}

/// A unit's duration class: task type and stage, and the model, mode and duration its spec
/// names (unreadable or absent fields are left out).
pub fn class_of(unit: &Unit) -> String {
    let mut class = format!("{}/{}", unit.task_type, unit.stage);
    if let Ok(f) = serde_json::from_str::<ClassFields>(&unit.spec) {
        for v in [f.model, f.mode, f.duration].into_iter().flatten() {
            class.push('/');
            match v {
                serde_json::Value::String(s) => class.push_str(&s),
                other => class.push_str(&other.to_string()),
            }
        }
    }
    class
}

/// Learn from a decided batch: every update that ends a `submitted` unit's job with success
/// tells how long the provider took since the unit's submit marker.
pub fn learn(
    durations: &Durations,
    units: &[&Unit],
    updates: &[slotd_store::UnitUpdate],
    now: i64,
) {
    let succeeded: std::collections::HashSet<&str> = updates
        .iter()
        .filter(|u| u.to == Some(slotd_core::model::UnitStatus::Succeeded))
        .map(|u| u.unit_id.as_str())
        .collect();
    if succeeded.is_empty() {
        return;
    }
    for unit in units.iter().filter(|u| succeeded.contains(u.id.as_str())) {
        if let Some(at) = unit.submitted_at {
            let ms = now.saturating_sub(at);
            let class = class_of(unit);
            // The provider's job durations as slotd saw them (docs/operations.md).
            metrics::histogram!(
                "slotd_provider_job_seconds",
                "pool" => unit.pool.clone(),
                "class" => class.clone(),
            )
            .record(ms.max(0) as f64 / 1000.0);
            durations.observe(&unit.pool, &class, ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uniform(lo: i64, hi: i64, n: i64) -> Arc<Distribution> {
        Arc::new(
            Distribution::new((0..n).map(|i| lo + (hi - lo) * i / (n - 1)).collect())
                .expect("samples"),
        )
    }

    #[test]
    fn cdf_is_piecewise_linear_between_samples() {
        let d = uniform(30_000, 120_000, 10);
        assert_eq!(d.cdf(0), 0.0);
        assert_eq!(d.cdf(29_999), 0.0);
        assert_eq!(d.cdf(120_000), 1.0);
        assert!((d.cdf(75_000) - 0.5).abs() < 1e-9);
        assert_eq!(d.quantile(0.0), 30_000);
        assert_eq!(d.quantile(1.0), 120_000);
    }

    #[test]
    fn a_class_plans_only_with_enough_samples() {
        let d = Durations::default();
        for i in 0..(MIN_SAMPLES as i64 - 1) {
            d.observe("p", "c", 1_000 + i);
        }
        assert!(d.distribution("p", "c").is_none());
        d.observe("p", "c", 5_000);
        let dist = d.distribution("p", "c").expect("enough samples");
        assert_eq!(dist.len(), MIN_SAMPLES);
        for _ in 0..(2 * KEEP) {
            d.observe("p", "c", 7);
        }
        assert_eq!(d.distribution("p", "c").expect("kept").len(), KEEP);
    }
}
