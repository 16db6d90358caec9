//! Poll rounds through whole ticks (`run_once`, the fixture handler, a manual clock): while a
//! backlog waits, a poll that comes due before the pool's planned round waits for it, and the
//! round reads every such unit together.

use serde_json::json;

use slotd_core::clock::{Clock, ManualClock};
use slotd_core::model::UnitStatus;

use super::deadlines::grant_tests::{build, post};
use super::{Scheduler, TickReport};

/// One tick of the pool at the clock's time.
async fn tick(sched: &Scheduler, clock: &ManualClock) -> TickReport {
    sched
        .run_once("fixture", clock.now_ms())
        .await
        .expect("tick")
}

#[tokio::test]
async fn polls_due_between_rounds_wait_for_the_round_and_meet_in_it() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let (services, clock) = build(dir.path()).await;
    let sched = Scheduler::new(services.clone());
    // Twelve jobs that run until further notice on a pool of ten: two wait, a backlog.
    let task = post(
        &services,
        json!({"payload": {"count": 12, "behavior": "idle"}}),
    )
    .await;
    let first = tick(&sched, &clock).await;
    assert_eq!(first.accepted, 10, "{first:?}");
    let units = services.store.task_units(&task).await.expect("units");
    let submitted: Vec<_> = units
        .iter()
        .filter(|u| u.status == UnitStatus::Submitted)
        .collect();
    assert_eq!(submitted.len(), 10);
    let last_due = submitted.iter().map(|u| u.next_at).max().expect("due");

    // Every first read has come due (each unit's own floor), but the pool's round is later.
    clock.set(last_due + 10);
    let round = last_due + 5_000;
    services
        .durations
        .rounds
        .lock()
        .insert("fixture".into(), round);
    let between = tick(&sched, &clock).await;
    assert_eq!(between.polled, 0, "{between:?}");
    assert_eq!(between.held_for_round, 10, "{between:?}");
    assert_eq!(between.round_at, Some(round));
    assert_eq!(
        between.next_due,
        Some(round),
        "the pool sleeps until its round, not in a loop over polls it holds"
    );

    // At the round, all ten are read in one call.
    clock.set(round);
    let at_round = tick(&sched, &clock).await;
    assert_eq!(at_round.polled, 10, "{at_round:?}");
    assert_eq!(at_round.held_for_round, 0, "{at_round:?}");
    // The next round is planned for all of them together.
    let units = services.store.task_units(&task).await.expect("units");
    let next: std::collections::BTreeSet<i64> = units
        .iter()
        .filter(|u| u.status == UnitStatus::Submitted)
        .map(|u| u.next_at)
        .collect();
    assert_eq!(next.len(), 1, "one round for all: {next:?}");

    // Without a backlog (the waiting units cancelled), nothing waits for a round.
    let planned = *next.first().expect("a round");
    // (The service holds no unit write: a store of its own on the same database.)
    let writer = slotd_store::open(&services.config.database_url)
        .await
        .expect("a store");
    for u in units.iter().filter(|u| u.status == UnitStatus::Pending) {
        writer
            .unit_apply(
                &[slotd_store::UnitUpdate {
                    unit_id: u.id.clone(),
                    from: Some(UnitStatus::Pending),
                    to: Some(UnitStatus::Cancelled),
                    detail: Some("cancelled by the test".into()),
                    ..slotd_store::UnitUpdate::default()
                }],
                clock.now_ms(),
                None,
            )
            .await
            .expect("cancelled");
    }
    services
        .durations
        .rounds
        .lock()
        .insert("fixture".into(), planned + 60_000);
    clock.set(planned);
    let no_backlog = tick(&sched, &clock).await;
    assert_eq!(no_backlog.polled, 10, "{no_backlog:?}");
    assert_eq!(no_backlog.held_for_round, 0, "{no_backlog:?}");
}
