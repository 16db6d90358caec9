//! Loading one component file: read, hash, compile off the async runtime (cached by content
//! hash), place it on the pooling engine or, when it does not fit a pool slot, the on-demand one
//! (counted and logged), check it targets `slotd:handler@1.x`, pre-instantiate, `describe`,
//! validate. Every error names the file.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::bindings::{ACCEPTED_MAJOR, HANDLER_INTERFACE, PACKAGE, SlotdHandlerPre};
use super::cache::Artifact;
use super::engine::{Placed, Shared};
use super::linked::{
    Linked, cost_indices, extension_indices, link, major, provider_indices, route_indices,
};
use super::{Handler, HandlerInfo, Runtime, StagePool};

impl Runtime {
    /// Compile (off the async runtime), pre-instantiate and `describe` one component file.
    pub async fn load_file(&self, path: &Path) -> anyhow::Result<Arc<Handler>> {
        let shown = path.display().to_string();
        self.load_inner(path)
            .await
            .with_context(|| format!("loading handler {shown}"))
    }

    async fn load_inner(&self, path: &Path) -> anyhow::Result<Arc<Handler>> {
        let bytes = tokio::fs::read(path).await.context("reading the file")?;
        self.load_bytes_inner(path, bytes).await
    }

    /// [`Runtime::load_file`] on content already read (the watcher hashes it first).
    pub async fn load_bytes(&self, path: &Path, bytes: Vec<u8>) -> anyhow::Result<Arc<Handler>> {
        let shown = path.display().to_string();
        self.load_bytes_inner(path, bytes)
            .await
            .with_context(|| format!("loading handler {shown}"))
    }

    async fn load_bytes_inner(&self, path: &Path, bytes: Vec<u8>) -> anyhow::Result<Arc<Handler>> {
        check_size(bytes.len(), self.limits.handler_file_bytes)?;
        check_header(&bytes)?;
        let sha256 = sha256_hex(&bytes);
        let Placed { component, misfit } = self.compile(&sha256, bytes).await?;
        let contract = check_contract(component.engine(), &component)?;
        let Linked {
            pre,
            ext,
            cost,
            prov,
            route,
        } = link(self.shared.linker_for(&component), &component)?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "handler".into());
        let placeholder = HandlerInfo {
            name: stem.clone(),
            version: String::new(),
            task_types: Vec::new(),
            pools: Vec::new(),
        };
        let mut handler = Handler::new(
            Arc::from(stem.as_str()),
            placeholder,
            sha256,
            path.to_path_buf(),
            pre,
            ext,
            self.shared.clone(),
        );
        handler.set_costs(cost);
        handler.set_provider(prov);
        handler.set_routes(route);
        handler.contract = contract;
        let info = handler
            .describe()
            .await
            .map_err(|fault| anyhow!("describe failed: {fault}"))?;
        validate_info(&info).context("describe returned an invalid declaration")?;
        let (handler, info) = extend(handler, info).await?;
        let handler = handler.with_info(info);
        if let Some(reason) = misfit {
            self.shared.metrics.record(|| {
                metrics::counter!(
                    "slotd_handler_fallbacks_total",
                    "handler" => handler.info.name.clone(),
                    "reason" => "does_not_fit",
                )
                .increment(1)
            });
            tracing::warn!(handler = %handler.info.name, version = %handler.info.version, path = %path.display(), %reason, "the component does not fit the instance pool: its calls run on the on-demand allocator (slower; counted in slotd_handler_fallbacks_total)");
        }
        Ok(Arc::new(handler))
    }

    /// Compile in `spawn_blocking` and place the code on an engine; an unchanged file (same
    /// sha256) reuses the compiled code, from memory or else from the disk cache.
    async fn compile(&self, sha256: &str, bytes: Vec<u8>) -> anyhow::Result<Placed> {
        if let Some(hit) = self.compiled.lock().get(sha256) {
            return Ok(hit.clone());
        }
        let shared = self.shared.clone();
        let disk = self.disk.clone();
        let sha = sha256.to_string();
        let placed = tokio::task::spawn_blocking(move || {
            if let Some(hit) = disk
                .as_ref()
                .and_then(|d| d.load_with(&sha, |code| shared.place(code)))
            {
                tracing::debug!(sha256 = %sha, "compiled handler taken from the disk cache");
                return Ok(hit);
            }
            let started = std::time::Instant::now();
            let code = precompile(&shared, &bytes)?;
            tracing::info!(sha256 = %sha, elapsed = ?started.elapsed(), "handler compiled");
            if let Some(d) = &disk {
                d.store_bytes(&sha, &code);
            }
            shared.place(Artifact::Bytes(&code))
        })
        .await
        .context("the compile task did not finish")??;
        self.compiled
            .lock()
            .insert(sha256.to_string(), placed.clone());
        Ok(placed)
    }
}

