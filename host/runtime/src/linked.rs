//! A compiled component linked for one engine ([`Linked`]): pre-instantiated with the host's
//! imports, and the indices of its optional exports (those of later 1.x minors), found by the
//! component's own export names. Below both the loader (`load.rs`), which links a component
//! when it is loaded, and [`Handler`](super::Handler), which links its on-demand copy the first
//! time a call needs it.

use anyhow::{Context, anyhow};
use wasmtime::component::{Component, Linker};

use super::bindings::{
    ACCEPTED_MAJOR, COSTS_INTERFACE, EXTENSIONS_INTERFACE, PROVIDER_INTERFACE, ROUTES_INTERFACE,
    SlotdHandlerPre, costs, extensions, provider, routes,
};
use super::engine::CallState;

/// A compiled component linked for one engine: its pre-instantiated form and where its optional
/// exports live (export indices belong to one engine's copy of the component).
pub(crate) struct Linked {
    pub pre: SlotdHandlerPre<CallState>,
    pub ext: Option<extensions::GuestIndices>,
    pub cost: Option<costs::GuestIndices>,
    pub prov: Option<provider::GuestIndices>,
    pub route: Option<routes::GuestIndices>,
}

/// An optional export's indices, found in another engine's [`Linked`] copy of the component.
pub(crate) trait Export: Sized {
    fn of(linked: &Linked) -> Option<&Self>;
}

impl Export for extensions::GuestIndices {
    fn of(linked: &Linked) -> Option<&Self> {
        linked.ext.as_ref()
    }
}

impl Export for costs::GuestIndices {
    fn of(linked: &Linked) -> Option<&Self> {
        linked.cost.as_ref()
    }
}

impl Export for provider::GuestIndices {
    fn of(linked: &Linked) -> Option<&Self> {
        linked.prov.as_ref()
    }
}

impl Export for routes::GuestIndices {
    fn of(linked: &Linked) -> Option<&Self> {
        linked.route.as_ref()
    }
}

/// Link a component with `linker` (of the component's engine): pre-instantiate it and find its
/// exports, the required ones and the optional ones of later 1.x minors.
pub(crate) fn link(linker: &Linker<CallState>, component: &Component) -> anyhow::Result<Linked> {
    let pre = linker
        .instantiate_pre(component)
        .map_err(|e| anyhow!("{e:#}"))
        .context("linking its imports (only WASI and slotd:handler@1 are provided)")?;
    let ext = extension_indices(&pre)?;
    let cost = cost_indices(&pre)?;
    let prov = provider_indices(&pre)?;
    let route = route_indices(&pre)?;
    let pre = SlotdHandlerPre::new(pre)
        .map_err(|e| anyhow!("{e:#}"))
        .context("finding the handler exports")?;
    Ok(Linked {
        pre,
        ext,
        cost,
        prov,
        route,
    })
}

/// The major version in a name like `slotd:handler/handler@1.0.0`, if versioned.
pub(crate) fn major(name: &str) -> Option<&str> {
    name.split_once('@')
        .map(|(_, v)| v.split('.').next().unwrap_or(v))
}

/// The name under which the component exports `interface` in a version of the accepted major
/// (`slotd:handler/extensions@1.1.0`, `…@1.2.0`, …), if it does. The lookup is by the
/// component's own name, so any 1.x minor that has the interface is found, whatever minor the
/// host binds.
fn export_of<T: 'static>(
    pre: &wasmtime::component::InstancePre<T>,
    interface: &str,
) -> Option<String> {
    let component = pre.component();
    let ty = component.component_type();
    let prefix = format!("{interface}@");
    ty.exports(component.engine())
        .map(|(name, _)| name)
        .find(|name| name.starts_with(&prefix) && major(name) == Some(ACCEPTED_MAJOR))
        .map(str::to_string)
}

/// The `extensions` export of a 1.1 (or later 1.x) component, if it has one.
pub(crate) fn extension_indices<T: 'static>(
    pre: &wasmtime::component::InstancePre<T>,
) -> anyhow::Result<Option<extensions::GuestIndices>> {
    let Some(name) = export_of(pre, EXTENSIONS_INTERFACE) else {
        return Ok(None);
    };
    extensions::GuestIndices::new(pre)
        .map(Some)
        .map_err(|e| anyhow!("{e:#}"))
        .with_context(|| format!("finding the extensions export ({name})"))
}

/// The `costs` export of a 1.2 (or later 1.x) component, if it has one.
pub(crate) fn cost_indices<T: 'static>(
    pre: &wasmtime::component::InstancePre<T>,
) -> anyhow::Result<Option<costs::GuestIndices>> {
    let Some(name) = export_of(pre, COSTS_INTERFACE) else {
        return Ok(None);
    };
    costs::GuestIndices::new(pre)
        .map(Some)
        .map_err(|e| anyhow!("{e:#}"))
        .with_context(|| format!("finding the costs export ({name})"))
}

/// The `provider` export of a 1.3 (or later 1.x) component, if it has one.
pub(crate) fn provider_indices<T: 'static>(
    pre: &wasmtime::component::InstancePre<T>,
) -> anyhow::Result<Option<provider::GuestIndices>> {
    let Some(name) = export_of(pre, PROVIDER_INTERFACE) else {
        return Ok(None);
    };
    provider::GuestIndices::new(pre)
        .map(Some)
        .map_err(|e| anyhow!("{e:#}"))
        .with_context(|| format!("finding the provider export ({name})"))
}

/// The `routes` export of a 1.5 (or later 1.x) component, if it has one.
pub(crate) fn route_indices<T: 'static>(
    pre: &wasmtime::component::InstancePre<T>,
) -> anyhow::Result<Option<routes::GuestIndices>> {
    let Some(name) = export_of(pre, ROUTES_INTERFACE) else {
        return Ok(None);
    };
    routes::GuestIndices::new(pre)
        .map(Some)
        .map_err(|e| anyhow!("{e:#}"))
        .with_context(|| format!("finding the routes export ({name})"))
}
