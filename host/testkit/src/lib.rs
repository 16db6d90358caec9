//! slotd-testkit: what slotd's tests and benches stand on. A dev-dependency everywhere but
//! in the `slotd` binary, whose demo loads the built handlers (docs/architecture.md).
//!
//! - [`stub`]: the stub provider the fixture handler speaks to, and a TCP proxy a test cuts.
//! - [`BUILT_PLUGINS`] and [`built_handler`]: the handler components this crate's build script
//!   compiled from `plugins/`.

pub mod stub;

use std::path::{Path, PathBuf};

/// Where this crate's build script put every component it built from `plugins/` (file names
/// use `_`: `kling_video.wasm`).
pub const BUILT_PLUGINS: &str = env!("SLOTD_BUILT_PLUGINS");

/// Where the build put the component of a handler crate named `name` (e.g. `kling-video`):
/// the build script builds every crate in `plugins/` into [`BUILT_PLUGINS`] (file names use
/// `_`), and installs the provider handlers into `plugins/` (file names use `-`).
pub fn built_handler(name: &str) -> Option<PathBuf> {
    let built = Path::new(BUILT_PLUGINS).join(format!("{}.wasm", name.replace('-', "_")));
    let installed = Path::new("plugins").join(format!("{name}.wasm"));
    [built, installed].into_iter().find(|p| p.is_file())
}
