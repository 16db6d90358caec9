//! The scheduler: per-pool loops around [`Scheduler::run_once`] (load → grant → call → apply →
//! release), the finalization workers, slot reconciliation with the database.
//!
//! The loops only wait and call `run_once` / `finalize_once`; tests call those directly with an
//! injected clock and read the returned reports instead of sleeping.

mod cancel;
mod deadlines;
mod decide;
mod discovery;
mod download;
mod error;
mod fill;
mod finalize;
mod group_counts;
mod leasing;
mod policy;
mod provider_callback;
mod renewal;
pub mod rollout;
mod rounds;
mod route_back;
mod route_fill;
mod service;
mod shared;
mod shares;
mod tick;
mod tick_report;

pub use decide::{Decided, Refused, decide_updates, fault_updates};
pub use error::SchedulerError;
pub use finalize::FinalizeReport;
pub use policy::{poll_delay_ms, retry_delay_ms};
pub use provider_callback::{ProviderCallbackReport, apply_provider_callback};
pub use tick::{TickReport, TickSteps};

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

use slotd_coord::slots::holder;
use slotd_pools::pool_state::slot_key;
use slotd_runtime::{BatchUnit, Handler};
use slotd_store::Fence;
use slotd_units::provider_callback_token::{self, Scope};
use slotd_units::services::Services;

/// Drives every pool of one slotd instance.
pub struct Scheduler {
    pub(crate) services: Services,
    /// Identifies this instance as a finalization lease owner.
    pub(crate) owner: String,
    /// Last reconciliation per pool (Unix ms).
    last_reconcile: Mutex<HashMap<String, i64>>,
    /// Best-effort units whose unreachable deadline is already in their events.
    deadline_noted: Mutex<std::collections::HashSet<String>>,
    /// The deadline sweep's pending counts per pool.
    deadline_groups: Mutex<HashMap<String, group_counts::GroupCounts>>,
    /// Pool leases (with Redis): `None` when this instance drives every pool alone.
    pub(crate) leases: Option<Arc<slotd_coord::lease::Leases>>,
    /// The leases this instance holds and the pools' tick locks.
    pub(crate) lease_state: leasing::LeaseState,
    /// Bounds finalizations in flight; never shared with provider slots.
    pub(crate) finalize_permits: Arc<Semaphore>,
    /// Finalizations running in the background (drained at shutdown).
    pub(crate) finalize_tasks: TaskTracker,
    /// The last claim took as many units as it had workers for, so more may be due: a worker
    /// that frees up looks for them at once. Otherwise new work wakes the finalizer itself.
    pub(crate) finalize_backlog: std::sync::atomic::AtomicBool,
    /// Finalizations done (artifacts stored, result merged) whose completion the finalizer's
    /// next pass writes, all in one statement; until then each unit stays `finalizing` under
    /// this instance's lease, so a crash meanwhile only means the unit is finalized again.
    pub(crate) finalized: Mutex<Vec<(slotd_core::model::Unit, String)>>,
    /// HTTP client for artifact downloads (the host's, not a handler's); it follows no
    /// redirects itself, see `download.rs`.
    pub(crate) downloads: reqwest::Client,
    /// Finalization lease renewals so far (a test signal: wait for one instead of sleeping).
    finalize_renewals: tokio::sync::watch::Sender<u64>,
    /// The fencing token this instance holds per pool (its pool lease's), passed with every
    /// scheduler write so a stale one is refused. No entry: unfenced (embedded, one instance).
    fences: Mutex<HashMap<String, Fence>>,
    /// The waiting flag last written per shared slot set (until, Unix ms; 0: cleared).
    waiting_noted: Mutex<HashMap<String, i64>>,
    /// When the rollout loop last looked for old rolled-back candidates' jobs in flight (Unix
    /// ms), see `rollout::Scheduler::sweep_rollbacks`.
    pub(crate) rollback_late_check: std::sync::atomic::AtomicI64,
}

