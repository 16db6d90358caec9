//! slotd-server: the top of the service library, above every concept crate and below the
//! `slotd` binary (docs/architecture.md). It runs slotd ([`app`]) and re-exports the crates
//! below under the module names the binary, the demo, the end-to-end tests and the benches use.
//!
//! A unit travels in a straight line: API → lifecycle → store → scheduler (grant, handler
//! call, lifecycle) → finalizer → object store → completion webhook outbox
//! (docs/unit-journey.md).
//!
//! # The crates below, in build order
//! - slotd-coord: [`keyspace`], [`slots`], [`lease`], [`hot`], [`wake`].
//! - slotd-objects: [`objects`], the artifact store (local dir, S3).
//! - slotd-pools: [`pool_state`], [`eta`], [`routing`].
//! - slotd-units: [`services`], [`lifecycle`] (the one writer of units), [`event_feed`],
//!   [`provider_callback_token`].
//! - slotd-webhooks: [`completion_webhooks`], [`task_view`].
//! - slotd-scheduler: [`scheduler`].
//! - slotd-api: [`api`] (with the console and the listener, [`serve`]).
//! - slotd-audit: [`check`], `slotd check`'s read-only audit.

pub mod app;

pub use slotd_api as api;
pub use slotd_api::serve;
pub use slotd_audit as check;
pub use slotd_coord::{hot, keyspace, lease, slots, wake};
pub use slotd_objects as objects;
pub use slotd_pools::{eta, pool_state, routing};
pub use slotd_scheduler as scheduler;
pub use slotd_units::{event_feed, lifecycle, provider_callback_token, services};
pub use slotd_webhooks::{completion_webhooks, task_view};

pub use app::{build, run, run_with};

#[cfg(test)]
mod open_tests;
