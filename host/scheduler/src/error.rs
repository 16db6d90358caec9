//! [`SchedulerError`]: what stops a scheduler step (a tick, a provider callback's commit, a
//! fill, the deadline sweep, a reconciliation) before it did anything durable.

/// The store or the slot store failed; nothing durable was done, and the step is tried again
/// on the next wake or tick.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error(transparent)]
    Store(#[from] slotd_store::StoreError),
    #[error(transparent)]
    Slots(#[from] slotd_coord::slots::SlotError),
    /// With pool leases (a cluster), a tick or a rebuild of a slot set found no fence for its
    /// pool: the lease was dropped after the tick was allowed to start. Writing unfenced would
    /// be writing as if this instance drove the pool alone, so nothing is written.
    #[error("pool {0:?} holds no fence at this instance (its lease was dropped); nothing written")]
    Unfenced(String),
}

impl SchedulerError {
    /// Refused by fencing: a newer lease holder of the pool exists (its token is in the
    /// database, or drawn in Redis before a slot set's rebuild), so this instance must stop
    /// driving the pool.
    pub fn is_fenced(&self) -> bool {
        matches!(
            self,
            SchedulerError::Store(slotd_store::StoreError::Fenced { .. })
                | SchedulerError::Slots(slotd_coord::slots::SlotError::Fenced { .. })
                | SchedulerError::Unfenced(_)
        )
    }
}

impl From<slotd_units::lifecycle::LifecycleError> for SchedulerError {
    fn from(e: slotd_units::lifecycle::LifecycleError) -> Self {
        match e {
            slotd_units::lifecycle::LifecycleError::Store(e) => SchedulerError::Store(e),
            slotd_units::lifecycle::LifecycleError::Slots(e) => SchedulerError::Slots(e),
        }
    }
}
