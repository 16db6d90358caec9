//! In-process slots: a mutex-guarded holder set per pool. Correct for one slotd process (the
//! embedded default), where the API and the scheduler share this value.

use std::collections::{BTreeSet, HashMap, HashSet};

use async_trait::async_trait;
use parking_lot::Mutex;

use super::{
    CreateLog, LogCount, OnShared, Rebuild, Reconciled, SlotError, SlotStore, holder_unit,
    log_entry,
};

/// Holder sets per pool and create logs, under one lock so a grant and its count move
/// together.
#[derive(Default)]
pub struct LocalSlots {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    pools: HashMap<String, HashSet<String>>,
    /// Create logs: (Unix ms, entry), oldest first.
    logs: HashMap<String, BTreeSet<(i64, String)>>,
    /// Shared accounts' waiting flags: account → slot set → until (Unix ms).
    waiting: HashMap<String, HashMap<String, i64>>,
}

fn count_since(log: Option<&BTreeSet<(i64, String)>>, since: i64) -> LogCount {
    let Some(log) = log else {
        return LogCount::default();
    };
    let mut range = log.range((since, String::new())..);
    let oldest = range.next().map(|(at, _)| *at);
    LogCount {
        count: u32::try_from(usize::from(oldest.is_some()) + range.count()).unwrap_or(u32::MAX),
        oldest,
    }
}

