//! Fencing, deterministically (docs/operations.md): a scheduler stopped inside a handler call loses its
//! pool to another; when it resumes, its tick writes nothing and it drops the lease. The stub
//! holds the call's create until the test releases it, so the hand-over happens at exactly
//! that moment. PostgreSQL and Redis, as in a cluster; both schedulers in one process.

use std::time::Duration;

use serde_json::json;
use slotd_core::clock::Clock;
use slotd_server::scheduler::{Scheduler, SchedulerError};
use slotd_store::StoreError;

use crate::support::*;

const POOL: &str = "fixture";

/// What the database holds for a task: its units and its event log.
async fn stored(m: &Manual, task: &str) -> (Vec<slotd_core::model::Unit>, Vec<String>) {
    let store = &m.services.store;
    let units = store.task_units(task).await.expect("units");
    let events = store
        .unit_events(task)
        .await
        .expect("events")
        .iter()
        .map(|e| format!("{e:?}"))
        .collect();
    (units, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_resumed_after_losing_its_lease_writes_nothing() {
    let db = crate::pg::PgSchema::create().await;
    let prefix = format!("slotd-test-fencing-{}", uuid::Uuid::new_v4().simple());
    let m = Manual::start_with(2, 100, |c| {
        c.database_url = db.url();
        c.redis_url = Some(crate::scale_cluster::redis_url());
        c.redis_prefix = prefix;
        c.scheduler.lease_ttl = Duration::from_millis(300);
    })
    .await;
    let a = m.scheduler.clone();
    let b = Scheduler::new(m.services.clone());
    let token_a = a
        .take_lease(POOL)
        .await
        .expect("Redis answers")
        .expect("A takes the free lease");
    let task = m.submit("fixture", json!({"count": 2, "polls": 1})).await;

    // A ticks and stops inside its handler call, at the provider's create.
    let gate = m.stub.hold_creates();
    let now = m.clock.now_ms();
    let a_tick = tokio::spawn({
        let a = a.clone();
        async move { a.run_once(POOL, now).await }
    });
    gate.arrived(1).await;
    let before = stored(&m, &task).await;
    assert!(
        before
            .0
            .iter()
            .all(|u| u.status == slotd_core::model::UnitStatus::Submitted),
        "A marked the units before calling: {:?}",
        before.0
    );

    // A's lease runs out (its coordinator is stopped with it); B takes the pool.
    let token_b = eventually(Duration::from_secs(10), "B takes the pool", async || {
        b.take_lease(POOL).await.ok().flatten()
    })
    .await;
    assert!(token_b > token_a, "{token_b} > {token_a}");

    // A resumes: its provider calls answer, its write is refused, nothing of it lands.
    gate.release();
    let outcome = a_tick.await.expect("A's tick ran");
    assert!(
        matches!(
            outcome,
            Err(SchedulerError::Store(StoreError::Fenced { .. }))
        ),
        "A's resumed tick must be refused by the fence: {outcome:?}"
    );
    assert_eq!(stored(&m, &task).await, before, "A's resumed tick wrote");
    assert_eq!(a.lease_token(POOL), None, "A still holds the lease");
    assert!(a.held_pools().is_empty(), "{:?}", a.held_pools());
    assert_eq!(b.lease_token(POOL), Some(token_b));

    // B finishes the work: the units A marked are in doubt, resolved by their keys, so the
    // jobs A created are adopted, not created again.
    let mut rounds = 0;
    while m.task(&task).await["status"] != "completed" {
        rounds += 1;
        assert!(rounds < 200, "B did not finish: {}", m.task(&task).await);
        m.clock.advance(500);
        let now = m.clock.now_ms();
        b.run_once(POOL, now).await.expect("B ticks");
        b.finalize_once(now).await.expect("B finalizes");
        b.finalize_idle().await;
    }
    let stats = m.stub.stats();
    assert_eq!(stats.creates, 2, "each unit's job created once");
    assert_eq!(stats.duplicate_creates, 0, "a key was sent twice");
    m.check().await;
}
