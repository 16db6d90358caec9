//! The only `generate!` of the SDK: Rust bindings of world `slotd-handler` (contract 1.5.0,
//! from this crate's own `wit/handler.wit`). Handlers do not use these directly: the SDK's
//! neutral types convert to and from them, and [`crate::export_handler!`] exports a
//! [`crate::Handler`] through them.
//!
//! The imports compile on every target; outside `wasm32` calling one panics (wit-bindgen's
//! stubs), which is why tests use [`crate::testing::ScriptedHost`] instead.

wit_bindgen::generate!({
    path: "wit",
    world: "slotd-handler",
    // The export macro is public and finds these bindings by itself, so a handler crate needs
    // no wit-bindgen of its own.
    export_macro_name: "__export_slotd_handler",
    pub_export_macro: true,
    default_bindings_module: "::slotd_sdk::bindings",
    runtime_path: "::slotd_sdk::__private::wit_bindgen::rt",
});
