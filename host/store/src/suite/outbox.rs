//! The webhook outbox: a task with a `callback_url` is open until its delivery is queued (in
//! the same transaction), queueing twice changes nothing, a claim leases a due delivery to one
//! owner, only that owner records the attempt, a retry comes due again, and the list shows
//! every attempt.

use super::fixtures::{POOL, T0, VIDEO, apply, create, submit, succeed, task, unit, update};
use crate::{AttemptNext, AttemptOutcome, DynStore, Field, NewDelivery};
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

/// A retry that moves units reopens the task's completion webhook: its next end is queued
/// again, under an id of its own (`…_2`), once however many sweeps queue it, and a sweep
/// that read the end before the retry does not close the reopened task.
pub(crate) async fn webhook_reopens_after_a_retry(store: DynStore) {
    let mut with_hook = task("t1", "acme", VIDEO, POOL, 1, 0);
    with_hook.completion_webhook_url = Some("https://example.com/hook".into());
    create(&store, with_hook).await;
    let fail = |at| {
        let store = store.clone();
        async move {
            submit(&store, &["t1-u0"], at).await;
            let mut u = update("t1-u0", UnitStatus::Submitted, UnitStatus::Failed);
            u.error = Field::Set(r#"{"code":"1301","message":"bad"}"#.into());
            apply(&store, u, at + 1).await;
        }
    };
    let delivery = |id: &str, now| NewDelivery {
        id: id.into(),
        task_id: "t1".into(),
        tenant: "acme".into(),
        url: "https://example.com/hook".into(),
        event: "task.failed".into(),
        payload: "{}".into(),
        now,
    };

    // The first end: the id receivers know.
    fail(T0).await;
    let open = store.webhook_open_tasks(0, 10).await.unwrap();
    assert_eq!(open.len(), 1);
    let first = open[0].3;
    assert_eq!(first, 0, "a task never retried is at its first end");
    assert!(
        store
            .webhook_enqueue_end(&delivery("msg_t1_failed", T0 + 2), first)
            .await
            .unwrap()
    );
    assert!(store.webhook_open_tasks(0, 10).await.unwrap().is_empty());

    // The retry reopens it; a sweep that read the first end closes nothing now.
    assert_eq!(
        store
            .task_retry_failed("acme", "t1", T0 + 10)
            .await
            .unwrap(),
        Some(1)
    );
    assert!(
        store.webhook_open_tasks(0, 10).await.unwrap().is_empty(),
        "running again: not ended"
    );
    assert!(
        !store
            .webhook_enqueue_end(&delivery("msg_t1_failed", T0 + 11), first)
            .await
            .unwrap(),
        "a stale sweep does not close the reopened task"
    );

    // The second end: open again, at the next generation.
    fail(T0 + 20).await;
    let open = store.webhook_open_tasks(0, 10).await.unwrap();
    assert_eq!(
        open.len(),
        1,
        "the retried task ended again: open for its webhook"
    );
    let second = open[0].3;
    assert_eq!(second, 1);
    assert!(
        !store
            .webhook_enqueue_end(&delivery("msg_t1_failed", T0 + 22), first)
            .await
            .unwrap(),
        "a sweep of the first end does not close the second"
    );
    assert_eq!(store.webhook_open_tasks(0, 10).await.unwrap().len(), 1);
    // Two instances sweeping the same end: one delivery.
    for _ in 0..2 {
        assert!(
            store
                .webhook_enqueue_end(&delivery("msg_t1_failed_2", T0 + 23), second)
                .await
                .unwrap()
        );
    }
    assert!(store.webhook_open_tasks(0, 10).await.unwrap().is_empty());
    let ids: Vec<String> = store
        .webhook_list("t1")
        .await
        .unwrap()
        .into_iter()
        .map(|(d, _)| d.id)
        .collect();
    assert_eq!(ids, ["msg_t1_failed", "msg_t1_failed_2"]);
    let due = store
        .webhook_claim("a", T0 + 1000, T0 + 100, 10)
        .await
        .unwrap();
    assert_eq!(due.len(), 2, "each end queued once");
}
