//! A slot store for tests of what happens *during* a rebuild (this crate's `testing` feature):
//! every call goes to the store it wraps, but each [`SlotStore::reconcile`] first runs a
//! hook with the set and the ids the rebuilder read, so a test can let the world move (a unit
//! end, another scheduler take over) between the read of the database and the set's write.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;

use super::{CreateLog, DynSlots, LogCount, OnShared, Rebuild, Reconciled, SlotError, SlotStore};

/// What runs before a rebuild: given the set's key and the ids read, it may fail the rebuild.
pub type RebuildHook = Arc<
    dyn Fn(String, Vec<String>) -> Pin<Box<dyn Future<Output = Result<(), SlotError>> + Send>>
        + Send
        + Sync,
>;

/// [`SlotStore`] over `inner`, running `hook` before every rebuild.
pub struct BeforeRebuild {
    pub inner: DynSlots,
    pub hook: RebuildHook,
}

#[async_trait]
impl SlotStore for BeforeRebuild {
    async fn acquire_within(
        &self,
        pool: &str,
        unit_ids: &[String],
        max: u32,
        logs: &[CreateLog],
        now: i64,
        shared: Option<OnShared<'_>>,
    ) -> Result<Vec<String>, SlotError> {
        self.inner
            .acquire_within(pool, unit_ids, max, logs, now, shared)
            .await
    }
    async fn set_waiting(&self, account: &str, key: &str, until: i64) -> Result<(), SlotError> {
        self.inner.set_waiting(account, key, until).await
    }
    async fn waiting(&self, account: &str) -> Result<HashMap<String, i64>, SlotError> {
        self.inner.waiting(account).await
    }
    async fn log_count(&self, key: &str, since: i64) -> Result<LogCount, SlotError> {
        self.inner.log_count(key, since).await
    }
    async fn log_forget(&self, key: &str, entries: &[String]) -> Result<(), SlotError> {
        self.inner.log_forget(key, entries).await
    }
    async fn log_trim_oldest(&self, key: &str, since: i64, n: u32) -> Result<u32, SlotError> {
        self.inner.log_trim_oldest(key, since, n).await
    }
    async fn log_restore(&self, key: &str, entries: &[(String, i64)]) -> Result<(), SlotError> {
        self.inner.log_restore(key, entries).await
    }
    async fn release(&self, pool: &str, unit_ids: &[String]) -> Result<(), SlotError> {
        self.inner.release(pool, unit_ids).await
    }
    async fn used(&self, pool: &str) -> Result<u32, SlotError> {
        self.inner.used(pool).await
    }
    async fn used_many(&self, pools: &[String]) -> Result<Vec<Option<u32>>, SlotError> {
        self.inner.used_many(pools).await
    }
    async fn reconcile(
        &self,
        pool: &str,
        submitted: &[String],
        guard: Rebuild<'_>,
    ) -> Result<Reconciled, SlotError> {
        (self.hook)(pool.to_string(), submitted.to_vec()).await?;
        self.inner.reconcile(pool, submitted, guard).await
    }
}