impl LocalSlots {
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl SlotStore for LocalSlots {
    async fn acquire_within(
        &self,
        pool: &str,
        unit_ids: &[String],
        max: u32,
        logs: &[CreateLog],
        now: i64,
        shared: Option<OnShared<'_>>,
    ) -> Result<Vec<String>, SlotError> {
        let mut inner = self.inner.lock();
        let Inner {
            pools,
            logs: held_logs,
            waiting,
        } = &mut *inner;
        // A shared account: every member's use and waiting flag, read under the same lock.
        let mut members = shared.map(|on| {
            let used: Vec<u32> = on
                .account
                .members
                .iter()
                .map(|m| {
                    pools
                        .get(&m.key)
                        .map_or(0, |h| u32::try_from(h.len()).unwrap_or(u32::MAX))
                })
                .collect();
            let flags = waiting.get(&on.account.name).cloned().unwrap_or_default();
            (on, used, on.account.waiting_now(&flags, now))
        });
        let held = pools.entry(pool.to_string()).or_default();
        // Each log's entries (pruned) and the running count of each of its checks.
        let mut counts: Vec<Vec<u32>> = Vec::with_capacity(logs.len());
        for l in logs {
            let entries = held_logs.entry(l.key.clone()).or_default();
            entries.retain(|(at, _)| *at >= l.keep_since);
            counts.push(
                l.checks
                    .iter()
                    .map(|c| count_since(Some(entries), c.since).count)
                    .collect(),
            );
        }
        let mut granted = Vec::with_capacity(unit_ids.len());
        for id in unit_ids {
            if held.contains(id) {
                granted.push(id.clone());
                continue;
            }
            let room = logs
                .iter()
                .zip(&counts)
                .all(|(l, n)| l.checks.iter().zip(n).all(|(c, n)| *n < c.limit));
            let share_room = members
                .as_ref()
                .is_none_or(|(on, used, waiting)| on.account.room(on.this, used, waiting) > 0);
            if (held.len() as u64) < u64::from(max) && room && share_room {
                if let Some((on, used, _)) = &mut members
                    && let Some(n) = used.get_mut(on.this)
                {
                    *n += 1;
                }
                held.insert(id.clone());
                granted.push(id.clone());
                for (l, n) in logs.iter().zip(counts.iter_mut()) {
                    held_logs
                        .entry(l.key.clone())
                        .or_default()
                        .insert((now, log_entry(holder_unit(id), now)));
                    n.iter_mut().for_each(|n| *n += 1);
                }
            }
        }
        Ok(granted)
    }

    async fn log_count(&self, key: &str, since: i64) -> Result<LogCount, SlotError> {
        Ok(count_since(self.inner.lock().logs.get(key), since))
    }

    async fn set_waiting(&self, account: &str, key: &str, until: i64) -> Result<(), SlotError> {
        let mut inner = self.inner.lock();
        let flags = inner.waiting.entry(account.to_string()).or_default();
        flags.insert(key.to_string(), until);
        Ok(())
    }

    async fn waiting(&self, account: &str) -> Result<HashMap<String, i64>, SlotError> {
        Ok(self
            .inner
            .lock()
            .waiting
            .get(account)
            .cloned()
            .unwrap_or_default())
    }

    async fn log_forget(&self, key: &str, entries: &[String]) -> Result<(), SlotError> {
        let mut inner = self.inner.lock();
        if let Some(log) = inner.logs.get_mut(key) {
            let gone: HashSet<&String> = entries.iter().collect();
            log.retain(|(_, e)| !gone.contains(e));
        }
        Ok(())
    }

    async fn log_trim_oldest(&self, key: &str, since: i64, n: u32) -> Result<u32, SlotError> {
        let mut inner = self.inner.lock();
        let Some(log) = inner.logs.get_mut(key) else {
            return Ok(0);
        };
        let gone: Vec<(i64, String)> = log
            .range((since, String::new())..)
            .take(n as usize)
            .cloned()
            .collect();
        for e in &gone {
            log.remove(e);
        }
        Ok(u32::try_from(gone.len()).unwrap_or(u32::MAX))
    }

    async fn log_restore(&self, key: &str, entries: &[(String, i64)]) -> Result<(), SlotError> {
        let mut inner = self.inner.lock();
        let log = inner.logs.entry(key.to_string()).or_default();
        log.extend(entries.iter().map(|(e, at)| (*at, e.clone())));
        Ok(())
    }

    async fn release(&self, pool: &str, unit_ids: &[String]) -> Result<(), SlotError> {
        let mut inner = self.inner.lock();
        if let Some(held) = inner.pools.get_mut(pool) {
            for id in unit_ids {
                held.remove(id);
            }
        }
        Ok(())
    }

    async fn used(&self, pool: &str) -> Result<u32, SlotError> {
        let inner = self.inner.lock();
        Ok(inner
            .pools
            .get(pool)
            .map_or(0, |h| u32::try_from(h.len()).unwrap_or(u32::MAX)))
    }

    /// Every count under one lock: a snapshot, as Redis's `HMGET` gives, so a sum over the
    /// members of a shared account never adds counts read at different instants.
    async fn used_many(&self, pools: &[String]) -> Result<Vec<Option<u32>>, SlotError> {
        let inner = self.inner.lock();
        Ok(pools
            .iter()
            .map(|pool| {
                Some(
                    inner
                        .pools
                        .get(pool)
                        .map_or(0, |h| u32::try_from(h.len()).unwrap_or(u32::MAX)),
                )
            })
            .collect())
    }

    /// In-process slots serve one process, which drives every pool alone (pool leases need
    /// Redis): no other rebuilder or granter exists, so `guard` has nothing to refuse.
    async fn reconcile(
        &self,
        pool: &str,
        submitted: &[String],
        _guard: Rebuild<'_>,
    ) -> Result<Reconciled, SlotError> {
        let mut inner = self.inner.lock();
        let held = inner.pools.entry(pool.to_string()).or_default();
        let want: HashSet<&String> = submitted.iter().collect();
        let freed: Vec<String> = held.iter().filter(|h| !want.contains(h)).cloned().collect();
        let restored: Vec<String> = submitted
            .iter()
            .filter(|s| !held.contains(*s))
            .cloned()
            .collect();
        for f in &freed {
            held.remove(f);
        }
        for r in &restored {
            held.insert(r.clone());
        }
        Ok(Reconciled { freed, restored })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn ids(r: std::ops::Range<u32>) -> Vec<String> {
        r.map(|i| format!("u{i}")).collect()
    }

    #[tokio::test]
    async fn never_more_than_max_under_concurrent_acquirers() {
        let slots = Arc::new(LocalSlots::new());
        let mut joins = Vec::new();
        for t in 0..8u32 {
            let slots = slots.clone();
            joins.push(tokio::spawn(async move {
                let mut got = 0usize;
                for round in 0..50u32 {
                    let want = ids(t * 1000 + round * 3..t * 1000 + round * 3 + 3);
                    let g = slots.acquire("p", &want, 5).await.unwrap_or_default();
                    assert!(slots.used("p").await.unwrap_or(99) <= 5);
                    got += g.len();
                    slots.release("p", &g).await.ok();
                }
                got
            }));
        }
        let mut total = 0;
        for j in joins {
            total += j.await.unwrap_or(0);
        }
        assert!(total > 0, "some acquirer must have been granted a slot");
        assert_eq!(
            slots.used("p").await.ok(),
            Some(0),
            "everything released at the end"
        );
    }

    #[tokio::test]
    async fn acquire_is_idempotent_per_holder() {
        let s = LocalSlots::new();
        let a = ids(0..3);
        assert_eq!(s.acquire("p", &a, 3).await.ok(), Some(a.clone()));
        assert_eq!(s.acquire("p", &a, 3).await.ok(), Some(a.clone()));
        assert_eq!(s.acquire("p", &ids(3..4), 3).await.ok(), Some(vec![]));
        assert_eq!(s.used("p").await.ok(), Some(3));
    }

    #[tokio::test]
    async fn a_grant_waits_for_every_window_and_counts_in_it() {
        use crate::slots::WindowCheck;
        let s = LocalSlots::new();
        // 3 creates per 10 s and 4 per 100 s, 10 slots.
        let log = |now: i64| CreateLog {
            key: "q".into(),
            checks: vec![
                WindowCheck {
                    limit: 3,
                    since: now - 10_000 + 1,
                },
                WindowCheck {
                    limit: 4,
                    since: now - 100_000 + 1,
                },
            ],
            keep_since: now - 100_000 + 1,
        };
        let got = s
            .acquire_within("p", &ids(0..5), 10, &[log(1_000)], 1_000, None)
            .await
            .unwrap_or_default();
        assert_eq!(got, ids(0..3), "the 10 s window takes three");
        // Held ids are granted again without a count; nothing new fits in the window yet.
        let got = s
            .acquire_within("p", &ids(0..5), 10, &[log(5_000)], 5_000, None)
            .await
            .unwrap_or_default();
        assert_eq!(got, ids(0..3));
        // 10 s later the short window has room, the long one for one more only.
        let got = s
            .acquire_within("p", &ids(3..6), 10, &[log(11_000)], 11_000, None)
            .await
            .unwrap_or_default();
        assert_eq!(got, ids(3..4));
        let n = s.log_count("q", 0).await.unwrap_or_default();
        assert_eq!((n.count, n.oldest), (4, Some(1_000)));
        // An unused grant is forgotten; the rebuild from the record adds to the log (a grant
        // not yet in the record still counts) and counts a create it holds once.
        s.log_forget("q", &[log_entry("u3", 11_000)]).await.ok();
        assert_eq!(s.log_count("q", 0).await.map(|n| n.count).ok(), Some(3));
        s.log_restore("q", &[("a@50".into(), 50), (log_entry("u0", 1_000), 1_000)])
            .await
            .ok();
        let n = s.log_count("q", 0).await.unwrap_or_default();
        assert_eq!((n.count, n.oldest), (4, Some(50)));
        assert_eq!(s.log_count("q", 51).await.map(|n| n.count).ok(), Some(3));
        // The provider counts fewer than the log holds since 51: the oldest go.
        assert_eq!(s.log_trim_oldest("q", 51, 2).await.ok(), Some(2));
        let n = s.log_count("q", 0).await.unwrap_or_default();
        assert_eq!(
            (n.count, n.oldest),
            (2, Some(50)),
            "the one before `since` stays"
        );
        assert_eq!(s.log_trim_oldest("nothing", 0, 2).await.ok(), Some(0));
    }

    #[tokio::test]
    async fn a_grant_passes_the_pools_log_and_its_accounts_and_counts_in_both() {
        use crate::slots::WindowCheck;
        let s = LocalSlots::new();
        let log = |key: &str, limit: u32| CreateLog {
            key: key.into(),
            checks: vec![WindowCheck { limit, since: 0 }],
            keep_since: 0,
        };
        // The pool allows 5, account a 2: a's slot set gets 2.
        let got = s
            .acquire_within(
                "p@a",
                &ids(0..4),
                10,
                &[log("p", 5), log("p@a", 2)],
                1,
                None,
            )
            .await
            .unwrap_or_default();
        assert_eq!(got, ids(0..2));
        // Account b has no quota of its own: the pool's 3 left.
        let got = s
            .acquire_within("p@b", &ids(10..20), 10, &[log("p", 5)], 1, None)
            .await
            .unwrap_or_default();
        assert_eq!(got, ids(10..13));
        assert_eq!(s.log_count("p", 0).await.map(|n| n.count).ok(), Some(5));
        assert_eq!(s.log_count("p@a", 0).await.map(|n| n.count).ok(), Some(2));
    }

    #[tokio::test]
    async fn submissions_are_released_alone() {
        crate::slots::shared_tests::submissions_are_released_alone(&LocalSlots::new()).await;
    }

    #[tokio::test]
    async fn a_shared_account_lends_idle_slots_and_keeps_a_waiting_members_minimum() {
        crate::slots::shared_tests::borrowing_and_giving_back(&LocalSlots::new()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_shared_account_holds_its_limit_under_concurrent_grants() {
        let s: Arc<dyn SlotStore> = Arc::new(LocalSlots::new());
        crate::slots::shared_tests::never_above_the_limit_under_concurrent_grants([s.clone(), s])
            .await;
    }

    #[tokio::test]
    async fn reconcile_frees_leaks_and_restores_holders() {
        let s = LocalSlots::new();
        s.acquire("p", &ids(0..3), 10).await.ok();
        let r = s.reconcile("p", &ids(2..5), Rebuild::default()).await.ok();
        let mut r = r.unwrap_or_default();
        r.freed.sort();
        r.restored.sort();
        assert_eq!(r.freed, ids(0..2));
        assert_eq!(r.restored, ids(3..5));
        assert_eq!(s.used("p").await.ok(), Some(3));
    }
}
