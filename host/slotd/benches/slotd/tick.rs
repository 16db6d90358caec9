//! `run_once` at 10,000 units (docs/testing.md): a poll tick with 10,000 units in flight of which
//! 1,000 are due, and a fill tick with 10,000 pending and 1,000 free slots. Real store, real
//! compiled fixture handler (`idle`: accepted, then "running"; `quick`: accepted, then
//! succeeded at its first poll), no HTTP, an injected clock.

use std::time::Instant;

use slotd_core::clock::{Clock, DynClock, ManualClock};
use slotd_server::scheduler::{Scheduler, TickSteps};

use crate::common::{Compared, fixture_config, median, median_f64, ms, post_fixture, submit_many};
use crate::report::{Better, Report, Target};

pub(crate) const IN_FLIGHT: u32 = 10_000;
pub(crate) const DUE: u32 = 1_000;

pub(crate) async fn scheduler(
    dir: &std::path::Path,
    slots: u32,
    url: &str,
    adjust: impl FnOnce(&mut slotd_core::config::Config),
) -> (
    slotd_server::services::Services,
    std::sync::Arc<Scheduler>,
    std::sync::Arc<ManualClock>,
) {
    let clock = ManualClock::new(1_000_000);
    let dyn_clock: DynClock = clock.clone();
    let mut config = fixture_config(dir, slots, url);
    config.scheduler.max_batch = DUE;
    adjust(&mut config);
    let services = slotd_server::app::build_with_clock(config, dyn_clock)
        .await
        .expect("build");
    let sched = Scheduler::new(services.clone());
    (services, sched, clock)
}

/// 10,000 in flight, 1,000 due per tick: the median poll tick and the median tick with nothing
/// due (ms). On the schema before the lean-write migrations with `previous`.
async fn poll(backend: &str, url: &str, previous: bool) -> (f64, f64) {
    let dir = tempfile::TempDir::new().expect("tmp");
    let (services, sched, clock) = scheduler(dir.path(), IN_FLIGHT, url, |_| {}).await;
    if previous {
        crate::common::as_previous_schema(url).await;
    }
    submit_many(&services, IN_FLIGHT, "idle").await;
    // Fill every slot (a batch of 10,000 creates: not the figure measured here).
    let mut in_flight = 0;
    while in_flight < IN_FLIGHT as usize {
        let r = sched
            .run_once("fixture", clock.now_ms())
            .await
            .expect("fill");
        assert!(r.claimed > 0, "the fill stalled at {in_flight}");
        in_flight += r.claimed;
        clock.advance(1);
    }
    analyze_if_asked(url).await;
    // Every unit due; each tick polls the 1,000 due longest (max_batch) and reschedules them.
    clock.advance(60_000);
    let mut polls = Vec::new();
    let mut steps = Vec::new();
    let mut idle = Vec::new();
    for _ in 0..(IN_FLIGHT / DUE) {
        let t = Instant::now();
        let r = sched
            .run_once("fixture", clock.now_ms())
            .await
            .expect("poll tick");
        polls.push(t.elapsed());
        steps.push((t.elapsed(), r.steps.clone()));
        assert_eq!(r.polled as u32, DUE, "a poll tick should poll {DUE}");
        assert_eq!(r.used_after, IN_FLIGHT, "every unit stays in flight");
        clock.advance(1);
    }
    // Nothing due now: the fixed cost of looking.
    for _ in 0..5 {
        let t = Instant::now();
        let r = sched
            .run_once("fixture", clock.now_ms())
            .await
            .expect("idle tick");
        idle.push(t.elapsed());
        assert_eq!(r.polled, 0);
    }
    print_steps(
        backend,
        if previous {
            "poll (previous schema)"
        } else {
            "poll"
        },
        steps,
    );
    (ms(median(polls)), ms(median(idle)))
}

/// With `SLOTD_BENCH_ANALYZE`, gather PostgreSQL's statistics of `units` before the measured
/// ticks, as autovacuum does for a database in service (the run's database is minutes old,
/// and without statistics the fill's pending query reads the narrow live-units index and
/// sorts every pending unit instead of reading `units_fill` in order: docs/scale.md).
async fn analyze_if_asked(url: &str) {
    if std::env::var_os("SLOTD_BENCH_ANALYZE").is_none() || !url.starts_with("postgres") {
        return;
    }
    let pool = sqlx::PgPool::connect(url).await.expect("pg");
    sqlx::query("ANALYZE units")
        .execute(&pool)
        .await
        .expect("analyze");
    pool.close().await;
    eprintln!("  (analyzed)");
}

