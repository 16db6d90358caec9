//! Where a task stands in its pool (`task_queue_standing`, the ETA's input), against the fill
//! order the store itself answers (`unit_list_pending`).

use super::fixtures::{POOL, T0, VIDEO, create, submit, task, types};
use crate::DynStore;

pub(crate) async fn queue_standing_follows_the_fill_order(store: DynStore) {
    // Tenant a: a1 (3 units) then a2 (2); tenant b: b1 (4); tenant c: c1 (2) at priority 5.
    create(&store, task("a1", "a", VIDEO, POOL, 3, 0)).await;
    create(&store, task("b1", "b", VIDEO, POOL, 4, 0)).await;
    create(&store, task("a2", "a", VIDEO, POOL, 2, 0)).await;
    create(&store, task("c1", "c", VIDEO, POOL, 3, 5)).await;
    submit(&store, &["c1-u0"], T0 + 1).await;

    let order: Vec<String> = store
        .unit_list_pending(POOL, &types(&[VIDEO]), T0 + 100, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.id)
        .collect();
    let place = |id: &str| order.iter().position(|u| u == id).expect("pending") as u64;

    // The higher priority first, then the tenants' turns: exact where no tie is involved.
    let c1 = store.task_queue_standing("c1").await.unwrap().expect("c1");
    assert_eq!((c1.pending, c1.ahead_first, c1.ahead_last), (2, 0, 1));
    assert_eq!(c1.pool, POOL);
    assert_eq!(c1.running, vec![(T0 + 1, true)]);
    let a2 = store.task_queue_standing("a2").await.unwrap().expect("a2");
    assert_eq!(a2.running, vec![(T0 + 1, false)]);
    // Ties between tenants at the same turn go by who was served last, which the standing
    // does not read (half of them are counted ahead): off by at most one per other tenant.
    for (t, first, last) in [
        ("a1", "a1-u0", "a1-u2"),
        ("b1", "b1-u0", "b1-u3"),
        ("a2", "a2-u0", "a2-u1"),
    ] {
        let s = store.task_queue_standing(t).await.unwrap().expect(t);
        assert!(
            s.ahead_first.abs_diff(place(first)) <= 1,
            "{t}: {s:?} {order:?}"
        );
        assert!(
            s.ahead_last.abs_diff(place(last)) <= 1,
            "{t}: {s:?} {order:?}"
        );
    }

    // Nothing waiting but a job running: no queue, the running job only.
    submit(&store, &["c1-u1", "c1-u2"], T0 + 2).await;
    let c1 = store.task_queue_standing("c1").await.unwrap().expect("c1");
    assert_eq!((c1.pending, c1.running.len()), (0, 3));
    assert!(c1.running.iter().all(|(_, mine)| *mine));
    // No such task, or nothing in flight: no standing.
    assert_eq!(store.task_queue_standing("nope").await.unwrap(), None);
}
