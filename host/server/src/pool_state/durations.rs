//! The provider's observed job durations, learned from completed units, and the poll rounds
//! planned from them (SPEC §16: full slots on polling alone at a small request budget).
//!
//! Every unit that leaves `submitted` because its job succeeded tells how long the provider
//! took (submit marker to the answer that saw the end). Durations are kept per pool and per
//! *class*: the task type, the stage and, when the unit's spec names them, its `model` /
//! `model_name`, `mode` and `duration` (a 10 s Kling pro video takes longer than a 5 s std
//! one). The last [`KEEP`] of each class make an empirical distribution.
//!
//! While a pool has a backlog, what costs utilization is the time between a job's end and the
//! poll that notices it. A poll *round* asks about every running unit of the pool at once
//! (handlers answer a round with one list request where the provider has one), and the next
//! round is due when the expected number of jobs that ended unnoticed since this one reaches
//! [`ROUND_THETA`]: `Σ (F(e + Δ) − F(e)) / (1 − F(e))` over the running units, `e` each one's
//! age and `F` its class's distribution. So rounds are sparse while every job is young (none
//! can have ended yet) and close together when many are near their usual end, at about
//! `1 / ROUND_THETA` rounds per completed job.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Deserialize;

use crate::model::Unit;

/// Completions kept per class.
pub const KEEP: usize = 256;
/// Completions a class needs before its distribution plans polls.
pub const MIN_SAMPLES: usize = 4;
/// Expected unnoticed completions that make the next round due while a backlog waits: about
/// two rounds per completed job (with the create, three provider requests per job).
pub const ROUND_THETA: f64 = 0.5;

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
    rounds: Mutex<HashMap<String, i64>>,
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

