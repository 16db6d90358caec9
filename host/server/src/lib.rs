//! slotd-server: the service library. Everything that runs while slotd serves, above the
//! store and the wasm runtime and below the `slotd` binary (docs/architecture.md).
//!
//! A unit travels in a straight line: API → lifecycle → store → scheduler (grant, handler
//! call, lifecycle) → finalizer → object store → completion webhook outbox
//! (docs/unit-journey.md).
//!
//! # Layout
//! - [`keyspace`]: the shared Redis connection and key prefix; [`slots`]: the `SlotStore`
//!   (in-process; Redis); [`lease`]: per-pool scheduler leases with fencing tokens; [`hot`]: the
//!   hot task status cache (Redis, database fallback); [`wake`]: early wake-ups.
//! - [`pool_state`]: the pools' live state (limits, adapted capacity, drained accounts,
//!   observed durations), kept by the scheduler and read by the API, ETAs and `slotd check`.
//! - [`services`]: the shared handles every part uses.
//! - [`lifecycle`]: the one writer of units: create, cancel, retry, the submit marker, a tick's
//!   and a provider callback's changes, finalization; each ends with its follow-ups.
//! - [`scheduler`]: per-pool loops around `run_once`, finalization workers.
//! - [`objects`]: the object store for artifacts (local dir, S3), streaming uploads.
//! - [`provider_callback_token`]: the tokens in provider callback URLs that say which units a provider
//!   callback may change.
//! - [`completion_webhooks`]: completion webhooks from a durable outbox, signed, SSRF-checked.
//! - [`task_view`]: how a task looks to a client, shared by the API and the completion webhook
//!   outbox.
//! - [`eta`]: the completion estimate of `GET /v1/tasks/{id}`.
//! - [`api`]: the axum router, one file per resource, problem+json errors, the OpenAPI
//!   document every route is registered with, and the operator console at `/`.
//! - [`check`]: `slotd check`, the read-only audit of a database against the invariants.
//! - [`app`]: building the services from the config, running until shutdown; [`serve`]: the
//!   HTTP/1.1 listener loop (header-read timeout, graceful shutdown).

pub mod api;
pub mod app;
pub mod check;
pub mod completion_webhooks;
pub mod eta;
pub mod event_feed;
pub mod hot;
pub mod keyspace;
pub mod lease;
pub mod lifecycle;
pub mod objects;
pub mod pool_state;
pub mod provider_callback_token;
pub mod routing;
pub mod scheduler;
pub mod serve;
pub mod services;
pub mod slots;
pub mod task_view;
pub mod wake;

pub use app::{build, run, run_with};

#[cfg(test)]
mod open_tests;
