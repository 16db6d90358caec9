//! slotd-sim: provider simulators over real HTTP, for tests, the demo and the benchmarks.
//! Outside the scheduling path: no library crate depends on this one, only the `slotd`
//! binary (`slotd sim kling|runway|fal`, `slotd demo`), tests and benches (docs/architecture.md).
//!
//! - [`fal`]: the fal queue simulator, Pika's models through fal's queue (`slotd sim fal`).
//! - [`files`]: the deterministic result files all three serve (a test recomputes their bytes).
//! - [`kling`]: the Kling simulator (`slotd sim kling`).
//! - [`runway`]: the Runway simulator (`slotd sim runway`).
//! - What the three share, written once: [`Handle`] (a running simulator: address, base URL,
//!   shutdown; `handle`), the defaults and start-up checks of their common options
//!   ([`options`]) and their clock (`clock`: simulated time scaled to real time, wall-clock
//!   times).

mod clock;
pub mod fal;
pub mod files;
mod handle;
pub mod kling;
pub mod options;
pub mod runway;

pub use handle::Handle;
