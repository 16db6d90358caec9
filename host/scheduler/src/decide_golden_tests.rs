//! Every field of the update each outcome plans, compared whole: a field dropped or changed
//! in `update_for`, `base` or `cancel_unsent` shows here (mutation testing found that the
//! outcome tests, which look at a few fields each, let such changes through).

use std::time::Duration;

use super::tests::{ch, info};
use super::*;
use crate::test_units::unit;
use slotd_core::model::ProviderError;

const NOW: i64 = 1_000_000;

fn err(code: &str) -> ProviderError {
    ProviderError {
        code: Some(code.into()),
        message: "m".into(),
    }
}

/// The one update `decide_updates` makes of `change` (with state and cost) for `unit`.
fn plan_one(cfg: &SchedulerConfig, unit: &Unit, outcome: Outcome) -> UnitUpdate {
    let mut c = ch(&unit.id, outcome);
    c.state = Some(r#"{"s":1}"#.into());
    c.cost = Some("0.5".into());
    let p = decide_updates(cfg, &info(), &[unit], vec![c], NOW);
    assert!(p.refused.is_empty(), "{:?}", p.refused);
    assert_eq!(p.updates.len(), 1);
    p.updates.into_iter().next().expect("one update")
}

/// What every update of a change to `u1` (submitted, in `stage`) starts from. An update that
/// takes the unit out of `submitted` also carries `unless_cancel_requested` (the cancel rule).
fn base_of(stage: &str) -> UnitUpdate {
    UnitUpdate {
        unit_id: "u1".into(),
        from: Some(UnitStatus::Submitted),
        from_stage: Some(stage.into()),
        state: Some(r#"{"s":1}"#.into()),
        cost: Some("0.5".into()),
        ..UnitUpdate::default()
    }
}

fn same(got: &UnitUpdate, want: &UnitUpdate) {
    assert_eq!(format!("{got:#?}"), format!("{want:#?}"));
}

#[test]
fn each_outcome_plans_the_whole_update() {
    let cfg = SchedulerConfig::default();
    let mut polled = unit("u1", Some("j1"), "a");
    polled.polls = 2;
    polled.attempts = 1;
    let fresh = unit("u1", None, "a");

    same(
        &plan_one(
            &cfg,
            &fresh,
            Outcome::Accepted {
                job_id: "j1".into(),
            },
        ),
        &UnitUpdate {
            to: Some(UnitStatus::Submitted),
            detail: Some("accepted as provider job j1".into()),
            provider_job_id: Field::Set("j1".into()),
            polls: Some(0),
            error: Field::Clear,
            next_at: Some(NOW + 5_000),
            ..base_of("a")
        },
    );
    // A repeat of the job already recorded: nothing but the state and cost.
    same(
        &plan_one(
            &cfg,
            &polled,
            Outcome::Accepted {
                job_id: "j1".into(),
            },
        ),
        &UnitUpdate {
            to: Some(UnitStatus::Submitted),
            ..base_of("a")
        },
    );
    same(
        &plan_one(&cfg, &polled, Outcome::Running { after_ms: None }),
        &UnitUpdate {
            to: Some(UnitStatus::Submitted),
            polls: Some(3),
            next_at: Some(NOW + poll_delay_ms(&cfg, 3, None)),
            ..base_of("a")
        },
    );
    let last = {
        let mut u = polled.clone();
        u.stage = "b".into();
        u
    };
    same(
        &plan_one(
            &cfg,
            &last,
            Outcome::Succeeded {
                result: "{}".into(),
            },
        ),
        &UnitUpdate {
            to: Some(UnitStatus::Succeeded),
            unless_cancel_requested: true,
            result: Some("{}".into()),
            error: Field::Clear,
            attempts: Some(0),
            submitted_at: Field::Clear,
            next_at: Some(NOW),
            detail: Some("provider job succeeded".into()),
            ..base_of("b")
        },
    );
    same(
        &plan_one(&cfg, &polled, Outcome::NextStage { stage: "b".into() }),
        &UnitUpdate {
            to: Some(UnitStatus::Pending),
            unless_cancel_requested: true,
            detail: Some("stage a succeeded; next stage b".into()),
            stage: Some("b".into()),
            pool: Some("p2".into()),
            provider_job_id: Field::Clear,
            polls: Some(0),
            attempts: Some(0),
            error: Field::Clear,
            submitted_at: Field::Clear,
            next_at: Some(NOW),
            ..base_of("a")
        },
    );
    same(
        &plan_one(
            &cfg,
            &fresh,
            Outcome::CapacityRejected {
                after_ms: Some(7_000),
            },
        ),
        &UnitUpdate {
            to: Some(UnitStatus::Pending),
            unless_cancel_requested: true,
            submitted_at: Field::Clear,
            // The provider's 7 s and up to a quarter more, drawn from the unit.
            next_at: Some(
                NOW + crate::policy::capacity_delay_ms(&cfg, Some(7_000), &fresh.id, NOW),
            ),
            detail: Some("provider over capacity; back to pending".into()),
            ..base_of("a")
        },
    );
    same(
        &plan_one(
            &cfg,
            &polled,
            Outcome::RetryAfter {
                after_ms: Some(3_000),
                error: err(TIMEOUT_CODE),
            },
        ),
        &UnitUpdate {
            to: Some(UnitStatus::Submitted),
            next_at: Some(NOW + retry_delay_ms(&cfg, 2, Some(3_000))),
            detail: Some("provider did not answer in time; retried, no retry budget spent".into()),
            error: Field::Set(r#"{"code":"timeout","message":"m"}"#.into()),
            ..base_of("a")
        },
    );
    // A read of a job the provider holds: no retry budget, however many came before; the
    // reads back off along the poll schedule.
    let read_again = UnitUpdate {
        to: Some(UnitStatus::Submitted),
        polls: Some(3),
        next_at: Some(NOW + retry_delay_ms(&cfg, 1, None).max(poll_delay_ms(&cfg, 3, None))),
        detail: Some(
            "transient error reading provider job j1; read again later, no retry budget spent"
                .into(),
        ),
        error: Field::Set(r#"{"code":"500","message":"m"}"#.into()),
        ..base_of("a")
    };
    let polled_spent = {
        let mut u = polled.clone();
        u.attempts = cfg.retry_budget;
        u
    };
    for u in [&polled, &polled_spent] {
        same(
            &plan_one(
                &cfg,
                u,
                Outcome::RetryAfter {
                    after_ms: None,
                    error: err("500"),
                },
            ),
            &read_again,
        );
    }
    // A submit (no job recorded: in doubt) spends the budget, and fails once it is spent.
    let mut submitting = fresh.clone();
    submitting.attempts = 1;
    same(
        &plan_one(
            &cfg,
            &submitting,
            Outcome::RetryAfter {
                after_ms: None,
                error: err("500"),
            },
        ),
        &UnitUpdate {
            to: Some(UnitStatus::Submitted),
            attempts: Some(2),
            next_at: Some(NOW + retry_delay_ms(&cfg, 2, None)),
            detail: Some(format!("transient error, retry 2/{}", cfg.retry_budget)),
            error: Field::Set(r#"{"code":"500","message":"m"}"#.into()),
            ..base_of("a")
        },
    );
    let spent = {
        let mut u = fresh.clone();
        u.attempts = cfg.retry_budget;
        u
    };
    same(
        &plan_one(
            &cfg,
            &spent,
            Outcome::RetryAfter {
                after_ms: None,
                error: err("500"),
            },
        ),
        &UnitUpdate {
            to: Some(UnitStatus::Failed),
            unless_cancel_requested: true,
            attempts: Some(cfg.retry_budget + 1),
            detail: Some(format!("retry budget of {} spent", cfg.retry_budget)),
            error: Field::Set(r#"{"code":"500","message":"m"}"#.into()),
            ..base_of("a")
        },
    );
    same(
        &plan_one(&cfg, &polled, Outcome::Fail { error: err("1301") }),
        &UnitUpdate {
            to: Some(UnitStatus::Failed),
            unless_cancel_requested: true,
            detail: Some("provider job failed".into()),
            error: Field::Set(r#"{"code":"1301","message":"m"}"#.into()),
            ..base_of("a")
        },
    );
}

/// With callbacks on, polls are only the safety net: never sooner than
/// `callback_safety_poll`, whatever the handler hints.
#[test]
fn with_callbacks_polls_wait_for_the_safety_net() {
    let cfg = SchedulerConfig {
        callback_safety_poll: Some(Duration::from_secs(60)),
        poll_max: Duration::from_secs(120),
        ..SchedulerConfig::default()
    };
    let fresh = unit("u1", None, "a");
    let accepted = plan_one(&cfg, &fresh, Outcome::Accepted { job_id: "j".into() });
    assert_eq!(accepted.next_at, Some(NOW + 60_000));
    let running = plan_one(
        &cfg,
        &unit("u1", Some("j"), "a"),
        Outcome::Running {
            after_ms: Some(1_000),
        },
    );
    assert_eq!(running.next_at, Some(NOW + 60_000));
    // A hint past the safety net is kept.
    let later = plan_one(
        &cfg,
        &unit("u1", Some("j"), "a"),
        Outcome::Running {
            after_ms: Some(90_000),
        },
    );
    assert_eq!(later.next_at, Some(NOW + 90_000));
}

#[test]
fn in_doubt_cancelled_units_end_without_a_lookup() {
    let mut u = unit("u1", None, "a");
    u.cancel_requested_at = Some(5);
    let decided = cancel_unsent(std::slice::from_ref(&u));
    assert_eq!(decided.len(), 1);
    same(
        &decided[0],
        &UnitUpdate {
            unit_id: "u1".into(),
            from: Some(UnitStatus::Submitted),
            from_stage: Some("a".into()),
            to: Some(UnitStatus::Cancelled),
            submitted_at: Field::Clear,
            detail: Some(
                "cancelled by client: no provider job was recorded for the submission; \
                 not looked up again, since that would submit it; slot released"
                    .into(),
            ),
            ..UnitUpdate::default()
        },
    );
}

/// A fault's updates, whole: the single unit that faults alone spends a retry (failed only
/// past the budget, not at it); a larger call and a slow provider charge nobody and wait the
/// slow-provider backoff.
#[test]
fn fault_updates_are_whole() {
    let cfg = SchedulerConfig::default();
    let trap = HandlerFault::Trap("boom".into());
    let error =
        Field::Set(r#"{"code":"handler_trap","message":"handler fault: trap: boom"}"#.into());
    let base = |stage: &str| UnitUpdate {
        unit_id: "u1".into(),
        from: Some(UnitStatus::Submitted),
        from_stage: Some(stage.into()),
        to: Some(UnitStatus::Submitted),
        error: error.clone(),
        detail: Some("handler fault: trap: boom".into()),
        ..UnitUpdate::default()
    };
    // A submit (no job recorded) is charged; a unit whose job runs is not (below).
    let mut u = unit("u1", None, "a");
    u.submitted_at = Some(NOW - 400_000);
    u.attempts = cfg.retry_budget - 1;
    same(
        &fault_updates(&cfg, &[&u], &trap, NOW)[0],
        &UnitUpdate {
            attempts: Some(cfg.retry_budget),
            next_at: Some(NOW + retry_delay_ms(&cfg, cfg.retry_budget, None)),
            ..base("a")
        },
    );
    u.attempts = cfg.retry_budget;
    same(
        &fault_updates(&cfg, &[&u], &trap, NOW)[0],
        &UnitUpdate {
            attempts: Some(cfg.retry_budget + 1),
            to: Some(UnitStatus::Failed),
            unless_cancel_requested: true,
            detail: Some(format!(
                "handler fault: trap: boom; retry budget of {} spent",
                cfg.retry_budget
            )),
            ..base("a")
        },
    );
    // Two units in the call: neither is charged; both wait a tenth of their wait so far.
    let other = unit("u2", None, "a");
    let both = fault_updates(&cfg, &[&u, &other], &trap, NOW);
    same(
        &both[0],
        &UnitUpdate {
            next_at: Some(NOW + 40_000),
            ..base("a")
        },
    );
    assert_eq!(both[1].unit_id, "u2");
    assert_eq!(both[1].attempts, None);
    // Nor a single unit whose provider job runs, whatever it spent before.
    let mut running = u.clone();
    running.provider_job_id = Some("j".into());
    same(
        &fault_updates(&cfg, &[&running], &trap, NOW)[0],
        &UnitUpdate {
            next_at: Some(NOW + 40_000),
            ..base("a")
        },
    );
    // A slow provider charges even a single unit nothing.
    let slow = HandlerFault::ProviderDeadline(Duration::from_secs(30));
    let decided = &fault_updates(&cfg, &[&u], &slow, NOW)[0];
    assert_eq!(
        (decided.attempts, decided.next_at),
        (None, Some(NOW + 40_000))
    );
}

#[test]
fn a_stage_deadline_fails_the_unit_whole() {
    let cfg = SchedulerConfig::default();
    let deadline = i64::try_from(cfg.stage_deadline.as_millis()).expect("ms");
    // In doubt (no job recorded) and late: failed. On time, or late with a job the provider
    // holds (cancelled at the provider or read to its end, never failed while it runs): kept.
    let mut late = unit("u1", None, "a");
    late.submitted_at = Some(NOW - deadline);
    let mut on_time = unit("u2", Some("j"), "a");
    on_time.submitted_at = Some(NOW - deadline + 1);
    let mut late_job = unit("u3", Some("j3"), "a");
    late_job.submitted_at = Some(NOW - deadline);
    let (kept, failed) = expire_stage_deadline(&cfg, vec![late, on_time, late_job], |u| u, NOW);
    let kept: Vec<&str> = kept.iter().map(|u| u.id.as_str()).collect();
    assert_eq!(kept, ["u2", "u3"]);
    assert_eq!(failed.len(), 1);
    let message = "stage a had no result within scheduler.stage_deadline of 2h";
    same(
        &failed[0],
        &UnitUpdate {
            unit_id: "u1".into(),
            from: Some(UnitStatus::Submitted),
            from_stage: Some("a".into()),
            to: Some(UnitStatus::Failed),
            unless_cancel_requested: true,
            error: Field::Set(format!(
                r#"{{"code":"stage_deadline","message":"{message}"}}"#
            )),
            detail: Some(message.into()),
            ..UnitUpdate::default()
        },
    );
}
