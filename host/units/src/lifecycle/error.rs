//! [`LifecycleError`]: why a write of the lifecycle did not happen, or happened without all of
//! its follow-ups.

/// The store refused or could not take the write (nothing was written), or the slot store
/// failed during the follow-ups (the write stands; the pool's reconciliation with the
/// database frees what was missed). Its callers retry on their next wake or tick.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error(transparent)]
    Store(#[from] slotd_store::StoreError),
    #[error(transparent)]
    Slots(#[from] slotd_coord::slots::SlotError),
}
