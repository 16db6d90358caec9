//! Provider slots (docs/state-machine.md): a slot is held by a unit exactly while it is `submitted`.
//!
//! [`SlotStore`] keeps, per pool, the set of submissions holding a slot, each named by
//! [`holder`]: the unit id and the instant of its submit marker (`submitted_at`), so a release
//! that comes late can only free the submission that took the slot, never a later submission of
//! the same unit granted meanwhile (a two-stage unit's next stage, a create that made nothing).
//! Granting is atomic against
//! the pool's maximum across every user of the store, and the set is reconciled with the
//! database's `submitted` units so that a crashed instance's slots come back without waiting
//! for a blanket expiry.
//!
//! Implementations: [`local::LocalSlots`] (in-process, the embedded default) and
//! [`redis::RedisSlots`] (Lua scripts on a shared Redis, for several instances).

pub mod local;
pub mod redis;
#[cfg(test)]
mod shared_tests;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

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
    /// A rebuild of `pool`'s slot set carried lease token `token`, but a newer holder has
    /// drawn `current` since: its grants may already be in the set, and a rebuild from an
    /// older read of the database would take them out. Nothing was changed.
    #[error(
        "the slot set of pool {pool:?} was not rebuilt: lease token {token} is older than \
         {current}, drawn by the pool's newer holder"
    )]
    Fenced {
        pool: String,
        token: i64,
        current: i64,
    },
}

/// Who may rebuild a slot set, checked in the same atomic step as the rebuild
/// ([`SlotStore::reconcile`]). A rebuild writes what the database said when it was read; if
/// another process granted in between, the write would take those holders out and the pool
/// could be granted past its maximum. So a rebuild by a pool's lease holder names its token,
/// and one for a pool this process does not drive rebuilds only a set still lost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rebuild<'a> {
    /// The pool and the lease token the rebuilder holds: refused with [`SlotError::Fenced`]
    /// when the pool's lease has drawn a newer token (a newer holder exists).
    pub fence: Option<(&'a str, i64)>,
    /// Rebuild only a lost set; a set found rebuilt already (by the process that drives its
    /// pool) is left as it is.
    pub only_if_lost: bool,
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

/// The name a slot set holds for one submission: unit `unit_id` marked submitted at
/// `submitted_at` (Unix ms, the grant's instant, which the submit marker stores). Grants, the
/// marker's give-back, releases and rebuilds all name the submission, so each acts on it alone.
pub fn holder(unit_id: &str, submitted_at: i64) -> String {
    format!("{unit_id}@{submitted_at}")
}

/// The unit id of a [`holder`] name (the whole name when it has no submission part).
pub fn holder_unit(holder: &str) -> &str {
    holder.rsplit_once('@').map_or(holder, |(unit, _)| unit)
}

/// What a create log holds at or after an instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogCount {
    pub count: u32,
    /// The oldest counted create (Unix ms), if any.
    pub oldest: Option<i64>,
}

/// A provider account whose limit spans the slot sets of several pools
/// (docs/accounts-deadlines-budgets.md "One account, many pools"): together they hold at most
/// `limit`; each holds at most its `max`, and its `min` is kept free for it while it has work
/// waiting (lent to the others while it has none, given back only as their slots free).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SharedAccount {
    pub name: String,
    pub limit: u32,
    pub members: Vec<Share>,
}

/// One slot set's share of a [`SharedAccount`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Share {
    /// The slot set (`pool@account`, or the pool's own for a handler's implicit account).
    pub key: String,
    pub pool: String,
    pub min: u32,
    pub max: u32,
}

/// A grant on member `this` of a shared account.
#[derive(Clone, Copy, Debug)]
pub struct OnShared<'a> {
    pub account: &'a SharedAccount,
    pub this: usize,
}

