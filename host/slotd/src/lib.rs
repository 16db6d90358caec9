//! The `slotd` binary's commands that tests drive directly. The binary is the top of the
//! workspace: the one package that may depend on the simulators, through its default `demo`
//! feature, which a release build leaves out (docs/architecture.md).
//!
//! - [`demo`]: `slotd demo`, the main job end to end against the simulators (the `slotd-demo`
//!   crate, feature `demo`).
//! - [`publish`]: `slotd plugin publish`, a handler sent to a running cluster as a release.
//! - [`scaffold`]: `slotd plugin new`, a new handler project on the vendored SDK.
//! - [`watch`]: `slotd task watch`, a task's live progress from its event stream.

#[cfg(feature = "demo")]
pub use slotd_demo as demo;
pub mod publish;
pub mod scaffold;
pub mod watch;
