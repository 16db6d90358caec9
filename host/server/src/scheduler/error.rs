//! [`SchedulerError`]: what stops a scheduler step (a tick, a provider callback's commit, a
//! fill, the deadline sweep, a reconciliation) before it did anything durable.

/// The store or the slot store failed; nothing durable was done, and the step is tried again
/// on the next wake or tick.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error(transparent)]
    Store(#[from] slotd_store::StoreError),
    #[error(transparent)]
    Slots(#[from] crate::slots::SlotError),
}