/// Units of the deadline variant's task: a lower priority than the backlog, due in a day.
const DEADLINED: u32 = 200;

/// What a fill tick measures beside the plain fill.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Plain,
    /// A task with a deadline below the backlog (the sweep's projection every tick).
    Deadlines,
    /// The plain fill on the schema before the lean-write migrations (`previous_schema/`).
    Previous,
    /// The pool with three dimensions: slots, `rate` and `daily`, set high enough never to
    /// bind, so the tick grants what the plain one does and the figure is the admission's cost
    /// (window counts, the checks in the grant step, the create records).
    Quotas,
}

/// 10,000 (and more) pending, 1,000 free slots per fill tick; between fill ticks a poll tick
/// ends the 1,000 submitted (succeeded), which frees their slots. With `deadlines`, a task of
/// [`DEADLINED`] units below the backlog's priority carries a deadline it can meet, so every
/// tick's deadline sweep projects them behind the whole backlog (its per-group counts made
/// afresh each tick: the clock moves a minute between ticks).
async fn fill(backend: &str, url: &str, variant: Variant) -> (f64, f64) {
    let deadlines = variant == Variant::Deadlines;
    let dir = tempfile::TempDir::new().expect("tmp");
    let (services, sched, clock) = scheduler(dir.path(), DUE, url, |c| {
        if variant == Variant::Quotas
            && let Some(p) = c.pools.get_mut("fixture")
        {
            p.rate = slotd_core::config::parse_rate("1000000/min").ok();
            p.daily = slotd_core::config::parse_rate("100000000/day").ok();
        }
    })
    .await;
    if variant == Variant::Previous {
        crate::common::as_previous_schema(url).await;
    }
    let rounds = 5;
    submit_many(&services, IN_FLIGHT + rounds * DUE, "quick").await;
    if deadlines {
        post_fixture(
            &services,
            serde_json::json!({
                "payload": {"count": DEADLINED, "behavior": "quick"},
                "priority": -1,
                "deadline": "1970-01-02T00:00:00Z",
            }),
        )
        .await;
    }
    analyze_if_asked(url).await;
    let mut fills = Vec::new();
    let mut steps = Vec::new();
    let mut frees = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let r = sched
            .run_once("fixture", clock.now_ms())
            .await
            .expect("fill tick");
        fills.push(t.elapsed());
        steps.push((t.elapsed(), r.steps.clone()));
        assert_eq!(r.claimed as u32, DUE, "a fill tick should fill {DUE} slots");
        clock.advance(60_000);
        let t = Instant::now();
        let r = sched
            .run_once("fixture", clock.now_ms())
            .await
            .expect("freeing tick");
        frees.push(t.elapsed());
        assert_eq!(r.succeeded as u32, DUE, "the poll should end every unit");
        clock.advance(1);
    }
    let what = match variant {
        Variant::Plain => "fill",
        Variant::Previous => "fill (previous schema)",
        Variant::Deadlines => "fill+deadlines",
        Variant::Quotas => "fill+quotas",
    };
    if deadlines {
        let pending = services
            .store
            .unit_pending_groups("fixture", -1)
            .await
            .expect("groups")
            .iter()
            .find(|g| g.priority == -1)
            .map_or(0, |g| g.pending);
        assert_eq!(
            pending,
            u64::from(DEADLINED),
            "the deadline units wait, none refused"
        );
    }
    if variant == Variant::Quotas {
        let used = services
            .slots
            .log_count("fixture", 0)
            .await
            .expect("create log")
            .count;
        assert_eq!(used, rounds * DUE, "every grant counted in the create log");
    }
    print_steps(backend, what, steps);
    (ms(median(fills)), ms(median(frees)))
}

/// Where the median tick's time went (the profile behind the figure).
pub(crate) fn print_steps(
    backend: &str,
    what: &str,
    mut ticks: Vec<(std::time::Duration, TickSteps)>,
) {
    ticks.sort_by_key(|(d, _)| *d);
    let Some((total, s)) = ticks.get(ticks.len() / 2) else {
        return;
    };
    eprintln!(
        "  {backend} {what} tick {:.2} ms: claim {:.2}, collect {:.2}, call {:.2}, commit {:.2}, finish {:.2}",
        ms(*total),
        ms(s.claim),
        ms(s.collect),
        ms(s.call),
        ms(s.commit),
        ms(s.finish)
    );
}

/// The poll and fill ticks of one backend over the rounds, and the ticks measured beside
/// them for context (nothing due, the tick that ends 1,000 units).
#[derive(Default)]
struct Ticks {
    poll: Compared,
    fill: Compared,
    idle: Vec<f64>,
    succeed: Vec<f64>,
}

