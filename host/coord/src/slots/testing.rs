//! A slot store for tests of what happens *during* a rebuild or a release (this crate's
//! `testing` feature): every call goes to the store it wraps, but each [`SlotStore::reconcile`]
//! first runs a hook with the set and the names the rebuilder read, and each
//! [`SlotStore::release`] one with the set and the names released, so a test can let the world
//! move (a unit end, another scheduler take over, a tick grant again) between the read of the
//! database and the set's write, or between a unit's move and its slot's release.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;

use super::{CreateLog, DynSlots, LogCount, OnShared, Rebuild, Reconciled, SlotError, SlotStore};

/// What runs before a rebuild or a release: given the set's key and the holder names read (or
/// released), it may fail the call.
pub type RebuildHook = Arc<
    dyn Fn(String, Vec<String>) -> Pin<Box<dyn Future<Output = Result<(), SlotError>> + Send>>
        + Send
        + Sync,
>;

/// [`SlotStore`] over `inner`, running `hook` before every rebuild and `before_release`
/// (when set) before every release.
pub struct BeforeRebuild {
    pub inner: DynSlots,
    pub hook: RebuildHook,
    pub before_release: Option<RebuildHook>,
}

impl BeforeRebuild {
    /// Hooks only the rebuilds.
    pub fn new(inner: DynSlots, hook: RebuildHook) -> Self {
        Self {
            inner,
            hook,
            before_release: None,
        }
    }

    /// Hooks only the releases.
    pub fn releases(inner: DynSlots, before_release: RebuildHook) -> Self {
        let none: RebuildHook = Arc::new(|_, _| Box::pin(async { Ok(()) }));
        Self {
            inner,
            hook: none,
            before_release: Some(before_release),
        }
    }
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
        if let Some(hook) = &self.before_release {
            hook(pool.to_string(), unit_ids.to_vec()).await?;
        }
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
