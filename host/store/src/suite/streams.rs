//! Event streams (`unit_events_after`): every event of a scope once, in the log's order, paged
//! and resumed from any event's cursor; other tenants' tasks never show; the head cursor sees
//! only what comes after it.

use super::fixtures::{POOL, T0, VIDEO, create, task, update};
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

/// Read the whole log's scopes from `from` to the end, `limit` events a page: each page's
/// scopes, and the cursor after it.
async fn scope_pages(
    store: &DynStore,
    mut from: EventCursor,
    limit: u32,
) -> Vec<(Vec<(String, String)>, EventCursor)> {
    let mut out = Vec::new();
    for _ in 0..1000 {
        let page = store.unit_event_scopes_after(from, limit).await.unwrap();
        let done = !page.more;
        let mut scopes = page.scopes;
        scopes.sort();
        if !scopes.is_empty() {
            out.push((scopes, page.next));
        }
        from = page.next;
        if done {
            return out;
        }
    }
    panic!("the log never ended");
}

fn scope(tenant: &str, task: &str) -> (String, String) {
    (tenant.to_string(), task.to_string())
}

/// `unit_event_scopes_after` (what the API's one reader of the log uses to wake streams): every
/// tenant's tasks with events, each once a page; paged in the log's order, one event at a time
/// naming that event's task; resumed from any page's cursor; from the head only what comes
/// after, naming only the task that moved.
pub(crate) async fn event_scopes_page_and_resume(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 3, 0)).await;
    create(&store, task("t2", "acme", VIDEO, POOL, 2, 0)).await;
    create(&store, task("t3", "other", VIDEO, POOL, 2, 0)).await;
    store
        .unit_apply(
            &[
                update("t1-u0", UnitStatus::Pending, UnitStatus::Cancelled),
                update("t3-u1", UnitStatus::Pending, UnitStatus::Cancelled),
            ],
            T0 + 1,
            None,
        )
        .await
        .unwrap();
    // Every event of the three tasks, in id order, by task.
    let mut log: Vec<(i64, String)> = Vec::new();
    for t in ["t1", "t2", "t3"] {
        log.extend(
            store_ids(&store, t)
                .await
                .into_iter()
                .map(|id| (id, t.into())),
        );
    }
    log.sort();
    let everyone = vec![
        scope("acme", "t1"),
        scope("acme", "t2"),
        scope("other", "t3"),
    ];
    // On PostgreSQL an event shows once every older write transaction on the server has ended
    // (other tests' too): wait until all of them show, every event (one a page), not only
    // some event of each task.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let pages = scope_pages(&store, EventCursor::default(), 1000).await;
        let mut seen: Vec<_> = pages.into_iter().flat_map(|(s, _)| s).collect();
        seen.sort();
        seen.dedup();
        let events = scope_pages(&store, EventCursor::default(), 1).await.len();
        if seen == everyone && events == log.len() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the events never all showed: {seen:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // All at once: each task once.
    let pages = scope_pages(&store, EventCursor::default(), 1000).await;
    assert_eq!(pages.len(), 1, "{pages:?}");
    assert_eq!(pages[0].0, everyone);
    // One event a page: that event's task, in the log's order, no event skipped or doubled.
    let ones = scope_pages(&store, EventCursor::default(), 1).await;
    let tasks: Vec<&str> = ones
        .iter()
        .map(|(s, _)| {
            assert_eq!(s.len(), 1, "{s:?}");
            s[0].1.as_str()
        })
        .collect();
    let expected: Vec<&str> = log.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(tasks, expected);
    // Pages of three: the tasks of those events.
    let threes = scope_pages(&store, EventCursor::default(), 3).await;
    let mut at = 0;
    for (scopes, _) in &threes {
        let mut want: Vec<_> = log[at..(at + 3).min(log.len())]
            .iter()
            .map(|(_, t)| scope(if t == "t3" { "other" } else { "acme" }, t))
            .collect();
        want.sort();
        want.dedup();
        assert_eq!(scopes, &want, "page from event {at}");
        at += 3;
    }
    assert!(at >= log.len());
    // Resumed from any page's cursor: exactly the pages after it.
    for (k, (_, cursor)) in ones.iter().enumerate() {
        let rest = scope_pages(&store, *cursor, 1).await;
        let rest: Vec<&str> = rest.iter().map(|(s, _)| s[0].1.as_str()).collect();
        assert_eq!(rest, expected[k + 1..], "resumed after event {k}");
    }
    // From the head: nothing, then only the task that moved.
    let head = store.unit_events_head().await.unwrap();
    assert!(scope_pages(&store, head, 10).await.is_empty());
    store
        .unit_apply(
            &[update("t2-u1", UnitStatus::Pending, UnitStatus::Cancelled)],
            T0 + 2,
            None,
        )
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let after = loop {
        let got = scope_pages(&store, head, 10).await;
        if !got.is_empty() {
            break got;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new event never showed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0].0, vec![scope("acme", "t2")]);
    // And read on from there: nothing more.
    assert!(scope_pages(&store, after[0].1, 10).await.is_empty());
}
