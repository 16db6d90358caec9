//! The provider's observed job durations, learned from completed units.
//!
//! Every unit that leaves `submitted` because its job succeeded tells how long the provider
//! took (submit marker to the answer that saw the end). Durations are kept per pool and per
//! *class*: the task type, the stage and, when the unit's spec names them, its `model` /
//! `model_name`, `mode` and `duration` (a 10 s Kling pro video takes longer than a 5 s std
//! one). The last [`KEEP`] of each class make an empirical distribution.
//!
//! The distributions are what poll rounds (slotd-scheduler's `rounds.rs`), ETAs
//! ([`crate::eta`]) and deadline projections read.
//!
//! Until a class has [`MIN_SAMPLES`] completions, what its handler *states* (contract 1.3
//! `provider.durations`: a median and a 95th percentile) stands in: a log-normal through those
//! two points, sampled at [`STATED_POINTS`] quantiles. So a fresh slotd has ETAs and deadline
//! decisions from its first second; observed durations replace the statement as they come.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Deserialize;

use slotd_core::model::Unit;
use slotd_runtime::Registry;

/// Completions kept per class.
pub const KEEP: usize = 256;
/// Completions a class needs before its distribution is used.
pub const MIN_SAMPLES: usize = 4;
/// Quantiles a stated duration is sampled at.
pub const STATED_POINTS: usize = 32;
/// Consecutive completions beyond a class's distribution (all above its 95th percentile, or
/// all below its 5th) that make it start over from them: the provider got slower or faster.
pub const DRIFT_RUN: usize = 4;

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
    /// When each of `recent` ended (Unix ms), where known.
    ended: VecDeque<Option<i64>>,
    snapshot: Option<Arc<Distribution>>,
}

/// What a pool's classes have taken; shared by ticks and callbacks.
#[derive(Default)]
pub struct Durations {
    classes: Mutex<HashMap<(String, String), Samples>>,
    /// What handlers state of classes (contract 1.3), as distributions, by (pool, class).
    stated: Mutex<HashMap<(String, String), Arc<Distribution>>>,
    /// Classes whose handler was asked and stated nothing (asked once per process).
    asked: Mutex<std::collections::HashSet<(String, String)>>,
    /// Each pool's next poll round (Unix ms).
    pub rounds: Mutex<HashMap<String, i64>>,
    /// When a read last saw each in-flight unit's job running (Unix ms), by unit id.
    seen_running: Mutex<HashMap<String, i64>>,
    /// This instance's metrics registry.
    pub metrics: slotd_core::telemetry::Metrics,
}

impl std::fmt::Debug for Durations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durations").finish_non_exhaustive()
    }
}

impl Durations {
    /// An empty one that records into `metrics`.
    pub fn recording(metrics: slotd_core::telemetry::Metrics) -> Self {
        Durations {
            metrics,
            ..Default::default()
        }
    }

    /// One completed job of `class` in `pool` took `ms` (when it ended is not known).
    pub fn observe(&self, pool: &str, class: &str, ms: i64) {
        self.observe_sample(pool, class, ms, None);
    }

    /// One completed job of `class` in `pool` took `ms` and ended at `ended_at` (Unix ms).
    pub fn observe_ended(&self, pool: &str, class: &str, ms: i64, ended_at: i64) {
        self.observe_sample(pool, class, ms, Some(ended_at));
    }

    fn observe_sample(&self, pool: &str, class: &str, ms: i64, ended_at: Option<i64>) {
        if ms < 0 {
            return;
        }
        let mut classes = self.classes.lock();
        let s = classes
            .entry((pool.to_string(), class.to_string()))
            .or_default();
        if s.recent.len() == KEEP {
            s.recent.pop_front();
            s.ended.pop_front();
        }
        s.recent.push_back(ms);
        s.ended.push_back(ended_at);
        s.snapshot = None;
        if drifted(s) {
            let keep = s.recent.len() - DRIFT_RUN;
            s.recent.drain(..keep);
            s.ended.drain(..keep);
        }
    }

