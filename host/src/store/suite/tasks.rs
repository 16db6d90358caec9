//! Task-level transitions: cancellation (releasing submitted units' slots) and the explicit
//! retry of failed units with the next submit attempt.

use super::*;

/// Cancel ends at once every unit that holds no provider job (pending, succeeded, finalizing)
/// and leaves the `submitted` ones submitted, holding their slots, until their provider jobs
/// end: the provider keeps running them whatever slotd decides.
pub(crate) async fn cancel_keeps_submitted_until_the_job_ends(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 5, 0)).await;
    submit(&store, &["t1-u0", "t1-u2", "t1-u4"], T0).await;
    let mut accepted = update("t1-u4", UnitStatus::Submitted, UnitStatus::Submitted);
    accepted.provider_job_id = Some(Some("job-4".into()));
    apply(&store, accepted, T0 + 1).await;
    apply(
        &store,
        update("t1-u2", UnitStatus::Submitted, UnitStatus::Failed),
        T0,
    )
    .await;
    succeed(&store, "t1-u3").await;
    let claimed = store
        .unit_claim_finalize("fin-a", T0 + 1000, T0 + 20, 10)
        .await
        .unwrap();
    assert_eq!(ids(&claimed), ["t1-u3"]);

    store
        .task_cancel("acme", "t1", T0 + 30)
        .await
        .unwrap()
        .unwrap();
    let units = store.task_units("t1").await.unwrap();
    let statuses: Vec<UnitStatus> = units.iter().map(|u| u.status).collect();
    assert_eq!(
        statuses,
        [
            UnitStatus::Submitted,
            UnitStatus::Cancelled,
            UnitStatus::Failed,
            UnitStatus::Cancelled,
            UnitStatus::Submitted,
        ],
        "pending and finalizing end at once; submitted ones wait for their jobs"
    );
    let mut held = store.unit_list_submitted_ids(POOL).await.unwrap();
    held.sort();
    assert_eq!(held, ["t1-u0", "t1-u4"], "their slots stay held");
    assert!(
        !store
            .unit_complete("t1-u3", "fin-a", "{}", T0 + 40)
            .await
            .unwrap(),
        "a cancelled finalization cannot complete"
    );
}

pub(crate) async fn retry_bumps_submit_attempt(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 2, 0)).await;
    submit(&store, &["t1-u0"], T0).await;
    let mut fail = update("t1-u0", UnitStatus::Submitted, UnitStatus::Failed);
    fail.provider_job_id = Some(Some("job-1".into()));
    fail.error = Some(Some(r#"{"code":"1301","message":"bad"}"#.into()));
    fail.attempts = Some(3);
    fail.polls = Some(7);
    apply(&store, fail, T0 + 1).await;
    let before = unit(&store, "t1", 0).await.idempotency_key();

    assert_eq!(
        store.task_retry_failed("acme", "t1", T0 + 9).await.unwrap(),
        Some(1)
    );
    let u = unit(&store, "t1", 0).await;
    assert_eq!(
        (u.status, u.submit_attempt, u.attempts, u.polls),
        (UnitStatus::Pending, 1, 0, 0)
    );
    assert_eq!(
        (u.provider_job_id.clone(), u.error.clone(), u.next_at),
        (None, None, T0 + 9)
    );
    assert_ne!(
        u.idempotency_key(),
        before,
        "a resubmission needs a new key"
    );
    let events = store.unit_events("t1").await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(
        (last.from_status.as_deref(), last.to_status.as_str()),
        (Some("failed"), "pending")
    );
    assert_eq!(
        last.error.as_deref(),
        Some(r#"{"code":"1301","message":"bad"}"#)
    );
    assert_eq!(
        unit(&store, "t1", 1).await.submit_attempt,
        0,
        "pending units untouched"
    );
    assert_eq!(
        store
            .task_retry_failed("acme", "t1", T0 + 10)
            .await
            .unwrap(),
        Some(0)
    );
    let due = store
        .unit_list_pending(POOL, &types(&[VIDEO]), T0 + 9, 10)
        .await
        .unwrap();
    assert_eq!(ids(&due), ["t1-u0", "t1-u1"]);
}
