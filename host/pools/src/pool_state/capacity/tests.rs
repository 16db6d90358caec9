//! The estimator as a pure function: recorded refusal sequences step by step, and a small
//! closed loop (a provider with a ceiling, other clients and random refusals, jobs of fixed
//! length) that replays the patterns users meet, seeded.

use super::estimator::{Estimator, Observed, Policy, Verdict};

const POLICY: Policy = Policy {
    floor: 1,
    probe_ms: 10_000,
    probe_max_ms: 120_000,
};

fn seen(rejected: u32, accepted: u32, in_flight: u32) -> Observed {
    Observed {
        rejected,
        accepted,
        in_flight,
        queued: 0,
        retry_after_ms: Some(1_000),
    }
}

#[test]
fn a_refusal_at_a_level_accepted_recently_costs_a_request_not_the_slots() {
    let mut e = Estimator::default();
    assert_eq!(e.observe(20, seen(0, 20, 20), 0, &POLICY), None);
    // A job ended, the refill was refused at 19: noise, the limit stays 20.
    assert_eq!(
        e.observe(20, seen(1, 0, 19), 5_000, &POLICY),
        Some(Verdict::Noise)
    );
    assert_eq!(e.estimate(20), 20);
    // No create above 19 for the provider's back-off, then one above it.
    assert_eq!(e.limit(20, 5_500), 19);
    assert_eq!(e.limit(20, 6_000), 20);
    assert_eq!(e.next_change(20, 5_500), Some(6_000));
    // Accepted at 20 again: the run of refusals is over.
    assert_eq!(e.observe(20, seen(0, 1, 20), 6_000, &POLICY), None);
    assert_eq!(
        e.observe(20, seen(1, 0, 19), 9_000, &POLICY),
        Some(Verdict::Noise)
    );
    assert_eq!(e.limit(20, 9_999), 19, "the back-off starts over at 1 s");
    assert_eq!(e.limit(20, 10_000), 20);
}

#[test]
fn refusals_that_repeat_at_a_level_set_a_ceiling_and_back_off_doubling() {
    let mut e = Estimator::default();
    e.observe(20, seen(0, 20, 20), 0, &POLICY);
    assert_eq!(
        e.observe(20, seen(1, 0, 14), 1_000, &POLICY),
        Some(Verdict::Noise)
    );
    assert_eq!(e.limit(20, 1_999), 14);
    assert_eq!(
        e.limit(20, 2_000),
        15,
        "one create asks again, not every free slot"
    );
    assert_eq!(
        e.observe(20, seen(1, 0, 14), 2_000, &POLICY),
        Some(Verdict::Noise)
    );
    assert_eq!(
        e.limit(20, 3_999),
        14,
        "the second refusal in a row waits 2 s"
    );
    assert_eq!(
        e.observe(20, seen(1, 0, 14), 4_000, &POLICY),
        Some(Verdict::Noise)
    );
    assert_eq!(e.limit(20, 7_999), 14, "the third 4 s");
    assert_eq!(
        e.observe(20, seen(1, 0, 14), 8_000, &POLICY),
        Some(Verdict::Ceiling)
    );
    assert_eq!(e.estimate(20), 14);
    // The probe opens after `probe`: one create above the ceiling.
    assert_eq!(e.limit(20, 17_999), 14);
    assert_eq!(e.limit(20, 18_000), 15);
    // Refused: the ceiling stands and the next probe waits twice as long.
    assert_eq!(
        e.observe(20, seen(1, 0, 14), 18_000, &POLICY),
        Some(Verdict::ProbeRefused)
    );
    assert_eq!(e.limit(20, 37_999), 14);
    assert_eq!(e.limit(20, 38_000), 15);
    assert_eq!(
        e.observe(20, seen(1, 0, 14), 38_000, &POLICY),
        Some(Verdict::ProbeRefused)
    );
    assert_eq!(e.limit(20, 77_999), 14);
    // Accepted: the ceiling rises and the next probe opens at once, climbing twice as far.
    assert_eq!(
        e.observe(20, seen(0, 1, 15), 78_000, &POLICY),
        Some(Verdict::ProbeAccepted)
    );
    assert_eq!(e.estimate(20), 15);
    assert_eq!(e.limit(20, 78_000), 17);
    assert_eq!(
        e.observe(20, seen(0, 2, 17), 78_100, &POLICY),
        Some(Verdict::ProbeAccepted)
    );
    assert_eq!(
        e.limit(20, 78_100),
        20,
        "4 more, capped at the configured limit"
    );
    assert_eq!(
        e.observe(20, seen(0, 3, 20), 78_200, &POLICY),
        Some(Verdict::Restored)
    );
    assert_eq!(e.limit(20, 78_200), 20);
    let view = e.view(20, 78_200);
    assert_eq!(
        (view.ceiling, view.refusals_noise, view.refusals_ceiling),
        (None, 3, 3)
    );
}

