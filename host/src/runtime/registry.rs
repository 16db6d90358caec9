//! [`Registry`]: the handlers currently serving, behind an `ArcSwap` so that a reload never makes
//! a call wait; a call in flight keeps the `Arc<Handler>` it started with.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::Runtime;
use super::handler::Handler;

/// An immutable view of the loaded handlers.
#[derive(Default)]
pub struct Snapshot {
    /// Handlers by name.
    pub by_name: BTreeMap<String, Arc<Handler>>,
    /// Handler name by task type.
    pub by_type: BTreeMap<String, String>,
}

/// What loading a directory did.
#[derive(Debug, Default)]
pub struct LoadSummary {
    /// (path, handler name, version) of each loaded file.
    pub loaded: Vec<(PathBuf, String, String)>,
    /// (path, reason) of each refused file.
    pub refused: Vec<(PathBuf, String)>,
}

/// The current set of handlers.
#[derive(Default)]
pub struct Registry {
    current: ArcSwap<Snapshot>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// The current snapshot (cheap; lock-free).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// The handler serving a task type.
    pub fn for_type(&self, task_type: &str) -> Option<Arc<Handler>> {
        let snap = self.current.load();
        snap.by_type
            .get(task_type)
            .and_then(|n| snap.by_name.get(n))
            .cloned()
    }

    /// A handler by name.
    pub fn by_name(&self, name: &str) -> Option<Arc<Handler>> {
        self.current.load().by_name.get(name).cloned()
    }

    /// Every loaded handler, by name.
    pub fn all(&self) -> Vec<Arc<Handler>> {
        self.current.load().by_name.values().cloned().collect()
    }

    /// Add or replace a handler (by name). Refused when one of its task types is served by a
    /// different handler.
    pub fn insert(&self, handler: Arc<Handler>) -> Result<(), String> {
        let old = self.current.load_full();
        let name = handler.info.name.clone();
        for t in &handler.info.task_types {
            if let Some(other) = old.by_type.get(&t.name)
                && *other != name
            {
                return Err(format!(
                    "task type {:?} is already served by handler {other:?}",
                    t.name
                ));
            }
        }
        let mut by_name = old.by_name.clone();
        let mut by_type: BTreeMap<String, String> = old
            .by_type
            .iter()
            .filter(|(_, n)| **n != name)
            .map(|(t, n)| (t.clone(), n.clone()))
            .collect();
        for t in &handler.info.task_types {
            by_type.insert(t.name.clone(), name.clone());
        }
        by_name.insert(name, handler);
        self.current.store(Arc::new(Snapshot { by_name, by_type }));
        Ok(())
    }

    /// Unload a handler by name; its units wait as pending.
    pub fn remove(&self, name: &str) -> Option<Arc<Handler>> {
        let old = self.current.load_full();
        let mut by_name = old.by_name.clone();
        let gone = by_name.remove(name)?;
        let by_type = old
            .by_type
            .iter()
            .filter(|(_, n)| *n != name)
            .map(|(t, n)| (t.clone(), n.clone()))
            .collect();
        self.current.store(Arc::new(Snapshot { by_name, by_type }));
        Some(gone)
    }

    /// Load every `*.wasm` directly in `dir` (sorted by file name); refusals are logged with
    /// `warn!` and reported, never fatal.
    pub async fn load_dir(&self, runtime: &Runtime, dir: &Path) -> LoadSummary {
        let mut summary = LoadSummary::default();
        let files = match wasm_files(dir) {
            Ok(files) => files,
            Err(e) => {
                let reason = format!("reading plugins directory {}: {e}", dir.display());
                tracing::warn!(dir = %dir.display(), "{reason}");
                summary.refused.push((dir.to_path_buf(), reason));
                return summary;
            }
        };
        for path in files {
            let outcome = match runtime.load_file(&path).await {
                Ok(handler) => {
                    let name = handler.info.name.clone();
                    let version = handler.info.version.clone();
                    self.insert(handler)
                        .map(|()| (name, version))
                        .map_err(|e| format!("loading handler {}: {e}", path.display()))
                }
                Err(e) => Err(format!("{e:#}")),
            };
            match outcome {
                Ok((name, version)) => {
                    tracing::info!(path = %path.display(), handler = %name, %version, "handler loaded");
                    summary.loaded.push((path, name, version));
                }
                Err(reason) => {
                    tracing::warn!(path = %path.display(), "handler refused: {reason}");
                    metrics::counter!("slotd_handler_refusals_total").increment(1);
                    summary.refused.push((path, reason));
                }
            }
        }
        summary
    }
}

/// The `*.wasm` files directly in `dir`, sorted.
fn wasm_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "wasm") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}
