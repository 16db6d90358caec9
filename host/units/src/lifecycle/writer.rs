//! [`UnitWriter`]: the store's unit writes, as the service holds them. Its fields are private
//! to the lifecycle, so a unit write anywhere else (in this crate or in the crates above it)
//! does not compile: the rest of the service holds the store as a [`slotd_store::DynServiceStore`] (reads and the
//! records beside the units), and reaches units only through the lifecycle's operations.

use slotd_store::DynUnitWriter;
use slotd_store::group_commit::TaskWriter;

/// The unit writes of one service: the store's [`slotd_store::UnitWrite`] and the group
/// commit of task creation over it. Cheap to clone. Built once with the [`Services`] it
/// belongs to ([`crate::assemble::build`] or a test); used by the lifecycle alone.
///
/// Code outside the lifecycle reads through `Services::store` and compiles:
///
/// ```no_run
/// use slotd_store::prelude::*;
/// async fn read(services: &slotd_units::services::Services) {
///     let _ = services.store.task_units("t-1").await;
/// }
/// ```
///
/// but a unit write through it does not (the service's store has no unit write):
///
/// ```compile_fail,E0599
/// use slotd_store::prelude::*;
/// async fn write(services: &slotd_units::services::Services) {
///     let _ = services.store.unit_apply(&[], 0, None).await;
/// }
/// ```
///
/// nor through the writer, whose store only the lifecycle can reach:
///
/// ```compile_fail,E0616
/// use slotd_store::prelude::*;
/// async fn write(services: &slotd_units::services::Services) {
///     let _ = services.units.store.unit_apply(&[], 0, None).await;
/// }
/// ```
///
/// [`Services`]: crate::services::Services
#[derive(Clone)]
pub struct UnitWriter {
    /// Every unit write but task creation.
    pub(super) store: DynUnitWriter,
    /// Task creation through group commit (what `POST /v1/tasks` uses).
    pub(super) tasks: TaskWriter,
    /// Provider callbacks' writes, written together.
    pub(super) callbacks: super::callback_writes::CallbackWrites,
}

impl UnitWriter {
    /// The unit writes of `store`, with a group-commit writer of task creation started over
    /// it (it records its batches into `metrics`).
    pub fn start(store: DynUnitWriter, metrics: slotd_core::telemetry::Metrics) -> UnitWriter {
        UnitWriter {
            tasks: TaskWriter::start(store.clone(), metrics),
            store,
            callbacks: Default::default(),
        }
    }

    /// The provider callbacks' writes (how many statements they cost: a test signal).
    pub fn callback_writes(&self) -> &super::callback_writes::CallbackWrites {
        &self.callbacks
    }
}