#[test]
fn a_ceiling_from_the_start_is_learned_in_four_ticks() {
    let mut e = Estimator::default();
    // The first wave: 20 asked, 15 taken; the single asks after 1, 2 and 4 s refused too.
    assert_eq!(
        e.observe(20, seen(5, 15, 15), 0, &POLICY),
        Some(Verdict::Noise)
    );
    assert_eq!(
        e.observe(20, seen(1, 0, 15), 1_000, &POLICY),
        Some(Verdict::Noise)
    );
    assert_eq!(
        e.observe(20, seen(1, 0, 15), 3_000, &POLICY),
        Some(Verdict::Noise)
    );
    assert_eq!(
        e.observe(20, seen(1, 0, 15), 7_000, &POLICY),
        Some(Verdict::Ceiling)
    );
    assert_eq!(e.estimate(20), 15);
    // Random refusals in the first wave do not: the retries get in.
    let mut e = Estimator::default();
    e.observe(20, seen(5, 15, 15), 0, &POLICY);
    assert_eq!(
        e.observe(20, seen(1, 4, 19), 1_000, &POLICY),
        Some(Verdict::Noise)
    );
    assert_eq!(e.observe(20, seen(0, 1, 20), 3_000, &POLICY), None);
    assert_eq!(e.estimate(20), 20);
}

#[test]
fn the_floor_and_the_configured_limit_bound_it() {
    let floor = Policy { floor: 4, ..POLICY };
    let mut e = Estimator::default();
    for at in [0, 1_000, 3_000, 7_000] {
        e.observe(20, seen(1, 0, 1), at, &floor);
    }
    assert_eq!(e.estimate(20), 4, "never below the floor");
    assert_eq!(e.estimate(3), 3, "never above a lowered configuration");
    // Nothing held and refused: nothing is created until the back-off ends.
    let mut e = Estimator::default();
    e.observe(20, seen(1, 0, 0), 0, &POLICY);
    assert_eq!(e.limit(20, 500), 0);
    assert_eq!(e.limit(20, 1_000), 1, "then one create asks again");
}

#[test]
fn jobs_queued_at_the_provider_bring_the_limit_to_what_it_runs() {
    let mut e = Estimator::default();
    let queued = |in_flight, queued| Observed {
        in_flight,
        queued,
        ..Observed::default()
    };
    assert_eq!(
        e.observe(8, queued(8, 3), 0, &POLICY),
        Some(Verdict::Queued)
    );
    assert_eq!(e.estimate(8), 5);
    // Fewer queued later never raises it; probes do.
    e.observe(8, queued(5, 1), 1, &POLICY);
    assert_eq!(e.estimate(8), 4);
    assert_eq!(e.limit(8, 10_000), 4);
    assert_eq!(e.limit(8, 10_001), 5);
}

/// A provider for the closed loop: `capacity` slots, of which `other(t)` are held by other
/// clients (they win every race for a freed slot), and a share of creates refused at random.
struct Provider {
    capacity: u32,
    other: fn(i64) -> u32,
    noise: f64,
    rng: u64,
    ours: Vec<i64>,
}