/// Compile a component for the runtime's engines (blocking). Compiling does not depend on the
/// instance allocator: the code is placed afterwards ([`Shared::place`]).
fn precompile(shared: &Shared, bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
    shared
        .engine
        .precompile_component(bytes)
        .map_err(|e| anyhow!("{e:#}"))
        .context("not a valid WebAssembly component")
}

/// The content hash that names a version of a handler file.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Refuse non-wasm files and core modules early with a message saying what the file is.
/// A component file is at most `[limits] handler_file_mb`.
fn check_size(len: usize, max: usize) -> anyhow::Result<()> {
    if len > max {
        bail!(
            "the file is {len} bytes, more than limits.handler_file_mb allows ({} MiB)",
            max / (1024 * 1024)
        );
    }
    Ok(())
}

fn check_header(bytes: &[u8]) -> anyhow::Result<()> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        bail!(
            "not a WebAssembly file (no \\0asm header); expected a component built for wasm32-wasip2"
        );
    }
    // Bytes 6..8 are the layer: 0 for a core module, 1 for a component.
    if bytes[6..8] == [0, 0] {
        bail!(
            "a core WebAssembly module, not a component; build the handler for wasm32-wasip2 \
             against {PACKAGE}@{ACCEPTED_MAJOR}.x"
        );
    }
    Ok(())
}

/// Read a 1.1 component's features and, when it routes, its stage pools (with only its plain
/// settings readable), and fold the pools into the declaration.
async fn extend(mut handler: Handler, info: HandlerInfo) -> anyhow::Result<(Handler, HandlerInfo)> {
    handler.features = handler
        .read_features()
        .await
        .map_err(|fault| anyhow!("extensions.features failed: {fault}"))?;
    handler.read_route_models().await?;
    if !handler.features.routing {
        return Ok((handler, info));
    }
    let handler = handler.with_settings_of(&info.name);
    let pools = handler
        .stage_pools()
        .await
        .map_err(|fault| anyhow!("extensions.stage-pools failed: {fault}"))?;
    let info = with_stage_pools(info, pools).context("stage-pools returned an invalid route")?;
    validate_info(&info).context("stage-pools returned an invalid declaration")?;
    Ok((handler, info))
}

/// Add routed pools to the stages and the proposals. Each names a declared task type and
/// stage; a pool proposed twice with different defaults is refused.
pub(crate) fn with_stage_pools(
    mut info: HandlerInfo,
    pools: Vec<StagePool>,
) -> anyhow::Result<HandlerInfo> {
    for sp in pools {
        let Some(stage) = info
            .task_types
            .iter_mut()
            .find(|t| t.name == sp.task_type)
            .and_then(|t| t.stages.iter_mut().find(|s| s.name == sp.stage))
        else {
            bail!(
                "pool {:?} is routed for stage {:?} of task type {:?}, which describe did not \
                 declare",
                sp.pool.name,
                sp.stage,
                sp.task_type
            );
        };
        if !stage.allows(&sp.pool.name) {
            stage.alt_pools.push(sp.pool.name.clone());
        }
        match info.pools.iter().find(|p| p.name == sp.pool.name) {
            Some(p) if p.default_max_slots != sp.pool.default_max_slots => bail!(
                "pool {:?} is proposed with {} and with {} slots",
                p.name,
                p.default_max_slots,
                sp.pool.default_max_slots
            ),
            Some(_) => {}
            None => info.pools.push(sp.pool),
        }
    }
    Ok(info)
}