impl Scheduler {
    pub fn new(services: Services) -> Arc<Self> {
        let permits = services.config.scheduler.finalize_concurrency;
        let owner = format!("slotd-{}", uuid::Uuid::new_v4());
        let leases = services.keyspace.as_ref().map(|keys| {
            Arc::new(slotd_coord::lease::Leases::new(
                keys.clone(),
                &owner,
                services.config.scheduler.lease_ttl,
            ))
        });
        Arc::new(Scheduler {
            owner,
            leases,
            lease_state: leasing::LeaseState::default(),
            services,
            last_reconcile: Mutex::new(HashMap::new()),
            waiting_noted: Mutex::new(HashMap::new()),
            deadline_noted: Mutex::new(std::collections::HashSet::new()),
            deadline_groups: Mutex::new(HashMap::new()),
            finalize_permits: Arc::new(Semaphore::new(permits)),
            finalize_tasks: TaskTracker::new(),
            finalize_backlog: std::sync::atomic::AtomicBool::new(false),
            finalized: Mutex::new(Vec::new()),
            downloads: download::client(),
            finalize_renewals: tokio::sync::watch::Sender::new(0),
            fences: Mutex::new(HashMap::new()),
            rollback_late_check: std::sync::atomic::AtomicI64::new(i64::MIN),
        })
    }

    /// Fence this instance's writes for `fence.pool` with its lease token from now on (the
    /// lease holder calls this after winning the lease and `pool_fence_advance`).
    pub fn set_fence(&self, fence: Fence) {
        self.fences.lock().insert(fence.pool.clone(), fence);
    }

    /// Stop fencing `pool`'s writes (the lease was given up).
    pub fn clear_fence(&self, pool: &str) {
        self.fences.lock().remove(pool);
    }

    /// The fence for `pool`'s writes, if this instance holds one.
    pub(crate) fn fence(&self, pool: &str) -> Option<Fence> {
        self.fences.lock().get(pool).cloned()
    }

    /// The fence a write of `pool` driven by this instance must carry. Without leases (one
    /// instance, the embedded default) there is none and writes go unfenced; with leases a
    /// missing fence means the lease was dropped (lost, fenced out, given up) since the caller
    /// was allowed to start, and is refused: "no fence" never stands for "embedded" there.
    pub(crate) fn driving_fence(&self, pool: &str) -> Result<Option<Fence>, SchedulerError> {
        match (self.fence(pool), &self.leases) {
            (Some(f), _) => Ok(Some(f)),
            (None, None) => Ok(None),
            (None, Some(_)) => Err(SchedulerError::Unfenced(pool.to_string())),
        }
    }

    /// Counts this instance's finalization lease renewals, so a test can wait for the next one.
    pub fn finalize_renewals(&self) -> tokio::sync::watch::Receiver<u64> {
        self.finalize_renewals.subscribe()
    }

    /// The services this scheduler uses.
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// Where the provider can call back for `handler`'s call over `units` of `pool`, when
    /// slotd has a public URL: the URL carries a token naming the submit attempts the call may
    /// create jobs for (the units without a job id), and a callback through it may change only
    /// those units (see [`slotd_units::provider_callback_token`]).
    fn provider_callback_url(
        &self,
        handler: &Handler,
        pool: &str,
        units: &[BatchUnit],
    ) -> Option<String> {
        let base = self.services.config.public_url.as_ref()?;
        let name = &handler.info.name;
        let scope = Scope::for_call(
            name,
            pool,
            units
                .iter()
                .filter(|b| b.unit.provider_job_id.is_none())
                .filter_map(|b| b.unit.submitted_at),
        )
        .with_release(&handler.sha256);
        let token = provider_callback_token::mint(&self.services.provider_callback_key, &scope);
        Some(format!(
            "{}/v1/callbacks/{name}/{token}",
            base.trim_end_matches('/')
        ))
    }

