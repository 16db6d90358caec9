//! Fencing, deterministically (docs/operations.md): a scheduler stopped inside a handler call loses its
//! pool to another; when it resumes, its tick writes nothing and it drops the lease. The stub
//! holds the call's create until the test releases it, so the hand-over happens at exactly
//! that moment. PostgreSQL and Redis, as in a cluster; both schedulers in one process.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;
use slotd_core::clock::Clock;
use slotd_server::scheduler::{Scheduler, SchedulerError};
use slotd_server::slots::testing::{BeforeRebuild, RebuildHook};
use slotd_server::slots::{DynSlots, SlotError};
use slotd_store::StoreError;
use tokio::sync::oneshot;

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

/// Tick and finalize `task` on scheduler `b`, half a second of the clock at a time, until
/// it completes.
async fn finish(m: &Manual, b: &Arc<Scheduler>, task: &str) {
    let mut rounds = 0;
    while m.task(task).await["status"] != "completed" {
        rounds += 1;
        assert!(rounds < 200, "B did not finish: {}", m.task(task).await);
        m.clock.advance(500);
        let now = m.clock.now_ms();
        b.run_once(POOL, now).await.expect("B ticks");
        b.finalize_once(now).await.expect("B finalizes");
        b.finalize_idle().await;
    }
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
    finish(&m, &b, &task).await;
    let stats = m.stub.stats();
    assert_eq!(stats.creates, 2, "each unit's job created once");
    assert_eq!(stats.duplicate_creates, 0, "a key was sent twice");
    m.check().await;
}

/// The slot store, but the first rebuild of a set stops after the database was read and
/// before the set is written, until the test lets it go on: a scheduler paused there (CI saw
/// one, SIGSTOPped by `scale_cluster::a_paused_scheduler_is_fenced_out`), resumed, would write
/// a set without the newer holder's grants: 19 submitted in a pool of 18.
fn stops_mid_rebuild(
    inner: DynSlots,
    arrived: oneshot::Sender<()>,
    resume: oneshot::Receiver<()>,
) -> DynSlots {
    let gate = Arc::new(Mutex::new(Some((arrived, resume))));
    let hook: RebuildHook = Arc::new(move |_set: String, _read: Vec<String>| {
        let gate = gate.lock().take();
        Box::pin(async move {
            if let Some((arrived, resume)) = gate {
                let _ = arrived.send(());
                let _ = resume.await;
            }
            Ok(())
        })
    });
    Arc::new(BeforeRebuild::new(inner, hook))
}

/// The holders of `pool`'s slot set in Redis, sorted.
async fn holders(prefix: &str, pool: &str) -> Vec<String> {
    let client = redis::Client::open(crate::scale_cluster::redis_url()).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let mut ids: Vec<String> = redis::cmd("SMEMBERS")
        .arg(format!("{prefix}slots:{pool}"))
        .query_async(&mut conn)
        .await
        .expect("SMEMBERS");
    ids.sort();
    ids
}

