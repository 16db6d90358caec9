//! The `slotd` binary's commands that tests drive directly. The binary is the top of the
//! workspace: the one place that may depend on the simulators and the test kit
//! (docs/architecture.md).
//!
//! - [`demo`]: `slotd demo`, the main job end to end against the simulators.
//! - [`scaffold`]: `slotd plugin new`, a new handler project on the vendored SDK.
//! - [`watch`]: `slotd task watch`, a task's live progress from its event stream.

pub mod demo;
pub mod scaffold;
pub mod watch;
