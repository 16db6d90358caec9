//! slotd-handlers: the handler components of `plugins/`, built by this crate's build script
//! (`build.rs`) for `wasm32-wasip2`. The build adds the target when the toolchain lacks it, and
//! installs the provider handlers into `plugins/`, where a default `slotd serve` loads them.
//!
//! Used by the demo (`slotd-demo`) and, through the test kit, by tests and benches; never by
//! the production library or a `slotd` built without its default `demo` feature
//! (docs/architecture.md, "Where built handlers come from").

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
