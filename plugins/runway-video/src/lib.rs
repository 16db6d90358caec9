//! The `runway-video` handler: Runway image-to-video and text-to-video (`RUNWAY_API.md`), one
//! unit per shot, each on its model's pool `runway:<model>` (Runway limits concurrency per
//! model). Built on `slotd-sdk`.
//!
//! # Layout
//! - [`settings`]: `describe`, `stage-pools` (sized by the tier), configuration, the client.
//! - [`models`]: the models in scope and what each accepts; [`assets`]: image and prompt
//!   forms; [`payload`]: `plan` (one spec per shot); [`spec`]: the spec read back.

pub mod assets;
pub mod models;
pub mod payload;
pub mod settings;
pub mod spec;
