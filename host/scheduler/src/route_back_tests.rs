//! Failover of routed units as [`decide_updates`] applies it (`route_back.rs`): a refusal
//! before the target accepted the job sends the unit back to its route, one in doubt stays.

use super::tests::{ch, info};
use super::{decide_updates, decide_updates_in};
use crate::test_units::unit;
use slotd_core::config::SchedulerConfig;
use slotd_core::model::{Outcome, ProviderError, RouteOption, TargetUnit, UnitRouting, UnitStatus};
use std::collections::HashSet;

fn option(handler: &str) -> RouteOption {
    RouteOption {
        handler: handler.into(),
        model: "m".into(),
        plan: Some(TargetUnit {
            task_type: "t".into(),
            stage: "a".into(),
            pool: format!("{handler}:pool"),
            spec: "{}".into(),
            state: "{}".into(),
            estimate: None,
            expected_ms: None,
        }),
        refused: None,
    }
}

/// A unit of route `clip` bound to its first of `n` targets, freshly submitted.
fn routed(n: usize) -> slotd_core::model::Unit {
    let mut u = unit("u1", None, "a");
    u.routing = Some(
        UnitRouting {
            route: "clip".into(),
            options: (0..n).map(|i| option(&format!("h{i}"))).collect(),
            bound: Some(0),
        }
        .to_json(),
    );
    u
}

fn err(code: &str) -> ProviderError {
    ProviderError {
        code: Some(code.into()),
        message: "no".into(),
    }
}

#[test]
fn refusals_before_acceptance_send_the_unit_back_to_its_route() {
    let cfg = SchedulerConfig::default();
    let u = routed(2);
    for outcome in [
        Outcome::CapacityRejected { after_ms: None },
        Outcome::RetryAfter {
            after_ms: None,
            error: err("account_exhausted"),
        },
        Outcome::RetryAfter {
            after_ms: None,
            error: err("quota_exhausted"),
        },
        Outcome::RetryAfter {
            after_ms: None,
            error: err("not_created"),
        },
        Outcome::Fail {
            error: err("invalid_duration"),
        },
    ] {
        let d = decide_updates(&cfg, &info(), &[&u], vec![ch("u1", outcome.clone())], 100);
        let up = &d.updates[0];
        assert_eq!(up.to, Some(UnitStatus::Pending), "{outcome:?}");
        assert_eq!(up.pool.as_deref(), Some("route:clip"));
        assert_eq!(up.task_type.as_deref(), Some("clip"));
        assert_eq!(up.stage.as_deref(), Some("route"));
        let r = UnitRouting::parse(up.routing.as_deref().unwrap_or("")).expect("routing");
        assert_eq!(r.bound, None);
        let refused = r.options[0].refused.as_ref().expect("refusal recorded");
        // A permanent refusal leaves the target out for good; the others for a while.
        assert_eq!(
            refused.until.is_none(),
            matches!(outcome, Outcome::Fail { .. }),
            "{outcome:?}"
        );
        assert!(
            up.detail
                .as_deref()
                .unwrap_or("")
                .contains("h0/m refused it")
        );
    }
}