    /// Make the pool's slot holders equal to the database's submitted units, at start-up and
    /// then every `reconcile_interval`, so a crashed instance's slots come back and a lost
    /// slot store is rebuilt.
    async fn maybe_reconcile(&self, pool: &str, now: i64) -> Result<(), SchedulerError> {
        let every = i64::try_from(
            self.services
                .config
                .scheduler
                .reconcile_interval
                .as_millis(),
        )
        .unwrap_or(i64::MAX);
        let (due, first) = match self.last_reconcile.lock().get(pool) {
            Some(&last) => (now.saturating_sub(last) >= every, false),
            None => (true, true),
        };
        if !due {
            return Ok(());
        }
        // This instance's first look at the pool (a start, a lease won): its create log may be
        // missing what another process or an earlier run of this one granted.
        self.reconcile_with(pool, first, false).await?;
        self.prune_create_log(pool).await?;
        self.last_reconcile.lock().insert(pool.to_string(), now);
        Ok(())
    }

    /// Slots in use of `pool`'s slot set `key`; a lost slot set (Redis flushed) is rebuilt
    /// from the database first (the whole pool's).
    async fn slots_used(&self, pool: &str, key: &str) -> Result<u32, SchedulerError> {
        match self.services.slots.used(key).await {
            Err(slotd_coord::slots::SlotError::NotReconciled(_)) => {
                tracing::warn!(
                    pool,
                    key,
                    "slot set lost (Redis flushed?); rebuilding it from the database"
                );
                self.reconcile_with(pool, true, true).await?;
                Ok(self.services.slots.used(key).await?)
            }
            other => Ok(other?),
        }
    }

    /// [`Scheduler::slots_used`] of each of `sets` (pool, slot set), read in one call; a lost
    /// set is rebuilt and read again on its own.
    async fn slots_used_many(&self, sets: &[(&str, &str)]) -> Result<Vec<u32>, SchedulerError> {
        let keys: Vec<String> = sets.iter().map(|(_, k)| k.to_string()).collect();
        let counts = self.services.slots.used_many(&keys).await?;
        let mut out = Vec::with_capacity(keys.len());
        for ((pool, key), n) in sets.iter().zip(counts) {
            out.push(match n {
                Some(n) => n,
                None => self.slots_used(pool, key).await?,
            });
        }
        Ok(out)
    }

    /// Grant slots of `pool`'s slot set `key`; a lost slot set (this one, or another member's
    /// of its shared account) is rebuilt from the database before anything is granted.
    async fn acquire_slots(
        &self,
        (pool, key): (&str, &str),
        ids: &[String],
        max: u32,
        logs: &[slotd_coord::slots::CreateLog],
        now: i64,
        shared: Option<slotd_coord::slots::OnShared<'_>>,
    ) -> Result<Vec<String>, SchedulerError> {
        let slots = &self.services.slots;
        // Each lost set is rebuilt once; a shared account may have lost several.
        let mut rebuilt = 0;
        loop {
            match slots.acquire_within(key, ids, max, logs, now, shared).await {
                Err(slotd_coord::slots::SlotError::NotReconciled(lost)) if rebuilt <= 16 => {
                    let of = shared
                        .and_then(|on| on.account.members.iter().find(|m| m.key == lost))
                        .map_or(pool, |m| m.pool.as_str());
                    tracing::warn!(
                        pool = of,
                        key = %lost,
                        "slot set lost (Redis flushed?); rebuilding it from the database"
                    );
                    // Only while still lost: `of` may be another process's pool, whose
                    // driver may have rebuilt it and granted since this read.
                    self.reconcile_with(of, true, true).await?;
                    rebuilt += 1;
                }
                other => return Ok(other?),
            }
        }
    }

    /// Reconcile one pool's slots with the database now.
    ///
    /// A pool with accounts has a slot set per account (`pool@account`): each is made equal
    /// to the submitted units marked on that account, so is the slot set of an account no
    /// longer configured whose units still run.
    pub async fn reconcile(
        &self,
        pool: &str,
    ) -> Result<slotd_coord::slots::Reconciled, SchedulerError> {
        self.reconcile_with(pool, false, false).await
    }

