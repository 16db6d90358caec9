//! The handler driven through its `Handler` methods against a scripted Runway (the SDK's
//! `ScriptedHost`), on the build machine: ticks, the outcome-unknown rule, cancel, finalize
//! and what every request carries.

mod auth;
mod cancel;
mod estimate;
mod finalize;
mod poll;
mod rate_limit;
mod submit;
pub(crate) mod support;
mod unknown;