    /// Whether `class` in `pool` is still learning: fewer than [`MIN_SAMPLES`] of its jobs
    /// were seen to end, so what stands in for it (a statement, or nothing) is not yet
    /// trusted to say when its jobs end.
    pub fn learning(&self, pool: &str, class: &str) -> bool {
        self.classes
            .lock()
            .get(&(pool.to_string(), class.to_string()))
            .is_none_or(|s| s.recent.len() < MIN_SAMPLES)
    }

    /// The distribution of `class` in `pool`, once it has [`MIN_SAMPLES`]; before that, the
    /// one its handler stated, if any.
    pub fn distribution(&self, pool: &str, class: &str) -> Option<Arc<Distribution>> {
        let key = (pool.to_string(), class.to_string());
        {
            let mut classes = self.classes.lock();
            if let Some(s) = classes.get_mut(&key)
                && s.recent.len() >= MIN_SAMPLES
            {
                if s.snapshot.is_none() {
                    s.snapshot =
                        Distribution::new(s.recent.iter().copied().collect()).map(Arc::new);
                }
                return s.snapshot.clone();
            }
        }
        self.stated.lock().get(&key).cloned()
    }

    /// A handler's statement of how long jobs of `class` in `pool` take: the median and the
    /// 95th percentile, ms. Kept until replaced by another statement; observed durations win
    /// once the class has [`MIN_SAMPLES`].
    pub fn state(&self, pool: &str, class: &str, p50_ms: u64, p95_ms: u64) {
        let mut stated = self.stated.lock();
        if let std::collections::hash_map::Entry::Vacant(slot) =
            stated.entry((pool.to_string(), class.to_string()))
            && let Some(d) = stated_distribution(p50_ms, p95_ms)
        {
            slot.insert(Arc::new(d));
        }
    }

    /// Whether `class` in `pool` has a distribution, observed or stated.
    pub fn knows(&self, pool: &str, class: &str) -> bool {
        let key = (pool.to_string(), class.to_string());
        self.classes
            .lock()
            .get(&key)
            .is_some_and(|s| s.recent.len() >= MIN_SAMPLES)
            || self.stated.lock().contains_key(&key)
    }
}

/// Whether the newest [`DRIFT_RUN`] samples all fall beyond the distribution of the ones
/// before them (at least [`MIN_SAMPLES`] of those), on the same side.
///
/// Longer than before counts only against the earlier samples that had ended when the newest
/// jobs started. Jobs started together end shortest first, so every completion of such a
/// cohort is longer than the ones before it; that is not the provider slowing down, and
/// starting over from the newest four each time would leave a narrow distribution of the
/// latest lengths (a backlog's second jobs then looked young and their ends went unnoticed for
/// rounds). Jobs started after the earlier ones had ended, and longer, are. Samples whose end
/// is not known count as ended before anything.
fn drifted(s: &Samples) -> bool {
    let recent = &s.recent;
    let n = recent.len();
    if n < MIN_SAMPLES + DRIFT_RUN {
        return false;
    }
    let newest = || recent.iter().skip(n - DRIFT_RUN);
    let Some(old) = Distribution::new(recent.iter().take(n - DRIFT_RUN).copied().collect()) else {
        return false;
    };
    if newest().all(|&v| v < old.quantile(0.05)) {
        return true;
    }
    // When the first of the newest jobs started.
    let started = recent
        .iter()
        .zip(&s.ended)
        .skip(n - DRIFT_RUN)
        .map(|(&v, ended)| ended.map_or(i64::MAX, |e| e.saturating_sub(v)))
        .min()
        .unwrap_or(i64::MAX);
    let before: Vec<i64> = recent
        .iter()
        .zip(&s.ended)
        .take(n - DRIFT_RUN)
        .filter(|(_, ended)| ended.is_none_or(|e| e <= started))
        .map(|(&v, _)| v)
        .collect();
    if before.len() < MIN_SAMPLES {
        return false;
    }
    Distribution::new(before).is_some_and(|old| newest().all(|&v| v > old.quantile(0.95)))
}

