//! [`FollowUps`]: what has to happen after units were written, gathered while the write's
//! result is read and done in one place, so that no writer can forget one:
//!
//! 1. drop the hot status snapshots of the tasks changed (readers fall back to the database);
//! 2. free the slots of the units that left `submitted`;
//! 3. wake each pool whose units became pending or freed a slot, so it fills at once;
//! 4. wake the finalizer when units reached `succeeded`.
//!
//! Only facts the database confirmed go in: a writer adds a follow-up for an update the store
//! reported applied, never for one it merely asked for.

use std::collections::{BTreeMap, BTreeSet};

use crate::services::Services;
use crate::slots::SlotError;
use crate::wake::WakeKey;

/// Follow-ups of one write, in the order [`FollowUps::run`] does them.
#[derive(Debug, Default)]
pub(crate) struct FollowUps {
    /// Tasks whose hot snapshot is stale.
    tasks: BTreeSet<String>,
    /// Slots to free, by slot set (`pool` or `pool@account`), with the pool to wake after.
    release: BTreeMap<String, (String, Vec<String>)>,
    /// Pools to wake (units became pending, or slots freed).
    pools: BTreeSet<String>,
    /// Units reached `succeeded`: the finalizer has work.
    finalizer: bool,
}

impl FollowUps {
    /// Task `id` changed: its snapshot goes.
    pub fn task(&mut self, id: &str) {
        if !self.tasks.contains(id) {
            self.tasks.insert(id.to_string());
        }
    }

    /// Unit `unit` of `pool` left `submitted`: its slot in `slot_set` frees and the pool wakes.
    pub fn release(&mut self, slot_set: String, pool: &str, unit: String) {
        self.release
            .entry(slot_set)
            .or_insert_with(|| (pool.to_string(), Vec::new()))
            .1
            .push(unit);
    }

    /// `pool` has pending units to fill.
    pub fn wake_pool(&mut self, pool: &str) {
        if !self.pools.contains(pool) {
            self.pools.insert(pool.to_string());
        }
    }

    /// Units reached `succeeded`.
    pub fn wake_finalizer(&mut self) {
        self.finalizer = true;
    }

    /// Do every follow-up. Returns the slots freed. A slot store failure stops the rest (the
    /// pool's reconciliation with the database frees what was missed; the tick interval wakes
    /// what was not woken).
    pub async fn run(self, services: &Services) -> Result<usize, SlotError> {
        if !self.tasks.is_empty() {
            services
                .hot
                .invalidate(self.tasks.iter().map(String::as_str))
                .await;
        }
        let mut released = 0;
        let mut pools = self.pools;
        for (slot_set, (pool, ids)) in self.release {
            released += ids.len();
            services.slots.release(&slot_set, &ids).await?;
            // Freed slots: the pool's next tick can fill them at once.
            services.wake.pool(&pool);
            pools.remove(&pool);
        }
        for pool in &pools {
            // A routed unit back on its route wakes the route's target pools.
            for p in crate::routing::pools_to_wake(&services.config, &services.registry, pool) {
                services.wake.pool(&p);
            }
        }
        if self.finalizer {
            services.wake.wake(WakeKey::Finalizer);
        }
        Ok(released)
    }
}
