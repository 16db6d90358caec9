//! A pool's `rate` with two schedulers in cluster mode (docs/accounts-deadlines-budgets.md
//! "Quotas"): the window is checked and counted in Redis in the grant's own Lua call, so no
//! scheduler, and no takeover between them, lets more creates through than the rate allows.
//! Counted on the provider's side, from the Kling simulator's record of its tasks. A Redis
//! flush loses the log with the slot sets; it is rebuilt from the database's record.

use crate::scale_cluster::{Cluster, ClusterOptions};

/// Creates allowed per window, and the window.
const RATE: usize = 8;
const WINDOW_S: f64 = 2.0;

/// The most creates the provider saw in any window of `window` seconds (`times` in seconds).
pub fn busiest_window(mut times: Vec<f64>, window: f64) -> usize {
    times.sort_by(f64::total_cmp);
    let mut best = 0;
    let mut first = 0;
    for (i, t) in times.iter().enumerate() {
        while times[first] <= t - window {
            first += 1;
        }
        best = best.max(i + 1 - first);
    }
    best
}

/// `kling:video` at 8 creates per 2 s (18 slots, so the rate binds, not the slots), 100 shots,
/// two schedulers; the one driving the pool is killed after 40 creates and the other takes the
/// pool over with the create log where it was. No 2 s window at the provider held more than 8
/// creates; all complete, each created once; and the run took as long as the rate says it must
/// (so the rate was in force, not merely unreached).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_rate_holds_across_two_schedulers_and_a_takeover() {
    let mut opts = ClusterOptions::new(2, 25);
    opts.video_rate = Some(format!("{RATE}/{WINDOW_S}s"));
    let mut c = Cluster::start_with(opts).await;
    let ids = c.submit_videos(5, 20).await;
    c.wait_creates(40).await;
    let holder = c.holder_of("kling:video").await;
    c.schedulers[holder].signal("KILL");
    c.schedulers[holder].child.wait().ok();
    c.wait_completed(&ids).await;
    c.assert_clean(100).await;

    let scale = c.sim.stats().time_scale;
    let times: Vec<f64> = c
        .sim
        .jobs()
        .iter()
        .filter(|j| j.kind.ends_with("video"))
        .map(|j| j.started * scale)
        .collect();
    assert_eq!(times.len(), 100);
    let busiest = busiest_window(times.clone(), WINDOW_S);
    assert!(
        busiest <= RATE,
        "the provider saw {busiest} creates within {WINDOW_S} s; the rate allows {RATE}"
    );
    assert_eq!(busiest, RATE, "the rate was reached, so it was what bound");
    let span =
        times.iter().copied().fold(0.0, f64::max) - times.iter().copied().fold(f64::MAX, f64::min);
    let least = (100 / RATE - 1) as f64 * WINDOW_S;
    assert!(
        span >= least,
        "100 creates in {span:.1} s; at {RATE}/{WINDOW_S} s they need {least} s"
    );
}

/// The same rate with Redis flushed twice mid-run (the create log goes with the slot sets): the
/// scheduler rebuilds the log from the database's record before it grants again, so the
/// provider still never sees more than the rate allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_rate_survives_a_redis_flush() {
    let mut opts = ClusterOptions::new(2, 26);
    opts.video_rate = Some(format!("{RATE}/{WINDOW_S}s"));
    let c = Cluster::start_with(opts).await;
    let ids = c.submit_videos(3, 20).await;
    c.wait_creates(20).await;
    c.flush_redis().await;
    c.wait_creates(36).await;
    c.flush_redis().await;
    c.wait_completed(&ids).await;
    c.assert_clean(60).await;
    let scale = c.sim.stats().time_scale;
    let times: Vec<f64> = c
        .sim
        .jobs()
        .iter()
        .filter(|j| j.kind.ends_with("video"))
        .map(|j| j.started * scale)
        .collect();
    let busiest = busiest_window(times, WINDOW_S);
    assert!(
        busiest <= RATE,
        "after a flush the provider saw {busiest} creates within {WINDOW_S} s; the rate allows {RATE}"
    );
}

#[test]
fn the_busiest_window_counts_creates_less_than_a_window_apart() {
    assert_eq!(busiest_window(vec![0.0, 0.5, 1.9, 2.0, 2.1], 2.0), 4);
    assert_eq!(busiest_window(vec![0.0, 2.0, 4.0], 2.0), 1);
    assert_eq!(busiest_window(Vec::new(), 2.0), 0);
}

