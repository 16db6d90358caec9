//! slotd-sim: provider simulators over real HTTP, for tests, the demo and the benchmarks.
//! Outside the scheduling path: no library crate depends on this one, only the `slotd`
//! binary (`slotd sim kling|runway`, `slotd demo`), tests and benches (docs/architecture.md).
//!
//! - [`fal`]: the fal queue simulator, Pika's models through fal's queue (`slotd sim fal`).
//! - [`files`]: the deterministic result files both serve (a test recomputes their bytes).
//! - [`kling`]: the Kling simulator (`slotd sim kling`).
//! - [`runway`]: the Runway simulator (`slotd sim runway`).

pub mod fal;
pub mod files;
pub mod kling;
pub mod runway;
