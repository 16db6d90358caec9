//! slotd: a slot-based scheduler for provider-limited asynchronous jobs, with hot-loadable
//! WebAssembly handlers (see `SPEC.md` in the design docs and the README).
//!
//! A unit travels in a straight line: API → store → scheduler (grant, handler call, apply) →
//! store → finalizer → object store.
//!
//! # Layout
//! - [`config`]: one typed `Config`, named defaults, validation.
//! - [`model`]: statuses, legal transitions, change validation, derived task status. Pure.
//! - [`store`]: the durable `TaskStore` (SQLite; PostgreSQL), queries named `noun_verb`.
//! - [`slots`]: the `SlotStore` (in-process; Redis).
//! - [`keyspace`]: the shared Redis connection and key prefix; [`lease`]: per-pool scheduler
//!   leases with fencing tokens; [`hot`]: the hot task status cache (Redis, database fallback).
//! - [`runtime`]: the wasm engine, handler calls, host imports, the handler registry.
//! - [`scheduler`]: per-pool loops around `run_once`, finalization workers.
//! - [`objects`]: the object store for artifacts (local dir, S3), streaming uploads.
//! - [`api`]: the axum router, one file per resource, problem+json errors, the OpenAPI
//!   document every route is registered with, and the operator console at `/`.
//! - [`eta`]: the completion estimate of `GET /v1/tasks/{id}`.
//! - [`callback_token`]: the tokens in callback URLs that say which units a callback may change.
//! - [`sim`]: the Kling-compatible provider simulator (`slotd sim kling`), outside the scheduling path.
//! - [`sim_runway`]: the Runway-compatible provider simulator (`slotd sim runway`), likewise.
//! - [`check`]: `slotd check`, the read-only audit of a database against the invariants.
//! - [`watch`]: `slotd task watch`, a task's live progress from its event stream.
//! - [`deliveries`]: completion webhooks from a durable outbox, signed, SSRF-checked.
//! - [`app`]: building the services from the config, running until shutdown; [`serve`]: the
//!   HTTP/1.1 listener loop (header-read timeout, graceful shutdown).
//! - [`redact`]: passwords out of printed URLs.
//! - [`demo`]: `slotd demo`, the main job end to end against the simulator.
//! - [`scaffold`]: `slotd plugin new`, a new handler project on the vendored SDK.
//! - [`services`], [`clock`], [`wake`]: shared handles, the injected clock, early wake-ups.
//! - [`webhooks`]: Standard Webhooks signing and verification.

pub mod api;
pub mod app;
pub mod callback_token;
pub mod check;
pub mod clock;
pub mod config;
pub mod deliveries;
pub mod demo;
pub mod eta;
pub mod hot;
pub mod keyspace;
pub mod lease;
pub mod model;
pub mod objects;
pub mod redact;
pub mod runtime;
pub mod scaffold;
pub mod scheduler;
pub mod serve;
pub mod services;
pub mod sim;
pub mod sim_runway;
pub mod slots;
pub mod store;
pub mod stub;
pub mod wake;
pub mod watch;
pub mod webhooks;

pub use app::{build, run, run_with};
