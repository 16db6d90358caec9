//! Deciding updates from handler changes: outcomes, budgets, faults, cancels, deadlines.

use super::*;
use crate::test_units::unit;
use slotd_runtime::{StageInfo, TaskTypeInfo};

pub(crate) fn info() -> HandlerInfo {
    HandlerInfo {
        name: "h".into(),
        version: "1".into(),
        task_types: vec![TaskTypeInfo {
            name: "t".into(),
            stages: vec![
                StageInfo {
                    name: "a".into(),
                    pool: "p1".into(),
                    alt_pools: Vec::new(),
                },
                StageInfo {
                    name: "b".into(),
                    pool: "p2".into(),
                    alt_pools: Vec::new(),
                },
            ],
        }],
        pools: vec![],
    }
}

pub(crate) fn ch(id: &str, outcome: Outcome) -> Change {
    Change {
        provider_queue: None,
        unit_id: id.into(),
        outcome,
        state: None,
        cost: None,
    }
}

#[test]
fn next_stage_moves_pool_and_clears_job() {
    let cfg = SchedulerConfig::default();
    let u = unit("u1", Some("j"), "a");
    let p = decide_updates(
        &cfg,
        &info(),
        &[&u],
        vec![ch("u1", Outcome::NextStage { stage: "b".into() })],
        100,
    );
    assert!(p.refused.is_empty());
    let up = &p.updates[0];
    assert_eq!(up.to, Some(UnitStatus::Pending));
    assert_eq!(up.pool.as_deref(), Some("p2"));
    assert_eq!(up.provider_job_id, Field::Clear);
}

#[test]
fn illegal_duplicate_and_foreign_changes_are_refused() {
    let cfg = SchedulerConfig::default();
    let u = unit("u1", Some("j"), "a");
    let p = decide_updates(
        &cfg,
        &info(),
        &[&u],
        vec![
            ch(
                "u1",
                Outcome::NextStage {
                    stage: "zzz".into(),
                },
            ),
            ch("u1", Outcome::Running { after_ms: None }),
            ch("u9", Outcome::Running { after_ms: None }),
        ],
        0,
    );
    // The first is illegal, the second a duplicate (one change per unit), u9 is foreign.
    assert_eq!(p.refused.len(), 3, "{:?}", p.refused);
    assert!(p.updates.is_empty());
    assert!(p.refused[1].reason.contains("more than one change"));
}

#[test]
fn retries_spend_the_budget_then_fail() {
    let cfg = SchedulerConfig {
        retry_budget: 1,
        ..SchedulerConfig::default()
    };
    let mut u = unit("u1", None, "b");
    let err = ProviderError {
        code: Some("5000".into()),
        message: "boom".into(),
    };
    let retry = || {
        ch(
            "u1",
            Outcome::RetryAfter {
                after_ms: None,
                error: err.clone(),
            },
        )
    };
    let p = decide_updates(&cfg, &info(), &[&u], vec![retry()], 0);
    assert_eq!(p.updates[0].to, Some(UnitStatus::Submitted));
    u.attempts = 1;
    let p = decide_updates(&cfg, &info(), &[&u], vec![retry()], 0);
    assert_eq!(p.updates[0].to, Some(UnitStatus::Failed));
}

/// A provider that does not answer in time never spends the retry budget: the unit stays
/// submitted however often it happens (the stage deadline bounds it); other transient
/// errors still do.
#[test]
fn timeouts_spend_no_retry_budget() {
    let cfg = SchedulerConfig {
        retry_budget: 1,
        ..SchedulerConfig::default()
    };
    let mut u = unit("u1", Some("job"), "b");
    u.attempts = 5;
    let timeout = ch(
        "u1",
        Outcome::RetryAfter {
            after_ms: None,
            error: ProviderError {
                code: Some(TIMEOUT_CODE.into()),
                message: "request timed out".into(),
            },
        },
    );
    let p = decide_updates(&cfg, &info(), &[&u], vec![timeout], 0);
    assert_eq!(p.updates[0].to, Some(UnitStatus::Submitted));
    assert_eq!(p.updates[0].attempts, None, "no attempt counted");
    assert!(p.updates[0].next_at.is_some_and(|t| t > 0));
}

