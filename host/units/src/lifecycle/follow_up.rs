//! [`FollowUps`]: what has to happen after units were written, gathered while the write's
//! result is read and done in one place, so that no writer can forget one:
//!
//! 1. drop the hot status snapshots of the tasks changed (readers fall back to the database);
//! 2. free the slots of the units that left `submitted`, and give back the slots of grants
//!    that did not become submit markers (without a wake: the granting tick goes on filling);
//! 3. wake each pool whose units became pending, freed a slot or became due now (a provider
//!    callback's "read it now"), so it acts at once; a route's wake reaches its target pools;
//! 4. wake the finalizer when units reached `succeeded`;
//! 5. wake the completion-webhook loop (everywhere it runs) when units ended or were parked,
//!    since their task may have ended with them.
//!
//! Only facts the database confirmed go in: a writer adds a follow-up for an update the store
//! reported applied, never for one it merely asked for.

use std::collections::{BTreeMap, BTreeSet};

use crate::services::Services;
use slotd_coord::slots::SlotError;
use slotd_coord::wake::WakeKey;

/// Follow-ups of one write, in the order [`FollowUps::run`] does them.
#[derive(Debug, Default)]
pub struct FollowUps {
    /// Tasks whose hot snapshot is stale.
    tasks: BTreeSet<String>,
    /// Slots to free, by slot set (`pool` or `pool@account`), with the pool to wake after.
    release: BTreeMap<String, (String, Vec<String>)>,
    /// Pools to wake (units became pending, or slots freed).
    pools: BTreeSet<String>,
    /// Slots of grants that never became submit markers, by slot set: freed without a wake.
    give_back: BTreeMap<String, Vec<String>>,
    /// Units reached `succeeded`: the finalizer has work.
    finalizer: bool,
    /// Units ended (or were parked): their tasks may have ended, with a webhook to send.
    ended: bool,
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

    /// A grant in `slot_set` did not become a submit marker: its slot goes back, and no pool
    /// wakes for it (the tick that granted it goes on filling).
    pub fn give_back(&mut self, slot_set: String, units: Vec<String>) {
        self.give_back.entry(slot_set).or_default().extend(units);
    }

    /// `pool` has work now: pending units to fill, or units due now.
    pub fn wake_pool(&mut self, pool: &str) {
        if !self.pools.contains(pool) {
            self.pools.insert(pool.to_string());
        }
    }

    /// Units reached `succeeded`.
    pub fn wake_finalizer(&mut self) {
        self.finalizer = true;
    }

    /// Units reached an end (`completed`, `failed`, `cancelled`) or were parked: their tasks
    /// may have ended.
    pub fn task_ended(&mut self) {
        self.ended = true;
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
        for (slot_set, ids) in &self.give_back {
            services.slots.release(slot_set, ids).await?;
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
            for p in slotd_pools::routing::pools_to_wake(&services.config, &services.registry, pool)
            {
                services.wake.pool(&p);
            }
        }
        if self.finalizer {
            services.wake.wake(WakeKey::Finalizer);
        }
        if self.ended {
            services.wake.wake(WakeKey::Webhooks);
        }
        Ok(released)
    }
}

/// A fill passed routed units over to `pools` (their route's pick named them, and they have
/// room): they wake, as any follow-up wakes a pool, to take them at once. Nothing was written:
/// the units wait on their route until one of those pools binds them.
pub async fn routed_units_left(services: &Services, pools: &BTreeSet<String>) {
    let mut follow = FollowUps::default();
    for pool in pools {
        follow.wake_pool(pool);
    }
    if let Err(e) = follow.run(services).await {
        tracing::debug!(error = %e, "waking the pools routed units were left to failed");
    }
}