/// Learn from a planned batch: every update that ends a `submitted` unit's job with success
/// tells how long the provider took since the unit's submit marker.
pub fn learn(
    durations: &Durations,
    units: &[&Unit],
    updates: &[crate::store::UnitUpdate],
    now: i64,
) {
    let succeeded: std::collections::HashSet<&str> = updates
        .iter()
        .filter(|u| u.to == Some(crate::model::UnitStatus::Succeeded))
        .map(|u| u.unit_id.as_str())
        .collect();
    if succeeded.is_empty() {
        return;
    }
    for unit in units.iter().filter(|u| succeeded.contains(u.id.as_str())) {
        if let Some(at) = unit.submitted_at {
            let ms = now.saturating_sub(at);
            let class = class_of(unit);
            // The provider's job durations as slotd saw them (SPEC §12).
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

/// Put the ordinary polls of `planned` (one call over `units` of `pool`, while a backlog
/// waits) into one round: every polled unit gets the same `next_at`, so that the next call
/// asks about all of them at once (one list request where the provider has one). The round
/// is the one [`round_delay`] finds for the units whose class has a distribution (between
/// `floor` and `ceil` from now); units of a class not learned yet are looked at every
/// `prior` ms meanwhile, so the first completions (which teach the distribution) are not
/// noticed late. A round the pool already planned wins when it comes sooner, so that units
/// marked by other ticks meet in the same request.
pub fn plan_round(
    durations: &Durations,
    pool: &str,
    units: &[&Unit],
    planned: &mut super::Planned,
    now: i64,
    (floor, prior, ceil): (i64, i64, i64),
) {
    if planned.polling.is_empty() {
        return;
    }
    let by_id: HashMap<&str, &Unit> = units.iter().map(|u| (u.id.as_str(), *u)).collect();
    let mut members = Vec::new();
    let mut running = Vec::new();
    let mut unknown = false;
    for &i in &planned.polling {
        let Some(unit) = planned
            .updates
            .get(i)
            .and_then(|u| by_id.get(u.unit_id.as_str()))
        else {
            continue;
        };
        members.push(i);
        match durations.distribution(pool, &class_of(unit)) {
            Some(dist) => {
                let age = unit.submitted_at.map_or(0, |at| now.saturating_sub(at));
                running.push((dist, age));
            }
            None => unknown = true,
        }
    }
    if members.is_empty() {
        return;
    }
    let prior = prior.clamp(floor, ceil.max(floor));
    let mut delay = if running.is_empty() {
        prior
    } else {
        round_delay(&running, ROUND_THETA, floor, ceil)
    };
    if unknown {
        delay = delay.min(prior);
    }
    let mut at = now.saturating_add(delay);
    {
        let mut rounds = durations.rounds.lock();
        if let Some(&planned_at) = rounds.get(pool)
            && planned_at > now
            && planned_at < at
        {
            at = planned_at;
        }
        rounds.insert(pool.to_string(), at);
    }
    for i in members {
        if let Some(u) = planned.updates.get_mut(i) {
            u.next_at = Some(at);
        }
    }
}

/// When the next round is due for running units of the given distributions and ages (ms):
/// the smallest delay in `[floor, ceil]` at which the expected number of them ending reaches
/// `theta`, or `ceil` if it never does.
pub fn round_delay(running: &[(Arc<Distribution>, i64)], theta: f64, floor: i64, ceil: i64) -> i64 {
    let ceil = ceil.max(floor);
    let expected = |delta: i64| -> f64 {
        running
            .iter()
            .map(|(d, age)| d.ends_within(*age, delta))
            .sum()
    };
    if running.is_empty() || expected(ceil) < theta {
        return ceil;
    }
    if expected(floor) >= theta {
        return floor;
    }
    let (mut lo, mut hi) = (floor, ceil);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if expected(mid) >= theta {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
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
    fn young_jobs_are_not_worth_a_round() {
        let d = uniform(30_000, 120_000, 50);
        // Twenty jobs just started: none can end within the next 20 s.
        let running: Vec<_> = (0..20).map(|_| (d.clone(), 0)).collect();
        assert_eq!(d.ends_within(0, 20_000), 0.0);
        let delay = round_delay(&running, ROUND_THETA, 200, 60_000);
        assert!(
            delay > 30_000,
            "first round after the shortest job: {delay}"
        );
    }

    #[test]
    fn rounds_close_in_as_many_jobs_near_their_end() {
        let d = uniform(30_000, 120_000, 50);
        // Twenty jobs spread over their run (ages 30 s to 106 s): together they end at about
        // Σ 1/(120 s − age) ≈ 0.5 per second, so θ = 0.5 is about a second away.
        let running: Vec<_> = (0..20).map(|i| (d.clone(), 30_000 + i * 4_000)).collect();
        let delay = round_delay(&running, ROUND_THETA, 200, 60_000);
        assert!((500..2_000).contains(&delay), "{delay}");
        // One job alone waits about ten times as long as twenty.
        let one = round_delay(&running[..1], ROUND_THETA, 200, 60_000);
        assert!(one > 5 * delay, "{one} vs {delay}");
    }

    #[test]
    fn tail_jobs_are_still_polled() {
        let d = uniform(30_000, 120_000, 50);
        assert!(d.ends_within(500_000, 10_000) > 0.0);
        let delay = round_delay(&[(d, 500_000)], ROUND_THETA, 200, 600_000);
        assert!(delay < 600_000);
    }

    #[test]
    fn classes_name_model_mode_and_duration() {
        let mut u = crate::scheduler::apply::tests::unit("u1", Some("j1"), "generate");
        u.task_type = "video".into();
        u.spec = r#"{"model_name":"kling-v1-6","mode":"pro","duration":"10","prompt":"x"}"#.into();
        assert_eq!(class_of(&u), "video/generate/kling-v1-6/pro/10");
        u.spec = "not json".into();
        assert_eq!(class_of(&u), "video/generate");
    }

    /// A planned batch of "still running" polls for `units` (all of pool p1).
    fn polls(units: &[&Unit], now: i64) -> super::super::Planned {
        let mut planned = super::super::Planned::default();
        for u in units {
            planned.polling.push(planned.updates.len());
            planned.updates.push(crate::store::UnitUpdate {
                unit_id: u.id.clone(),
                from: Some(crate::model::UnitStatus::Submitted),
                to: Some(crate::model::UnitStatus::Submitted),
                next_at: Some(now + 5_000 + planned.updates.len() as i64 * 1_000),
                ..Default::default()
            });
        }
        planned
    }

    #[test]
    fn polls_meet_in_one_round() {
        let d = Durations::default();
        let mut a = crate::scheduler::apply::tests::unit("a", Some("ja"), "s");
        let mut b = crate::scheduler::apply::tests::unit("b", Some("jb"), "s");
        // Not learned yet: every poll goes to the same round, `prior` away.
        let now = 100_000;
        let mut planned = polls(&[&a, &b], now);
        plan_round(&d, "p1", &[&a, &b], &mut planned, now, (200, 5_000, 30_000));
        let at: Vec<_> = planned.updates.iter().map(|u| u.next_at).collect();
        assert_eq!(at, vec![Some(now + 5_000), Some(now + 5_000)]);
        // Learned (jobs take 30-40 s): jobs 35 s old are near their end, so the round is
        // sooner than the prior; a job just started alone would wait longer.
        for ms in [30_000, 32_000, 34_000, 36_000, 38_000, 40_000] {
            d.observe("p1", &class_of(&a), ms);
        }
        a.submitted_at = Some(now - 35_000);
        b.submitted_at = Some(now - 35_000);
        let mut planned = polls(&[&a, &b], now);
        plan_round(
            &d,
            "p1",
            &[&a, &b],
            &mut planned,
            now + 1,
            (200, 5_000, 30_000),
        );
        let first = planned.updates[0].next_at.expect("timed");
        assert!(first < now + 5_000, "{first}");
        assert!(planned.updates.iter().all(|u| u.next_at == Some(first)));
        // A young unit polled by another tick joins the round already planned.
        let mut c = crate::scheduler::apply::tests::unit("c", Some("jc"), "s");
        c.submitted_at = Some(now);
        let mut planned = polls(&[&c], now);
        plan_round(&d, "p1", &[&c], &mut planned, now + 2, (200, 5_000, 30_000));
        assert_eq!(planned.updates[0].next_at, Some(first));
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
