//! A Kling account other clients also use (docs/testing.md, `kling` group): the mixed
//! workload of [`crate::kling`], embedded, polling and with callbacks, against the simulator
//! refusing a quarter of creates 1303 at random, and against another client that holds 6 of
//! the 20 slots in bursts (five simulated minutes on, five off). Printed: backlog
//! utilization and makespan against the ideal FIFO of the same jobs (the run without
//! refusals is the `kling` group's), create requests per shot, refusals per create, and how
//! long slotd took to fill what the other client gave back at each burst's end.

use crate::kling::{Deployment, LIMIT, RunSpec, run_one};
use crate::report::{Report, Target};

/// The other client: slots it holds, how long a burst lasts and the quiet between bursts
/// (simulated seconds).
const OTHER_CLIENT: (u32, f64, f64) = (6, 300.0, 300.0);

pub async fn run(report: &mut Report, shots: usize, scale: f64) {
    for (mode, callbacks) in [("polling", false), ("callbacks", true)] {
        let noisy = RunSpec {
            over_capacity_rate: 0.25,
            ..RunSpec::new(Deployment::Embedded, shots, scale, callbacks)
        };
        eprintln!("kling: {shots} shots, a quarter of creates refused at random, {mode}…");
        let f = run_one(&noisy)
            .await
            .expect("kling run")
            .expect("an embedded run always starts");
        let per_shot = f.create_requests as f64 / f.shots.max(1) as f64;
        eprintln!(
            "kling refusals {mode}: backlog utilization {:.4}, makespan {:.3}x the ideal FIFO, \
             {:.2} create requests per shot ({} refused), wall {:.1} s",
            f.backlog_util,
            f.makespan_ratio,
            per_shot,
            f.refusals_1303,
            f.wall.as_secs_f64()
        );
        let name = |n: &str| format!("noise25_{n}_{mode}");
        report.add(
            &name("backlog_util"),
            "sqlite",
            f.backlog_util,
            "ratio",
            Target::AtLeast(0.90),
        );
        report.add(
            &name("makespan_fifo"),
            "sqlite",
            f.makespan_ratio,
            "ratio",
            Target::AtMost(1.15),
        );
        report.add(
            &name("creates_per_shot"),
            "sqlite",
            per_shot,
            "1",
            Target::AtMost(2.0),
        );

        let shared = RunSpec {
            other_client: Some(OTHER_CLIENT),
            ..RunSpec::new(Deployment::Embedded, shots, scale, callbacks)
        };
        let (slots, burst, gap) = OTHER_CLIENT;
        eprintln!(
            "kling: {shots} shots, another client holding {slots} of {LIMIT} slots for {burst} s \
             every {} s, {mode}…",
            burst + gap
        );
        let f = run_one(&shared)
            .await
            .expect("kling run")
            .expect("an embedded run always starts");
        let refused = f.refusals_1303 as f64 / f.create_requests.max(1) as f64;
        let worst_refill = f.refill_delays.iter().copied().fold(0.0, f64::max);
        eprintln!(
            "kling other client {mode}: {} of {} creates refused ({:.3}), refills after the \
             bursts' ends {:?} simulated s, backlog utilization {:.4}, wall {:.1} s",
            f.refusals_1303,
            f.create_requests,
            refused,
            f.refill_delays,
            f.backlog_util,
            f.wall.as_secs_f64()
        );
        let name = |n: &str| format!("other6_{n}_{mode}");
        report.add(
            &name("refused_share"),
            "sqlite",
            refused,
            "ratio",
            Target::AtMost(0.10),
        );
        // "Within a few seconds" of real time at the benchmark's compression.
        report.add(
            &name("refill_after_burst"),
            "sqlite",
            worst_refill * scale,
            "s",
            Target::AtMost(5.0),
        );
        report.add(
            &name("backlog_util"),
            "sqlite",
            f.backlog_util,
            "ratio",
            Target::None(crate::report::Better::Higher),
        );
    }
}
