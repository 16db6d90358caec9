//! Honest ETAs: when a task is expected to end, from what slotd knows and a queue
//! cannot: the pool's slots (the effective limit), who holds them and since when, the fill
//! order ahead of the task ([`QueueStanding`]), and the provider's observed durations
//! ([`Durations`]).
//!
//! The estimate replays the pool's near future: each slot frees when its job is expected to
//! end, and the units ahead of the task's last pending one take the freed slots in fill order,
//! each for the pool's mean duration, none before the pool's quotas let its create go (a
//! closure, and each window's pace: [`Pace`]); the task ends when its last job does. Durations come
//! from the jobs that ended and, as lower bounds, those still running ([`Survival`]). No job
//! ended yet: no estimate (`None`), rather than a guess.
//!
//! What it leaves out, and so what the benchmark's error shows: the time between a job's end
//! and slotd noticing it (polling), finalization (downloads), retries, and work arriving later
//! with a higher priority.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::pool_state::durations::Distribution;
use slotd_store::QueueStanding;

/// Job durations as the estimate reads them: the ended jobs (the [`Distribution`]'s samples)
/// together with the jobs still running, whose ages are lower bounds of their durations
/// (right-censored). Early in a run only the shortest jobs have ended; reading the ended ones
/// alone would promise everything far too soon. So the survival curve is the Kaplan–Meier
/// product-limit estimate over both, and past the longest ended job, where nothing is known,
/// a job is expected to take another mean duration of the ended ones (a memoryless tail).
#[derive(Clone, Debug)]
struct Survival {
    /// Distinct ended durations, ascending, each with S just after it.
    steps: Vec<(i64, f64)>,
    /// Mean of the ended durations: the expected remainder past the last step.
    tail: f64,
}

impl Survival {
    fn new(ended: &Distribution, running_ages: &[i64]) -> Survival {
        let samples = ended.samples();
        let mut censored: Vec<i64> = running_ages.to_vec();
        censored.sort_unstable();
        let mut steps = Vec::new();
        let mut s = 1.0;
        let mut i = 0;
        while i < samples.len() {
            let t = samples[i];
            let ties = samples[i..].iter().take_while(|&&v| v == t).count();
            let at_risk =
                (samples.len() - i) + (censored.len() - censored.partition_point(|&c| c < t));
            s *= 1.0 - ties as f64 / at_risk.max(1) as f64;
            steps.push((t, s));
            i += ties;
        }
        Survival {
            steps,
            tail: ended.mean().max(1) as f64,
        }
    }

    /// S(t): the share of jobs still running at `t`.
    fn at(&self, t: i64) -> f64 {
        let k = self.steps.partition_point(|&(v, _)| v <= t);
        if k == 0 { 1.0 } else { self.steps[k - 1].1 }
    }

    /// ∫ S from `a` on: the steps, then the memoryless tail.
    fn integral_from(&self, a: i64) -> f64 {
        let mut total = 0.0;
        let mut from = a;
        let mut s = self.at(a);
        for &(t, after) in &self.steps {
            if t <= from {
                continue;
            }
            total += s * (t - from) as f64;
            from = t;
            s = after;
        }
        total + s * self.tail
    }

    /// The expected duration.
    fn mean(&self) -> i64 {
        self.integral_from(0).round() as i64
    }

    /// How much longer a job running at `age` takes with probability `q`: the `q` quantile of
    /// its remaining duration (past the last step, of the memoryless tail).
    fn remaining_quantile(&self, age: i64, q: f64) -> i64 {
        let alive = self.at(age);
        let left = (1.0 - q).clamp(1e-6, 1.0);
        if alive > 1e-9 {
            // The first step at which fewer than `left` of the jobs alive at `age` still run.
            if let Some(&(t, _)) = self
                .steps
                .iter()
                .find(|&&(t, after)| t > age && after / alive < left)
            {
                return t - age;
            }
        }
        // In the tail: S falls by e every `tail` ms from where the steps end.
        let last = self.steps.last().map_or(0, |&(t, _)| t).max(age);
        let share = if alive > 1e-9 {
            (self.at(last) / alive).clamp(1e-9, 1.0)
        } else {
            1.0
        };
        let beyond = if share > left {
            self.tail * (share / left).ln()
        } else {
            0.0
        };
        last - age + beyond.round() as i64
    }

    /// How much longer a job running at `age` is expected to take.
    fn remaining(&self, age: i64) -> i64 {
        let alive = self.at(age);
        if alive <= 1e-9 {
            return self.tail.round() as i64;
        }
        (self.integral_from(age) / alive).round() as i64
    }
}

/// Most queued units replayed one by one; beyond, the rest is taken at the pool's rate.
const REPLAY_MAX: u64 = 200_000;