/// The component must export `slotd:handler/handler@1.x` and import nothing of another major.
/// Returns the contract version it was built against (the version of its handler export).
fn check_contract(engine: &Engine, component: &Component) -> anyhow::Result<String> {
    let ty = component.component_type();
    let accepted = format!("{HANDLER_INTERFACE}@{ACCEPTED_MAJOR}.x");
    let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
    let prefix = format!("{HANDLER_INTERFACE}@");
    let Some(export) = exports.iter().find(|n| n.starts_with(&prefix)) else {
        bail!(
            "the component does not export the handler interface: it exports [{}]; \
             this host accepts {accepted}",
            exports.join(", ")
        );
    };
    if major(export) != Some(ACCEPTED_MAJOR) {
        bail!(
            "the component was built for {export}, an incompatible major version; \
             this host accepts {accepted}"
        );
    }
    let package_prefix = format!("{PACKAGE}/");
    for (name, _) in ty.imports(engine) {
        if name.starts_with(&package_prefix) && major(name) != Some(ACCEPTED_MAJOR) {
            bail!(
                "the component imports {name}, an incompatible version; this host provides \
                 {PACKAGE}@{ACCEPTED_MAJOR}.x"
            );
        }
    }
    Ok(export
        .split_once('@')
        .map(|(_, v)| v.to_string())
        .unwrap_or_default())
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// What `describe` declared must be usable by the scheduler and the API.
pub(crate) fn validate_info(info: &HandlerInfo) -> anyhow::Result<()> {
    match info_problems(info).into_iter().next() {
        Some(problem) => bail!("{problem}"),
        None => Ok(()),
    }
}

/// A pool name the scheduler can create: printable, no whitespace, bounded.
fn valid_pool(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name.chars().all(|c| !c.is_whitespace() && !c.is_control())
}

/// Every problem in a declaration, in order (empty when it is usable).
pub(crate) fn info_problems(info: &HandlerInfo) -> Vec<String> {
    let mut out = Vec::new();
    if !valid_name(&info.name) {
        out.push(format!(
            "handler name {:?} must match [a-z0-9-]+",
            info.name
        ));
    }
    if info.version.trim().is_empty() {
        out.push(format!("handler {:?} declares an empty version", info.name));
    }
    if info.task_types.is_empty() {
        out.push(format!("handler {:?} declares no task types", info.name));
    }
    let mut types = BTreeSet::new();
    for t in &info.task_types {
        if t.name.trim().is_empty() {
            out.push(format!(
                "handler {:?} declares a task type with an empty name",
                info.name
            ));
        }
        if !types.insert(t.name.as_str()) {
            out.push(format!("task type {:?} is declared twice", t.name));
        }
        if t.stages.is_empty() {
            out.push(format!("task type {:?} declares no stages", t.name));
        }
        let mut stages = BTreeSet::new();
        for st in &t.stages {
            if st.name.trim().is_empty() {
                out.push(format!(
                    "task type {:?} has a stage with an empty name",
                    t.name
                ));
            }
            if !stages.insert(st.name.as_str()) {
                out.push(format!(
                    "task type {:?} declares stage {:?} twice",
                    t.name, st.name
                ));
            }
            if st.pool.trim().is_empty() {
                out.push(format!(
                    "stage {:?} of task type {:?} names an empty pool",
                    st.name, t.name
                ));
            } else if !valid_pool(&st.pool) {
                out.push(format!(
                    "stage {:?} of task type {:?} names pool {:?}: pool names are printable, \
                     without spaces, at most 128 bytes",
                    st.name, t.name, st.pool
                ));
            }
        }
    }
    let mut pools = BTreeSet::new();
    for p in &info.pools {
        if p.name.trim().is_empty() {
            out.push(format!(
                "handler {:?} proposes a pool with an empty name",
                info.name
            ));
        } else if !valid_pool(&p.name) {
            out.push(format!(
                "handler {:?} proposes pool {:?}: pool names are printable, without spaces, \
                 at most 128 bytes",
                info.name, p.name
            ));
        }
        if !pools.insert(p.name.as_str()) {
            out.push(format!("pool {:?} is proposed twice", p.name));
        }
        if p.default_max_slots == 0 {
            out.push(format!("pool {:?} proposes 0 slots (at least 1)", p.name));
        }
    }
    out
}

/// Notes on a usable declaration that an author probably wants to know (not problems).
pub(crate) fn info_notes(info: &HandlerInfo) -> Vec<String> {
    let proposed: BTreeSet<&str> = info.pools.iter().map(|p| p.name.as_str()).collect();
    let used: BTreeSet<&str> = info
        .task_types
        .iter()
        .flat_map(|t| t.stages.iter())
        .flat_map(|s| {
            std::iter::once(s.pool.as_str()).chain(s.alt_pools.iter().map(String::as_str))
        })
        .collect();
    let mut out = Vec::new();
    for p in used.difference(&proposed) {
        out.push(format!(
            "pool {p:?} is used by a stage but not proposed: it gets 1 slot unless \
             [pools.\"{p}\"] max_slots is configured"
        ));
    }
    for p in proposed.difference(&used) {
        out.push(format!("pool {p:?} is proposed but no stage uses it"));
    }
    out
}

/// What `slotd plugin check` found in one file.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// sha256 of the file, when it could be read.
    pub sha256: Option<String>,
    /// What `describe` declared (with routed pools), when the component got that far.
    pub info: Option<HandlerInfo>,
    /// The contract version it was built against, e.g. "1.0.0".
    pub contract: Option<String>,
    /// The optional parts of the contract it uses, when they could be read.
    pub features: Option<super::Features>,
    /// Everything that would make the host refuse the file. Empty: it would load.
    pub problems: Vec<String>,
    /// Things worth knowing that do not stop it loading.
    pub notes: Vec<String>,
}

