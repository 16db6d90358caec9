//! Honest ETAs (issue 13): when a task is expected to end, from what slotd knows and a queue
//! cannot: the pool's slots (the effective limit), who holds them and since when, the fill
//! order ahead of the task ([`QueueStanding`]), and the provider's observed durations
//! ([`Durations`]).
//!
//! The estimate replays the pool's near future: each slot frees when its job is expected to
//! end (a job of age `a` is expected to take the mean of the observed durations longer than
//! `a`, less `a`), and the units ahead of the task's last pending one take the freed slots in
//! fill order, each for the pool's mean duration; the task ends when its last job does. No
//! durations observed yet: no estimate (`None`), rather than a guess.
//!
//! What it leaves out, and so what the benchmark's error shows: the time between a job's end
//! and slotd noticing it (polling), finalization (downloads), retries, and work arriving later
//! with a higher priority.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::scheduler::durations::Distribution;
use crate::store::QueueStanding;

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
}

/// When the task's last job in its pool is expected to end (Unix ms).
pub fn completion(input: Inputs<'_>) -> i64 {
    let Inputs {
        now,
        slots,
        standing,
        pool,
        own,
    } = input;
    let own = own.unwrap_or(pool);
    let mut own_end = now;
    let mut free: BinaryHeap<Reverse<i64>> = BinaryHeap::new();
    for &(submitted_at, mine) in &standing.running {
        let age = (now - submitted_at).max(0);
        let class = if mine { own } else { pool };
        let end = now + class.expected_remaining(age).max(0);
        if mine {
            own_end = own_end.max(end);
        }
        free.push(Reverse(end));
    }
    let slots = usize::try_from(slots.max(1)).unwrap_or(1);
    while free.len() < slots {
        free.push(Reverse(now));
    }
    if standing.pending == 0 {
        return own_end;
    }
    let pool_mean = pool.mean().max(1);
    let replayed = standing.ahead_last.min(REPLAY_MAX);
    for _ in 0..replayed {
        let Some(Reverse(at)) = free.pop() else { break };
        free.push(Reverse(at + pool_mean));
    }
    // Past the replay cap the pool drains `slots` units per mean duration.
    let rest = standing.ahead_last - replayed;
    let drained = i64::try_from(rest / slots as u64).unwrap_or(i64::MAX / 4) * pool_mean;
    let start = free.pop().map_or(now, |Reverse(at)| at).saturating_add(drained);
    own_end.max(start + own.mean().max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(samples: &[i64]) -> Distribution {
        Distribution::new(samples.to_vec()).expect("samples")
    }

    fn standing(pending: u64, ahead_last: u64, running: Vec<(i64, bool)>) -> QueueStanding {
        QueueStanding {
            pool: "p".into(),
            pending,
            ahead_first: ahead_last.saturating_sub(pending.saturating_sub(1)),
            ahead_last,
            running,
        }
    }

    #[test]
    fn an_empty_pool_runs_the_task_now() {
        let d = dist(&[1000, 1000, 1000, 1000]);
        let s = standing(1, 0, vec![]);
        let at = completion(Inputs {
            now: 10_000,
            slots: 2,
            standing: &s,
            pool: &d,
            own: None,
        });
        assert_eq!(at, 11_000);
    }

    #[test]
    fn units_ahead_wait_for_slots_in_waves() {
        // 2 slots, both busy until +500; 3 units ahead, then ours: waves at 500, 1500, 2500.
        let d = dist(&[1000, 1000, 1000, 1000]);
        let s = standing(1, 3, vec![(9_500, false), (9_500, false)]);
        let at = completion(Inputs {
            now: 10_000,
            slots: 2,
            standing: &s,
            pool: &d,
            own: None,
        });
        // Slots free at 10500, 10500; ahead take 10500, 10500, 11500; ours starts 11500.
        assert_eq!(at, 12_500);
    }

    #[test]
    fn a_running_task_ends_with_its_last_job() {
        let d = dist(&[1000, 2000, 3000, 4000]);
        // Our job has run 2500 ms: expected to take mean(3000, 4000) = 3500, so 1000 more.
        let s = standing(0, 0, vec![(7_500, true), (9_000, false)]);
        let at = completion(Inputs {
            now: 10_000,
            slots: 2,
            standing: &s,
            pool: &d,
            own: None,
        });
        assert_eq!(at, 11_000);
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
        });
        assert_eq!(at, 5000);
        // A million ahead on 10 slots: about 100,000 pool means.
        let s = standing(1, 1_000_000, vec![]);
        let at = completion(Inputs {
            now: 0,
            slots: 10,
            standing: &s,
            pool: &pool,
            own: None,
        });
        assert!((at - 100_001_000).abs() <= 1000, "{at}");
    }
}