/// A log-normal through a median and a 95th percentile, sampled at [`STATED_POINTS`] evenly
/// spaced quantiles; `None` for a zero median or a p95 below it.
pub fn stated_distribution(p50_ms: u64, p95_ms: u64) -> Option<Distribution> {
    if p50_ms == 0 || p95_ms < p50_ms {
        return None;
    }
    let mu = (p50_ms as f64).ln();
    // z(0.95) = 1.6449.
    let sigma = ((p95_ms as f64).ln() - mu) / 1.644_853_6;
    let n = STATED_POINTS as f64;
    let samples = (0..STATED_POINTS)
        .map(|i| {
            let q = (i as f64 + 0.5) / n;
            (mu + sigma * normal_quantile(q)).exp().round() as i64
        })
        .collect();
    Distribution::new(samples)
}

/// The standard normal's quantile (Abramowitz and Stegun 26.2.23, error below 4.5e-4).
fn normal_quantile(q: f64) -> f64 {
    let tail = |p: f64| {
        let t = (-2.0 * p.ln()).sqrt();
        t - (2.515_517 + 0.802_853 * t + 0.010_328 * t * t)
            / (1.0 + 1.432_788 * t + 0.189_269 * t * t + 0.001_308 * t * t * t)
    };
    let q = q.clamp(1e-12, 1.0 - 1e-12);
    if q < 0.5 { -tail(q) } else { tail(1.0 - q) }
}