    /// Reconcile, restoring the create log first when `restore_log` or when a slot set was
    /// found lost. The log is whole before a set is marked reconciled again: grants wait on
    /// that mark, so none is decided on a log the flush emptied (whoever rebuilds the set,
    /// this scheduler's grant path, its periodic pass, or another process).
    ///
    /// The sets are written from a read of the database made before, so each rebuild is
    /// guarded ([`slotd_coord::slots::Rebuild`]): it carries this instance's lease token for
    /// the pool, and is refused ([`SlotError::Fenced`](slotd_coord::slots::SlotError)) once a newer
    /// holder exists, whose grants since the read it would take out of the set; with
    /// `only_if_lost`, a set someone rebuilt meanwhile is left alone.
    async fn reconcile_with(
        &self,
        pool: &str,
        restore_log: bool,
        only_if_lost: bool,
    ) -> Result<slotd_coord::slots::Reconciled, SchedulerError> {
        let s = &self.services;
        // A rebuild of a set this instance drives carries its fence; one of another process's
        // pool (`only_if_lost`) rebuilds only a set still lost, and needs none.
        let fence = if only_if_lost {
            self.fence(pool)
        } else {
            self.driving_fence(pool)?
        };
        let guard = slotd_coord::slots::Rebuild {
            fence: fence.as_ref().map(|f| (f.pool.as_str(), f.token)),
            only_if_lost,
        };
        let mut by_key: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        if let Some(limit) = slotd_units::pools_now::pool_limits_now(s).get(pool) {
            for a in &limit.accounts {
                by_key.insert(a.slot_key(pool), Vec::new());
            }
        }
        by_key.entry(pool.to_string()).or_default();
        // A shared account's member set of this pool, even with no handler loaded for it: a
        // grant on another member waits on its mark.
        for a in slotd_pools::pool_state::shared_accounts(&s.config).values() {
            for m in a.members.iter().filter(|m| m.pool == pool) {
                by_key.entry(m.key.clone()).or_default();
            }
        }
        for sub in s.store.unit_list_submitted_accounts(pool).await? {
            by_key
                .entry(slot_key(pool, sub.account.as_deref()))
                .or_default()
                .push(holder(&sub.unit_id, sub.submitted_at));
        }
        let mut lost = false;
        for key in by_key.keys() {
            if let Err(slotd_coord::slots::SlotError::NotReconciled(_)) = s.slots.used(key).await {
                lost = true;
                break;
            }
        }
        if restore_log || lost {
            self.restore_create_log(pool).await?;
        }
        let mut r = slotd_coord::slots::Reconciled::default();
        let mut restored_in: Vec<(String, Vec<String>)> = Vec::new();
        for (key, submitted) in by_key {
            let one = s.slots.reconcile(&key, &submitted, guard).await?;
            r.freed.extend(one.freed);
            if !one.restored.is_empty() {
                restored_in.push((key, one.restored.clone()));
            }
            r.restored.extend(one.restored);
        }
        // A unit released between the read above and its set's rebuild had its slot given
        // back before the rebuild put it in again (a release commits, then removes). Read once
        // more: whatever was restored and is no longer submitted is released now; a release
        // committed after this read removes its holder itself, after the rebuild.
        if !restored_in.is_empty() {
            let still: std::collections::BTreeSet<String> = s
                .store
                .unit_list_submitted_accounts(pool)
                .await?
                .into_iter()
                .map(|sub| holder(&sub.unit_id, sub.submitted_at))
                .collect();
            for (key, ids) in restored_in {
                let gone: Vec<String> = ids.into_iter().filter(|id| !still.contains(id)).collect();
                if !gone.is_empty() {
                    s.slots.release(&key, &gone).await?;
                    r.restored.retain(|id| !gone.contains(id));
                    r.freed.extend(gone);
                }
            }
        }
        if !r.freed.is_empty() || !r.restored.is_empty() {
            tracing::info!(
                pool,
                freed = r.freed.len(),
                restored = r.restored.len(),
                "slots reconciled with the database"
            );
        }
        Ok(r)
    }