/// The flush found by the scheduler's periodic reconciliation rather than by a grant: the
/// slot set is rebuilt and marked whole, and the create log with it, before anything is
/// granted again. One scheduler driven by hand (manual clock), so the reconciliation is due
/// at exactly the tick after the flush. Before the fix the pass marked the set whole on an
/// empty log and the tick granted a second window's worth of creates at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_found_by_the_periodic_reconciliation_keeps_the_rate() {
    use crate::support::Manual;
    use slotd_core::clock::Clock;

    const POOL: &str = "fixture";
    let db = crate::pg::PgSchema::create().await;
    let prefix = format!("slotd-test-flushrate-{}", uuid::Uuid::new_v4().simple());
    let m = Manual::start_with(10, 100, |c| {
        c.database_url = db.url();
        c.redis_url = Some(crate::scale_cluster::redis_url());
        c.redis_prefix = prefix.clone();
        if let Some(p) = c.pools.get_mut(POOL) {
            p.rate = slotd_core::config::parse_rate("3/1h").ok();
        }
    })
    .await;
    m.stub.hold_jobs(true);
    m.scheduler
        .take_lease(POOL)
        .await
        .expect("Redis answers")
        .expect("the free lease");
    m.submit("fixture", serde_json::json!({"count": 6, "polls": 1}))
        .await;
    let mut rounds = 0;
    while m.stub.stats().creates < 3 {
        m.round(&[POOL], 50).await;
        rounds += 1;
        assert!(rounds < 50, "three creates within the rate never went out");
    }
    m.round(&[POOL], 50).await;
    assert_eq!(m.stub.stats().creates, 3, "the rate holds before the flush");

    crate::scale_cluster::flush_prefix(&prefix).await;
    let every = m.services.config.scheduler.reconcile_interval;
    let step = i64::try_from(every.as_millis()).unwrap_or(1_000) + 1;
    // The scheduler ticks on before its lease loop notices the lease went with the flush (a
    // lease won anew restores the log by itself).
    for _ in 0..4 {
        m.clock.advance(step);
        let now = m.clock.now_ms();
        m.scheduler.run_once(POOL, now).await.expect("run_once");
    }
    assert_eq!(
        m.stub.stats().creates,
        3,
        "after the flush the rate of 3 an hour still holds"
    );
    m.stub.hold_jobs(false);
    m.check().await;
}

/// A daily quota per calendar day in a named zone (`tz = "Asia/Tokyo"`): the day's creates
/// are counted from Tokyo's midnight (15:00 UTC), not UTC's, and the units held by a full day
/// go at Tokyo's next midnight. Embedded store, manual clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daily_quota_in_a_named_zone_resets_at_that_zones_midnight() {
    use crate::support::Manual;
    use slotd_core::clock::Clock;

    const POOL: &str = "fixture";
    let m = Manual::start_with(10, 100, |c| {
        if let Some(p) = c.pools.get_mut(POOL) {
            p.daily = Some(slotd_core::config::Quota {
                limit: 2,
                window: slotd_core::config::calendar_day("Asia/Tokyo").expect("zone"),
            });
        }
    })
    .await;
    // 14:00 UTC on day 0: 23:00 in Tokyo.
    let tokyo_midnight = 15 * 3_600_000;
    m.clock
        .advance(tokyo_midnight - 3_600_000 - m.clock.now_ms());
    m.submit("fixture", serde_json::json!({"count": 4, "polls": 1}))
        .await;
    let mut rounds = 0;
    while m.stub.stats().creates < 2 {
        m.round(&[POOL], 50).await;
        rounds += 1;
        assert!(rounds < 50, "the day's two creates never went out");
    }
    // The rest of Tokyo's day (UTC's day goes on for hours after it): nothing more.
    while m.clock.now_ms() < tokyo_midnight - 60_000 {
        let step = (tokyo_midnight - 60_000 - m.clock.now_ms()).min(600_000);
        m.round(&[POOL], step).await;
    }
    assert_eq!(m.stub.stats().creates, 2, "two a day in Tokyo");
    // Past Tokyo's midnight (and the margin of a second): the next two go.
    m.clock.advance(tokyo_midnight + 2_000 - m.clock.now_ms());
    let mut rounds = 0;
    while m.stub.stats().creates < 4 {
        m.round(&[POOL], 50).await;
        rounds += 1;
        assert!(rounds < 50, "Tokyo's new day never let the next two go");
    }
    m.run_until(&[POOL], 200, async |m| {
        m.stub.stats().in_flight == 0
            && m.services
                .store
                .unit_count_by_pool()
                .await
                .is_ok_and(|c| c.iter().all(|c| c.status.is_terminal() || c.count == 0))
    })
    .await;
    m.check().await;
}