#[test]
fn a_unit_whose_job_may_exist_stays_bound() {
    let cfg = SchedulerConfig::default();
    let u = routed(2);
    // A lost answer: a timeout keeps it submitted, in doubt.
    let timeout = Outcome::RetryAfter {
        after_ms: None,
        error: err("timeout"),
    };
    let d = decide_updates(&cfg, &info(), &[&u], vec![ch("u1", timeout)], 100);
    assert_eq!(d.updates[0].to, Some(UnitStatus::Submitted));
    assert!(d.updates[0].routing.is_none() && d.updates[0].pool.is_none());
    // In doubt, even a refusal of the account keeps it on this target.
    let in_doubt: HashSet<&str> = ["u1"].into_iter().collect();
    let exhausted = Outcome::RetryAfter {
        after_ms: None,
        error: err("account_exhausted"),
    };
    let d = decide_updates_in(
        &cfg,
        &info(),
        &[&u],
        &in_doubt,
        vec![ch("u1", exhausted)],
        100,
    );
    assert!(d.updates[0].routing.is_none());
    // A failure in doubt (fal's `submission_unknown`) fails it; it never fails over.
    let unknown = Outcome::Fail {
        error: err("submission_unknown"),
    };
    let d = decide_updates_in(
        &cfg,
        &info(),
        &[&u],
        &in_doubt,
        vec![ch("u1", unknown)],
        100,
    );
    assert_eq!(d.updates[0].to, Some(UnitStatus::Failed));
    assert!(d.updates[0].routing.is_none());
    // With a job id, a failure is the job's.
    let mut with_job = routed(2);
    with_job.provider_job_id = Some("j".into());
    let failed = Outcome::Fail { error: err("x") };
    let d = decide_updates(&cfg, &info(), &[&with_job], vec![ch("u1", failed)], 100);
    assert_eq!(d.updates[0].to, Some(UnitStatus::Failed));
    assert!(d.updates[0].routing.is_none());
}

#[test]
fn the_last_target_refusing_for_good_fails_the_unit() {
    let cfg = SchedulerConfig::default();
    let u = routed(1);
    let failed = Outcome::Fail {
        error: err("invalid_duration"),
    };
    let d = decide_updates(&cfg, &info(), &[&u], vec![ch("u1", failed)], 100);
    let up = &d.updates[0];
    assert_eq!(up.to, Some(UnitStatus::Failed));
    assert!(
        up.detail
            .as_deref()
            .unwrap_or("")
            .contains("no target is left")
    );
    // On its route, so a retry routes it again (every target gets it once more).
    assert_eq!(up.pool.as_deref(), Some("route:clip"));
    // A refusal for a while with no other target: back on the route until it is over.
    let busy = Outcome::CapacityRejected {
        after_ms: Some(5_000),
    };
    let d = decide_updates(&cfg, &info(), &[&u], vec![ch("u1", busy)], 100);
    assert_eq!(d.updates[0].to, Some(UnitStatus::Pending));
    assert!(d.updates[0].next_at.unwrap_or(0) > 100);
}

#[test]
fn not_created_without_a_route_goes_back_to_pending_after_the_backoff() {
    let cfg = SchedulerConfig::default();
    let u = unit("u1", None, "a");
    let nc = Outcome::RetryAfter {
        after_ms: Some(1_000),
        error: err("not_created"),
    };
    let d = decide_updates(&cfg, &info(), &[&u], vec![ch("u1", nc)], 100);
    let up = &d.updates[0];
    assert_eq!(up.to, Some(UnitStatus::Pending));
    assert_eq!(up.attempts, Some(1));
    assert!(up.next_at.unwrap_or(0) >= 1_100);
    assert!(up.pool.is_none(), "stays in its pool");
}

/// A create the provider refused for its pace (`rate_limited`) goes back to pending for the
/// provider's delay and spends no retry, however many came before: a rate limit that lasts
/// fails nothing. A `not_created` beside it still spends one.
#[test]
fn a_rate_limited_create_spends_no_retry() {
    let cfg = SchedulerConfig::default();
    let mut u = unit("u1", None, "a");
    u.attempts = cfg.retry_budget;
    let limited = Outcome::RetryAfter {
        after_ms: Some(7_000),
        error: err("rate_limited"),
    };
    let d = decide_updates(&cfg, &info(), &[&u], vec![ch("u1", limited)], 100);
    let up = &d.updates[0];
    assert_eq!(up.to, Some(UnitStatus::Pending));
    assert_eq!(up.attempts, None, "no retry spent");
    assert_eq!(up.next_at, Some(7_100), "the provider's delay");
    let nc = Outcome::RetryAfter {
        after_ms: Some(7_000),
        error: err("not_created"),
    };
    let d = decide_updates(&cfg, &info(), &[&u], vec![ch("u1", nc)], 100);
    assert_eq!(
        d.updates[0].to,
        Some(UnitStatus::Failed),
        "the budget was spent"
    );
}
