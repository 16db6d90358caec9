//! The Kling handlers, written on `slotd-sdk`: payload validation (`plan`), the JWT, how
//! Kling's answers are classified, the submit/poll flow of a tick and callbacks, against the
//! SDK's `Host`, so everything runs and is tested on the build machine as well as inside the
//! `kling-video` and `kling-avatar` components, which only export [`KlingVideo`] and
//! [`KlingAvatar`].
//!
//! # Layout
//! - `handlers`: the two `Handler` implementations.
//! - `client`: the JWT and one authenticated round of requests, re-signing once on 1003/1004.
//! - `answer`: Kling's envelope and the classification of every code.
//! - `task`: the task object and what its status means for a unit.
//! - `flow`: a tick: in-doubt lookups, submits, duplicate adoption, polls; `list`: list polling;
//!   `job`: a unit of the batch as both see it.
//! - `fields`: payload validation (the SDK's helpers and Kling's image rule).
//! - `video`, `avatar`: the two handlers' payloads, bodies and results.
//! - `video_route`: `kling-video` as a route target (contract 1.5 `routes`): a canonical shot
//!   as a `video` unit.
//! - `price`: the expected cost of a job in resource-pack units (contract 1.2 `costs`).
//! - `webhook`: callbacks (signature checked by the SDK, task object to change).

pub mod answer;
pub mod avatar;
pub mod client;
pub mod fields;
pub mod flow;
pub mod handlers;
pub mod job;
mod list;
pub mod price;
pub mod task;
pub mod video;
pub mod video_route;
pub mod webhook;

#[cfg(test)]
mod flow_tests;
#[cfg(test)]
mod handler_tests;
#[cfg(test)]
mod testing;

pub use handlers::{KlingAvatar, KlingVideo};