/// What an estimate is made from.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    pub now: i64,
    /// The pool's effective limit.
    pub slots: u32,
    pub standing: &'a QueueStanding,
    /// All classes of the pool: what units ahead (and running ones of other tasks) take.
    pub pool: &'a Distribution,
    /// The task's own class, when known apart from the pool's.
    pub own: Option<&'a Distribution>,
    /// While quotas hold every new submit of the pool back (a full window, a provider's
    /// closure): until when. No pending unit starts before then.
    pub opens_at: Option<i64>,
    /// The pool's quotas on creates as they stand: the creates ahead wait their turn in each
    /// window (see [`Pace`]).
    pub pace: &'a [Pace],
}

/// One quota window as the estimate reads it: `remaining` creates may go now; after that,
/// `limit` per `window_ms`, the first of them at `resets_at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    pub remaining: u32,
    pub resets_at: i64,
    pub limit: u32,
    pub window_ms: i64,
}

impl Pace {
    /// The earliest the `k`-th create from now (0-based) may go.
    fn earliest(&self, k: u64, now: i64) -> i64 {
        let remaining = u64::from(self.remaining);
        if k < remaining {
            return now;
        }
        let waves = (k - remaining) / u64::from(self.limit.max(1));
        let waves = i64::try_from(waves).unwrap_or(i64::MAX / 4);
        self.resets_at
            .max(now)
            .saturating_add(waves.saturating_mul(self.window_ms.max(1)))
    }
}

/// The earliest the `k`-th create from now may go under every window.
fn paced(pace: &[Pace], k: u64, now: i64) -> i64 {
    pace.iter().map(|p| p.earliest(k, now)).max().unwrap_or(now)
}

