//! What the crate's tests share: a store with units in flight.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use slotd_core::model::UnitStatus;
use slotd_store::{Created, Field, NewTask, NewUnit, RecordWrite, UnitUpdate, UnitWrite};

/// The task type of [`submitted_jobs`]' units.
pub(crate) const VIDEO: &str = "video";

/// A task of `n` units, all submitted, unit `i` running as provider job `job-{i}`.
pub(crate) async fn submitted_jobs(
    n: usize,
) -> (tempfile::TempDir, Arc<slotd_store::sqlite::SqliteStore>) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("slotd.db").display());
    let store = slotd_store::sqlite::SqliteStore::connect(&url)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let store = Arc::new(store);
    let task = NewTask {
        id: "t".into(),
        tenant: "acme".into(),
        task_type: VIDEO.into(),
        payload: "{}".into(),
        idempotency_key: None,
        priority: 0,
        completion_webhook_url: None,
        units: (0..n)
            .map(|i| NewUnit {
                id: format!("t-u{i}"),
                pool: "p".into(),
                stage: "main".into(),
                spec: "{}".into(),
                state: "{}".into(),
                routes: None,
                routing: None,
                cost_estimate: None,
                planned_release: None,
            })
            .collect(),
        now: 1,
        terms: Default::default(),
    };
    assert_eq!(
        store.task_create(task).await.unwrap(),
        Created::New("t".into())
    );
    let ids: Vec<String> = (0..n).map(|i| format!("t-u{i}")).collect();
    let marked = store.unit_mark_submitted(&ids, 2, 2, None).await.unwrap();
    assert_eq!(marked.len(), n);
    let accepted: Vec<UnitUpdate> = (0..n)
        .map(|i| UnitUpdate {
            unit_id: format!("t-u{i}"),
            from: Some(UnitStatus::Submitted),
            to: Some(UnitStatus::Submitted),
            provider_job_id: Field::Set(format!("job-{i}")),
            ..UnitUpdate::default()
        })
        .collect();
    assert_eq!(
        store
            .unit_apply(&accepted, 3, None)
            .await
            .unwrap()
            .applied
            .len(),
        n
    );
    (dir, store)
}
