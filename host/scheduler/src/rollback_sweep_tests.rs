//! A rolled-back candidate keeps failing after its rollback: until every process's release
//! follower drops the canary it may take units, and the jobs it created stay on it. The retry
//! of the tasks whose units it failed once ran only right after the rollback's compare-and-set,
//! so a unit it failed a moment later was never retried (the cluster test saw a task end
//! `failed` after a rollback), and a scheduler killed between the move and the retry lost
//! every retry. The rollout loop now sweeps rolled-back rollouts on each pass.

use slotd_core::clock::Clock;
use slotd_core::model::{Unit, UnitStatus};
use slotd_store::{Rollout, RolloutState, UnitUpdate};
use slotd_units::lifecycle::{Origin, apply_changes};
use slotd_units::services::Services;

use super::Scheduler;
use super::deadlines::grant_tests::{build_slots, idle_task};
use super::rollout::apply_move;

const CANDIDATE: &str = "c4nd1d4te";
const INCUMBENT: &str = "1ncumbent";

/// Write `update` for `unit` through the lifecycle, as a tick of the candidate would.
async fn write(services: &Services, unit: &Unit, update: UnitUpdate) {
    let origins = [(unit.id.as_str(), Origin::from(unit))].into();
    let done = apply_changes(services, &[update], &origins, services.clock.now_ms(), None)
        .await
        .expect("written");
    assert_eq!(done.applied, 1, "{done:?}");
}

/// The candidate's job of `unit` failed on a poll.
fn failed_on_the_candidate(unit: &Unit) -> UnitUpdate {
    UnitUpdate {
        unit_id: unit.id.clone(),
        from: Some(UnitStatus::Submitted),
        to: Some(UnitStatus::Failed),
        job_release: Some(CANDIDATE.into()),
        error: slotd_store::Field::Set(r#"{"code":"misread","message":"m"}"#.into()),
        detail: Some("provider job failed".into()),
        ..UnitUpdate::default()
    }
}

/// Two tasks of one unit each, submitted, their jobs created by the candidate; a running
/// rollout of it; the services and the tasks.
async fn rolling_out(
    dir: &std::path::Path,
) -> (
    Services,
    std::sync::Arc<slotd_core::clock::ManualClock>,
    Rollout,
    Vec<String>,
) {
    let (services, clock) = build_slots(dir, 4).await;
    let tasks = vec![
        idle_task(&services, "fixture", 1).await,
        idle_task(&services, "fixture", 1).await,
    ];
    Scheduler::new(services.clone())
        .run_once("fixture", clock.now_ms())
        .await
        .expect("tick");
    for t in &tasks {
        let unit = services.store.task_units(t).await.expect("units").remove(0);
        assert_eq!(unit.status, UnitStatus::Submitted, "{unit:?}");
        let pinned = UnitUpdate {
            unit_id: unit.id.clone(),
            from: Some(UnitStatus::Submitted),
            to: Some(UnitStatus::Submitted),
            job_release: Some(CANDIDATE.into()),
            ..UnitUpdate::default()
        };
        write(&services, &unit, pinned).await;
    }
    let now = clock.now_ms();
    let rollout = Rollout {
        id: "r1".into(),
        name: "fixture".into(),
        candidate: CANDIDATE.into(),
        incumbent: INCUMBENT.into(),
        stages: vec![50, 100],
        stage: 0,
        state: RolloutState::Running,
        min_units: 1,
        margin: 0.0,
        started_at: now - 1,
        stage_started_at: now - 1,
        updated_at: now - 1,
        reason: None,
        figures: None,
        events: Vec::new(),
    };
    assert!(
        services
            .store
            .rollout_start(&rollout)
            .await
            .expect("started")
    );
    (services, clock, rollout, tasks)
}

async fn status_of(services: &Services, task: &str) -> UnitStatus {
    services.store.task_units(task).await.expect("units")[0].status
}

#[tokio::test]
async fn what_the_candidate_fails_after_its_rollback_is_retried() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let (services, clock, rollout, tasks) = rolling_out(dir.path()).await;
    let first = services
        .store
        .task_units(&tasks[0])
        .await
        .expect("units")
        .remove(0);
    write(&services, &first, failed_on_the_candidate(&first)).await;

    clock.advance(1_000);
    let m = rollout.move_to(
        0,
        RolloutState::RolledBack,
        "stage 1 (50 %) failed; rolled back".into(),
        None,
        clock.now_ms(),
    );
    assert!(apply_move(&services, &rollout, &m).await.expect("moved"));
    assert_eq!(
        status_of(&services, &tasks[0]).await,
        UnitStatus::Pending,
        "retried at the move"
    );

    // The candidate's other job, still in flight at the rollback, fails a moment later.
    clock.advance(1_000);
    let second = services
        .store
        .task_units(&tasks[1])
        .await
        .expect("units")
        .remove(0);
    write(&services, &second, failed_on_the_candidate(&second)).await;
    Scheduler::new(services.clone())
        .judge_rollouts()
        .await
        .expect("judged");
    assert_eq!(
        status_of(&services, &tasks[1]).await,
        UnitStatus::Pending,
        "a failure of the candidate after its rollback is retried by the rollout loop"
    );
    // The retried unit is the candidate's no longer: a later failure of it is not the
    // candidate's, and the sweep leaves it be.
    let again = services
        .store
        .task_units(&tasks[1])
        .await
        .expect("units")
        .remove(0);
    assert_eq!(again.releases.job_release, None, "{again:?}");
}

#[tokio::test]
async fn a_rollback_whose_scheduler_died_before_its_retry_is_retried_by_the_next_pass() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let (services, clock, rollout, tasks) = rolling_out(dir.path()).await;
    for t in &tasks {
        let unit = services.store.task_units(t).await.expect("units").remove(0);
        write(&services, &unit, failed_on_the_candidate(&unit)).await;
    }
    // The move is committed, and the scheduler that made it dies before retrying anything.
    clock.advance(1_000);
    let m = rollout.move_to(
        0,
        RolloutState::RolledBack,
        "stage 1 (50 %) failed; rolled back".into(),
        None,
        clock.now_ms(),
    );
    assert!(services.store.rollout_move(&m).await.expect("moved"));
    for t in &tasks {
        assert_eq!(status_of(&services, t).await, UnitStatus::Failed);
    }
    // Any scheduler's next pass of the rollout loop.
    Scheduler::new(services.clone())
        .judge_rollouts()
        .await
        .expect("judged");
    for t in &tasks {
        assert_eq!(
            status_of(&services, t).await,
            UnitStatus::Pending,
            "task {t}"
        );
    }
}