impl SharedAccount {
    /// New slots member `this` may take now, given each member's slots in use and whether it
    /// has work waiting (both in member order): within its own `max`, within the account's
    /// `limit`, and leaving free what the other waiting members are still owed of their `min`.
    /// The one rule of a shared grant; the Redis script (`lua/acquire.lua`) applies the same.
    pub fn room(&self, this: usize, used: &[u32], waiting: &[bool]) -> u32 {
        let used_of = |i: usize| used.get(i).copied().unwrap_or(0);
        let total: u32 = (0..self.members.len())
            .map(used_of)
            .fold(0, u32::saturating_add);
        let owed: u32 = self
            .members
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != this && waiting.get(*i).copied().unwrap_or(false))
            .map(|(i, m)| m.min.saturating_sub(used_of(i)))
            .fold(0, u32::saturating_add);
        let mine = self
            .members
            .get(this)
            .map_or(0, |m| m.max.saturating_sub(used_of(this)));
        mine.min(self.limit.saturating_sub(total).saturating_sub(owed))
    }

    /// The member index of slot set `key`.
    pub fn member(&self, key: &str) -> Option<usize> {
        self.members.iter().position(|m| m.key == key)
    }

    /// Which members have work waiting at `now`, from the `waiting` flags
    /// ([`SlotStore::waiting`]), in member order.
    pub fn waiting_now(
        &self,
        flags: &std::collections::HashMap<String, i64>,
        now: i64,
    ) -> Vec<bool> {
        self.members
            .iter()
            .map(|m| flags.get(&m.key).is_some_and(|until| *until >= now))
            .collect()
    }
}

/// Per-pool slot accounting shared by every scheduler and API instance.
#[async_trait]
pub trait SlotStore: Send + Sync + 'static {
    /// Grant slots to as many of `unit_ids` (in order; [`holder`] names) as fit under `max`;
    /// returns the names granted. A name already holding a slot (the same submission's grant
    /// asked again) is granted again without counting twice.
    async fn acquire(
        &self,
        pool: &str,
        unit_ids: &[String],
        max: u32,
    ) -> Result<Vec<String>, SlotError> {
        self.acquire_within(pool, unit_ids, max, &[], now_unused(), None)
            .await
    }
    /// [`SlotStore::acquire`] that also passes every check of every one of `logs` (the pool's,
    /// an account's) for each new slot and counts it in each at `now`, atomically with the
    /// slot; and, for a slot set on a shared provider account, the account's rule
    /// ([`SharedAccount::room`], with the members' `waiting` flags as of `now`) in the same
    /// step. A lost member set is [`SlotError::NotReconciled`] naming that set.
    async fn acquire_within(
        &self,
        pool: &str,
        unit_ids: &[String],
        max: u32,
        logs: &[CreateLog],
        now: i64,
        shared: Option<OnShared<'_>>,
    ) -> Result<Vec<String>, SlotError>;
    /// Flag slot set `key` of the shared account `account` as having work waiting until
    /// `until` (Unix ms; a past instant clears it). The other members' grants keep its unmet
    /// `min` free while the flag holds; a flag its scheduler stops renewing (a crash) lapses.
    async fn set_waiting(&self, account: &str, key: &str, until: i64) -> Result<(), SlotError>;
    /// Every waiting flag of `account`: slot set → until when (Unix ms).
    async fn waiting(
        &self,
        account: &str,
    ) -> Result<std::collections::HashMap<String, i64>, SlotError>;
    /// Creates in the log `key` at or after `since`.
    async fn log_count(&self, key: &str, since: i64) -> Result<LogCount, SlotError>;
    /// Take entries out of the log `key` (grants that were not used).
    async fn log_forget(&self, key: &str, entries: &[String]) -> Result<(), SlotError>;
    /// Take the `n` oldest entries at or after `since` out of the log `key` (creates the
    /// provider no longer counts in its window); returns how many were taken.
    async fn log_trim_oldest(&self, key: &str, since: i64, n: u32) -> Result<u32, SlotError>;
    /// Add `entries` (name, Unix ms) to the log `key`, keeping what it holds: its rebuild from
    /// the database's record of creates after the slot store was lost. What it holds stays
    /// because another scheduler may have granted since, with markers not yet in the record.
    async fn log_restore(&self, key: &str, entries: &[(String, i64)]) -> Result<(), SlotError>;
    /// Release the slots these submissions hold ([`holder`] names; unknown names are ignored).
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
    /// Make the holder set equal to `submitted` (the [`holder`] names of the database's
    /// submitted units of the pool),
    /// if `guard` allows it ([`Rebuild`]); a set left alone reports nothing freed or restored.
    async fn reconcile(
        &self,
        pool: &str,
        submitted: &[String],
        guard: Rebuild<'_>,
    ) -> Result<Reconciled, SlotError>;
}

pub type DynSlots = Arc<dyn SlotStore>;