/// A cancel-requested unit leaves `submitted` only as `cancelled`, with the provider's
/// result kept for the record; polls keep it submitted; units nobody cancelled get the
/// guard that refuses their update if a cancel lands meanwhile.
#[test]
fn cancel_requested_units_end_cancelled() {
    let cfg = SchedulerConfig::default();
    let requested = |job: Option<&str>, stage: &str| {
        let mut u = unit("u1", job, stage);
        u.cancel_requested_at = Some(5);
        u
    };
    let err = ProviderError {
        code: Some("1301".into()),
        message: "bad".into(),
    };
    for (u, outcome) in [
        (
            requested(Some("j"), "b"),
            Outcome::Succeeded {
                result: r#"{"url":"https://x"}"#.into(),
            },
        ),
        (
            requested(Some("j"), "a"),
            Outcome::Fail { error: err.clone() },
        ),
        (
            requested(None, "a"),
            Outcome::CapacityRejected { after_ms: None },
        ),
        (
            requested(Some("j"), "a"),
            Outcome::NextStage { stage: "b".into() },
        ),
    ] {
        let p = decide_updates(&cfg, &info(), &[&u], vec![ch("u1", outcome)], 100);
        assert!(p.refused.is_empty(), "{:?}", p.refused);
        let up = &p.updates[0];
        assert_eq!(up.to, Some(UnitStatus::Cancelled), "{up:?}");
        assert_eq!((up.stage.as_ref(), up.pool.as_ref()), (None, None));
        assert_eq!(
            up.provider_job_id,
            Field::Keep,
            "the job id stays for the record"
        );
        assert!(!up.unless_cancel_requested);
    }
    let mut u = requested(Some("j"), "b");
    let p = decide_updates(
        &cfg,
        &info(),
        &[&u],
        vec![ch(
            "u1",
            Outcome::Succeeded {
                result: "{}".into(),
            },
        )],
        0,
    );
    assert_eq!(p.updates[0].result.as_deref(), Some("{}"));
    let p = decide_updates(
        &cfg,
        &info(),
        &[&u],
        vec![ch("u1", Outcome::Running { after_ms: None })],
        0,
    );
    assert_eq!(p.updates[0].to, Some(UnitStatus::Submitted));
    // A handler that faults reading a job the client cancelled spends nothing and keeps the
    // slot: the job still runs at the provider. One that faults before any job was recorded
    // ends cancelled once its budget is spent.
    let f = HandlerFault::Trap("x".into());
    u.attempts = cfg.retry_budget;
    assert_eq!(
        fault_updates(&cfg, &[&u], &f, 0)[0].to,
        Some(UnitStatus::Submitted)
    );
    let mut unsent = requested(None, "b");
    unsent.attempts = cfg.retry_budget;
    assert_eq!(
        fault_updates(&cfg, &[&unsent], &f, 0)[0].to,
        Some(UnitStatus::Cancelled)
    );

    let plain = unit("u2", Some("j"), "a");
    let p = decide_updates(
        &cfg,
        &info(),
        &[&plain],
        vec![ch("u2", Outcome::Fail { error: err })],
        0,
    );
    assert_eq!(p.updates[0].to, Some(UnitStatus::Failed));
    assert!(p.updates[0].unless_cancel_requested);
    let p = decide_updates(
        &cfg,
        &info(),
        &[&plain],
        vec![ch("u2", Outcome::Running { after_ms: None })],
        0,
    );
    assert!(
        !p.updates[0].unless_cancel_requested,
        "staying submitted (a job id, a poll) is never refused"
    );
}

