//! In-process slots: a mutex-guarded holder set per pool. Correct for one slotd process (the
//! embedded default), where the API and the scheduler share this value.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use parking_lot::Mutex;

use super::{Reconciled, SlotError, SlotStore};

/// Holder sets per pool.
#[derive(Default)]
pub struct LocalSlots {
    pools: Mutex<HashMap<String, HashSet<String>>>,
}

impl LocalSlots {
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl SlotStore for LocalSlots {
    async fn acquire(
        &self,
        pool: &str,
        unit_ids: &[String],
        max: u32,
    ) -> Result<Vec<String>, SlotError> {
        let mut pools = self.pools.lock();
        let held = pools.entry(pool.to_string()).or_default();
        let mut granted = Vec::with_capacity(unit_ids.len());
        for id in unit_ids {
            if held.contains(id) {
                granted.push(id.clone());
            } else if (held.len() as u64) < u64::from(max) {
                held.insert(id.clone());
                granted.push(id.clone());
            }
        }
        Ok(granted)
    }

    async fn release(&self, pool: &str, unit_ids: &[String]) -> Result<(), SlotError> {
        let mut pools = self.pools.lock();
        if let Some(held) = pools.get_mut(pool) {
            for id in unit_ids {
                held.remove(id);
            }
        }
        Ok(())
    }

    async fn used(&self, pool: &str) -> Result<u32, SlotError> {
        let pools = self.pools.lock();
        Ok(pools
            .get(pool)
            .map_or(0, |h| u32::try_from(h.len()).unwrap_or(u32::MAX)))
    }

    async fn reconcile(&self, pool: &str, submitted: &[String]) -> Result<Reconciled, SlotError> {
        let mut pools = self.pools.lock();
        let held = pools.entry(pool.to_string()).or_default();
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
    async fn reconcile_frees_leaks_and_restores_holders() {
        let s = LocalSlots::new();
        s.acquire("p", &ids(0..3), 10).await.ok();
        let r = s.reconcile("p", &ids(2..5)).await.ok();
        let mut r = r.unwrap_or_default();
        r.freed.sort();
        r.restored.sort();
        assert_eq!(r.freed, ids(0..2));
        assert_eq!(r.restored, ids(3..5));
        assert_eq!(s.used("p").await.ok(), Some(3));
    }
}
