//! A late release frees only the submission that took the slot (docs/state-machine.md, "Slots").
//!
//! A unit leaves `submitted` for `pending` (a two-stage unit's next stage, a create that made
//! nothing), and the process that wrote it is slow to release its slot; meanwhile the pool's
//! tick grants the same unit again and submits it. Slot sets used to hold bare unit ids: the
//! grant found the id in the set and took no slot, and the late release then took the new
//! submission's slot out, so the set held one fewer than were submitted and the next fill went
//! over the pool's maximum. Made deterministic here: the slot store's `release` first runs a
//! whole tick (the re-grant) and only then releases.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use slotd_core::clock::Clock;
use slotd_core::model::{Unit, UnitStatus};
use slotd_store::{Field, UnitUpdate};
use slotd_units::lifecycle::Origin;
use slotd_units::services::Services;

use super::Scheduler;
use super::deadlines::grant_tests::{build_slots, idle_task};
use slotd_coord::slots::testing::{BeforeRebuild, RebuildHook};
use slotd_coord::slots::{SlotError, holder};

const POOL: &str = "fixture";

/// The units of `pool` that are `submitted`, across `tasks`.
async fn submitted(services: &Services, tasks: &[&str]) -> Vec<Unit> {
    let mut out = Vec::new();
    for t in tasks {
        out.extend(
            services
                .store
                .task_units(t)
                .await
                .expect("units")
                .into_iter()
                .filter(|u| u.status == UnitStatus::Submitted),
        );
    }
    out
}

/// How the unit leaves `submitted` for `pending` while its job is done with.
#[derive(Clone, Copy, Debug)]
enum Back {
    /// Its first stage succeeded: the next stage waits for a slot of the same pool.
    NextStage,
    /// The provider answered the create with an error and made no job.
    NotCreated,
}

async fn a_late_release_frees_only_its_own_submission(back: Back) {
    let dir = tempfile::TempDir::new().expect("tmp");
    let (plain, clock) = build_slots(dir.path(), 2).await;
    let task_type = match back {
        Back::NextStage => "fixture-staged",
        Back::NotCreated => "fixture",
    };
    let task = idle_task(&plain, task_type, 1).await;
    let report = Scheduler::new(plain.clone())
        .run_once(POOL, clock.now_ms())
        .await
        .expect("tick");
    assert_eq!(report.accepted, 1, "{report:?}");
    let unit = submitted(&plain, &[&task]).await.remove(0);
    let first = holder(&unit.id, unit.submitted_at.expect("marked"));

    // The releasing process stalls: before the first submission's slot goes, the pool's tick
    // grants the unit again (it is pending and due) and submits it.
    let fired = Arc::new(AtomicBool::new(false));
    let hook: RebuildHook = Arc::new({
        let (plain, clock, first, fired) =
            (plain.clone(), clock.clone(), first.clone(), fired.clone());
        move |_set: String, names: Vec<String>| {
            let (plain, clock, fired) = (plain.clone(), clock.clone(), fired.clone());
            let ours = names.contains(&first);
            Box::pin(async move {
                if !ours || fired.swap(true, Ordering::SeqCst) {
                    return Ok(());
                }
                clock.advance(1_000);
                Scheduler::new(plain)
                    .run_once(POOL, clock.now_ms())
                    .await
                    .map(|_| ())
                    .map_err(|e| SlotError::Unavailable(format!("the racing tick: {e}")))
            })
        }
    });
    let mut slow = plain.clone();
    slow.slots = Arc::new(BeforeRebuild::releases(plain.slots.clone(), hook));

    let now = clock.now_ms();
    let mut update = UnitUpdate {
        unit_id: unit.id.clone(),
        from: Some(UnitStatus::Submitted),
        from_stage: Some(unit.stage.clone()),
        from_submitted_at: unit.submitted_at,
        to: Some(UnitStatus::Pending),
        provider_job_id: Field::Clear,
        submitted_at: Field::Clear,
        polls: Some(0),
        next_at: Some(now),
        ..UnitUpdate::default()
    };
    match back {
        Back::NextStage => {
            update.stage = Some("two".into());
            update.detail = Some("stage one succeeded; next stage two".into());
        }
        Back::NotCreated => {
            update.error = Field::Set(r#"{"code":"not_created","message":"503"}"#.into());
            update.detail = Some("provider created no job; back to pending".into());
        }
    }
    let origins = [(unit.id.as_str(), Origin::from(&unit))].into();
    let done = slotd_units::lifecycle::apply_changes(&slow, &[update], &origins, now, None)
        .await
        .expect("applied");
    assert_eq!(done.applied, 1, "{done:?}");
    assert!(fired.load(Ordering::SeqCst), "the racing tick ran");

    let again = submitted(&plain, &[&task]).await;
    assert_eq!(again.len(), 1, "the racing tick submitted the unit again");
    assert_ne!(again[0].submitted_at, unit.submitted_at);
    assert_eq!(
        plain.slots.used(POOL).await.expect("used"),
        1,
        "{back:?}: the late release took the new submission's slot"
    );

    // The pool's maximum holds: two more units find one slot between them.
    let more = idle_task(&plain, "fixture", 2).await;
    clock.advance(1_000);
    Scheduler::new(plain.clone())
        .run_once(POOL, clock.now_ms())
        .await
        .expect("tick");
    let running = submitted(&plain, &[&task, &more]).await;
    assert_eq!(
        running.len(),
        2,
        "{back:?}: {} submitted on a pool of 2",
        running.len()
    );
    assert_eq!(plain.slots.used(POOL).await.expect("used"), 2);
}

#[tokio::test]
async fn a_late_release_after_a_next_stage_frees_only_its_own_submission() {
    a_late_release_frees_only_its_own_submission(Back::NextStage).await;
}

#[tokio::test]
async fn a_late_release_after_a_create_that_made_nothing_frees_only_its_own_submission() {
    a_late_release_frees_only_its_own_submission(Back::NotCreated).await;
}
