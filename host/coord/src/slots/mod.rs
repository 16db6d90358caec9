//! Provider slots (docs/state-machine.md): a slot is held by a unit exactly while it is `submitted`.
//!
//! [`SlotStore`] keeps, per pool, the set of unit ids holding a slot. Granting is atomic against
//! the pool's maximum across every user of the store, and the set is reconciled with the
//! database's `submitted` units so that a crashed instance's slots come back without waiting
//! for a blanket expiry.
//!
//! Implementations: [`local::LocalSlots`] (in-process, the embedded default) and
//! [`redis::RedisSlots`] (Lua scripts on a shared Redis, for several instances).

pub mod local;
pub mod redis;

use std::sync::Arc;

use async_trait::async_trait;

/// Slot store failures (only a remote store can fail).
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    #[error("slot store unavailable: {0}")]
    Unavailable(String),
    /// The pool's holder set was lost (Redis flushed or restarted) and must be rebuilt from
    /// the database ([`SlotStore::reconcile`]) before anything is granted.
    #[error("the slot set of pool {0:?} was lost; reconcile it with the database first")]
    NotReconciled(String),
}

/// What a reconciliation changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// Holders that were not `submitted` in the database: leaked slots, now freed.
    pub freed: Vec<String>,
    /// `submitted` units that held no slot (e.g. after a flush): now holding one.
    pub restored: Vec<String>,
}

/// One quota checked at grant time: fewer than `limit` creates in the log at or after `since`
/// (Unix ms), or the grant waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowCheck {
    pub limit: u32,
    pub since: i64,
}

/// A pool's create log (docs/accounts-deadlines-budgets.md "Quotas"): each grant that takes a
/// new slot is counted in it as `{unit id}@{now}`, in the same atomic step as the slot, and
/// must pass every check first. Entries before `keep_since` are dropped on the way.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateLog {
    pub key: String,
    pub checks: Vec<WindowCheck>,
    pub keep_since: i64,
}

/// The `now` of a grant that counts in no log (it is not used).
const fn now_unused() -> i64 {
    0
}

/// The name of a grant's entry in a create log.
pub fn log_entry(unit_id: &str, at: i64) -> String {
    format!("{unit_id}@{at}")
}

/// What a create log holds at or after an instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogCount {
    pub count: u32,
    /// The oldest counted create (Unix ms), if any.
    pub oldest: Option<i64>,
}

/// Per-pool slot accounting shared by every scheduler and API instance.
#[async_trait]
pub trait SlotStore: Send + Sync + 'static {
    /// Grant slots to as many of `unit_ids` (in order) as fit under `max`; returns the ids
    /// granted. Ids already holding a slot are granted again without counting twice.
    async fn acquire(
        &self,
        pool: &str,
        unit_ids: &[String],
        max: u32,
    ) -> Result<Vec<String>, SlotError> {
        self.acquire_within(pool, unit_ids, max, &[], now_unused())
            .await
    }
    /// [`SlotStore::acquire`] that also passes every check of every one of `logs` (the pool's,
    /// an account's) for each new slot and counts it in each at `now`, atomically with the
    /// slot.
    async fn acquire_within(
        &self,
        pool: &str,
        unit_ids: &[String],
        max: u32,
        logs: &[CreateLog],
        now: i64,
    ) -> Result<Vec<String>, SlotError>;
    /// Creates in the log `key` at or after `since`.
    async fn log_count(&self, key: &str, since: i64) -> Result<LogCount, SlotError>;
    /// Take entries out of the log `key` (grants that were not used).
    async fn log_forget(&self, key: &str, entries: &[String]) -> Result<(), SlotError>;
    /// Add `entries` (name, Unix ms) to the log `key`, keeping what it holds: its rebuild from
    /// the database's record of creates after the slot store was lost. What it holds stays
    /// because another scheduler may have granted since, with markers not yet in the record.
    async fn log_restore(&self, key: &str, entries: &[(String, i64)]) -> Result<(), SlotError>;
    /// Release the slots these units hold (unknown ids are ignored).
    async fn release(&self, pool: &str, unit_ids: &[String]) -> Result<(), SlotError>;
    /// Slots in use ([`SlotError::NotReconciled`] if the set must be rebuilt first).
    async fn used(&self, pool: &str) -> Result<u32, SlotError>;
    /// [`SlotStore::used`] of each of `pools`, in order, in one call where the store can (a
    /// tick reads every account of its pool); `None` where that set must be rebuilt first.
    async fn used_many(&self, pools: &[String]) -> Result<Vec<Option<u32>>, SlotError> {
        let mut out = Vec::with_capacity(pools.len());
        for pool in pools {
            out.push(match self.used(pool).await {
                Ok(n) => Some(n),
                Err(SlotError::NotReconciled(_)) => None,
                Err(e) => return Err(e),
            });
        }
        Ok(out)
    }
    /// Make the holder set equal to `submitted` (the database's submitted units of the pool).
    async fn reconcile(&self, pool: &str, submitted: &[String]) -> Result<Reconciled, SlotError>;
}

pub type DynSlots = Arc<dyn SlotStore>;