/// Validate a component file offline, as the host would before loading it, collecting every
/// problem rather than stopping at the first (the checks that depend on an earlier one, such
/// as `describe` on a file that does not compile, are skipped).
pub async fn check_file(runtime: &Runtime, path: &Path) -> CheckReport {
    let mut report = CheckReport::default();
    let bytes = match tokio::fs::read(path).await {
        Ok(b) => b,
        Err(e) => {
            report
                .problems
                .push(format!("reading {}: {e}", path.display()));
            return report;
        }
    };
    report.sha256 = Some(hex::encode(Sha256::digest(&bytes)));
    if let Err(e) = check_header(&bytes) {
        report.problems.push(format!("{e:#}"));
        return report;
    }
    let shared = runtime.shared.clone();
    let compiled = tokio::task::spawn_blocking(move || {
        precompile(&shared, &bytes).and_then(|code| shared.place(Artifact::Bytes(&code)))
    })
    .await;
    let Placed { component, misfit } = match compiled {
        Ok(Ok(placed)) => placed,
        Ok(Err(e)) => {
            report.problems.push(format!("{e:#}"));
            return report;
        }
        Err(e) => {
            report
                .problems
                .push(format!("the compile task failed: {e}"));
            return report;
        }
    };
    if let Some(reason) = &misfit {
        report.notes.push(format!(
            "it does not fit the instance pool ({reason}): its calls would run on the slower \
             on-demand allocator"
        ));
    }
    let contract = match check_contract(component.engine(), &component) {
        Ok(v) => v,
        Err(e) => {
            report.problems.push(format!("{e:#}"));
            String::new()
        }
    };
    let pre = match runtime
        .shared
        .linker_for(&component)
        .instantiate_pre(&component)
    {
        Ok(pre) => pre,
        Err(e) => {
            report.problems.push(format!(
                "linking its imports (only WASI and slotd:handler@1 are provided): {e:#}"
            ));
            return report;
        }
    };
    if !report.problems.is_empty() {
        return report;
    }
    let ext = match extension_indices(&pre) {
        Ok(ext) => ext,
        Err(e) => {
            report.problems.push(format!("{e:#}"));
            return report;
        }
    };
    let cost = match cost_indices(&pre) {
        Ok(cost) => cost,
        Err(e) => {
            report.problems.push(format!("{e:#}"));
            return report;
        }
    };
    let prov = match provider_indices(&pre) {
        Ok(prov) => prov,
        Err(e) => {
            report.problems.push(format!("{e:#}"));
            return report;
        }
    };
    let route = match route_indices(&pre) {
        Ok(route) => route,
        Err(e) => {
            report.problems.push(format!("{e:#}"));
            return report;
        }
    };
    let pre = match SlotdHandlerPre::new(pre) {
        Ok(p) => p,
        Err(e) => {
            report
                .problems
                .push(format!("finding the handler exports: {e:#}"));
            return report;
        }
    };
    let mut handler = Handler::new(
        Arc::from("check"),
        HandlerInfo {
            name: "check".into(),
            version: String::new(),
            task_types: Vec::new(),
            pools: Vec::new(),
        },
        report.sha256.clone().unwrap_or_default(),
        path.to_path_buf(),
        pre,
        ext,
        runtime.shared.clone(),
    );
    handler.set_costs(cost);
    handler.set_provider(prov);
    handler.set_routes(route);
    handler.contract = contract.clone();
    report.contract = Some(contract);
    match handler.describe().await {
        Ok(info) => {
            let info = match extend(handler, info.clone()).await {
                Ok((h, extended)) => {
                    report.features = Some(h.features);
                    extended
                }
                Err(e) => {
                    report.problems.push(format!("{e:#}"));
                    info
                }
            };
            report.problems.extend(info_problems(&info));
            report.notes.extend(info_notes(&info));
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
            if stem.as_deref() != Some(info.name.as_str()) {
                report.notes.push(format!(
                    "the file is named {:?} but declares handler {:?}; naming it {}.wasm keeps \
                     one file per handler obvious",
                    path.file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    info.name,
                    info.name
                ));
            }
            report.info = Some(info);
        }
        Err(fault) => report.problems.push(format!("describe failed: {fault}")),
    }
    report
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
