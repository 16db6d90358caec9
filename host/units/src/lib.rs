//! slotd-units: the shared handles every part of slotd is given ([`services::Services`]) and
//! the one writer of units behind them ([`lifecycle`]). A unit write compiles only inside this
//! crate's `lifecycle` module (docs/architecture.md, "One writer of units").
//!
//! - [`services`]: the handles; [`assemble`]: building them from the configuration.
//! - [`lifecycle`]: create, cancel, retry, the submit marker, a tick's and a provider
//!   callback's changes, finalization; each ends with its follow-ups.
//! - [`pools_now`]: the pools' limits and quota closures as they stand, read through the
//!   services.
//! - [`event_feed`]: the one reader of the event log behind live event streams.
//! - [`job_lookups`]: provider callbacks' job lookups, read together ([`together`]: asks
//!   gathered into passes; the callbacks' writes are gathered the same way).
//! - [`provider_callback_token`]: the tokens in provider callback URLs that say which units a
//!   provider callback may change.

pub mod assemble;
pub mod event_feed;
pub mod job_lookups;
pub mod lifecycle;
pub mod pools_now;
pub mod provider_callback_token;
pub mod services;
#[cfg(test)]
mod test_support;
mod together;
