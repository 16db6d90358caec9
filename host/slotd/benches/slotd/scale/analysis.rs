//! What a scale run's simulators saw, against what arrived: slot utilization while work
//! waited, and the arrival-to-submit latency.

use std::time::{Duration, Instant};

use slotd_sim::kling::SimHandle;

use super::Shape;

/// One provider job in wall time: (account, start, end).
pub(super) type Job = (usize, Instant, Option<Instant>);

pub(super) fn jobs_wall(sims: &[SimHandle], time_scale: f64) -> Vec<Job> {
    let mut out = Vec::new();
    for (i, sim) in sims.iter().enumerate() {
        let Some(origin) = sim.first_create() else {
            continue;
        };
        let at = |s: f64| origin + Duration::from_secs_f64((s * time_scale).max(0.0));
        for j in sim.jobs() {
            out.push((i, at(j.started), j.ended.map(at)));
        }
    }
    out
}

/// Busy slots over capacity, integrated over the moments some unit had arrived and was not
/// yet submitted (arrivals ahead of provider creates), and the highest number of jobs one
/// account's provider ran at once.
pub(super) fn utilization_while_waiting(
    arrivals: &[Instant],
    jobs: &[Job],
    shape: &Shape,
    window: (Instant, Instant),
) -> (f64, u32) {
    #[derive(Clone, Copy)]
    enum Ev {
        Arrive,
        Start(usize),
        End(usize),
    }
    let mut events: Vec<(Instant, u8, Ev)> = Vec::new();
    events.extend(arrivals.iter().map(|t| (*t, 2, Ev::Arrive)));
    for (a, s, e) in jobs {
        events.push((*s, 1, Ev::Start(*a)));
        if let Some(e) = e {
            // Ends sort before starts at the same instant (a slot handed over).
            events.push((*e, 0, Ev::End(*a)));
        }
    }
    events.sort_by_key(|(t, order, _)| (*t, *order));
    let cap = f64::from(shape.slots());
    let (mut waiting, mut busy) = (0i64, 0i64);
    let mut per_account = vec![0u32; shape.accounts];
    let mut peak = 0u32;
    let (mut busy_area, mut capacity_area) = (0.0f64, 0.0f64);
    let mut last: Option<Instant> = None;
    for (t, _, ev) in events {
        if let Some(prev) = last
            && waiting > 0
        {
            // Only the part of [prev, t) inside the window.
            let (a, b) = (prev.max(window.0), t.min(window.1));
            let dt = b.saturating_duration_since(a).as_secs_f64();
            busy_area += busy as f64 * dt;
            capacity_area += cap * dt;
        }
        last = Some(t);
        match ev {
            Ev::Arrive => waiting += 1,
            Ev::Start(a) => {
                waiting -= 1;
                busy += 1;
                if let Some(n) = per_account.get_mut(a) {
                    *n += 1;
                    peak = peak.max(*n);
                }
            }
            Ev::End(a) => {
                busy -= 1;
                if let Some(n) = per_account.get_mut(a) {
                    *n = n.saturating_sub(1);
                }
            }
        }
    }
    let util = if capacity_area > 0.0 {
        busy_area / capacity_area
    } else {
        1.0
    };
    (util, peak)
}

/// Arrival to provider create, matching the k-th arrival with the k-th create (the fill
/// takes units in arrival order), in milliseconds, for the arrivals inside `window`.
pub(super) fn fifo_latencies(
    arrivals: &[Instant],
    jobs: &[Job],
    window: (Instant, Instant),
) -> Vec<f64> {
    let mut arrivals = arrivals.to_vec();
    arrivals.sort();
    let mut starts: Vec<Instant> = jobs.iter().map(|(_, s, _)| *s).collect();
    starts.sort();
    arrivals
        .iter()
        .zip(&starts)
        .filter(|(a, _)| **a >= window.0 && **a < window.1)
        .map(|(a, s)| s.saturating_duration_since(*a).as_secs_f64() * 1e3)
        .collect()
}

pub(super) fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i.min(v.len() - 1)]
}
