//! Poll rounds: while a pool has a backlog, the time between a job's end and the poll that
//! notices it is what costs utilization. A round asks about every running unit of the pool
//! at once (handlers answer a round with one list request where the provider has one), and
//! the next round is due when the expected number of jobs that ended unnoticed since this one
//! reaches [`ROUND_THETA`]: `Σ (F(e + Δ) − F(e)) / (1 − F(e))` over the running units, `e`
//! each one's age and `F` its class's distribution ([`slotd_pools::pool_state::durations`]). So
//! rounds are sparse while every job is young and close together when many are near their
//! usual end, at about `1 / ROUND_THETA` rounds per completed job.

use std::collections::HashMap;
use std::sync::Arc;

use slotd_core::model::Unit;

use super::Decided;
use slotd_pools::pool_state::durations::{Distribution, Durations, class_of};

/// Expected unnoticed completions that make the next round due while a backlog waits: about
/// two rounds per completed job (with the create, three provider requests per job).
pub const ROUND_THETA: f64 = 0.5;

/// Put the ordinary polls of `decided` (one call over `units` of `pool`, while a backlog
/// waits) into one round: every polled unit gets the same `next_at`, so that the next call
/// asks about all of them at once (one list request where the provider has one). The round
/// is the one [`round_delay`] finds for the units whose class has a distribution (between
/// `floor` and `ceil` from now); units of a class with no distribution yet are looked at every
/// `prior` ms meanwhile, and a class seen to end fewer than `MIN_SAMPLES` times (its handler's
/// statement not yet borne out) by the time its youngest job's age has doubled, so the first
/// completions (which teach the distribution) are not noticed late. A round the pool already decided wins when it comes sooner, so that units
/// marked by other ticks meet in the same request; a call of new jobs alone plans no round for
/// the pool (it would be timed by young jobs only, and the pool's other polls wait for a
/// planned round: see [`planned_round`]). A unit with a floor (`not_before`: its
/// handler's hint, a new job's first poll) is never read before it: it keeps the later of the
/// round and its floor, so a provider with no list endpoint is read per job at its own pace.
pub fn schedule_round(
    durations: &Durations,
    pool: &str,
    units: &[&Unit],
    decided: &mut Decided,
    now: i64,
    (floor, prior, ceil): (i64, i64, i64),
) {
    if decided.polling.is_empty() {
        return;
    }
    let by_id: HashMap<&str, &Unit> = units.iter().map(|u| (u.id.as_str(), *u)).collect();
    let mut members = Vec::new();
    let mut running = Vec::new();
    let mut unknown = false;
    // Only new jobs (accepted this tick): their round is theirs, not the pool's.
    let mut only_new = true;
    // The youngest job of a class still learning: the round comes by the time it has lived
    // as long again.
    let mut explore: Option<i64> = None;
    for &i in &decided.polling {
        let Some(unit) = decided
            .updates
            .get(i)
            .and_then(|u| by_id.get(u.unit_id.as_str()))
        else {
            continue;
        };
        members.push(i);
        only_new &= unit.provider_job_id.is_none();
        let class = class_of(unit);
        let age = unit.submitted_at.map_or(0, |at| now.saturating_sub(at));
        if durations.learning(pool, &class) {
            explore = Some(explore.map_or(age, |e: i64| e.min(age)));
        }
        match durations.distribution(pool, &class) {
            Some(dist) => running.push((dist, age)),
            None => unknown = true,
        }
    }
    if members.is_empty() {
        return;
    }
    let prior = prior.clamp(floor, ceil.max(floor));
    let mut delay = if running.is_empty() {
        prior
    } else {
        round_delay(&running, ROUND_THETA, floor, ceil)
    };
    if unknown {
        delay = delay.min(prior);
    }
    // A class not yet seen to end enough times is looked at as its jobs' ages double,
    // whatever its handler stated: a statement too long would otherwise leave its first jobs
    // ending unseen, and teach slotd their durations late and too long.
    if let Some(age) = explore {
        delay = delay.min(age.max(floor));
    }
    let mut at = now.saturating_add(delay);
    {
        let mut rounds = durations.rounds.lock();
        if let Some(&planned_at) = rounds.get(pool)
            && planned_at > now
            && planned_at < at
        {
            at = planned_at;
        } else if !only_new {
            rounds.insert(pool.to_string(), at);
        }
    }
    for i in members {
        // A unit the provider's pace keeps from being read before a time joins the first
        // round after it, never an earlier one.
        let floor = decided.not_before.get(&i).copied().unwrap_or(at);
        if let Some(u) = decided.updates.get_mut(i) {
            u.next_at = Some(at.max(floor));
        }
    }
}

/// The pool's next round, if one is planned after `now`.
///
/// While it is, ordinary polls that come due before it (a unit whose own floor, such as a new
/// job's first read or a single query's pace, ended between two rounds) wait for it instead of
/// being read on their own: every round then reads every running unit past its floor, in one
/// list request where the provider has one, and the units do not drift apart into cohorts read
/// at different times (a tick read 3.7 of 20 running units on average before). A round that
/// has passed holds nothing back, so a pool whose round found nothing due reads each unit when
/// it is due until the next round is planned.
pub fn planned_round(durations: &Durations, pool: &str, now: i64) -> Option<i64> {
    durations
        .rounds
        .lock()
        .get(pool)
        .copied()
        .filter(|&at| at > now)
}

