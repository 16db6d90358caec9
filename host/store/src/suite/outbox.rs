//! The webhook outbox: a task with a `callback_url` is open until its delivery is queued (in
//! the same transaction), queueing twice changes nothing, a claim leases a due delivery to one
//! owner, only that owner records the attempt, a retry comes due again, and the list shows
//! every attempt.

use super::fixtures::{POOL, T0, VIDEO, apply, create, succeed, task, unit, update};
use crate::{AttemptNext, AttemptOutcome, DynStore, NewDelivery};
use slotd_core::model::UnitStatus;

pub(crate) async fn webhook_outbox(store: DynStore) {
    let mut with_hook = task("t1", "acme", VIDEO, POOL, 1, 0);
    with_hook.completion_webhook_url = Some("https://example.com/hook".into());
    create(&store, with_hook).await;
    create(&store, task("t2", "acme", VIDEO, POOL, 1, 0)).await;
    // Running: not listed (a sweep reads the tasks that ended, not every open one).
    assert!(store.webhook_open_tasks(0, 10).await.unwrap().is_empty());
    let u = unit(&store, "t1", 0).await;
    succeed(&store, &u.id).await;
    assert!(
        store.webhook_open_tasks(0, 10).await.unwrap().is_empty(),
        "succeeded and not finalized yet is not an end"
    );
    let mut parked = update(&u.id, UnitStatus::Succeeded, UnitStatus::Succeeded);
    parked.next_at = Some(slotd_core::model::FINALIZE_PARKED_AT);
    apply(&store, parked, T0 + 3).await;
    let open = store.webhook_open_tasks(0, 10).await.unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!((open[0].1.as_str(), open[0].2.as_str()), ("acme", "t1"));
    // Paged by seq: nothing after the last one.
    assert!(
        store
            .webhook_open_tasks(open[0].0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let d = NewDelivery {
        id: "msg_t1_completed".into(),
        task_id: "t1".into(),
        tenant: "acme".into(),
        url: "https://example.com/hook".into(),
        event: "task.completed".into(),
        payload: "{}".into(),
        now: T0,
    };
    store.webhook_enqueue(&d).await.unwrap();
    store.webhook_enqueue(&d).await.unwrap();
    assert!(store.webhook_open_tasks(0, 10).await.unwrap().is_empty());
    // One owner at a time.
    let a = store.webhook_claim("a", T0 + 1000, T0, 10).await.unwrap();
    assert_eq!(a.len(), 1, "queued once");
    assert!(
        store
            .webhook_claim("b", T0 + 1000, T0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let failed = |owner| AttemptOutcome {
        delivery_id: "msg_t1_completed",
        owner,
        at: T0 + 10,
        status: Some(503),
        error: Some("the receiver answered 503".into()),
        duration_ms: 3,
        next: AttemptNext::RetryAt(T0 + 500),
    };
    assert!(
        !store.webhook_attempt(&failed("b")).await.unwrap(),
        "not b's lease"
    );
    assert!(store.webhook_attempt(&failed("a")).await.unwrap());
    // Not due before its retry; due after, for anyone.
    assert!(
        store
            .webhook_claim("b", T0 + 2000, T0 + 100, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let again = store
        .webhook_claim("b", T0 + 2000, T0 + 500, 10)
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempts, 1);
    let delivered = AttemptOutcome {
        status: Some(200),
        error: None,
        next: AttemptNext::Delivered,
        at: T0 + 600,
        ..failed("b")
    };
    assert!(store.webhook_attempt(&delivered).await.unwrap());
    assert!(
        store
            .webhook_claim("c", T0 + 9000, T0 + 9000, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let list = store.webhook_list("t1").await.unwrap();
    assert_eq!(list.len(), 1);
    let (d, attempts) = &list[0];
    assert_eq!((d.status.as_str(), d.attempts), ("delivered", 2));
    assert_eq!(d.delivered_at, Some(T0 + 600));
    let statuses: Vec<Option<i64>> = attempts.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [Some(503), Some(200)]);
}