impl Durations {
    /// Every class of `pool` together (what a unit of unknown class is expected to take),
    /// once it has [`MIN_SAMPLES`].
    pub fn pool_distribution(&self, pool: &str) -> Option<Distribution> {
        let samples: Vec<i64> = {
            let classes = self.classes.lock();
            classes
                .iter()
                .filter(|((p, _), _)| p == pool)
                .flat_map(|(_, s)| s.recent.iter().copied())
                .collect()
        };
        if samples.len() >= MIN_SAMPLES {
            return Distribution::new(samples);
        }
        // Before that: every class its handlers stated, together.
        let stated: Vec<i64> = self
            .stated
            .lock()
            .iter()
            .filter(|((p, _), _)| p == pool)
            .flat_map(|(_, d)| d.samples().iter().copied())
            .collect();
        Distribution::new(stated)
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
    class_of_parts(&unit.task_type, &unit.stage, &unit.spec)
}

/// [`class_of`] from a unit's parts (a planned unit has no [`Unit`] yet).
pub fn class_of_parts(task_type: &str, stage: &str, spec: &str) -> String {
    let mut class = format!("{task_type}/{stage}");
    if let Ok(f) = serde_json::from_str::<ClassFields>(spec) {
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

/// In-flight units remembered as seen running at most; beyond it the oldest sightings are
/// dropped (a unit ended elsewhere: a cancel, another process's callback).
const SEEN_KEEP: usize = 100_000;

impl Durations {
    /// A read at `now` saw these units' jobs running.
    fn saw_running<'a>(&self, ids: impl Iterator<Item = &'a str>, now: i64) {
        let mut seen = self.seen_running.lock();
        for id in ids {
            seen.insert(id.to_string(), now);
        }
        if seen.len() > SEEN_KEEP {
            let mut ats: Vec<i64> = seen.values().copied().collect();
            ats.sort_unstable();
            let cut = ats[ats.len() - SEEN_KEEP / 2];
            seen.retain(|_, at| *at >= cut);
        }
    }

    /// When the job of `unit` ended, as best known at `now`: the middle between the last read
    /// that saw it running (after its submit marker) and `now`; `now` without such a read.
    fn ended_at(&self, unit: &str, submitted_at: i64, now: i64) -> i64 {
        match self.seen_running.lock().remove(unit) {
            Some(seen) if seen >= submitted_at && seen < now => seen + (now - seen) / 2,
            _ => now,
        }
    }
}

/// Learn from a decided batch of reads (a tick's polls): every update that ends a `submitted`
/// unit's job with success tells how long the provider took since the unit's submit marker,
/// to the middle of the interval in which the job ended; the units still running are noted as
/// seen running now.
pub fn learn(
    durations: &Durations,
    units: &[&Unit],
    updates: &[slotd_store::UnitUpdate],
    now: i64,
) {
    learn_from(durations, units, updates, now, false);
}

/// [`learn`] from what a provider's callback said: it tells the end when it happens, so the
/// sample runs to `now`.
pub fn learn_from_callback(
    durations: &Durations,
    units: &[&Unit],
    updates: &[slotd_store::UnitUpdate],
    now: i64,
) {
    learn_from(durations, units, updates, now, true);
}

fn learn_from(
    durations: &Durations,
    units: &[&Unit],
    updates: &[slotd_store::UnitUpdate],
    now: i64,
    exact: bool,
) {
    use slotd_core::model::UnitStatus;
    let mut succeeded: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut left: Vec<&str> = Vec::new();
    let mut running: Vec<&str> = Vec::new();
    for u in updates {
        match u.to {
            Some(UnitStatus::Succeeded) => {
                succeeded.insert(u.unit_id.as_str());
            }
            None | Some(UnitStatus::Submitted) => running.push(u.unit_id.as_str()),
            Some(_) => left.push(u.unit_id.as_str()),
        }
    }
    if !exact {
        durations.saw_running(running.into_iter(), now);
    }
    if !left.is_empty() {
        let mut seen = durations.seen_running.lock();
        for id in left {
            seen.remove(id);
        }
    }
    if succeeded.is_empty() {
        return;
    }
    for unit in units.iter().filter(|u| succeeded.contains(u.id.as_str())) {
        if let Some(at) = unit.submitted_at {
            let ended = if exact {
                durations.seen_running.lock().remove(&unit.id);
                now
            } else {
                durations.ended_at(&unit.id, at, now)
            };
            let ms = ended.saturating_sub(at);
            let class = class_of(unit);
            // The provider's job durations as slotd saw them (docs/operations.md).
            durations.metrics.record(|| {
                metrics::histogram!(
                    "slotd_provider_job_seconds",
                    "pool" => unit.pool.clone(),
                    "class" => class.clone(),
                )
                .record(ms.max(0) as f64 / 1000.0)
            });
            durations.observe_ended(&unit.pool, &class, ms, ended);
        }
    }
}

/// What asking for a unit's stated duration needs to know of it (a planned unit has no
/// [`Unit`] yet).
#[derive(Clone, Copy, Debug)]
pub struct UnitKind<'a> {
    pub task_type: &'a str,
    pub stage: &'a str,
    pub pool: &'a str,
    pub spec: &'a str,
}

impl<'a> From<&'a Unit> for UnitKind<'a> {
    fn from(u: &'a Unit) -> Self {
        UnitKind {
            task_type: &u.task_type,
            stage: &u.stage,
            pool: &u.pool,
            spec: &u.spec,
        }
    }
}