/// Whether a due unit is an ordinary poll, which waits for its pool's round: a `submitted`
/// unit with its job id recorded and no cancel asked for. A unit in doubt (no job id: its
/// lookup), a cancel, and every other status go at once.
pub fn waits_for_round(unit: &Unit) -> bool {
    unit.status == slotd_core::model::UnitStatus::Submitted
        && unit.provider_job_id.is_some()
        && unit.cancel_requested_at.is_none()
}

/// Move the floors of `decided` (and the polls they hold back) by `lag`, the time the call
/// took: poll delays count from the handler's answer, not from the tick's start, because a
/// provider's "not before" is measured from its own answer. One millisecond more rounds up.
pub fn floors_from_answer(decided: &mut Decided, lag: i64) {
    for (&i, at) in decided.not_before.iter_mut() {
        *at = at.saturating_add(lag).saturating_add(1);
        if let Some(u) = decided.updates.get_mut(i) {
            u.next_at = u.next_at.map(|n| n.max(*at));
        }
    }
}

/// When the next round is due for running units of the given distributions and ages (ms):
/// the smallest delay in `[floor, ceil]` at which the expected number of them ending reaches
/// `theta`, or `ceil` if it never does.
pub fn round_delay(running: &[(Arc<Distribution>, i64)], theta: f64, floor: i64, ceil: i64) -> i64 {
    let ceil = ceil.max(floor);
    let expected = |delta: i64| -> f64 {
        running
            .iter()
            .map(|(d, age)| d.ends_within(*age, delta))
            .sum()
    };
    if running.is_empty() || expected(ceil) < theta {
        return ceil;
    }
    if expected(floor) >= theta {
        return floor;
    }
    let (mut lo, mut hi) = (floor, ceil);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if expected(mid) >= theta {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uniform(lo: i64, hi: i64, n: i64) -> Arc<Distribution> {
        Arc::new(
            Distribution::new((0..n).map(|i| lo + (hi - lo) * i / (n - 1)).collect())
                .expect("samples"),
        )
    }

    #[test]
    fn young_jobs_are_not_worth_a_round() {
        let d = uniform(30_000, 120_000, 50);
        // Twenty jobs just started: none can end within the next 20 s.
        let running: Vec<_> = (0..20).map(|_| (d.clone(), 0)).collect();
        assert_eq!(d.ends_within(0, 20_000), 0.0);
        let delay = round_delay(&running, ROUND_THETA, 200, 60_000);
        assert!(
            delay > 30_000,
            "first round after the shortest job: {delay}"
        );
    }

    #[test]
    fn rounds_close_in_as_many_jobs_near_their_end() {
        let d = uniform(30_000, 120_000, 50);
        // Twenty jobs spread over their run (ages 30 s to 106 s): together they end at about
        // Σ 1/(120 s − age) ≈ 0.5 per second, so θ = 0.5 is about a second away.
        let running: Vec<_> = (0..20).map(|i| (d.clone(), 30_000 + i * 4_000)).collect();
        let delay = round_delay(&running, ROUND_THETA, 200, 60_000);
        assert!((500..2_000).contains(&delay), "{delay}");
        // One job alone waits about ten times as long as twenty.
        let one = round_delay(&running[..1], ROUND_THETA, 200, 60_000);
        assert!(one > 5 * delay, "{one} vs {delay}");
    }

    #[test]
    fn tail_jobs_are_still_polled() {
        let d = uniform(30_000, 120_000, 50);
        assert!(d.ends_within(500_000, 10_000) > 0.0);
        let delay = round_delay(&[(d, 500_000)], ROUND_THETA, 200, 600_000);
        assert!(delay < 600_000);
    }

    #[test]
    fn classes_name_model_mode_and_duration() {
        let mut u = crate::test_units::unit("u1", Some("j1"), "generate");
        u.task_type = "video".into();
        u.spec = r#"{"model_name":"kling-v1-6","mode":"pro","duration":"10","prompt":"x"}"#.into();
        assert_eq!(class_of(&u), "video/generate/kling-v1-6/pro/10");
        u.spec = "not json".into();
        assert_eq!(class_of(&u), "video/generate");
    }

    /// A decided batch of "still running" polls for `units` (all of pool p1).
    fn polls(units: &[&Unit], now: i64) -> Decided {
        let mut decided = Decided::default();
        for u in units {
            decided.polling.push(decided.updates.len());
            decided.updates.push(slotd_store::UnitUpdate {
                unit_id: u.id.clone(),
                from: Some(slotd_core::model::UnitStatus::Submitted),
                to: Some(slotd_core::model::UnitStatus::Submitted),
                next_at: Some(now + 5_000 + decided.updates.len() as i64 * 1_000),
                ..Default::default()
            });
        }
        decided
    }

    #[test]
    fn polls_meet_in_one_round() {
        let d = Durations::default();
        let mut a = crate::test_units::unit("a", Some("ja"), "s");
        let mut b = crate::test_units::unit("b", Some("jb"), "s");
        // Not learned yet: every poll goes to the same round, `prior` away.
        let now = 100_000;
        let mut decided = polls(&[&a, &b], now);
        schedule_round(&d, "p1", &[&a, &b], &mut decided, now, (200, 5_000, 30_000));
        let at: Vec<_> = decided.updates.iter().map(|u| u.next_at).collect();
        assert_eq!(at, vec![Some(now + 5_000), Some(now + 5_000)]);
        // Learned (jobs take 30-40 s): jobs 35 s old are near their end, so the round is
        // sooner than the prior; a job just started alone would wait longer.
        for ms in [30_000, 32_000, 34_000, 36_000, 38_000, 40_000] {
            d.observe("p1", &class_of(&a), ms);
        }
        a.submitted_at = Some(now - 35_000);
        b.submitted_at = Some(now - 35_000);
        let mut decided = polls(&[&a, &b], now);
        schedule_round(
            &d,
            "p1",
            &[&a, &b],
            &mut decided,
            now + 1,
            (200, 5_000, 30_000),
        );
        let first = decided.updates[0].next_at.expect("timed");
        assert!(first < now + 5_000, "{first}");
        assert!(decided.updates.iter().all(|u| u.next_at == Some(first)));
        // A young unit polled by another tick joins the round already decided.
        let mut c = crate::test_units::unit("c", Some("jc"), "s");
        c.submitted_at = Some(now);
        let mut decided = polls(&[&c], now);
        schedule_round(&d, "p1", &[&c], &mut decided, now + 2, (200, 5_000, 30_000));
        assert_eq!(decided.updates[0].next_at, Some(first));
    }
    #[test]
    fn a_statement_not_yet_borne_out_is_explored_as_ages_double() {
        let d = Durations::default();
        let mut a = crate::test_units::unit("a", Some("ja"), "s");
        let now = 100_000;
        a.submitted_at = Some(now - 2_000);
        // The handler states jobs of 5 to 10 minutes; this one is 2 s old.
        d.state("p1", &class_of(&a), 300_000, 600_000);
        let mut decided = polls(&[&a], now);
        schedule_round(&d, "p1", &[&a], &mut decided, now, (200, 5_000, 30_000));
        assert_eq!(
            decided.updates[0].next_at,
            Some(now + 2_000),
            "looked at when its age has doubled, not when the statement says"
        );
        // Once enough of its jobs were seen to end, the distribution decides alone.
        for _ in 0..slotd_pools::pool_state::durations::MIN_SAMPLES {
            d.observe("p1", &class_of(&a), 300_000);
        }
        d.rounds.lock().clear();
        let mut decided = polls(&[&a], now);
        schedule_round(&d, "p1", &[&a], &mut decided, now, (200, 5_000, 30_000));
        assert_eq!(decided.updates[0].next_at, Some(now + 30_000));
    }

    #[test]
    fn new_jobs_alone_plan_no_round_for_the_pool() {
        let d = Durations::default();
        let now = 100_000;
        // Units accepted this tick: no job id before it.
        let a = crate::test_units::unit("a", None, "s");
        let mut decided = polls(&[&a], now);
        schedule_round(&d, "p1", &[&a], &mut decided, now, (200, 5_000, 30_000));
        assert_eq!(decided.updates[0].next_at, Some(now + 5_000));
        assert_eq!(
            planned_round(&d, "p1", now),
            None,
            "the pool's polls are not held"
        );
        // A running job's read plans it; new jobs then join it.
        let b = crate::test_units::unit("b", Some("jb"), "s");
        let mut decided = polls(&[&b], now);
        schedule_round(&d, "p1", &[&b], &mut decided, now, (200, 5_000, 30_000));
        assert_eq!(planned_round(&d, "p1", now), Some(now + 5_000));
        let mut decided = polls(&[&a], now + 1_000);
        schedule_round(
            &d,
            "p1",
            &[&a],
            &mut decided,
            now + 1_000,
            (200, 5_000, 30_000),
        );
        assert_eq!(decided.updates[0].next_at, Some(now + 5_000));
        assert_eq!(
            planned_round(&d, "p1", now + 5_000),
            None,
            "a round past holds nothing"
        );
    }

    #[test]
    fn a_round_never_brings_a_paced_read_forward() {
        let d = Durations::default();
        let a = crate::test_units::unit("a", Some("ja"), "s");
        let b = crate::test_units::unit("b", Some("jb"), "s");
        let now = 100_000;
        let mut decided = polls(&[&a, &b], now);
        // `b`'s provider may not be asked about it for 8 s (its handler's hint).
        decided.not_before.insert(1, now + 8_000);
        schedule_round(&d, "p1", &[&a, &b], &mut decided, now, (200, 5_000, 30_000));
        assert_eq!(decided.updates[0].next_at, Some(now + 5_000));
        assert_eq!(decided.updates[1].next_at, Some(now + 8_000));
    }
}
