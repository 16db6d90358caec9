//! [`Watcher`]: keeps the registry in step with the plugins directory, and supervises
//! quarantine.
//!
//! notify reports file events on its own thread; they are forwarded to one tokio task that
//! debounces them: a path is handled only once no event touched it for
//! [`WatcherOptions::debounce`] and its size held still across [`WatcherOptions::settle`]. Then a
//! present file is (re)loaded (compiled off the async runtime, described, checked, swapped in;
//! a refusal leaves the serving version alone) and a missing one unloaded. A half-written file
//! that slipped through fails to parse and is refused, never swapped in; the write that
//! completes it is another event, and the whole file loads then. A periodic rescan catches
//! anything the OS dropped (event queue overflow, network filesystems).
//!
//! The same task receives the versions that crossed their quarantine threshold
//! ([`super::Tripped`]) and asks the registry to quarantine them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use notify::{RecursiveMode, Watcher as _};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::registry::{PathOutcome, is_handler_file, wasm_files};
use super::{Registry, Runtime};

/// Quiet time after the last event on a path before it is handled.
pub const DEBOUNCE_DEFAULT: Duration = Duration::from_millis(200);
/// Interval over which a file's size must not change before it is read.
pub const SETTLE_DEFAULT: Duration = Duration::from_millis(50);
/// How often the whole directory is compared with what is loaded, events or not.
pub const RESCAN_DEFAULT: Duration = Duration::from_secs(30);

/// Timings of the watcher (tests shorten them).
#[derive(Clone, Debug)]
pub struct WatcherOptions {
    pub debounce: Duration,
    pub settle: Duration,
    pub rescan: Duration,
}

impl Default for WatcherOptions {
    fn default() -> Self {
        WatcherOptions {
            debounce: DEBOUNCE_DEFAULT,
            settle: SETTLE_DEFAULT,
            rescan: RESCAN_DEFAULT,
        }
    }
}

/// The running watcher; dropping it does not stop it (cancel the token given to `spawn`).
pub struct Watcher {
    /// Ends when the shutdown token is cancelled.
    pub task: tokio::task::JoinHandle<()>,
}

/// Something for the watcher task to do.
enum Signal {
    /// notify saw something happen to these paths (empty: it lost track, rescan).
    Paths(Vec<PathBuf>),
}

impl Watcher {
    /// Watch `dir` until `shutdown` is cancelled. The directory must exist. Also takes the
    /// runtime's quarantine stream (at most one watcher per runtime supervises quarantine).
    pub fn spawn(
        runtime: Arc<Runtime>,
        registry: Arc<Registry>,
        dir: &Path,
        options: WatcherOptions,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Watcher> {
        let dir = dir.to_path_buf();
        let (tx, rx) = mpsc::unbounded_channel::<Signal>();
        let mut fs_watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                let paths = match event {
                    Ok(e) if e.need_rescan() => Vec::new(),
                    Ok(e) => e.paths,
                    Err(_) => Vec::new(),
                };
                let _ = tx.send(Signal::Paths(paths));
            })
            .context("starting the plugins watcher")?;
        fs_watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .with_context(|| format!("watching plugins directory {}", dir.display()))?;
        let tripped = runtime.take_tripped();
        let task = tokio::spawn(async move {
            // Owned by the task: events flow until it ends.
            let _fs_watcher = fs_watcher;
            run(runtime, registry, dir, options, rx, tripped, shutdown).await;
        });
        Ok(Watcher { task })
    }
}

async fn run(
    runtime: Arc<Runtime>,
    registry: Arc<Registry>,
    dir: PathBuf,
    options: WatcherOptions,
    mut events: mpsc::UnboundedReceiver<Signal>,
    mut tripped: Option<mpsc::UnboundedReceiver<super::Tripped>>,
    shutdown: CancellationToken,
) {
    tracing::info!(dir = %dir.display(), "watching plugins directory");
    // Path -> when it was last touched.
    let mut dirty: BTreeMap<PathBuf, Instant> = BTreeMap::new();
    // Whatever changed between the initial load and the watch starting is caught here.
    mark_all(&dir, &registry, &mut dirty);
    let mut next_rescan = Instant::now() + options.rescan;
    loop {
        let due = dirty
            .values()
            .min()
            .map(|t| *t + options.debounce)
            .unwrap_or(next_rescan)
            .min(next_rescan);
        tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(t) = recv_tripped(&mut tripped) => {
                registry.quarantine(&t).await;
            }
            signal = events.recv() => match signal {
                Some(Signal::Paths(paths)) if paths.is_empty() => mark_all(&dir, &registry, &mut dirty),
                Some(Signal::Paths(paths)) => {
                    let now = Instant::now();
                    for p in paths {
                        if p.parent() == Some(dir.as_path()) && is_handler_file(&p) {
                            dirty.insert(p, now);
                        }
                    }
                }
                None => break,
            },
            _ = tokio::time::sleep_until(due) => {
                if Instant::now() >= next_rescan {
                    mark_all(&dir, &registry, &mut dirty);
                    next_rescan = Instant::now() + options.rescan;
                }
                let now = Instant::now();
                let ready: Vec<PathBuf> = dirty
                    .iter()
                    .filter(|(_, t)| now >= **t + options.debounce)
                    .map(|(p, _)| p.clone())
                    .collect();
                for path in ready {
                    dirty.remove(&path);
                    if !settled(&path, options.settle).await {
                        // Still being written: look again after another quiet period.
                        dirty.insert(path, Instant::now());
                        continue;
                    }
                    handle(&runtime, &registry, &path).await;
                }
            }
        }
    }
    tracing::info!(dir = %dir.display(), "plugins watcher stopped");
}

async fn recv_tripped(
    rx: &mut Option<mpsc::UnboundedReceiver<super::Tripped>>,
) -> Option<super::Tripped> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Every handler file present, plus every path the registry serves from (a file that vanished
/// without an event is unloaded).
fn mark_all(dir: &Path, registry: &Registry, dirty: &mut BTreeMap<PathBuf, Instant>) {
    let now = Instant::now();
    if let Ok(files) = wasm_files(dir) {
        for f in files {
            dirty.entry(f).or_insert(now);
        }
    }
    for h in registry.all() {
        if h.path.parent() == Some(dir) && !h.path.exists() {
            dirty.entry(h.path.clone()).or_insert(now);
        }
    }
}

/// Whether the file's size held still over `settle` (a missing file counts as settled).
async fn settled(path: &Path, settle: Duration) -> bool {
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).ok();
    let before = size(path);
    if before.is_none() {
        return true;
    }
    tokio::time::sleep(settle).await;
    size(path) == before
}

async fn handle(runtime: &Runtime, registry: &Registry, path: &Path) {
    if !path.is_file() {
        registry.unload_path(path).await;
        return;
    }
    match registry.load_path(runtime, path).await {
        PathOutcome::Loaded { .. } | PathOutcome::Unchanged => {}
        PathOutcome::Refused(_) => {
            // Logged and counted by the registry; the serving version is untouched.
        }
    }
}
