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
    accepted.provider_job_id = Field::Set("job-4".into());
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

    let cancelled = store
        .task_cancel("acme", "t1", T0 + 30)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        cancelled,
        Cancelled {
            units: 2,
            waiting: 2
        },
        "pending and finalizing now; two submitted wait"
    );
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
    for u in [&units[0], &units[4]] {
        assert_eq!(u.cancel_requested_at, Some(T0 + 30), "{}", u.id);
    }
    assert_eq!(units[1].cancel_requested_at, None);
    assert_eq!(
        units[0].updated_at, T0,
        "an untouched in-doubt unit must keep looking untouched"
    );
    let record = store.task_get("acme", "t1").await.unwrap().unwrap();
    assert_eq!(record.cancel_requested_at, Some(T0 + 30));
    assert_eq!((record.counts.submitted, record.counts.cancelled), (2, 2));

    // Cancel again: nothing new, the first request's time kept, no new events.
    let events_before = store.unit_events("t1").await.unwrap().len();
    let again = store
        .task_cancel("acme", "t1", T0 + 50)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again, Cancelled::default());
    assert_eq!(store.unit_events("t1").await.unwrap().len(), events_before);
    let record = store.task_get("acme", "t1").await.unwrap().unwrap();
    assert_eq!(record.cancel_requested_at, Some(T0 + 30));
    let events = store.unit_events("t1").await.unwrap();
    let details: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e.at == T0 + 30)
        .map(|e| (e.unit_id.as_str(), e.to_status.as_str()))
        .collect();
    assert_eq!(
        details.len(),
        4,
        "one event per unit the cancel reached: {details:?}"
    );
    assert!(
        events
            .iter()
            .filter(|e| e.detail.as_deref() == Some(CANCEL_WAIT_DETAIL))
            .all(|e| e.to_status == "submitted")
    );

    // An update planned before the cancel (guarded) is refused; the scheduler's rewrite, made
    // with the cancel in view, ends the unit.
    let mut stale = update("t1-u4", UnitStatus::Submitted, UnitStatus::Succeeded);
    stale.unless_cancel_requested = true;
    let report = store.unit_apply(&[stale], T0 + 60, None).await.unwrap();
    assert_eq!(report.skipped, ["t1-u4"]);
    let mut unguarded = update("t1-u0", UnitStatus::Submitted, UnitStatus::Submitted);
    unguarded.provider_job_id = Field::Set("job-0".into());
    unguarded.unless_cancel_requested = false;
    apply(&store, unguarded, T0 + 60).await;
    apply(
        &store,
        update("t1-u4", UnitStatus::Submitted, UnitStatus::Cancelled),
        T0 + 70,
    )
    .await;
    assert_eq!(
        store.unit_list_submitted_ids(POOL).await.unwrap(),
        ["t1-u0"]
    );
    // A guarded update of a unit nobody cancelled applies as before.
    create(&store, task("t2", "acme", VIDEO, POOL, 1, 0)).await;
    submit(&store, &["t2-u0"], T0).await;
    let mut fresh = update("t2-u0", UnitStatus::Submitted, UnitStatus::Succeeded);
    fresh.unless_cancel_requested = true;
    apply(&store, fresh, T0 + 80).await;

    // Cancel is final: a retry revives none of the cancelled task's failed units.
    assert_eq!(
        store
            .task_retry_failed("acme", "t1", T0 + 90)
            .await
            .unwrap(),
        Some(0)
    );
    assert_eq!(unit(&store, "t1", 2).await.status, UnitStatus::Failed);
}

pub(crate) async fn retry_bumps_submit_attempt(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 2, 0)).await;
    submit(&store, &["t1-u0"], T0).await;
    let mut fail = update("t1-u0", UnitStatus::Submitted, UnitStatus::Failed);
    fail.provider_job_id = Field::Set("job-1".into());
    fail.error = Field::Set(r#"{"code":"1301","message":"bad"}"#.into());
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

/// One batch (group commit) stores each task as one create would, in order: a key an earlier
/// task of the same batch took answers with that task, the same key of another tenant does
/// not collide, and only the stored tasks get units and "created" events, FIFO in batch order.
pub(crate) async fn create_batch_resolves_keys_in_order(store: DynStore) {
    let keyed = |id: &str, tenant: &str, key: &str| {
        let mut t = task(id, tenant, VIDEO, POOL, 2, 0);
        t.idempotency_key = Some(key.into());
        t
    };
    let batch = [
        keyed("t1", "acme", "k"),
        keyed("t2", "acme", "k"),
        keyed("t3", "zeta", "k"),
        task("t4", "acme", VIDEO, POOL, 1, 0),
    ];
    let created = store.task_create_batch(&batch).await.unwrap();
    assert_eq!(
        created,
        [
            Created::New("t1".into()),
            Created::Existing("t1".into()),
            Created::New("t3".into()),
            Created::New("t4".into()),
        ]
    );
    assert!(store.task_units("t2").await.unwrap().is_empty());
    assert!(store.unit_events("t2").await.unwrap().is_empty());
    assert_eq!(store.unit_events("t1").await.unwrap().len(), 2);
    // Fill order is batch order (FIFO by the tasks' seq).
    let pending = store
        .unit_list_pending(POOL, &types(&[VIDEO]), T0, 10)
        .await
        .unwrap();
    let acme: Vec<&str> = pending
        .iter()
        .filter(|u| u.tenant == "acme")
        .map(|u| u.id.as_str())
        .collect();
    assert_eq!(acme, ["t1-u0", "t1-u1", "t4-u0"]);
    assert!(store.task_create_batch(&[]).await.unwrap().is_empty());
}
