//! slotd-testkit: what slotd's tests and benches stand on. A dev-dependency everywhere, never
//! linked by the `slotd` binary (docs/architecture.md).
//!
//! - [`stub`]: the stub provider the fixture handler speaks to, and a TCP proxy a test cuts.
//! - [`BUILT_PLUGINS`] and [`built_handler`]: the handler components, the test fixtures among
//!   them, that `slotd-handlers`' build script compiled from `plugins/`.

pub mod stub;

pub use slotd_handlers::{BUILT_PLUGINS, built_handler};