    /// Forget a pool's recorded creates that no window reaches any more (none is longer than a
    /// day, or 25 hours for a zoned calendar day whose clocks go back; a minute more covers any
    /// margin).
    async fn prune_create_log(&self, pool: &str) -> Result<(), SchedulerError> {
        let s = &self.services;
        let has_quotas = slotd_units::pools_now::pool_limits_now(s)
            .get(pool)
            .is_some_and(|l| {
                !l.quotas.is_empty() || l.accounts.iter().any(|a| !a.quotas.is_empty())
            });
        if !has_quotas {
            return Ok(());
        }
        let day =
            i64::try_from(slotd_core::config::QUOTA_WINDOW_MAX.as_millis()).unwrap_or(i64::MAX);
        let longest = day.saturating_add(3_600_000);
        let before = s
            .clock
            .now_ms()
            .saturating_sub(longest.saturating_add(60_000));
        s.store.quota_creates_prune(pool, before).await?;
        Ok(())
    }

    /// Make a pool's create log equal to the database's record of its creates (the record is
    /// written in the submit marker's transaction; the log may have lost grants to a restart
    /// or a Redis flush). Done when this instance first
    /// drives the pool and when the slot store was found lost, not on every reconciliation:
    /// a day's log can hold tens of thousands of creates.
    async fn restore_create_log(&self, pool: &str) -> Result<(), SchedulerError> {
        let s = &self.services;
        let now = s.clock.now_ms();
        let Some(limit) = slotd_units::pools_now::pool_limits_now(s).remove(pool) else {
            return Ok(());
        };
        let pool_log = slotd_pools::pool_state::quotas::create_log(pool, &limit.quotas, now);
        // The accounts' own logs, beside the pool's.
        let account_logs: Vec<(Option<String>, slotd_coord::slots::CreateLog)> = limit
            .accounts
            .iter()
            .filter_map(|a| {
                let key = a.slot_key(pool);
                Some((
                    a.name.clone(),
                    slotd_pools::pool_state::quotas::create_log(&key, &a.quotas, now)?,
                ))
            })
            .collect();
        let since = pool_log
            .iter()
            .chain(account_logs.iter().map(|(_, l)| l))
            .map(|l| l.keep_since)
            .min();
        let Some(since) = since else {
            return Ok(());
        };
        let creates = s.store.quota_creates_since(pool, since).await?;
        let entry =
            |c: &slotd_store::Create| (slotd_coord::slots::log_entry(&c.unit_id, c.at), c.at);
        if let Some(log) = &pool_log {
            let entries: Vec<(String, i64)> = creates
                .iter()
                .filter(|c| c.at >= log.keep_since)
                .map(entry)
                .collect();
            s.slots.log_restore(&log.key, &entries).await?;
        }
        for (account, log) in &account_logs {
            let entries: Vec<(String, i64)> = creates
                .iter()
                .filter(|c| c.at >= log.keep_since && &c.account == account)
                .map(entry)
                .collect();
            s.slots.log_restore(&log.key, &entries).await?;
        }
        Ok(())
    }
}

/// One pool's slot sets as (pool, set) pairs, for [`Scheduler::slots_used_many`].
fn pool_sets<'a>(pool: &'a str, keys: &'a [String]) -> Vec<(&'a str, &'a str)> {
    keys.iter().map(|k| (pool, k.as_str())).collect()
}

#[cfg(test)]
#[path = "budget_hold_tests.rs"]
mod budget_hold_tests;
#[cfg(test)]
#[path = "callback_write_lost_tests.rs"]
mod callback_write_lost_tests;
#[cfg(test)]
#[path = "reconcile_race_tests.rs"]
mod reconcile_race_tests;
#[cfg(test)]
#[path = "rollback_sweep_tests.rs"]
mod rollback_sweep_tests;
#[cfg(test)]
#[path = "rounds_tick_tests.rs"]
mod rounds_tick_tests;
#[cfg(test)]
#[path = "slot_holder_race_tests.rs"]
mod slot_holder_race_tests;
#[cfg(test)]
mod test_units;
