//! What the suite's checks share: the fixed clock, the pool and task type, a task of `n`
//! units, and the moves every check makes (create, submit, apply, succeed), each asserting
//! it happened.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{Created, DynStore, NewTask, NewUnit, UnitUpdate};
use slotd_core::model::{Unit, UnitStatus};

pub(crate) const T0: i64 = 1_700_000_000_000;
pub(crate) const VIDEO: &str = "video";
pub(crate) const POOL: &str = "kling:video";

pub(crate) fn types(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A task of `n` units in `pool`, one stage "main".
pub(crate) fn task(
    id: &str,
    tenant: &str,
    task_type: &str,
    pool: &str,
    n: usize,
    priority: i32,
) -> NewTask {
    NewTask {
        id: id.into(),
        tenant: tenant.into(),
        task_type: task_type.into(),
        payload: r#"{"shots":[]}"#.into(),
        idempotency_key: None,
        priority,
        completion_webhook_url: None,
        units: (0..n)
            .map(|i| NewUnit {
                id: format!("{id}-u{i}"),
                pool: pool.into(),
                stage: "main".into(),
                spec: format!(r#"{{"shot":{i}}}"#),
                state: "{}".into(),
                routes: None,
                routing: None,
                cost_estimate: None,
                planned_release: None,
            })
            .collect(),
        now: T0,
        terms: Default::default(),
    }
}

pub(crate) async fn create(store: &DynStore, t: NewTask) {
    let id = t.id.clone();
    assert_eq!(store.task_create(t).await.unwrap(), Created::New(id));
}

pub(crate) async fn unit(store: &DynStore, task_id: &str, index: usize) -> Unit {
    store.task_units(task_id).await.unwrap().swap_remove(index)
}

pub(crate) fn ids(units: &[Unit]) -> Vec<&str> {
    units.iter().map(|u| u.id.as_str()).collect()
}

/// Move the given pending units to submitted, asserting they all moved.
pub(crate) async fn submit(store: &DynStore, unit_ids: &[&str], now: i64) {
    let list: Vec<String> = unit_ids.iter().map(|s| s.to_string()).collect();
    let moved = store
        .unit_mark_submitted(&list, now, now, None)
        .await
        .unwrap();
    assert_eq!(ids(&moved), unit_ids);
}

/// Apply one update, asserting it applied.
pub(crate) async fn apply(store: &DynStore, update: UnitUpdate, now: i64) {
    let id = update.unit_id.clone();
    let report = store.unit_apply(&[update], now, None).await.unwrap();
    assert_eq!(report.applied, vec![id], "update should apply");
}

pub(crate) fn update(id: &str, from: UnitStatus, to: UnitStatus) -> UnitUpdate {
    UnitUpdate {
        unit_id: id.into(),
        from: Some(from),
        to: Some(to),
        ..UnitUpdate::default()
    }
}

/// Drive a unit to `succeeded` (due for finalization at `T0 + 10`).
pub(crate) async fn succeed(store: &DynStore, id: &str) {
    submit(store, &[id], T0 + 1).await;
    let mut u = update(id, UnitStatus::Submitted, UnitStatus::Succeeded);
    u.result = Some(r#"{"url":"https://x/y.mp4"}"#.into());
    u.next_at = Some(T0 + 10);
    apply(store, u, T0 + 2).await;
}
