//! The only `bindgen!`s of the host: Rust types and traits generated from `wit/handler.wit`,
//! fenced in private modules and re-exported under the names the runtime uses.
//!
//! Every import and export is async: `http` awaits real I/O, and async exports let the epoch
//! deadline callback yield to tokio so a spinning guest never blocks a worker thread.
//!
//! The host binds the world `slotd-handler-core` (the whole 1.0.0 contract, with 1.1's
//! additive imports): every 1.x component matches it. The `extensions` export added in 1.1.0
//! the `costs` export added in 1.2.0, the `provider` export added in 1.3.0 and the `routes`
//! export added in 1.5.0 are bound separately ([`extensions`], [`costs`], [`provider`],
//! [`routes`]) and looked up per component: a 1.0.0
//! component has none of them, a 1.1.0 component no `costs`, a 1.2.0 one no `provider`.

mod generated {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "slotd-handler-core",
        imports: { default: async },
        exports: { default: async },
    });
}

mod generated_full {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "slotd-handler",
        imports: { default: async },
        exports: { default: async },
        with: {
            "slotd:handler/types": super::generated::slotd::handler::types,
            "slotd:handler/http": super::generated::slotd::handler::http,
            "slotd:handler/log": super::generated::slotd::handler::log,
            "slotd:handler/config": super::generated::slotd::handler::config,
            "slotd:handler/signing": super::generated::slotd::handler::signing,
            "slotd:handler/observe": super::generated::slotd::handler::observe,
        },
    });
}

/// The instantiated core world and its pre-instantiated form (one per loaded handler version).
pub use generated::{SlotdHandlerCore as SlotdHandler, SlotdHandlerCorePre as SlotdHandlerPre};

/// Shared WIT records and variants (`unit`, `change`, `outcome`, …).
pub use generated::slotd::handler::types as wit;

/// Host traits of the imports, implemented in `host_impl/`.
pub use generated::slotd::handler::{config, http, log, observe, signing, types};

/// The `extensions` export of 1.1.0 components: `GuestIndices` (found once per component) and
/// `Guest` (loaded per instance), with its records.
pub use generated_full::exports::slotd::handler::extensions;

/// The `costs` export of 1.2.0 components: `GuestIndices` (found once per component) and
/// `Guest` (loaded per instance).
pub use generated_full::exports::slotd::handler::costs;

/// The `provider` export of 1.3.0 components: `GuestIndices` (found once per component) and
/// `Guest` (loaded per instance), with its records.
pub use generated_full::exports::slotd::handler::provider;

/// The `routes` export of 1.5.0 components: `GuestIndices` (found once per component) and
/// `Guest` (loaded per instance), with its records.
pub use generated_full::exports::slotd::handler::routes;

/// The WIT package the host implements, and the major version it accepts from components.
pub const PACKAGE: &str = "slotd:handler";
pub const ACCEPTED_MAJOR: &str = "1";
/// The interface every handler must export.
pub const HANDLER_INTERFACE: &str = "slotd:handler/handler";
/// The interface a 1.1 component exports beside `handler`.
pub const EXTENSIONS_INTERFACE: &str = "slotd:handler/extensions";
/// The interface a 1.2 component exports beside `handler` and `extensions`.
pub const COSTS_INTERFACE: &str = "slotd:handler/costs";
/// The interface a 1.3 component exports beside the earlier ones.
pub const PROVIDER_INTERFACE: &str = "slotd:handler/provider";
/// The interface a 1.5 component exports to serve routes.
pub const ROUTES_INTERFACE: &str = "slotd:handler/routes";
