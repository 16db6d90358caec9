//! A database filled by the previous schema and then migrated keeps everything it held, and
//! the queries that read the changed indexes find the same units after the upgrade.
//!
//! The backends' tests migrate a fresh database only up to the last migration before the one
//! under test, fill it with [`fill_before_upgrade`], run every migration, and hand the result
//! of the fill to [`check_after_upgrade`].

use super::*;
use crate::UnitEvent;
use slotd_core::model::Unit;

/// `all`'s migrations before `version`: the schema a database had before it.
pub(crate) fn migrations_before(
    all: &sqlx::migrate::Migrator,
    version: i64,
) -> sqlx::migrate::Migrator {
    let before = all.migrations.iter().filter(|m| m.version < version);
    sqlx::migrate::Migrator {
        migrations: std::borrow::Cow::Owned(before.cloned().collect()),
        ..sqlx::migrate::Migrator::DEFAULT
    }
}

/// What a filled database held: every task's units and events, and the counts per pool.
pub(crate) struct Held {
    tasks: Vec<(String, Vec<Unit>, Vec<String>)>,
    counts: Vec<(String, UnitStatus, u64)>,
}

/// The events as compared: every field but nothing derived from the read.
fn events_text(events: &[UnitEvent]) -> Vec<String> {
    events.iter().map(|e| format!("{e:?}")).collect()
}

async fn held(store: &DynStore) -> Held {
    let mut tasks = Vec::new();
    for id in ["up1", "up2"] {
        let units = store.task_units(id).await.unwrap();
        let events = events_text(&store.unit_events(id).await.unwrap());
        tasks.push((id.to_string(), units, events));
    }
    let mut counts: Vec<_> = store
        .unit_count_by_pool()
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.pool, c.status, c.count))
        .collect();
    counts.sort_by(|a, b| (&a.0, a.1.as_str()).cmp(&(&b.0, b.1.as_str())));
    Held { tasks, counts }
}

/// Units in every status the changed indexes distinguish: pending, submitted with a provider
/// job, succeeded, completed (with a job id it no longer waits on) and failed.
pub(crate) async fn fill_before_upgrade(store: &DynStore) -> Held {
    create(store, task("up1", "acme", VIDEO, POOL, 4, 0)).await;
    create(store, task("up2", "globex", VIDEO, POOL, 2, 0)).await;
    submit(store, &["up1-u1", "up1-u3"], T0).await;
    for (id, job) in [("up1-u1", "job-1"), ("up1-u3", "job-3")] {
        let mut u = update(id, UnitStatus::Submitted, UnitStatus::Submitted);
        u.provider_job_id = Field::Set(job.into());
        u.next_at = Some(T0 + 5_000);
        u.detail = Some(format!("accepted as {job}"));
        apply(store, u, T0 + 1).await;
    }
    succeed(store, "up1-u2").await;
    let mut done = update("up1-u3", UnitStatus::Submitted, UnitStatus::Succeeded);
    done.result = Some(r#"{"url":"https://x/3.mp4"}"#.into());
    done.next_at = Some(T0 + 10);
    apply(store, done, T0 + 3).await;
    let claimed = store
        .unit_claim_finalize("fin", T0 + 60_000, T0 + 20, 10)
        .await
        .unwrap();
    assert_eq!(
        ids(&claimed),
        ["up1-u2", "up1-u3"],
        "both succeeded units claimed"
    );
    assert!(
        store
            .unit_complete("up1-u3", "fin", r#"{"stored":"s3://b/3.mp4"}"#, T0 + 30)
            .await
            .unwrap()
    );
    // Back to succeeded, due again: a claim after the upgrade must find it.
    let released = crate::FinalizeRelease {
        id: "up1-u2",
        owner: "fin",
        error: r#"{"message":"download failed"}"#,
        next_at: T0 + 40,
        give_up: false,
    };
    assert!(
        store
            .unit_finalize_release(released, T0 + 31)
            .await
            .unwrap()
    );
    submit(store, &["up2-u0"], T0 + 4).await;
    apply(
        store,
        update("up2-u0", UnitStatus::Submitted, UnitStatus::Failed),
        T0 + 5,
    )
    .await;
    held(store).await
}

/// After every migration: the same units, events and counts, and each query served by a
/// changed index finds what it found before.
pub(crate) async fn check_after_upgrade(store: &DynStore, before: Held) {
    let after = held(store).await;
    for ((id, units, events), (_, units_after, events_after)) in
        before.tasks.iter().zip(&after.tasks)
    {
        assert_eq!(
            units, units_after,
            "task {id}: the units changed in the upgrade"
        );
        assert_eq!(
            events, events_after,
            "task {id}: the event log changed in the upgrade"
        );
    }
    assert_eq!(before.counts, after.counts, "counts per pool and status");
    let vt = types(&[VIDEO]);
    let found = store
        .unit_find_by_provider(&vt, Some("job-1"), None)
        .await
        .unwrap();
    assert_eq!(found.map(|u| u.id), Some("up1-u1".to_string()));
    assert!(
        store
            .unit_find_by_provider(&vt, Some("job-3"), None)
            .await
            .unwrap()
            .is_none(),
        "a completed unit's job is not waited on"
    );
    let due = store
        .unit_list_due(POOL, &vt, T0 + 5_000, 10)
        .await
        .unwrap();
    assert_eq!(ids(&due), ["up1-u1"]);
    assert_eq!(
        store
            .unit_next_due(POOL, UnitStatus::Submitted)
            .await
            .unwrap(),
        Some(T0 + 5_000)
    );
    let pending = store.unit_list_pending(POOL, &vt, T0, 10).await.unwrap();
    assert_eq!(ids(&pending), ["up1-u0", "up2-u1"]);
    // Both due times in one read, each as its own read gives it, in the order asked.
    let next_pending = store
        .unit_next_due(POOL, UnitStatus::Pending)
        .await
        .unwrap();
    assert!(next_pending.is_some());
    let (sub, pend) = (UnitStatus::Submitted, UnitStatus::Pending);
    assert_eq!(
        store.unit_next_due_of_both(POOL, sub, pend).await.unwrap(),
        (Some(T0 + 5_000), next_pending)
    );
    assert_eq!(
        store.unit_next_due_of_both(POOL, pend, sub).await.unwrap(),
        (next_pending, Some(T0 + 5_000))
    );
    let claimed = store
        .unit_claim_finalize("fin2", T0 + 90_000, T0 + 50, 10)
        .await
        .unwrap();
    assert_eq!(ids(&claimed), ["up1-u2"]);
    // The newest events, found from the last id handed out (the log's ids are no longer a
    // B-tree on PostgreSQL): the claim just made, and the completion before the upgrade.
    let recent = store
        .unit_events_recent_with("finalized by", 100)
        .await
        .unwrap();
    assert_eq!(
        recent
            .iter()
            .map(|e| e.unit_id.as_str())
            .collect::<Vec<_>>(),
        ["up1-u3"]
    );
    let newest = store
        .unit_events_recent_with("finalization claimed by fin2", 1)
        .await;
    assert_eq!(newest.unwrap().len(), 1, "the claim is the newest event");
}
