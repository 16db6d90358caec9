//! The submission record, the outcome-unknown rule and the per-model-pool plans.

use super::*;

fn unit(state: &str, submitted_at_ms: u64) -> Unit {
    Unit {
        id: "u1".into(),
        idempotency_key: "u1-main-0".into(),
        submitted_at_ms: Some(submitted_at_ms),
        state: state.into(),
        ..Unit::default()
    }
}

fn record_of(unit: &Unit) -> Record {
    serde_json::from_str(&unit.state).unwrap_or_default()
}

#[test]
fn records_belong_to_one_submission() {
    let u = unit("{}", 1_000);
    assert_eq!(Record::refused(&u, 2_000).said(&u), Said::Refused);
    let unknown =
        serde_json::to_string(&Record::unknown(&u, 1_000, "HTTP 504")).unwrap_or_default();
    assert_eq!(
        unknown,
        r#"{"submission":"u1-main-0@1000","unknown_since":1000,"unknown_reason":"HTTP 504"}"#
    );
    let again = unit(&unknown, 1_000);
    assert_eq!(
        record_of(&again).said(&again),
        Said::Unknown {
            since: 1_000,
            reason: "HTTP 504".into()
        }
    );
    let remarked = unit(&unknown, 9_000);
    assert_eq!(record_of(&remarked).said(&remarked), Said::Nothing);
    assert_eq!(
        serde_json::to_string(&Record::default()).ok().as_deref(),
        Some("{}")
    );
}

#[test]
fn only_a_refused_or_a_fresh_submission_may_be_submitted() {
    let lost = lost_by_slotd("create", "task id");
    assert!(
        lost.starts_with("slotd lost track of the create call"),
        "{lost}"
    );
    assert!(lost.ends_with("recording the task id)"), "{lost}");
    let fresh = unit("{}", 1_000);
    assert_eq!(Record::default().doubt(&fresh, 5_000, &lost), None);
    let in_doubt = Unit {
        in_doubt: true,
        ..fresh.clone()
    };
    assert_eq!(
        Record::default().doubt(&in_doubt, 5_000, &lost),
        Some(Doubt {
            since: 1_000,
            reason: lost.clone(),
            recorded: false
        })
    );
    assert_eq!(
        Record::refused(&in_doubt, 2_000).doubt(&in_doubt, 5_000, &lost),
        None
    );
    let unknown = Record::unknown(&in_doubt, 1_500, "timeout");
    assert_eq!(
        unknown.doubt(&in_doubt, 5_000, &lost),
        Some(Doubt {
            since: 1_500,
            reason: "timeout".into(),
            recorded: true
        })
    );
    assert!(!unknown.first_seen(1_500));
    assert!(unknown.first_seen(1_000));
}

#[test]
fn holds_are_timeouts_and_the_end_is_submission_unknown() {
    let u = unit("{}", 1_000);
    let held = hold(&u, "{\"a\":1}".into(), 30, "held".into());
    assert_eq!(held.state.as_deref(), Some("{\"a\":1}"));
    assert_eq!(
        held.outcome,
        Outcome::RetryAfter {
            after_ms: Some(30),
            error: ProviderError::new(Some(TIMEOUT), "held")
        }
    );
    let failed = give_up(&u, "{}".into(), "gone".into());
    assert_eq!(
        failed.outcome,
        Outcome::Fail(ProviderError::new(Some(SUBMISSION_UNKNOWN), "gone"))
    );
    assert_eq!(cancel_hold(10, 25), CancelOutcome::Running(Some(15)));
    assert_eq!(cancel_hold(25, 25), CancelOutcome::Ended);
}

#[test]
fn units_on_their_models_pools() {
    let info = one_stage("h", "1.0.0", "video", "main", "h:a");
    assert_eq!(info.task_types[0].stages, [StageInfo::new("main", "h:a")]);
    assert!(info.pools.is_empty());
    let pools = stage_pools("video", "main", ["h:a".to_string(), "h:b".to_string()], 3);
    assert_eq!(pools.len(), 2);
    assert_eq!(pools[1].pool, PoolInfo::new("h:b", 3));
    let planned = plan_default_pool(vec![("a", "s1".to_string())], "a");
    assert_eq!(planned.map(|u| u.len()), Ok(1));
    let refused = plan_default_pool(vec![("a", "s1".into()), ("b", "s2".into())], "a");
    let refused = refused.err().and_then(|e| e.field.zip(Some(e.message)));
    assert!(
        refused.as_ref().is_some_and(|(field, m)| field == "model"
            && m.starts_with("model b needs its own pool")
            && m.ends_with("only a is served here")),
        "{refused:?}"
    );
    let units = routed("main", [("h:b".to_string(), "s".to_string())]);
    assert_eq!(units[0].pools, [("main".to_string(), "h:b".to_string())]);
    assert_eq!(units[0].state, "{}");
}
