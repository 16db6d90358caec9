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
//! | [`cancel_task`] | `POST /v1/tasks/{id}/cancel` | drop the task's snapshot |
//! | [`retry_task`] | `POST /v1/tasks/{id}/retry` | snapshot; wake pools, the finalizer |
//! | [`mark_submitted`]: the submit marker | the tick's fill | give unused grants' slots back |
//! | [`apply_changes`] | a tick, a provider callback, the deadline sweep | snapshot; free slots of units that left `submitted` and wake their pools; the finalizer |
//! | [`claim_finalize`], [`complete_finalize`], [`release_finalize`] | the finalizer | snapshot when a finalization ends |
//!
//! Outside this module the store is only read, with two exceptions that change no unit a
//! reader sees: the finalizer's lease renewal (`unit_finalize_renew`, extending a lease it
//! holds) and the store's own group commit. The state machine these writes follow, and the
//! invariants they keep, are in docs/state-machine.md.

mod changes;
mod create;
mod create_routed;
mod finalize;
mod follow_up;
mod submit;
mod tasks;

pub(crate) use changes::{Origin, apply_changes};
pub use create::{CreateError, CreateRequest, CreatedTask, create_task};
pub use create_routed::create_routed_task;
pub use finalize::{claim_finalize, complete_finalize, release_finalize};
pub(crate) use submit::mark_submitted;
pub use tasks::{cancel_task, retry_task};
