//! Units held back by a budget are released by the lifecycle, with their follow-ups. The
//! store's `budget_set` used to clear the units' wait reasons itself, called from the API
//! with no follow-up: a task's snapshot in the hot cache (Redis) kept saying its units waited
//! for the budget, and only the pools with a configured limit were woken, never a route's.

use slotd_core::clock::Clock;
use slotd_core::model::UnitStatus;
use slotd_store::{Field, UnitUpdate};
use slotd_units::lifecycle::release_holds;

use super::deadlines::grant_tests::{build_with, idle_task};

#[tokio::test]
async fn releasing_a_budgets_holds_drops_the_task_snapshots_and_wakes_the_pools() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let keys = slotd_coord::keyspace::testing::fresh();
    let (services, clock) = build_with(dir.path(), 2, |c| {
        c.redis_url = Some(slotd_coord::keyspace::testing::redis_url());
        c.redis_prefix = keys.prefix().to_string();
    })
    .await;
    assert!(services.hot.enabled(), "the hot cache is on with Redis");
    let task = idle_task(&services, "fixture", 1).await;
    let unit = services
        .store
        .task_units(&task)
        .await
        .expect("units")
        .remove(0);
    // Held back by the budget until a minute from now (as the marker holds a grant it refused).
    let store = slotd_store::open(&services.config.database_url)
        .await
        .expect("the whole store");
    let later = clock.now_ms() + 60_000;
    let held = UnitUpdate {
        unit_id: unit.id.clone(),
        from: Some(UnitStatus::Pending),
        to: Some(UnitStatus::Pending),
        wait_reason: Field::Set("budget".into()),
        next_at: Some(later),
        ..UnitUpdate::default()
    };
    let report = store
        .unit_apply(&[held], clock.now_ms(), None)
        .await
        .expect("held");
    assert_eq!(report.applied, std::slice::from_ref(&unit.id));
    // A reader cached the task's view meanwhile.
    let seen = services.hot.lookup(&task).await.expect("Redis answers");
    assert!(
        services
            .hot
            .fill(&task, "local", &seen.generation, r#"{"waiting":"budget"}"#)
            .await
    );
    assert!(
        services
            .hot
            .lookup(&task)
            .await
            .and_then(|l| l.snapshot)
            .is_some()
    );
    let pool = services
        .wake
        .listener(slotd_coord::wake::WakeKey::Pool("fixture"));

    let now = clock.now_ms();
    let released = release_holds(&services, "local", now)
        .await
        .expect("released");
    assert_eq!(released, 1);
    let unit = services
        .store
        .task_units(&task)
        .await
        .expect("units")
        .remove(0);
    assert_eq!(unit.terms.wait_reason, None, "{unit:?}");
    assert_eq!(unit.next_at, now, "due now, not at the hold's end");
    assert!(
        services
            .hot
            .lookup(&task)
            .await
            .and_then(|l| l.snapshot)
            .is_none(),
        "the task's cached view still says it waits for the budget"
    );
    assert!(
        tokio::time::timeout(std::time::Duration::from_secs(5), pool.notified())
            .await
            .is_ok(),
        "the unit's pool is woken"
    );
    // Setting the budget record alone changes no unit any more.
    assert_eq!(
        release_holds(&services, "local", now).await.expect("again"),
        0
    );
    slotd_coord::keyspace::testing::flush(&keys).await;
}
