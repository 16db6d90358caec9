//! What the operator console reads: every tenant's tasks (and one tenant's), a task's owner,
//! the recent webhook deliveries across tasks, and a pool's slot history (transitions into
//! and out of `submitted` since a time, plus the units holding a slot now).

use super::fixtures::{POOL, T0, VIDEO, apply, create, submit, task, update};
use crate::{DynStore, NewDelivery, TaskFilter};
use slotd_core::model::UnitStatus;

pub(crate) async fn console_reads(store: DynStore) {
    create(&store, task("a1", "acme", VIDEO, POOL, 2, 0)).await;
    create(&store, task("b1", "bolt", VIDEO, POOL, 1, 0)).await;
    create(&store, task("o1", "acme", VIDEO, "other:pool", 1, 0)).await;
    let filter = TaskFilter {
        limit: 10,
        ..TaskFilter::default()
    };
    let ids =
        |page: crate::TaskPage| -> Vec<String> { page.tasks.into_iter().map(|t| t.id).collect() };
    let all = store.task_list_any(None, &filter).await.unwrap();
    assert_eq!(ids(all), ["o1", "b1", "a1"], "every tenant's, newest first");
    let acme = store.task_list_any(Some("acme"), &filter).await.unwrap();
    assert_eq!(ids(acme), ["o1", "a1"]);
    assert_eq!(
        ids(store.task_list("bolt", &filter).await.unwrap()),
        ["b1"],
        "the tenant's own list is unchanged"
    );
    assert_eq!(
        store.task_tenant("b1").await.unwrap().as_deref(),
        Some("bolt")
    );
    assert_eq!(store.task_tenant("nope").await.unwrap(), None);

    // Slot history: a1-u0 runs T0+10..T0+50, a1-u1 from T0+20 on, b1-u0 is refused once
    // (back to pending); o1 is another pool's.
    submit(&store, &["a1-u0", "b1-u0", "o1-u0"], T0 + 10).await;
    submit(&store, &["a1-u1"], T0 + 20).await;
    let mut refused = update("b1-u0", UnitStatus::Submitted, UnitStatus::Pending);
    refused.detail = Some("provider over capacity; back to pending".into());
    apply(&store, refused, T0 + 30).await;
    apply(
        &store,
        update("a1-u0", UnitStatus::Submitted, UnitStatus::Succeeded),
        T0 + 50,
    )
    .await;
    let log = store.pool_slot_log(POOL, T0, 100).await.unwrap();
    let seen: Vec<(&str, i64, &str)> = log
        .events
        .iter()
        .map(|e| (e.unit_id.as_str(), e.at, e.to_status.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("a1-u0", T0 + 10, "submitted"),
            ("b1-u0", T0 + 10, "submitted"),
            ("a1-u1", T0 + 20, "submitted"),
            ("b1-u0", T0 + 30, "pending"),
            ("a1-u0", T0 + 50, "succeeded"),
        ]
    );
    assert!(!log.truncated);
    assert_eq!(log.events[1].tenant, "bolt");
    assert_eq!(
        log.events[3].detail.as_deref(),
        Some("provider over capacity; back to pending")
    );
    let holders: Vec<(&str, i64)> = log
        .holders
        .iter()
        .map(|h| (h.unit_id.as_str(), h.since))
        .collect();
    assert_eq!(holders, [("a1-u1", T0 + 20)]);
    // A later window keeps only what happened in it; the holder is still there.
    let late = store.pool_slot_log(POOL, T0 + 40, 100).await.unwrap();
    assert_eq!(late.events.len(), 1);
    assert_eq!(late.holders.len(), 1);
    // The cap keeps the newest.
    let capped = store.pool_slot_log(POOL, T0, 2).await.unwrap();
    assert!(capped.truncated);
    assert_eq!(capped.events.len(), 2);
    assert_eq!(capped.events[1].at, T0 + 50);

    // Webhook deliveries across tasks, newest first, scoped by tenant and status.
    for (id, tenant, task_id, at) in [("d1", "acme", "a1", T0), ("d2", "bolt", "b1", T0 + 1)] {
        let d = NewDelivery {
            id: id.into(),
            task_id: task_id.into(),
            tenant: tenant.into(),
            url: "https://example.com/hook".into(),
            event: "task.completed".into(),
            payload: "{}".into(),
            now: at,
        };
        store.webhook_enqueue(&d).await.unwrap();
    }
    let all = store.webhook_recent(None, None, 10).await.unwrap();
    let ids: Vec<&str> = all.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["d2", "d1"]);
    assert_eq!(all[0].tenant, "bolt");
    let acme = store.webhook_recent(Some("acme"), None, 10).await.unwrap();
    assert_eq!(acme.len(), 1);
    assert_eq!(acme[0].id, "d1");
    assert!(
        store
            .webhook_recent(None, Some("delivered"), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .webhook_recent(None, Some("pending"), 1)
            .await
            .unwrap()
            .len(),
        1
    );
}
