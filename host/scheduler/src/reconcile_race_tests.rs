//! The slot set's rebuild racing a release (found by a long chaos run, fixed in c2efaf9): a
//! unit that leaves `submitted` between the rebuild's read of the database and the set's
//! rebuild had its slot released before the rebuild put it back, so without the rebuild's
//! second read it would hold a slot nobody releases until the next reconciliation. Made
//! deterministic here: the slot store's `reconcile` first lets the unit end (its change
//! commits, then its slot is released, as the lifecycle does) and only then rebuilds the set
//! from the list read before.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;

use slotd_core::clock::Clock;
use slotd_core::model::UnitStatus;
use slotd_store::{DynStore, UnitUpdate};

use super::Scheduler;
use super::deadlines::grant_tests::{build, post};
use slotd_coord::slots::local::LocalSlots;
use slotd_coord::slots::testing::{BeforeRebuild, RebuildHook};
use slotd_coord::slots::{DynSlots, SlotError};

/// The in-process slot store, but the first rebuild of a set lets `unit` end in the database
/// and releases its slot before rebuilding the set from the list it was given.
fn ends_during_the_rebuild(
    inner: DynSlots,
    store: DynStore,
    (unit, held): (String, String),
    now: i64,
) -> DynSlots {
    let fired = Arc::new(AtomicBool::new(false));
    let released = inner.clone();
    let hook: RebuildHook = Arc::new(move |pool: String, _read: Vec<String>| {
        let (fired, store, unit, held, released) = (
            fired.clone(),
            store.clone(),
            unit.clone(),
            held.clone(),
            released.clone(),
        );
        Box::pin(async move {
            if fired.swap(true, Ordering::SeqCst) {
                return Ok(());
            }
            let ended = UnitUpdate {
                unit_id: unit.clone(),
                from: Some(UnitStatus::Submitted),
                to: Some(UnitStatus::Failed),
                detail: Some("ended while the slot set was rebuilt".into()),
                ..UnitUpdate::default()
            };
            let report = store
                .unit_apply(&[ended], now, None)
                .await
                .map_err(|e| SlotError::Unavailable(format!("ending the unit: {e}")))?;
            assert_eq!(report.applied.len(), 1, "{report:?}");
            released.release(&pool, std::slice::from_ref(&held)).await
        })
    });
    Arc::new(BeforeRebuild::new(inner, hook))
}

#[tokio::test]
async fn a_unit_released_during_the_rebuild_holds_no_slot_after_it() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let (services, clock) = build(dir.path()).await;
    let unit = json!({"count": 1, "behavior": "quick"});
    let mut tasks = Vec::new();
    for _ in 0..3 {
        tasks.push(post(&services, json!({ "payload": unit })).await);
    }
    let report = Scheduler::new(services.clone())
        .run_once("fixture", clock.now_ms())
        .await
        .expect("tick");
    assert_eq!(report.accepted, 3, "{report:?}");
    let first = services.store.task_units(&tasks[0]).await.expect("units");
    assert_eq!(first[0].status, UnitStatus::Submitted, "{:?}", first[0]);

    let first_holder =
        slotd_coord::slots::holder(&first[0].id, first[0].submitted_at.expect("submitted"));
    // The slot set is lost (a fresh store: Redis restarted empty) and rebuilt; one of the
    // three ends between the rebuild's read and the set's rebuild.
    let mut lost = services.clone();
    lost.slots = ends_during_the_rebuild(
        Arc::new(LocalSlots::new()),
        // The service holds no unit write; the test writes the end as a second process
        // would, through a store of its own on the same database.
        slotd_store::open(&services.config.database_url)
            .await
            .expect("the store, with its unit writes"),
        (first[0].id.clone(), first_holder.clone()),
        clock.now_ms() + 1,
    );
    let reconciled = Scheduler::new(lost.clone())
        .reconcile("fixture")
        .await
        .expect("reconcile");

    let still = services
        .store
        .unit_list_submitted_accounts("fixture")
        .await
        .expect("submitted");
    assert_eq!(still.len(), 2, "{still:?}");
    assert_eq!(
        lost.slots.used("fixture").await.expect("used"),
        2,
        "the set holds exactly the submitted units after the rebuild ({reconciled:?})"
    );
    assert!(
        !reconciled.restored.contains(&first_holder),
        "the ended unit is not reported restored: {reconciled:?}"
    );
}
