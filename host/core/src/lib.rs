//! slotd-core: what every other slotd crate stands on: the types, rules and pure logic, with
//! no I/O beyond the address policy's DNS lookup (docs/architecture.md).
//!
//! - [`address`]: the address policy of outbound calls (allowlists, the SSRF rule).
//! - [`model`]: statuses, legal transitions, change validation, derived task status. Pure.
//! - [`config`]: one typed `Config`, named defaults, environment overrides, validation.
//! - [`clock`]: the injected clock.
//! - [`redact`]: passwords out of printed URLs.
//! - [`standard_webhooks`]: Standard Webhooks signing and verification (completion webhooks, the
//!   simulators' provider callbacks).
//! - [`telemetry`]: the per-instance metrics registry every metric is recorded through.

pub mod address;
pub mod clock;
pub mod config;
pub mod model;
pub mod redact;
pub mod standard_webhooks;
pub mod telemetry;
