//! How quickly a client's jobs fill the slots the other client of the account frees at the end
//! of each of its bursts: a pure function of [`SimHandle::jobs`](super::SimHandle::jobs) and
//! [`SimStats::other_client_bursts`](super::SimStats::other_client_bursts), for benchmarks.

use super::stats::{OtherClientBurst, SimJob};

/// For each of `bursts` (same order): the simulated seconds from its end until the jobs
/// running reach what the account allows them, `min(concurrency, jobs not ended yet)` (the jobs
/// not ended count those that start later: `jobs` is read after the run, in hindsight). The
/// target is judged at each job start and end after the burst's end, so jobs that end meanwhile
/// lower it.
///
/// `None` when the burst has not ended, or when the next burst began first (the other client
/// takes the room again). Read `jobs` after the run: jobs created later are unknown to it, so
/// an early read sets the target too low. Times are simulated seconds since the first create,
/// as both records count them.
pub fn refill_delays(
    jobs: &[SimJob],
    bursts: &[OtherClientBurst],
    concurrency: u32,
) -> Vec<Option<f64>> {
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let starts = sorted(jobs.iter().map(|j| j.started).collect());
    let ends = sorted(jobs.iter().filter_map(|j| j.ended).collect());
    let events = sorted(starts.iter().chain(&ends).copied().collect());
    let upto = |v: &[f64], t: f64| v.partition_point(|&x| x <= t);
    let met = |t: f64| {
        let ended = upto(&ends, t);
        let running = upto(&starts, t).saturating_sub(ended);
        let allowed = (concurrency as usize).min(jobs.len() - ended);
        running >= allowed
    };
    bursts
        .iter()
        .enumerate()
        .map(|(i, burst)| {
            let end = burst.end?;
            let next = bursts
                .iter()
                .enumerate()
                .filter(|&(j, b)| j != i && b.start >= end)
                .map(|(_, b)| b.start)
                .fold(f64::INFINITY, f64::min);
            let after = &events[upto(&events, end)..];
            std::iter::once(end)
                .chain(after.iter().copied())
                .take_while(|&t| t < next)
                .find(|&t| met(t))
                .map(|t| t - end)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(started: f64, ended: Option<f64>) -> SimJob {
        SimJob {
            started,
            ended,
            ..SimJob::default()
        }
    }

    fn burst(start: f64, end: Option<f64>) -> OtherClientBurst {
        OtherClientBurst {
            start,
            end,
            slots: 2,
            peak_held: 2,
        }
    }

    #[test]
    fn the_delay_runs_until_the_freed_slots_are_filled() {
        // One job runs at the burst's end (10); two more start at 12 and 15: full at 15.
        let jobs = [
            job(0.0, Some(20.0)),
            job(12.0, Some(30.0)),
            job(15.0, Some(30.0)),
        ];
        assert_eq!(
            refill_delays(&jobs, &[burst(2.0, Some(10.0))], 3),
            [Some(5.0)]
        );
        // Fewer jobs left than slots: full once the two that are left run.
        assert_eq!(
            refill_delays(&jobs[..2], &[burst(2.0, Some(10.0))], 3),
            [Some(2.0)]
        );
        // Already full when the burst ends.
        let full = [job(0.0, Some(20.0)), job(1.0, None), job(9.0, Some(11.0))];
        assert_eq!(
            refill_delays(&full, &[burst(2.0, Some(10.0))], 3),
            [Some(0.0)]
        );
    }

    #[test]
    fn jobs_ending_meanwhile_lower_the_target() {
        // At 10 two run and one is to come (target 3); at 11 one ends (target 2); at 14 the
        // third starts: two run, all there is.
        let jobs = [
            job(0.0, Some(11.0)),
            job(0.0, Some(30.0)),
            job(14.0, Some(30.0)),
        ];
        assert_eq!(
            refill_delays(&jobs, &[burst(2.0, Some(10.0))], 3),
            [Some(4.0)]
        );
    }

    #[test]
    fn no_delay_without_an_end_or_before_the_next_burst() {
        let jobs = [job(0.0, Some(50.0)), job(30.0, Some(60.0))];
        let bursts = [
            burst(2.0, Some(10.0)),
            burst(20.0, Some(25.0)),
            burst(40.0, None),
        ];
        // The first: the next burst (20) began before the second job (30). The second: filled
        // at 30. The third: in progress.
        assert_eq!(refill_delays(&jobs, &bursts, 2), [None, Some(5.0), None]);
        // A burst that begins as the other ends leaves no room to fill.
        let back_to_back = [burst(2.0, Some(10.0)), burst(10.0, None)];
        assert_eq!(refill_delays(&jobs, &back_to_back, 2), [None, None]);
        assert!(refill_delays(&jobs, &[], 2).is_empty());
    }
}
