//! The only `bindgen!` of the host: Rust types and traits generated from `wit/handler.wit`,
//! fenced in a private module and re-exported under the names the runtime uses.
//!
//! Every import and export is async: `http` awaits real I/O, and async exports let the epoch
//! deadline callback yield to tokio so a spinning guest never blocks a worker thread.

mod generated {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "slotd-handler",
        imports: { default: async },
        exports: { default: async },
    });
}

/// The instantiated world and its pre-instantiated form (one per loaded handler version).
pub use generated::{SlotdHandler, SlotdHandlerPre};

/// Shared WIT records and variants (`unit`, `change`, `outcome`, …).
pub use generated::slotd::handler::types as wit;

/// Host traits of the imports, implemented in `host_impl/`.
pub use generated::slotd::handler::{config, http, log, signing, types};

/// The WIT package the host implements, and the major version it accepts from components.
pub const PACKAGE: &str = "slotd:handler";
pub const ACCEPTED_MAJOR: &str = "1";
/// The interface every handler must export.
pub const HANDLER_INTERFACE: &str = "slotd:handler/handler";