/// The poll and fill ticks on the previous schema and the current one, alternating which goes
/// first, `rounds` times; with `baseline`, the earlier build's tick group before each round.
async fn compared(
    dir: &std::path::Path,
    rounds: usize,
    baseline: Option<&std::path::Path>,
) -> Vec<(&'static str, Ticks)> {
    let mut out: Vec<(&'static str, Ticks)> = Vec::new();
    for round in 0..rounds {
        let earlier = match baseline {
            Some(exe) => crate::common::run_baseline(exe, "tick").await,
            None => None,
        };
        for (backend, _) in crate::common::backends(dir).await {
            let i = match out.iter().position(|(b, _)| *b == backend) {
                Some(i) => i,
                None => {
                    out.push((backend, Ticks::default()));
                    out.len() - 1
                }
            };
            let sides = if round % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            let label = |previous: bool| if previous { ", previous schema" } else { "" };
            for previous in sides {
                eprintln!(
                    "tick: {backend}, poll ticks at {IN_FLIGHT} in flight{}, round {}…",
                    label(previous),
                    round + 1
                );
                let (_, url) = crate::common::fresh(dir, backend).await;
                let (tick, idle) = poll(backend, &url, previous).await;
                out[i].1.poll.push(previous, tick);
                if !previous {
                    out[i].1.idle.push(idle);
                }
            }
            for previous in sides {
                eprintln!(
                    "tick: {backend}, fill ticks at {IN_FLIGHT}+ pending{}, round {}…",
                    label(previous),
                    round + 1
                );
                let (_, url) = crate::common::fresh(dir, backend).await;
                let variant = if previous {
                    Variant::Previous
                } else {
                    Variant::Plain
                };
                let (tick, succeed) = fill(backend, &url, variant).await;
                out[i].1.fill.push(previous, tick);
                if !previous {
                    out[i].1.succeed.push(succeed);
                }
            }
            if let Some(f) = earlier.as_deref() {
                let ticks = &mut out[i].1;
                for (name, c) in [
                    ("run_once_poll_10k", &mut ticks.poll),
                    ("run_once_fill_10k", &mut ticks.fill),
                ] {
                    if let Some(v) = crate::common::baseline_value(f, name, backend) {
                        eprintln!("  baseline build: {name} {v:.1} ms");
                        c.baseline.push(v);
                    }
                }
            }
        }
    }
    out
}

pub async fn run(report: &mut Report) {
    let dir = tempfile::TempDir::new().expect("tmp");
    let baseline = crate::common::baseline_bench();
    let ticks = compared(dir.path(), crate::common::rounds(1), baseline.as_deref()).await;
    let mut plain = Vec::new();
    for (backend, t) in &ticks {
        t.poll.report(
            report,
            "run_once_poll_10k",
            backend,
            "ms",
            Target::AtMost(20.0),
        );
        report.add(
            "run_once_idle_10k",
            backend,
            median_f64(t.idle.clone()),
            "ms",
            Target::None(Better::Lower),
        );
        t.fill.report(
            report,
            "run_once_fill_10k",
            backend,
            "ms",
            Target::AtMost(20.0),
        );
        report.add(
            "run_once_succeed_1k",
            backend,
            median_f64(t.succeed.clone()),
            "ms",
            Target::None(Better::Lower),
        );
        plain.push(median_f64(t.fill.current.clone()));
    }
    for (backend, url) in crate::common::backends(dir.path()).await {
        eprintln!(
            "tick: {backend}, fill ticks at {IN_FLIGHT}+ pending and {DEADLINED} deadline units below them…"
        );
        let (tick, _) = fill(backend, &url, Variant::Deadlines).await;
        report.add(
            "run_once_fill_10k_deadlines",
            backend,
            tick,
            "ms",
            Target::None(Better::Lower),
        );
    }
    for ((backend, url), plain) in crate::common::backends(dir.path())
        .await
        .into_iter()
        .zip(plain)
    {
        eprintln!("tick: {backend}, fill ticks at {IN_FLIGHT}+ pending, slots + rate + daily…");
        let (quotas, _) = fill(backend, &url, Variant::Quotas).await;
        report.add(
            "run_once_fill_10k_quotas",
            backend,
            quotas,
            "ms",
            Target::None(Better::Lower),
        );
        report.add(
            "fill_quotas_over_slots_only",
            backend,
            quotas / plain.max(1e-9),
            "×",
            Target::AtMost(1.10),
        );
    }
}