#[test]
fn faults_keep_status_until_budget() {
    let cfg = SchedulerConfig {
        retry_budget: 2,
        ..SchedulerConfig::default()
    };
    let mut u = unit("u1", None, "a");
    let f = HandlerFault::Trap("x".into());
    assert_eq!(
        fault_updates(&cfg, &[&u], &f, 0)[0].to,
        Some(UnitStatus::Submitted)
    );
    u.attempts = 2;
    assert_eq!(
        fault_updates(&cfg, &[&u], &f, 0)[0].to,
        Some(UnitStatus::Failed)
    );
}

#[test]
fn only_single_unit_calls_are_charged_and_slowness_never() {
    let cfg = SchedulerConfig {
        retry_budget: 0,
        ..SchedulerConfig::default()
    };
    let a = unit("a", None, "a");
    let b = unit("b", Some("j"), "a");
    let trap = HandlerFault::Trap("x".into());
    for up in fault_updates(&cfg, &[&a, &b], &trap, 0) {
        assert_eq!((up.to, up.attempts), (Some(UnitStatus::Submitted), None));
    }
    let slow = HandlerFault::ProviderDeadline(std::time::Duration::from_secs(30));
    let up = &fault_updates(&cfg, &[&a], &slow, 0)[0];
    assert_eq!((up.to, up.attempts), (Some(UnitStatus::Submitted), None));
    assert!(up.next_at.is_some_and(|t| t > 0));
    assert_eq!(
        fault_updates(&cfg, &[&a], &trap, 0)[0].to,
        Some(UnitStatus::Failed)
    );
    // A unit whose provider job runs is never charged: its job would be abandoned.
    let up = &fault_updates(&cfg, &[&b], &trap, 0)[0];
    assert_eq!((up.to, up.attempts), (Some(UnitStatus::Submitted), None));
}

#[test]
fn units_past_the_stage_deadline_fail_with_that_reason() {
    let cfg = SchedulerConfig::default();
    let deadline = i64::try_from(cfg.stage_deadline.as_millis()).expect("fits");
    let mut old = unit("old", None, "a");
    old.submitted_at = Some(1_000);
    let mut fresh = unit("fresh", Some("j"), "a");
    fresh.submitted_at = Some(1_000 + deadline);
    let (kept, failed) = expire_stage_deadline(&cfg, vec![old, fresh], |u| u, 1_000 + deadline);
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].id, "fresh");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].to, Some(UnitStatus::Failed));
    let error = failed[0].error.value().cloned().unwrap_or_default();
    assert!(
        error.contains("stage_deadline") && error.contains("2h"),
        "{error}"
    );
}

/// Contract 1.4 `observe.queued`: a `running` job the provider holds in its queue shows it
/// (`provider_queue <position>`), counts as "the provider runs fewer than we hold" only once it
/// waits behind others or at a second read, and stops showing with any other answer.
#[test]
fn jobs_queued_at_the_provider_show_it_and_count_once_they_truly_wait() {
    let cfg = SchedulerConfig::default();
    let running = || Outcome::Running { after_ms: None };
    let queued = |id: &str, position: Option<u32>| Change {
        provider_queue: Some(slotd_core::model::ProviderQueue { position }),
        ..ch(id, running())
    };
    let fresh = unit("u1", Some("j1"), "a");
    let behind = unit("u2", Some("j2"), "a");
    let mut again = unit("u3", Some("j3"), "a");
    again.terms.wait_reason = Some("provider_queue 0".into());
    let mut started = unit("u4", Some("j4"), "a");
    started.terms.wait_reason = Some("provider_queue".into());
    let mut done = unit("u5", Some("j5"), "b");
    done.terms.wait_reason = Some("provider_queue 1".into());
    let plain = unit("u6", Some("j6"), "a");
    let p = decide_updates(
        &cfg,
        &info(),
        &[&fresh, &behind, &again, &started, &done, &plain],
        vec![
            queued("u1", Some(0)),
            queued("u2", Some(3)),
            queued("u3", None),
            ch("u4", running()),
            ch(
                "u5",
                Outcome::Succeeded {
                    result: "{}".into(),
                },
            ),
            ch("u6", running()),
        ],
        100,
    );
    assert!(p.refused.is_empty(), "{:?}", p.refused);
    let reason = |id: &str| {
        p.updates
            .iter()
            .find(|u| u.unit_id == id)
            .map(|u| u.wait_reason.clone())
    };
    assert_eq!(reason("u1"), Some(Field::Set("provider_queue 0".into())));
    assert_eq!(reason("u2"), Some(Field::Set("provider_queue 3".into())));
    assert_eq!(reason("u3"), Some(Field::Set("provider_queue".into())));
    assert_eq!(
        reason("u4"),
        Some(Field::Clear),
        "started: no longer queued"
    );
    assert_eq!(reason("u5"), Some(Field::Clear), "ended: no longer queued");
    assert_eq!(
        reason("u6"),
        Some(Field::Keep),
        "a plain poll stays a pure poll"
    );
    // u1 is next after a create (a dispatch delay); u2 waits behind 3; u3 was queued before.
    assert_eq!(p.provider_queued, 2);
    let pure = p
        .updates
        .iter()
        .find(|u| u.unit_id == "u6")
        .map(UnitUpdate::is_pure_poll);
    assert_eq!(pure, Some(true));
}

