//! A provider callback's write that commits and then loses its answer (the database committed,
//! the connection dropped before it said so). The callbacks' writer writes it again; the redo
//! meets the committed move and skips it. Taken for "skipped", the move's follow-ups were lost:
//! the unit left `submitted` but its slot stayed taken until the next reconcile, and the
//! finalizer was not woken. The lifecycle now reads back what a redone write's skipped updates
//! find, and runs the follow-ups of the moves that committed.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use slotd_core::clock::Clock;
use slotd_core::model::{Unit, UnitStatus};
use slotd_store::prelude::*;
use slotd_store::{
    ApplyReport, Cancelled, Created, DynStore, Fence, FinalizeRelease, Grant, Marked, NewTask,
    StoreError, StoreResult, UnitUpdate,
};
use slotd_units::lifecycle::{Origin, UnitWriter, apply_callback_changes};

use super::Scheduler;
use super::deadlines::grant_tests::{build_slots, idle_task};
use slotd_coord::slots::holder;

/// The unit writes of `inner`, but the first `unit_apply` commits and then answers an error,
/// as a write whose answer the network lost.
struct LosesFirstAnswer {
    inner: DynStore,
    lost: AtomicBool,
}

#[async_trait]
impl UnitWrite for LosesFirstAnswer {
    async fn task_create_batch(&self, tasks: &[NewTask]) -> StoreResult<Vec<Created>> {
        self.inner.task_create_batch(tasks).await
    }
    async fn task_cancel(
        &self,
        tenant: &str,
        id: &str,
        now: i64,
    ) -> StoreResult<Option<Cancelled>> {
        self.inner.task_cancel(tenant, id, now).await
    }
    async fn task_retry_failed(
        &self,
        tenant: &str,
        id: &str,
        now: i64,
    ) -> StoreResult<Option<u32>> {
        self.inner.task_retry_failed(tenant, id, now).await
    }
    async fn unit_mark_granted(
        &self,
        grants: &[Grant],
        now: i64,
        next_at: i64,
        fence: Option<&Fence>,
    ) -> StoreResult<Marked> {
        self.inner
            .unit_mark_granted(grants, now, next_at, fence)
            .await
    }
    async fn unit_apply(
        &self,
        updates: &[UnitUpdate],
        now: i64,
        fence: Option<&Fence>,
    ) -> StoreResult<ApplyReport> {
        let report = self.inner.unit_apply(updates, now, fence).await?;
        if !self.lost.swap(true, Ordering::SeqCst) {
            return Err(StoreError::Unavailable(format!(
                "connection reset after the commit (applied {:?})",
                report.applied
            )));
        }
        Ok(report)
    }
    async fn unit_claim_finalize(
        &self,
        owner: &str,
        lease_until: i64,
        now: i64,
        limit: u32,
    ) -> StoreResult<Vec<Unit>> {
        self.inner
            .unit_claim_finalize(owner, lease_until, now, limit)
            .await
    }
    async fn unit_complete_many(
        &self,
        owner: &str,
        done: &[(String, String)],
        now: i64,
    ) -> StoreResult<Vec<String>> {
        self.inner.unit_complete_many(owner, done, now).await
    }
    async fn unit_finalize_renew(
        &self,
        id: &str,
        owner: &str,
        lease_until: i64,
    ) -> StoreResult<bool> {
        self.inner.unit_finalize_renew(id, owner, lease_until).await
    }
    async fn unit_release_holds(
        &self,
        tenant: &str,
        now: i64,
    ) -> StoreResult<Vec<(String, String)>> {
        self.inner.unit_release_holds(tenant, now).await
    }
    async fn unit_finalize_release(
        &self,
        release: FinalizeRelease<'_>,
        now: i64,
    ) -> StoreResult<bool> {
        self.inner.unit_finalize_release(release, now).await
    }
}

#[tokio::test]
async fn a_callback_write_that_committed_and_lost_its_answer_keeps_its_follow_ups() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let (mut services, clock) = build_slots(dir.path(), 2).await;
    let task = idle_task(&services, "fixture", 1).await;
    Scheduler::new(services.clone())
        .run_once("fixture", clock.now_ms())
        .await
        .expect("tick");
    let unit = services
        .store
        .task_units(&task)
        .await
        .expect("units")
        .remove(0);
    assert_eq!(unit.status, UnitStatus::Submitted, "{unit:?}");
    assert_eq!(services.slots.used("fixture").await.expect("used"), 1);

    // The unit writes go through a connection that loses the first answer.
    let inner: DynStore = slotd_store::open(&services.config.database_url)
        .await
        .expect("the store, with its unit writes");
    services.units = UnitWriter::start(
        Arc::new(LosesFirstAnswer {
            inner,
            lost: AtomicBool::new(false),
        }),
        services.metrics.clone(),
    );
    let finalizer = services
        .wake
        .listener(slotd_coord::wake::WakeKey::Finalizer);

    // The provider calls back: the job succeeded.
    clock.advance(1_000);
    let now = clock.now_ms();
    let update = UnitUpdate {
        unit_id: unit.id.clone(),
        from: Some(UnitStatus::Submitted),
        from_stage: Some(unit.stage.clone()),
        from_submitted_at: unit.submitted_at,
        to: Some(UnitStatus::Succeeded),
        result: Some(r#"{"url":"https://example.com/out.mp4"}"#.into()),
        submitted_at: slotd_store::Field::Clear,
        next_at: Some(now),
        detail: Some("provider job succeeded".into()),
        ..UnitUpdate::default()
    };
    let origins: HashMap<&str, Origin<'_>> = [(unit.id.as_str(), Origin::from(&unit))].into();
    let done = apply_callback_changes(
        &services,
        &[update],
        &origins,
        now,
        std::time::Duration::ZERO,
    )
    .await
    .expect("the redone write answers");

    let after = services
        .store
        .task_units(&task)
        .await
        .expect("units")
        .remove(0);
    assert_eq!(after.status, UnitStatus::Succeeded, "{after:?}");
    assert_eq!(
        done.applied, 1,
        "the committed move counts as written: {done:?}"
    );
    assert_eq!(done.released, 1, "its slot is released: {done:?}");
    assert_eq!(
        services.slots.used("fixture").await.expect("used"),
        0,
        "the slot of {} stayed taken",
        holder(&unit.id, unit.submitted_at.unwrap_or_default())
    );
    assert!(
        tokio::time::timeout(std::time::Duration::from_secs(5), finalizer.notified())
            .await
            .is_ok(),
        "the finalizer is woken for the unit that succeeded"
    );
}
