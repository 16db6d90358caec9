//! # slotd-sdk
//!
//! Write slotd handlers in plain Rust. A handler is a WebAssembly
//! component (`wasm32-wasip2`) that knows one provider: it turns task payloads into units
//! (`plan`), batches of units into state changes (`tick`), succeeded units into artifacts
//! (`finalize`) and provider webhooks into changes (`on_callback`). The host owns all state,
//! the clock, the slots and the network.
//!
//! This crate speaks contract **`slotd:handler@1.5.0`** (its own copy is in `wit/`): implement
//! [`Handler`] on a unit struct and export it with [`export_handler!`]. Everything a handler
//! does outside its memory goes through a [`Host`]: [`WitHost`] inside the component,
//! [`testing::ScriptedHost`] in ordinary `cargo test` (feature `testing`), so a handler's
//! logic is tested offline on the build machine.
//!
//! # Layout
//! - [`Handler`], [`export_handler!`]: the trait and the export (the generated bindings live
//!   in [`bindings`]; handlers need not touch them).
//! - Plain records: units, contexts, [`Outcome`], [`Change`], [`CallbackChange`], plan and
//!   finalize results; [`HandlerInfo`] and the 1.1 extension records.
//! - [`Host`] and its HTTP records; [`WitHost`]; [`testing`].
//! - [`client`]: requests relative to a base URL, rounds through `send-batch` or
//!   `send-authorized`, JSON, status classes and failure outcomes; [`retry_after`].
//! - [`settings`]: configuration with errors naming the key; [`fields`]: payload validation.
//! - [`signing`]: HMAC and HS256 JWTs signed by the host; [`webhook`]: Standard Webhooks.
//! - [`polling`]: rounds of requests, list-endpoint paging, path segments.
//! - [`jobs`]: submit → poll → result handlers: the submission record, the outcome-unknown
//!   rule for providers without an idempotency key, units on their model's pool
//!   (`testing::jobs`: their test support).
//! - [`route`]: routes (contract 1.5): the canonical [`route::Shot`] a route hands a handler,
//!   parsed once for every handler, and the [`RoutedShot`] it answers.

#![warn(missing_docs)]

// The generated export macro names this crate by its absolute path, also from inside it.
extern crate self as slotd_sdk;

#[allow(missing_docs)] // Generated; documented from the WIT where it says anything.
pub mod bindings;
pub mod client;
mod convert;
#[cfg(test)]
mod example_tests;
mod export;
pub mod fields;
mod handler;
mod host;
mod info;
pub mod jobs;
pub mod polling;
pub mod retry_after;
pub mod route;
pub mod settings;
pub mod signing;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(any(test, feature = "testing"))]
mod testing_keys;
mod types;
pub mod webhook;
mod wit_host;

pub use export::features;
pub use handler::Handler;
pub use host::{
    AuthorizedRequest, Credential, Host, HttpError, Level, NO_SECRET, Request, Response, header,
};
pub use info::{
    CancelChange, CancelOutcome, ExpectedDuration, Features, HandlerInfo, LimitsContext, PoolInfo,
    PoolLimits, RoutedUnit, StageInfo, StagePool, StatedQuota, TaskTypeInfo,
};
pub use route::RoutedShot;
pub use types::{
    Artifact, CallbackChange, Change, Finalized, Outcome, PlanError, PlannedUnit, ProviderError,
    TickContext, Unit, UnitStatus,
};
pub use wit_host::WitHost;

/// The contract version this crate speaks.
pub const CONTRACT: &str = "slotd:handler@1.5.0";

/// What the export macro needs by path; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use wit_bindgen;
}

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