/// When the task's last job in its pool is expected to end (Unix ms).
pub fn completion(input: Inputs<'_>) -> i64 {
    let Inputs {
        now,
        slots,
        standing,
        pool,
        own,
        opens_at,
        pace,
    } = input;
    let ages = |mine_only: bool| -> Vec<i64> {
        standing
            .running
            .iter()
            .filter(|(_, mine)| !mine_only || *mine)
            .map(|&(at, _)| (now - at).max(0))
            .collect()
    };
    let pool = Survival::new(pool, &ages(false));
    let own = match own {
        Some(d) => Survival::new(d, &ages(true)),
        None => pool.clone(),
    };
    // The task ends with the last of its jobs: the expected maximum of n durations, not the
    // maximum of their expectations, which is about the `n / (n + 1)` quantile of each.
    let own_jobs = standing.pending + standing.running.iter().filter(|(_, m)| *m).count() as u64;
    let q = own_jobs as f64 / (own_jobs + 1) as f64;
    let mut own_end = now;
    let mut free: BinaryHeap<Reverse<i64>> = BinaryHeap::new();
    for &(submitted_at, mine) in &standing.running {
        let age = (now - submitted_at).max(0);
        if mine {
            own_end = own_end.max(now + own.remaining_quantile(age, q).max(0));
        }
        let class = if mine { &own } else { &pool };
        free.push(Reverse(now + class.remaining(age).max(0)));
    }
    let slots = usize::try_from(slots.max(1)).unwrap_or(1);
    while free.len() < slots {
        free.push(Reverse(now));
    }
    if standing.pending == 0 {
        return own_end;
    }
    // A slot freed while the pool is closed takes its next unit when it opens.
    if let Some(opens) = opens_at.filter(|t| *t > now) {
        free = free
            .into_iter()
            .map(|Reverse(at)| Reverse(at.max(opens)))
            .collect();
    }
    let pool_mean = pool.mean().max(1);
    let replayed = standing.ahead_last.min(REPLAY_MAX);
    for k in 0..replayed {
        let Some(Reverse(at)) = free.pop() else { break };
        free.push(Reverse(at.max(paced(pace, k, now)) + pool_mean));
    }
    // Past the replay cap the pool drains `slots` units per mean duration.
    let rest = standing.ahead_last - replayed;
    let drained = i64::try_from(rest / slots as u64).unwrap_or(i64::MAX / 4) * pool_mean;
    let start = free
        .pop()
        .map_or(now, |Reverse(at)| at)
        .saturating_add(drained)
        .max(paced(pace, standing.ahead_last, now));
    own_end.max(start + own.remaining_quantile(0, q).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(samples: &[i64]) -> Distribution {
        Distribution::new(samples.to_vec()).expect("samples")
    }

    /// [`completion`] with the pool's durations for the task's own jobs too.
    fn complete(now: i64, slots: u32, standing: &QueueStanding, pool: &Distribution) -> i64 {
        completion(Inputs {
            now,
            slots,
            standing,
            pool,
            own: None,
            opens_at: None,
            pace: &[],
        })
    }

    fn standing(pending: u64, ahead_last: u64, running: Vec<(i64, bool)>) -> QueueStanding {
        QueueStanding {
            pool: "p".into(),
            pending,
            ahead_first: ahead_last.saturating_sub(pending.saturating_sub(1)),
            ahead_last,
            running,
            ..QueueStanding::default()
        }
    }

    #[test]
    fn an_empty_pool_runs_the_task_now() {
        let d = dist(&[1000, 1000, 1000, 1000]);
        let s = standing(1, 0, vec![]);
        let at = complete(10_000, 2, &s, &d);
        assert_eq!(at, 11_000);
    }

    #[test]
    fn units_ahead_wait_for_slots_in_waves() {
        // 2 slots, both busy until +500; 3 units ahead, then ours: waves at 500, 1500, 2500.
        let d = dist(&[1000, 1000, 1000, 1000]);
        let s = standing(1, 3, vec![(9_500, false), (9_500, false)]);
        let at = complete(10_000, 2, &s, &d);
        // Slots free at 10500, 10500; ahead take 10500, 10500, 11500; ours starts 11500.
        assert_eq!(at, 12_500);
    }

    #[test]
    fn a_running_task_ends_with_its_last_job() {
        let d = dist(&[1000, 2000, 3000, 4000]);
        // Our job has run 2500 ms: it ends at 3000 or 4000 ms, even odds; its median
        // remainder (one job: the 1/2 quantile) is the later step, 1500 ms.
        let s = standing(0, 0, vec![(7_500, true), (9_000, false)]);
        let at = complete(10_000, 2, &s, &d);
        assert_eq!(at, 11_500);
    }

    #[test]
    fn early_in_a_run_jobs_still_running_stretch_the_expected_duration() {
        // Only the 4 shortest of 20 jobs ended (1 s each); 16 run at 1.2 s. Taken alone the
        // ended ones say every job takes 1 s; with the running ones as lower bounds, S(1 s) =
        // 0.8 and past 1 s the tail is memoryless with the 1 s mean, so the median job (one
        // job of its own: the 1/2 quantile) takes 1 + ln(0.8 / 0.5) s.
        let d = dist(&[1000, 1000, 1000, 1000]);
        let s = standing(1, 0, vec![(8_800, false); 16]);
        let at = complete(10_000, 20, &s, &d);
        assert_eq!(at, 11_470);
        // A job older than every ended one is not about to end: its median remainder is the
        // tail's, ln 2 means.
        let s = standing(0, 0, vec![(0, true)]);
        let at = complete(10_000, 1, &s, &d);
        assert_eq!(at, 10_693);
    }

    #[test]
    fn a_pool_closed_by_a_quota_starts_nothing_before_it_opens() {
        let d = dist(&[1000, 1000, 1000, 1000]);
        let s = standing(1, 0, vec![]);
        let closed = |opens_at| {
            completion(Inputs {
                now: 10_000,
                slots: 2,
                standing: &s,
                pool: &d,
                own: None,
                opens_at,
                pace: &[],
            })
        };
        assert_eq!(closed(None), 11_000);
        assert_eq!(closed(Some(50_000)), 51_000);
        assert_eq!(
            closed(Some(9_000)),
            11_000,
            "an end in the past changes nothing"
        );
    }

    #[test]
    fn creates_ahead_wait_their_turn_in_a_rate_window() {
        // 10 slots, jobs of 1 s, 25 units ahead, a rate of 5 per 10 s with 5 left now: the
        // units ahead go in waves of 5 every 10 s; ours is the 26th create, in the fifth wave
        // after the reset at 10 s: 10 + 4 x 10 = 50 s, and it ends a second later.
        let d = dist(&[1000, 1000, 1000, 1000]);
        let s = standing(1, 25, vec![]);
        let pace = [Pace {
            remaining: 5,
            resets_at: 10_000,
            limit: 5,
            window_ms: 10_000,
        }];
        let at = completion(Inputs {
            now: 0,
            slots: 10,
            standing: &s,
            pool: &d,
            own: None,
            opens_at: None,
            pace: &pace,
        });
        assert_eq!(at, 51_000);
        // Without the quota the slots alone decide: three waves of 10 jobs, ours in the third.
        assert_eq!(complete(0, 10, &s, &d), 3_000);
    }

    #[test]
    fn its_own_class_sets_its_duration_and_long_queues_drain_at_the_pool_rate() {
        let pool = dist(&[1000, 1000, 1000, 1000]);
        let own = dist(&[5000, 5000, 5000, 5000]);
        let s = standing(1, 0, vec![]);
        let at = completion(Inputs {
            now: 0,
            slots: 1,
            standing: &s,
            pool: &pool,
            own: Some(&own),
            opens_at: None,
            pace: &[],
        });
        assert_eq!(at, 5000);
        // A million ahead on 10 slots: about 100,000 pool means.
        let s = standing(1, 1_000_000, vec![]);
        let at = complete(0, 10, &s, &pool);
        assert!((at - 100_001_000).abs() <= 1000, "{at}");
    }
}