impl Provider {
    fn random(&mut self) -> f64 {
        self.rng = self
            .rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    fn create(&mut self, now: i64, job_ms: i64) -> bool {
        let room = self.capacity.saturating_sub((self.other)(now));
        if self.ours.len() as u32 >= room || self.random() < self.noise {
            return false;
        }
        self.ours.push(now + job_ms);
        true
    }
}

/// What one closed-loop run did: creates made and refused, busy slot-ms of ours, the
/// lowest estimate seen, and the estimate over time (every 10 s).
struct Run {
    creates: u32,
    refused: u32,
    busy_ms: i64,
    lowest: u32,
    estimates: Vec<u32>,
}

/// Ticks every 250 ms for `until` ms with an endless backlog of `job_ms` jobs, each tick
/// creating for every free slot (as the fill does).
fn closed_loop(provider: &mut Provider, job_ms: i64, until: i64) -> Run {
    let configured = 20;
    let mut e = Estimator::default();
    let mut run = Run {
        creates: 0,
        refused: 0,
        busy_ms: 0,
        lowest: configured,
        estimates: Vec::new(),
    };
    let mut now = 0;
    while now < until {
        provider.ours.retain(|end| *end > now);
        let limit = e.limit(configured, now);
        // One batch: a create for every free slot, answered one by one.
        let (mut accepted, mut rejected) = (0, 0);
        let free = limit.saturating_sub(provider.ours.len() as u32);
        for _ in 0..free {
            run.creates += 1;
            if provider.create(now, job_ms) {
                accepted += 1;
            } else {
                rejected += 1;
                run.refused += 1;
            }
        }
        let held = provider.ours.len() as u32;
        e.observe(configured, seen(rejected, accepted, held), now, &POLICY);
        run.lowest = run.lowest.min(e.estimate(configured));
        if now % 10_000 == 0 {
            run.estimates.push(e.estimate(configured));
        }
        run.busy_ms += i64::from(held) * 250;
        now += 250;
    }
    run
}

#[test]
fn a_quarter_of_creates_refused_at_random_keeps_the_slots() {
    for seed in 1..=8 {
        let mut provider = Provider {
            capacity: 20,
            other: |_| 0,
            noise: 0.25,
            rng: seed,
            ours: Vec::new(),
        };
        let until = 1_800_000;
        let run = closed_loop(&mut provider, 180_000, until);
        let utilization = run.busy_ms as f64 / (20 * until) as f64;
        let mean = run.estimates.iter().sum::<u32>() as f64 / run.estimates.len() as f64;
        let low = run.estimates.iter().filter(|e| **e < 18).count();
        eprintln!(
            "seed {seed}: utilization {utilization:.3}, mean estimate {mean:.2}, lowest {}, \
             {low} of {} samples below 18, {} of {} creates refused",
            run.lowest,
            run.estimates.len(),
            run.refused,
            run.creates
        );
        assert!(
            utilization > 0.98,
            "seed {seed}: utilization {utilization:.3}"
        );
        // Four refused ticks in a row do happen now and then; the probe undoes such a false
        // ceiling within seconds.
        assert!(mean >= 19.5, "seed {seed}: mean estimate {mean:.2}");
        assert!(
            low * 10 <= run.estimates.len(),
            "seed {seed}: {:?}",
            run.estimates
        );
        // Each refusal cost one request: about a quarter of the creates.
        let share = f64::from(run.refused) / f64::from(run.creates);
        assert!(
            share < 0.35,
            "{} of {} creates refused",
            run.refused,
            run.creates
        );
    }
}

#[test]
fn a_real_ceiling_is_learned_and_probed_rarely() {
    let mut provider = Provider {
        capacity: 14,
        other: |_| 0,
        noise: 0.0,
        rng: 7,
        ours: Vec::new(),
    };
    let until = 1_800_000;
    let run = closed_loop(&mut provider, 180_000, until);
    assert!(
        run.estimates[2..].iter().all(|e| *e == 14),
        "{:?}",
        run.estimates
    );
    // Learning it costs the first wave's refusals and three single asks; then a probe every
    // `probe_max` at most: about 17 in 30 minutes.
    assert!(run.refused <= 30, "{} refusals", run.refused);
    let utilization = run.busy_ms as f64 / (14 * until) as f64;
    assert!(utilization > 0.97, "utilization {utilization:.3}");
}

#[test]
fn a_ceiling_that_moves_is_followed_down_and_up() {
    // Another client holds 6 of the 20 from the 10th to the 20th minute.
    let mut provider = Provider {
        capacity: 20,
        other: |t| {
            if (600_000..1_200_000).contains(&t) {
                6
            } else {
                0
            }
        },
        noise: 0.0,
        rng: 7,
        ours: Vec::new(),
    };
    let run = closed_loop(&mut provider, 180_000, 1_800_000);
    let at = |minute: usize| run.estimates[minute * 6];
    assert_eq!(at(9), 20);
    assert!((14..=15).contains(&at(17)), "{:?}", run.estimates);
    // Back up within a probe's wait (`probe_max` at most) of the hold's end.
    assert_eq!(at(23), 20, "{:?}", run.estimates);
    assert!(
        run.refused <= 20,
        "{} refusals of {} creates",
        run.refused,
        run.creates
    );
}
