//! Everything the Kling handlers know that does not need the WIT bindings: payload validation
//! (`plan`), the JWT, how Kling's answers are classified, and the submit/poll flow of a tick,
//! written against the small [`Host`] trait so it runs and is tested on the host target as well
//! as inside the `kling-video` and `kling-avatar` components, which only adapt their generated
//! bindings to these types.
//!
//! # Layout
//! - `types`: the neutral records (units in, changes out, HTTP) and the [`Host`] trait.
//! - `jwt`: the HS256 token, signed by the host (`signing.hmac-sha256("secret_key", …)`).
//! - `answer`: Kling's envelope and the classification of every code.
//! - `client`: one authenticated round of requests, re-signing once on 1003/1004.
//! - `task`: the task object and what its status means for a unit.
//! - `flow`: a tick: in-doubt lookups, submits, duplicate adoption, polls; `list`: list polling.
//! - `fields`: payload validation helpers naming the field path.
//! - `video`, `avatar`: the two handlers' payloads, bodies and results.
//! - `webhook`: callbacks (Standard Webhooks verification, task object to change).

pub mod answer;
pub mod avatar;
pub mod client;
pub mod fields;
pub mod flow;
pub mod jwt;
mod list;
pub mod task;
pub mod types;
pub mod video;
pub mod webhook;

#[cfg(test)]
mod flow_tests;
#[cfg(test)]
mod testing;

pub use types::{
    CallbackChange, Change, Host, HttpError, Outcome, PlanError, ProviderError, Request, Response,
    UnitRef,
};
