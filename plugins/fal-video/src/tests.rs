//! The handler driven through its `Handler` methods against a scripted fal (the SDK's
//! `ScriptedHost`), on the build machine: plans, ticks, the outcome-unknown rule, webhooks,
//! cancel, finalize and what every request carries.

mod auth;
mod cancel;
mod estimate;
mod plan;
mod poll;
mod submit;
pub(crate) mod support;
mod unknown;
mod webhook;
