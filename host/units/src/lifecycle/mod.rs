//! The one writer of units. Every change to a unit's record goes through a function here, and
//! each ends with its follow-ups ([`follow_up::FollowUps`]: the hot status snapshot, the
//! slots, the wakes), so no caller can forget one. Callers decide *what* changes (the API
//! parses and authorizes a request; the scheduler grants slots, calls handlers and plans their
//! answers into updates); this module writes it and does what must follow.
//!
//! | operation | caller | follow-ups |
//! |---|---|---|
//! | [`create_task`]: plan, route, store | `POST /v1/tasks/{type}` | wake the units' pools |
//! | [`create_routed_task`]: every target plans each shot | `POST /v1/tasks/{route}` | wake the target pools |
//! | [`cancel_task`] | `POST /v1/tasks/{id}/cancel` | drop the task's snapshot; the completion webhooks when units ended |
//! | [`retry_task`] | `POST /v1/tasks/{id}/retry` | snapshot; wake pools, the finalizer |
//! | [`mark_submitted`]: the submit marker | the tick's fill | the marked units' snapshots; give unused grants' slots back |
//! | [`routed_units_left`] (no write) | the tick's fill | wake the pools routed units were left to |
//! | [`apply_changes`] | a tick, a provider callback, the deadline sweep | snapshot; free slots of units that left `submitted` and wake their pools; wake the pools of units made due now; the finalizer; the completion webhooks when units ended |
//! | [`claim_finalize`], [`renew_finalize`], [`complete_finalize_many`], [`release_finalize`] | the finalizer | snapshot when a finalization ends; the completion webhooks when it completed or gave up |
//!
//! The types say so: the rest of the service holds the store as a
//! [`slotd_store::DynServiceStore`], which has no unit write, and the unit writes are in
//! [`UnitWriter`] (`Services::units`), whose fields only this module can reach. The store's
//! other writes (budgets, quota bookkeeping, pool fences, the completion webhook outbox, host
//! keys, the handler history) change no unit and stay with their owners
//! (docs/architecture.md). The state machine these writes follow, and the invariants they
//! keep, are in docs/state-machine.md. Failures are a [`LifecycleError`].

mod callback_writes;
mod changes;
mod create;
mod create_routed;
mod error;
mod finalize;
mod follow_up;
mod holds;
mod submit;
mod tasks;
mod writer;

pub use callback_writes::CallbackWrites;
pub use changes::{Origin, apply_callback_changes, apply_changes};
pub use create::{CreateError, CreateRequest, CreatedTask, create_task};
pub use create_routed::create_routed_task;
pub use error::LifecycleError;
pub use finalize::{claim_finalize, complete_finalize_many, release_finalize, renew_finalize};
pub use follow_up::routed_units_left;
pub use holds::release_holds;
pub use submit::mark_submitted;
pub use tasks::{cancel_task, retry_task};
pub use writer::UnitWriter;
