//! `run_once` at 10,000 units (docs/testing.md): a poll tick with 10,000 units in flight of which
//! 1,000 are due, and a fill tick with 10,000 pending and 1,000 free slots. Real store, real
//! compiled fixture handler (`idle`: accepted, then "running"; `quick`: accepted, then
//! succeeded at its first poll), no HTTP, an injected clock.

use std::time::Instant;

use slotd_core::clock::{Clock, DynClock, ManualClock};
use slotd_server::scheduler::{Scheduler, TickSteps};

use crate::common::{fixture_config, median, ms, post_fixture, submit_many};
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

/// 10,000 in flight, 1,000 due per tick; the median poll tick (ms). On the schema before issue
/// 44 with `previous` (then the figure is named `…_previous_schema`).
async fn poll(report: &mut Report, backend: &str, url: &str, previous: bool) -> f64 {
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
    if std::env::var_os("SLOTD_BENCH_ANALYZE").is_some() && url.starts_with("postgres") {
        let pool = sqlx::PgPool::connect(url).await.expect("pg");
        sqlx::query("ANALYZE units")
            .execute(&pool)
            .await
            .expect("analyze");
        eprintln!("  (analyzed)");
    }
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
    let tick = ms(median(polls));
    if previous {
        report.add(
            "run_once_poll_10k_previous_schema",
            backend,
            tick,
            "ms",
            Target::None(Better::Lower),
        );
        return tick;
    }
    report.add(
        "run_once_poll_10k",
        backend,
        tick,
        "ms",
        Target::AtMost(20.0),
    );
    report.add(
        "run_once_idle_10k",
        backend,
        ms(median(idle)),
        "ms",
        Target::None(Better::Lower),
    );
    tick
}

/// A fresh database of `backend`'s kind (each run starts empty).
async fn fresh(dir: &std::path::Path, backend: &str) -> (&'static str, String) {
    crate::common::backends(dir)
        .await
        .into_iter()
        .find(|(b, _)| *b == backend)
        .expect("the backend answered a moment ago")
}

/// `{name}_after_over_before`: the tick on the current schema over the previous one's.
fn after_over_before(report: &mut Report, name: &str, backend: &str, after: f64, before: f64) {
    report.add(
        &format!("{name}_after_over_before"),
        backend,
        after / before.max(1e-9),
        "x",
        Target::None(Better::Lower),
    );
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
async fn fill(report: &mut Report, backend: &str, url: &str, variant: Variant) -> f64 {
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
    let fill_ms = ms(median(fills));
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
        print_steps(backend, "fill+deadlines", steps);
        report.add(
            "run_once_fill_10k_deadlines",
            backend,
            fill_ms,
            "ms",
            Target::None(Better::Lower),
        );
        return fill_ms;
    }
    if variant == Variant::Quotas {
        let used = services
            .slots
            .log_count("fixture", 0)
            .await
            .expect("create log")
            .count;
        assert_eq!(used, rounds * DUE, "every grant counted in the create log");
        print_steps(backend, "fill+quotas", steps);
        report.add(
            "run_once_fill_10k_quotas",
            backend,
            fill_ms,
            "ms",
            Target::None(Better::Lower),
        );
        return fill_ms;
    }
    if variant == Variant::Previous {
        print_steps(backend, "fill (previous schema)", steps);
        report.add(
            "run_once_fill_10k_previous_schema",
            backend,
            fill_ms,
            "ms",
            Target::None(Better::Lower),
        );
        return fill_ms;
    }
    print_steps(backend, "fill", steps);
    report.add(
        "run_once_fill_10k",
        backend,
        fill_ms,
        "ms",
        Target::AtMost(20.0),
    );
    report.add(
        "run_once_succeed_1k",
        backend,
        ms(median(frees)),
        "ms",
        Target::None(Better::Lower),
    );
    fill_ms
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

pub async fn run(report: &mut Report) {
    let dir = tempfile::TempDir::new().expect("tmp");
    // Before and after the lean-write migrations, in one run: the previous schema first.
    for (backend, url) in crate::common::backends(dir.path()).await {
        eprintln!("tick: {backend}, poll ticks at {IN_FLIGHT} in flight, previous schema…");
        let before = poll(report, backend, &url, true).await;
        eprintln!("tick: {backend}, poll ticks at {IN_FLIGHT} in flight…");
        let (_, url) = fresh(dir.path(), backend).await;
        let after = poll(report, backend, &url, false).await;
        after_over_before(report, "run_once_poll_10k", backend, after, before);
    }
    let mut plain = Vec::new();
    for (backend, url) in crate::common::backends(dir.path()).await {
        eprintln!("tick: {backend}, fill ticks at {IN_FLIGHT}+ pending, previous schema…");
        let before = fill(report, backend, &url, Variant::Previous).await;
        eprintln!("tick: {backend}, fill ticks at {IN_FLIGHT}+ pending…");
        let (_, url) = fresh(dir.path(), backend).await;
        let after = fill(report, backend, &url, Variant::Plain).await;
        after_over_before(report, "run_once_fill_10k", backend, after, before);
        plain.push(after);
    }
    for (backend, url) in crate::common::backends(dir.path()).await {
        eprintln!(
            "tick: {backend}, fill ticks at {IN_FLIGHT}+ pending and {DEADLINED} deadline units below them…"
        );
        fill(report, backend, &url, Variant::Deadlines).await;
    }
    for ((backend, url), plain) in crate::common::backends(dir.path())
        .await
        .into_iter()
        .zip(plain)
    {
        eprintln!("tick: {backend}, fill ticks at {IN_FLIGHT}+ pending, slots + rate + daily…");
        let quotas = fill(report, backend, &url, Variant::Quotas).await;
        report.add(
            "fill_quotas_over_slots_only",
            backend,
            quotas / plain.max(1e-9),
            "×",
            Target::AtMost(1.10),
        );
    }
}