/// A read the provider answered with an error and the handler retries after a delay (its
/// pace) is held to that delay counted from the answer, like a poll hint: it gets a floor that
/// `floors_from_answer` moves by the call's time. A retry without a delay gets none.
#[test]
fn paced_retries_of_a_read_count_from_the_answer() {
    let cfg = SchedulerConfig::default();
    let (u, v) = (unit("u1", Some("job1"), "b"), unit("u2", Some("job2"), "b"));
    let err = ProviderError {
        code: Some("5000".into()),
        message: "busy".into(),
    };
    let retry = |id: &str, after_ms: Option<u64>| {
        ch(
            id,
            Outcome::RetryAfter {
                after_ms,
                error: err.clone(),
            },
        )
    };
    let changes = vec![retry("u1", Some(5_000)), retry("u2", None)];
    let mut p = decide_updates(&cfg, &info(), &[&u, &v], changes, 1_000);
    let at = p.updates[0].next_at.expect("next read");
    assert!(at >= 6_000, "the pace from the tick: {at}");
    assert_eq!(p.not_before.get(&0), Some(&at));
    assert_eq!(p.not_before.get(&1), None, "{:?}", p.not_before);
    // The call was answered 700 ms after the tick began: the pace counts from there.
    super::super::rounds::floors_from_answer(&mut p, 700);
    assert_eq!(p.updates[0].next_at, Some(at + 701));
}

/// A running hint shorter than `poll_initial` (a job read on a list page, which may be read
/// again soon) is the read's floor, for poll rounds; the unit's own schedule outside rounds
/// stays clamped to `poll_initial`. A hint longer than `poll_max` leaves the floor at the
/// clamped time, as before.
#[test]
fn a_short_running_hint_is_the_floor_and_the_backoff_stays_clamped() {
    let cfg = SchedulerConfig::default();
    let initial = i64::try_from(cfg.poll_initial.as_millis()).expect("ms");
    let max = i64::try_from(cfg.poll_max.as_millis()).expect("ms");
    let (u, v) = (unit("u1", Some("job1"), "b"), unit("u2", Some("job2"), "b"));
    let running = |id: &str, ms: u64| ch(id, Outcome::Running { after_ms: Some(ms) });
    let long = u64::try_from(max * 10).expect("ms");
    let p = decide_updates(
        &cfg,
        &info(),
        &[&u, &v],
        vec![running("u1", 1_000), running("u2", long)],
        10_000,
    );
    assert_eq!(p.updates[0].next_at, Some(10_000 + initial));
    assert_eq!(p.not_before.get(&0), Some(&11_000));
    assert_eq!(p.updates[1].next_at, Some(10_000 + max));
    assert_eq!(p.not_before.get(&1), Some(&(10_000 + max)));
}
