//! Measuring a run against the ideal: what the demo prints at the end and the benchmarks print
//! as figures. Pure functions over the simulator's job log.

use std::collections::BTreeMap;

use slotd_sim::kling::SimJob;

/// The makespan of an ideal zero-overhead FIFO slot scheduler running `durations` (in
/// submission order) on `slots` slots: each job starts the instant a slot is free.
pub fn ideal_fifo_makespan(durations: &[f64], slots: u32) -> f64 {
    let slots = slots.max(1) as usize;
    // Free times of the slots; a job takes the earliest.
    let mut free = vec![0.0f64; slots.min(durations.len().max(1))];
    for &d in durations {
        let (i, start) = free
            .iter()
            .copied()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((0, 0.0));
        if let Some(f) = free.get_mut(i) {
            *f = start + d;
        }
    }
    free.into_iter().fold(0.0, f64::max)
}

/// Which pool a simulator job belongs to, by its kind.
pub fn pool_of_kind(kind: &str) -> &'static str {
    match kind {
        "custom-voices" | "advanced-custom-elements" => "kling:avatar",
        _ => "kling:video",
    }
}

/// Figures for one pool over one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolFigures {
    pub jobs: usize,
    /// Busy slot-seconds (simulated).
    pub busy: f64,
    /// First start to last end (simulated seconds).
    pub makespan: f64,
    /// `busy / (slots × makespan)`.
    pub utilization: f64,
    /// Busy slot-seconds divided by `slots ×` the time during which jobs were still waiting to
    /// be submitted (the backlog window: first start to the last job's start).
    pub backlog_utilization: f64,
}

/// Per-pool figures from the job log, given each pool's slot count.
pub fn pool_figures(
    jobs: &[SimJob],
    slots: &BTreeMap<String, u32>,
) -> BTreeMap<String, PoolFigures> {
    let mut out: BTreeMap<String, PoolFigures> = BTreeMap::new();
    let mut by_pool: BTreeMap<&str, Vec<&SimJob>> = BTreeMap::new();
    for j in jobs {
        by_pool.entry(pool_of_kind(&j.kind)).or_default().push(j);
    }
    for (pool, js) in by_pool {
        let n = f64::from(slots.get(pool).copied().unwrap_or(1).max(1));
        let first = js.iter().map(|j| j.started).fold(f64::INFINITY, f64::min);
        let last_end = js.iter().filter_map(|j| j.ended).fold(first, f64::max);
        let last_start = js.iter().map(|j| j.started).fold(first, f64::max);
        let busy: f64 = js
            .iter()
            .map(|j| j.ended.unwrap_or(last_end) - j.started)
            .sum();
        // Busy time inside the backlog window only.
        let busy_backlog: f64 = js
            .iter()
            .map(|j| (j.ended.unwrap_or(last_end).min(last_start) - j.started).max(0.0))
            .sum();
        let makespan = (last_end - first).max(0.0);
        let window = (last_start - first).max(0.0);
        out.insert(
            pool.to_string(),
            PoolFigures {
                jobs: js.len(),
                busy,
                makespan,
                utilization: if makespan > 0.0 {
                    busy / (n * makespan)
                } else {
                    0.0
                },
                backlog_utilization: if window > 0.0 {
                    busy_backlog / (n * window)
                } else {
                    1.0
                },
            },
        );
    }
    out
}

/// The most of `jobs` holding a slot at once (a job ending at the instant another starts
/// frees its slot first).
pub fn peak_running(jobs: &[&SimJob]) -> usize {
    let mut edges: Vec<(f64, i32)> = Vec::with_capacity(jobs.len() * 2);
    for j in jobs {
        edges.push((j.started, 1));
        edges.push((j.ended.unwrap_or(f64::MAX), -1));
    }
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut best) = (0i64, 0i64);
    for (_, d) in edges {
        now += i64::from(d);
        best = best.max(now);
    }
    usize::try_from(best).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_makespan_fills_the_earliest_slot() {
        assert_eq!(ideal_fifo_makespan(&[], 3), 0.0);
        assert_eq!(ideal_fifo_makespan(&[5.0, 5.0, 5.0], 3), 5.0);
        assert_eq!(ideal_fifo_makespan(&[5.0, 5.0, 5.0, 1.0], 3), 6.0);
        assert_eq!(ideal_fifo_makespan(&[10.0, 1.0, 1.0, 1.0], 2), 10.0);
    }

    #[test]
    fn peak_counts_overlaps_and_frees_before_it_takes() {
        let job = |s: f64, e: f64| SimJob {
            started: s,
            ended: Some(e),
            ..SimJob::default()
        };
        let (a, b, c) = (job(0.0, 10.0), job(5.0, 15.0), job(10.0, 20.0));
        assert_eq!(peak_running(&[]), 0);
        assert_eq!(peak_running(&[&a, &b, &c]), 2);
        let d = job(6.0, 7.0);
        assert_eq!(peak_running(&[&a, &b, &c, &d]), 3);
    }

    #[test]
    fn figures_per_pool() {
        let job = |kind: &str, s: f64, e: f64| SimJob {
            kind: kind.into(),
            started: s,
            ended: Some(e),
            planned_seconds: e - s,
            ..SimJob::default()
        };
        let jobs = vec![
            job("text2video", 0.0, 10.0),
            job("text2video", 0.0, 10.0),
            job("custom-voices", 0.0, 5.0),
        ];
        let slots = BTreeMap::from([
            ("kling:video".to_string(), 2),
            ("kling:avatar".to_string(), 2),
        ]);
        let f = pool_figures(&jobs, &slots);
        assert_eq!(f["kling:video"].utilization, 1.0);
        assert_eq!(f["kling:avatar"].utilization, 0.5);
    }
}