/// Ask the handlers of `units` for the stated durations (contract 1.3 `provider.durations`) of
/// the classes nothing is known of yet: neither observed nor stated, nor asked before in this
/// process (a handler that states nothing is asked once per class). Called when a task is
/// planned, and by the deadline sweep and the ETA for units a process did not plan (a restart,
/// a scheduler beside an API process), so the guest call is made once per class, not per
/// task. Only units in their task type's first stage: a statement is about the first stage.
pub async fn ask_unknown(durations: &Durations, registry: &Registry, units: &[UnitKind<'_>]) {
    let mut by_type: HashMap<&str, Vec<(UnitKind<'_>, String)>> = HashMap::new();
    for u in units {
        let class = class_of_parts(u.task_type, u.stage, u.spec);
        let key = (u.pool.to_string(), class.clone());
        if durations.knows(u.pool, &class) || durations.asked.lock().contains(&key) {
            continue;
        }
        let list = by_type.entry(u.task_type).or_default();
        if !list.iter().any(|(v, c)| v.pool == u.pool && *c == class) {
            list.push((*u, class));
        }
    }
    for (task_type, list) in by_type {
        let Some(h) = registry.for_type(task_type) else {
            continue;
        };
        let first = h
            .info
            .stages(task_type)
            .and_then(|s| s.first())
            .map(|s| s.name.as_str());
        let list: Vec<(UnitKind<'_>, String)> = list
            .into_iter()
            .filter(|(u, _)| first == Some(u.stage))
            .collect();
        if list.is_empty() {
            continue;
        }
        let specs: Vec<String> = list.iter().map(|(u, _)| u.spec.to_string()).collect();
        let answer = if h.has_provider() {
            h.durations(task_type, &specs).await
        } else {
            vec![None; specs.len()]
        };
        for ((u, class), e) in list.into_iter().zip(answer) {
            if let Some(e) = e {
                durations.state(u.pool, &class, e.p50_ms, e.p95_ms);
            }
            durations.asked.lock().insert((u.pool.to_string(), class));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stated_duration_stands_in_until_jobs_end() {
        let d = stated_distribution(50_000, 80_000).expect("usable");
        assert!(
            (d.quantile(0.5) - 50_000).abs() < 2_500,
            "{}",
            d.quantile(0.5)
        );
        assert!(
            (d.quantile(0.95) - 80_000).abs() < 6_000,
            "{}",
            d.quantile(0.95)
        );
        assert!(stated_distribution(0, 10).is_none());
        assert!(stated_distribution(10, 5).is_none());
        let durations = Durations::default();
        assert!(durations.distribution("p", "c").is_none());
        durations.state("p", "c", 50_000, 80_000);
        assert!(durations.knows("p", "c"));
        let stated = durations.distribution("p", "c").expect("stated");
        assert_eq!(stated.len(), STATED_POINTS);
        assert!(durations.pool_distribution("p").is_some());
        // Observed durations replace the statement once there are enough.
        for _ in 0..MIN_SAMPLES {
            durations.observe("p", "c", 1_000);
        }
        assert_eq!(
            durations.distribution("p", "c").map(|d| d.max()),
            Some(1_000)
        );
        assert_eq!(
            durations.pool_distribution("p").map(|d| d.max()),
            Some(1_000)
        );
    }

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

    /// A unit submitted at 0, of pool p.
    fn unit(id: &str) -> Unit {
        Unit {
            id: id.into(),
            task_id: "t".into(),
            index: 0,
            tenant: "a".into(),
            task_type: "video".into(),
            pool: "p".into(),
            stage: "s".into(),
            status: slotd_core::model::UnitStatus::Submitted,
            priority: 0,
            spec: "{}".into(),
            state: "{}".into(),
            provider_job_id: Some(format!("j-{id}")),
            submit_attempt: 0,
            attempts: 0,
            polls: 0,
            next_at: 0,
            submitted_at: Some(0),
            error: None,
            result: None,
            cost: None,
            cancel_requested_at: None,
            routes: None,
            routing: None,
            terms: Default::default(),
            releases: Default::default(),
            created_at: 0,
            updated_at: 0,
        }
    }

    fn update(id: &str, to: slotd_core::model::UnitStatus) -> slotd_store::UnitUpdate {
        slotd_store::UnitUpdate {
            unit_id: id.into(),
            from: Some(slotd_core::model::UnitStatus::Submitted),
            to: Some(to),
            ..Default::default()
        }
    }

    #[test]
    fn a_class_whose_jobs_drift_starts_over_from_the_newest() {
        let d = Durations::default();
        for i in 0..20 {
            d.observe("p", "c", 60_000 + (i * 7 % 20) * 1_000);
        }
        assert!(!d.learning("p", "c"));
        // The provider got three times slower: three such jobs are not yet a drift…
        for _ in 0..DRIFT_RUN - 1 {
            d.observe("p", "c", 200_000);
        }
        assert_eq!(
            d.distribution("p", "c").map(|x| x.len()),
            Some(20 + DRIFT_RUN - 1)
        );
        // …the fourth is: the class starts over from the newest four.
        d.observe("p", "c", 210_000);
        let now = d.distribution("p", "c").expect("learned");
        assert_eq!(now.len(), DRIFT_RUN);
        assert_eq!(now.quantile(0.0), 200_000);
        // And faster again.
        for _ in 0..8 {
            d.observe("p", "c", 20_000);
        }
        assert_eq!(d.distribution("p", "c").map(|x| x.max()), Some(20_000));
        // A new spread is learned (it may start over once on the way in)…
        for i in 0..40 {
            d.observe("p", "c", 15_000 + (i * 7 % 10) * 1_000);
        }
        let before = d.distribution("p", "c").map_or(0, |x| x.len());
        // …and then ordinary jobs within it do not reset it.
        for i in 0..40 {
            d.observe("p", "c", 15_000 + (i * 3 % 10) * 1_000);
        }
        assert_eq!(d.distribution("p", "c").map(|x| x.len()), Some(before + 40));
    }

    #[test]
    fn jobs_started_together_ending_shortest_first_are_not_a_drift() {
        // Twenty jobs of 30 s to 125 s start at once; they end in order of length, each longer
        // than every one before it.
        let d = Durations::default();
        let start = 1_000_000;
        let lengths: Vec<i64> = (0..20).map(|i| 30_000 + i * 5_000).collect();
        for &ms in &lengths {
            d.observe_ended("p", "c", ms, start + ms);
        }
        let learned = d.distribution("p", "c").expect("learned");
        assert_eq!(
            learned.len(),
            20,
            "nothing started over: {:?}",
            learned.samples()
        );
        assert_eq!(learned.quantile(0.0), 30_000);
        // Longer jobs started after those had ended are the provider slowing down: the class
        // starts over from them.
        let later = start + 1_000_000;
        for i in 0..DRIFT_RUN as i64 {
            d.observe_ended("p", "c", 400_000, later + i);
        }
        let slower = d.distribution("p", "c").expect("learned");
        assert_eq!(slower.len(), DRIFT_RUN, "{:?}", slower.samples());
        assert_eq!(slower.quantile(0.0), 400_000);
    }

    #[test]
    fn a_job_seen_ended_counts_to_the_middle_of_its_last_poll_gap() {
        use slotd_core::model::UnitStatus::{Submitted, Succeeded};
        let d = Durations::default();
        let (a, b) = (unit("a"), unit("b"));
        // Seen running at 10 s, seen ended at 20 s: it ended in between, 15 s on average.
        learn(
            &d,
            &[&a, &b],
            &[update("a", Submitted), update("b", Submitted)],
            10_000,
        );
        learn(&d, &[&a], &[update("a", Succeeded)], 20_000);
        // A provider's callback says when: 30 s.
        learn_from_callback(&d, &[&b], &[update("b", Succeeded)], 30_000);
        // Never seen running: the read that saw the end is all there is.
        let c = unit("c");
        learn(&d, &[&c], &[update("c", Succeeded)], 40_000);
        let class = class_of(&a);
        let samples: Vec<i64> = d.classes.lock()[&("p".to_string(), class)]
            .recent
            .iter()
            .copied()
            .collect();
        assert_eq!(samples, vec![15_000, 30_000, 40_000]);
        assert!(
            d.seen_running.lock().is_empty(),
            "ended units are forgotten"
        );
    }
}