/// A scheduler paused inside a rebuild of its pool's slot set, between reading the submitted
/// units and writing the set, loses the pool; the new holder grants the pool full. Resumed,
/// the old one's rebuild would write the set as it read it, without the new holder's grants,
/// and the pool would be granted past its maximum. It is refused by the fence instead: the
/// set still holds exactly the submitted units, and the provider never runs more than the
/// pool's two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_rebuild_of_the_slot_set_is_fenced_out() {
    let db = crate::pg::PgSchema::create().await;
    let prefix = format!("slotd-test-fencing-{}:", uuid::Uuid::new_v4().simple());
    let m = Manual::start_with(2, 100, |c| {
        c.database_url = db.url();
        c.redis_url = Some(crate::scale_cluster::redis_url());
        c.redis_prefix = prefix.clone();
        c.scheduler.lease_ttl = Duration::from_millis(300);
    })
    .await;
    let (arrived_tx, arrived) = oneshot::channel();
    let (resume, resume_rx) = oneshot::channel();
    let mut paused = m.services.clone();
    paused.slots = stops_mid_rebuild(m.services.slots.clone(), arrived_tx, resume_rx);
    let a = Scheduler::new(paused);
    let b = Scheduler::new(m.services.clone());
    a.take_lease(POOL)
        .await
        .expect("Redis answers")
        .expect("A takes the free lease");
    let task = m.submit("fixture", json!({"count": 4, "polls": 3})).await;

    // A's first tick rebuilds the pool's set (a lease just won) and stops there, having read
    // that nothing is submitted.
    let now = m.clock.now_ms();
    let a_tick = tokio::spawn({
        let a = a.clone();
        async move { a.run_once(POOL, now).await }
    });
    arrived.await.expect("A reached the rebuild");

    // A's lease runs out; B takes the pool and fills it: two units submitted, two holders.
    eventually(Duration::from_secs(10), "B takes the pool", async || {
        b.take_lease(POOL).await.ok().flatten()
    })
    .await;
    let report = b.run_once(POOL, m.clock.now_ms()).await.expect("B ticks");
    assert_eq!(report.claimed, 2, "{report:?}");
    let submitted = |units: Vec<slotd_core::model::Unit>| {
        let mut ids: Vec<String> = units
            .into_iter()
            .filter(|u| u.status == slotd_core::model::UnitStatus::Submitted)
            .map(|u| slotd_coord::slots::holder(&u.id, u.submitted_at.unwrap_or(0)))
            .collect();
        ids.sort();
        ids
    };
    let marked = submitted(m.services.store.task_units(&task).await.expect("units"));
    assert_eq!(marked.len(), 2);
    assert_eq!(holders(&prefix, POOL).await, marked);

    // A resumes: its rebuild from the earlier read is refused, A lets the pool go, and the
    // set still holds B's two units.
    resume.send(()).expect("A waits");
    let outcome = a_tick.await.expect("A's tick ran");
    assert!(
        matches!(
            outcome,
            Err(SchedulerError::Slots(SlotError::Fenced { .. }))
        ),
        "A's rebuild must be refused by the fence: {outcome:?}"
    );
    assert!(a.held_pools().is_empty(), "{:?}", a.held_pools());
    assert_eq!(
        holders(&prefix, POOL).await,
        marked,
        "A's rebuild wrote the set"
    );

    // B finishes the work within the pool's two slots.
    finish(&m, &b, &task).await;
    let stats = m.stub.stats();
    assert_eq!(stats.creates, 4, "each unit's job created once");
    assert!(stats.max_in_flight <= 2, "{} at once", stats.max_in_flight);
    m.check().await;
}

/// The lease loop drops a pool (lost, or given up) after the service loop was allowed to tick
/// it and before the tick read its fence. "No fence" once also meant "embedded, one instance",
/// so that tick ran unfenced: marker, handler calls and writes for a pool another instance
/// may hold by then. With leases configured a missing fence is refused: the tick writes
/// nothing, reaches no provider, and the pool is not driven until its lease is won again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_whose_lease_was_dropped_before_it_read_its_fence_writes_nothing() {
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
    a.take_lease(POOL)
        .await
        .expect("Redis answers")
        .expect("A takes the free lease");
    // A first tick under the lease rebuilds the pool's slot set (a lease just won), so the
    // refused tick below has no rebuild of its own to be refused by.
    a.run_once(POOL, m.clock.now_ms())
        .await
        .expect("a fenced tick");
    let task = m.submit("fixture", json!({"count": 2, "polls": 1})).await;
    let before = stored(&m, &task).await;

    // What the lease loop's drop does first, between the service loop's `may_tick` and the tick.
    a.clear_fence(POOL);
    let outcome = a.run_once(POOL, m.clock.now_ms()).await;
    assert!(
        matches!(outcome, Err(SchedulerError::Unfenced(ref p)) if p == POOL),
        "a tick without its fence must be refused: {outcome:?}"
    );
    assert_eq!(stored(&m, &task).await, before, "the unfenced tick wrote");
    assert_eq!(
        m.stub.stats().creates,
        0,
        "the unfenced tick reached the provider"
    );
    assert!(a.held_pools().is_empty(), "{:?}", a.held_pools());

    // Won again (once the lease it no longer renews runs out), the pool is driven as before.
    eventually(
        Duration::from_secs(10),
        "A takes the pool again",
        async || a.take_lease(POOL).await.ok().flatten(),
    )
    .await;
    finish(&m, &a, &task).await;
    assert_eq!(m.stub.stats().creates, 2, "each unit's job created once");
    m.check().await;
}
