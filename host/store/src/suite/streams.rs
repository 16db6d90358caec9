//! Event streams (`unit_events_after`): every event of a scope once, in the log's order, paged
//! and resumed from any event's cursor; other tenants' tasks never show; the head cursor sees
//! only what comes after it.

use super::{POOL, T0, VIDEO, create, task, update};
use crate::{DynStore, EventCursor, EventScope, UnitEvent};
use slotd_core::model::UnitStatus;

/// Read `scope` from `from` to the end, `limit` at a time.
async fn read_all(
    store: &DynStore,
    scope: EventScope<'_>,
    mut from: EventCursor,
    limit: u32,
) -> Vec<(EventCursor, UnitEvent)> {
    let mut out = Vec::new();
    for _ in 0..1000 {
        let page = store.unit_events_after(scope, from, limit).await.unwrap();
        let more = !page.events.is_empty() || page.next != from;
        out.extend(page.events);
        if !more {
            return out;
        }
        from = page.next;
    }
    panic!("the stream never ended");
}

fn ids(events: &[(EventCursor, UnitEvent)]) -> Vec<i64> {
    events.iter().map(|(_, e)| e.id).collect()
}

pub(crate) async fn event_streams_page_and_resume(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 5, 0)).await;
    create(&store, task("t2", "acme", VIDEO, POOL, 3, 0)).await;
    create(&store, task("t3", "other", VIDEO, POOL, 2, 0)).await;
    // Every unit of every task moves once: an event each.
    for (t, n) in [("t1", 5), ("t2", 3), ("t3", 2)] {
        let batch: Vec<_> = (0..n)
            .map(|i| {
                update(
                    &format!("{t}-u{i}"),
                    UnitStatus::Pending,
                    UnitStatus::Cancelled,
                )
            })
            .collect();
        store.unit_apply(&batch, T0 + 1, None).await.unwrap();
    }
    let log = store.unit_events("t1").await.unwrap();
    // On PostgreSQL an event shows once every older write transaction on the server has ended
    // (other tests' too): wait until all of them show, with a deadline, before reading them in
    // pieces (the horizon only moves forward).
    let all_of_acme = store_ids(&store, "t1").await.len() + store_ids(&store, "t2").await.len();
    let everything = EventScope {
        tenant: "acme",
        task_id: None,
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while read_all(&store, everything, EventCursor::default(), 100)
        .await
        .len()
        < all_of_acme
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the events never all showed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let one = EventScope {
        tenant: "acme",
        task_id: Some("t1"),
    };
    // Page by page, or all at once: the task's own log, in order.
    for limit in [1, 2, 100] {
        let got = read_all(&store, one, EventCursor::default(), limit).await;
        assert_eq!(ids(&got), log.iter().map(|e| e.id).collect::<Vec<_>>());
    }
    // Behind until the last one is read.
    assert!(
        store
            .unit_events_behind("t1", EventCursor::default())
            .await
            .unwrap()
    );
    let (last, _) = read_all(&store, one, EventCursor::default(), 100)
        .await
        .pop()
        .expect("events");
    assert!(!store.unit_events_behind("t1", last).await.unwrap());
    // Resumed after any event: exactly the rest.
    let all = read_all(&store, one, EventCursor::default(), 2).await;
    for (k, (cursor, _)) in all.iter().enumerate() {
        let rest = read_all(&store, one, *cursor, 2).await;
        assert_eq!(ids(&rest), ids(&all[k + 1..]), "resumed after event {k}");
    }
    // A tenant's stream: both its tasks, none of the other tenant's.
    let tenant = EventScope {
        tenant: "acme",
        task_id: None,
    };
    let got = read_all(&store, tenant, EventCursor::default(), 3).await;
    assert!(got.iter().all(|(_, e)| e.task_id != "t3"));
    let mut expected = store_ids(&store, "t1").await;
    expected.extend(store_ids(&store, "t2").await);
    expected.sort();
    assert_eq!(ids(&got), expected);
    // Another tenant's task reads as empty.
    let foreign = EventScope {
        tenant: "acme",
        task_id: Some("t3"),
    };
    assert!(
        read_all(&store, foreign, EventCursor::default(), 10)
            .await
            .is_empty()
    );
    // From the head: nothing yet, then only what comes after.
    let head = store.unit_events_head().await.unwrap();
    assert!(read_all(&store, tenant, head, 10).await.is_empty());
    create(&store, task("t4", "acme", VIDEO, POOL, 1, 0)).await;
    store
        .unit_apply(
            &[update("t4-u0", UnitStatus::Pending, UnitStatus::Cancelled)],
            T0 + 2,
            None,
        )
        .await
        .unwrap();
    // On PostgreSQL the event shows once every older write transaction on the server has
    // ended (other tests' too): wait for it, with a deadline.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let after = loop {
        let got = read_all(&store, tenant, head, 10).await;
        if !got.is_empty() {
            break got;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new event never showed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(after.iter().all(|(_, e)| e.task_id == "t4"), "{after:?}");
}

async fn store_ids(store: &DynStore, task: &str) -> Vec<i64> {
    store
        .unit_events(task)
        .await
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect()
}
