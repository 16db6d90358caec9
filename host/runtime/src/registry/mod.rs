//! [`Registry`]: the handlers currently serving, behind an `ArcSwap` so that a reload never makes
//! a call wait; a call in flight keeps the `Arc<Handler>` it started with.
//!
//! Writers (the initial load, the plugins watcher, quarantine) serialize on one mutex that also
//! guards the bookkeeping of a reload: the previous good versions of each handler (what a
//! quarantine restores), the quarantined hashes, the file that owns each handler name (see
//! `ownership.rs`), and a [`VersionRecord`] for every file version seen. Each state change is
//! also appended to the database history when one is attached.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use super::Runtime;
use super::handler::{Handler, now_ms};
use super::load::sha256_hex;
use super::ownership::{HISTORY_ROWS_READ, check_claim, owners_from_history, removed_reason};
use super::quarantine::Tripped;
use super::versions::{RECORDS_KEPT, VersionRecord, VersionState};
use slotd_store::{DynServiceStore, HandlerVersionRow};

pub mod canary;
pub mod releases;

/// Previous versions kept per handler for a quarantine to fall back on.
const PREVIOUS_KEPT: usize = 4;

/// An immutable view of the loaded handlers.
#[derive(Default)]
pub struct Snapshot {
    /// Handlers by name.
    pub by_name: BTreeMap<String, Arc<Handler>>,
    /// Handler name by task type.
    pub by_type: BTreeMap<String, String>,
    /// Versions replaced while they had provider jobs in flight, by sha256: their jobs' polls,
    /// callbacks, cancels and finalization still go through them (docs/handlers.md,
    /// "Releases") until the release follower finds their last job ended.
    pub draining: BTreeMap<String, Arc<Handler>>,
    /// The candidate of a staged rollout per handler name, and the share of new units it takes
    /// (percent; 0 while paused): see [`Registry::for_new`].
    pub canary: BTreeMap<String, (Arc<Handler>, u32)>,
}

/// What loading a directory did.
#[derive(Debug, Default)]
pub struct LoadSummary {
    /// (path, handler name, version) of each loaded file.
    pub loaded: Vec<(PathBuf, String, String)>,
    /// (path, reason) of each refused file.
    pub refused: Vec<(PathBuf, String)>,
}

/// What (re)loading one file did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathOutcome {
    /// A new version serves now.
    Loaded { name: String, version: String },
    /// The content is the version already seen for this path: nothing to do.
    Unchanged,
    /// The file was refused; whatever served before still serves.
    Refused(String),
}

/// The writers' side: everything a reload decides on.
#[derive(Default)]
struct Book {
    /// Versions replaced by a newer one, newest last, per handler name.
    previous: BTreeMap<String, Vec<Arc<Handler>>>,
    /// sha256 of every quarantined version: never served again by this process.
    quarantined: HashSet<String>,
    /// sha256 last tried for each path (a changed file is tried again; the same one is not).
    files: BTreeMap<PathBuf, String>,
    /// The file that owns each handler name (first served it, or is pinned to it).
    owners: BTreeMap<String, PathBuf>,
    /// Every version seen, oldest first (bounded).
    records: Vec<VersionRecord>,
}

/// The current set of handlers.
#[derive(Default)]
pub struct Registry {
    current: ArcSwap<Snapshot>,
    book: Mutex<Book>,
    /// Where state changes are journaled (`handler_versions`); unset in some tests.
    history: OnceLock<DynServiceStore>,
    /// Where loads, refusals and quarantines are counted; unset (nowhere) in some tests.
    metrics: OnceLock<slotd_core::telemetry::Metrics>,
    /// Called after the plugins directory published, promoted or withdrew a release (wakes
    /// every process's release follower); unset in some tests.
    on_release: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Count loads, refusals and quarantines in `metrics` (the instance's registry).
    pub fn attach_metrics(&self, metrics: slotd_core::telemetry::Metrics) {
        let _ = self.metrics.set(metrics);
    }

    fn metrics(&self) -> slotd_core::telemetry::Metrics {
        self.metrics.get().cloned().unwrap_or_default()
    }

    /// Call `hook` whenever the plugins directory changed the releases (see `releases.rs`).
    pub fn attach_release_hook(&self, hook: impl Fn() + Send + Sync + 'static) {
        let _ = self.on_release.set(Box::new(hook));
    }

    fn releases_changed(&self) {
        if let Some(hook) = self.on_release.get() {
            hook();
        }
    }

    /// Journal every version state change into `store` from now on.
    pub fn attach_history(&self, store: DynServiceStore) {
        let _ = self.history.set(store);
    }

    /// Take the owners of handler names from the attached history, before the plugins
    /// directory is first loaded, so ownership survives a restart (see `ownership.rs`). Without
    /// a history, or when it cannot be read (logged), owners start empty.
    pub async fn restore_owners(&self) {
        let Some(store) = self.history.get() else {
            return;
        };
        match store.handler_version_list(None, HISTORY_ROWS_READ).await {
            Ok(rows) => {
                let owners = owners_from_history(&rows);
                tracing::debug!(owners = owners.len(), "handler name owners restored");
                let mut book = self.book.lock();
                for (name, path) in owners {
                    book.owners.entry(name).or_insert(path);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not read the handler history; handler names are owned by the first file loaded")
            }
        }
    }

    /// The file owning each handler name now.
    pub fn owners(&self) -> BTreeMap<String, PathBuf> {
        self.book.lock().owners.clone()
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

    /// The handler for a job created by release `job_release` (a unit's `job_release`): that
    /// version while it drains, else the one serving the task type.
    pub fn for_job(&self, task_type: &str, job_release: Option<&str>) -> Option<Arc<Handler>> {
        let snap = self.current.load();
        let kept = |sha: &str| {
            snap.draining.get(sha).cloned().or_else(|| {
                snap.canary
                    .values()
                    .find(|(c, _)| c.sha256 == sha)
                    .map(|(c, _)| c.clone())
            })
        };
        if let Some(h) = job_release.and_then(kept)
            && h.info.task_types.iter().any(|t| t.name == task_type)
        {
            return Some(h);
        }
        snap.by_type
            .get(task_type)
            .and_then(|n| snap.by_name.get(n))
            .cloned()
    }

    /// Handler `name` in the version whose sha256 starts with `release` (a provider callback's
    /// token names the release that created the job): that version while it serves or
    /// drains, else the one serving the name.
    pub fn for_release(&self, name: &str, release: Option<&str>) -> Option<Arc<Handler>> {
        let snap = self.current.load();
        if let Some(prefix) = release.filter(|p| !p.is_empty())
            && let Some(h) = snap
                .draining
                .values()
                .chain(snap.canary.values().map(|(c, _)| c))
                .find(|h| h.info.name == name && h.sha256.starts_with(prefix))
        {
            return Some(h.clone());
        }
        snap.by_name.get(name).cloned()
    }

    /// The versions kept for their jobs in flight.
    pub fn draining(&self) -> Vec<Arc<Handler>> {
        self.current.load().draining.values().cloned().collect()
    }

    /// Version `sha256` no longer drains (its last job ended): it is dropped.
    pub async fn drained(&self, sha256: &str, reason: &str) -> Option<Arc<Handler>> {
        let (gone, record) = {
            let mut book = self.book.lock();
            let old = self.current.load_full();
            let gone = old.draining.get(sha256)?.clone();
            let mut draining = old.draining.clone();
            draining.remove(sha256);
            self.current.store(Arc::new(Snapshot {
                by_name: old.by_name.clone(),
                by_type: old.by_type.clone(),
                draining,
                canary: old.canary.clone(),
            }));
            set_state(
                &mut book,
                &gone,
                VersionState::Unloaded,
                Some(reason.to_string()),
                now_ms(),
            );
            (gone.clone(), record_of(&book, &gone.sha256, &gone.path))
        };
        tracing::info!(handler = %gone.info.name, version = %gone.info.version, sha256 = %short(sha256), "handler version unloaded: {reason}");
        self.journal(record).await;
        Some(gone)
    }

    /// A handler by name.
    pub fn by_name(&self, name: &str) -> Option<Arc<Handler>> {
        self.current.load().by_name.get(name).cloned()
    }

    /// Every loaded handler, by name.
    pub fn all(&self) -> Vec<Arc<Handler>> {
        self.current.load().by_name.values().cloned().collect()
    }

    /// Every version seen by this process, oldest first.
    pub fn versions(&self) -> Vec<VersionRecord> {
        self.book.lock().records.clone()
    }

    /// Add or replace a handler (by name). Refused when one of its task types is served by a
    /// different handler. The replaced version is kept to fall back on.
    pub fn insert(&self, handler: Arc<Handler>) -> Result<(), String> {
        let mut book = self.book.lock();
        self.insert_locked(&mut book, handler).map(|_| ())
    }

    /// [`Registry::insert`]; `takes_over`: the new version takes the jobs of the versions
    /// before it at once (none is kept to drain).
    pub fn insert_taking_over(&self, handler: Arc<Handler>) -> Result<(), String> {
        let mut book = self.book.lock();
        self.insert_with(&mut book, handler, true).map(|_| ())
    }

    /// Unload a handler by name; its units wait as pending.
    pub fn remove(&self, name: &str) -> Option<Arc<Handler>> {
        let _book = self.book.lock();
        self.remove_locked(name)
    }

    fn insert_locked(
        &self,
        book: &mut Book,
        handler: Arc<Handler>,
    ) -> Result<Option<Arc<Handler>>, String> {
        self.insert_with(book, handler, false)
    }

    /// Swap `handler` in. The version it replaces is kept to drain its jobs in flight
    /// (dropped by the release follower once none is left), unless `takes_over`: then the new
    /// version takes every job of its name at once.
    fn insert_with(
        &self,
        book: &mut Book,
        handler: Arc<Handler>,
        takes_over: bool,
    ) -> Result<Option<Arc<Handler>>, String> {
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
        let replaced = by_name.insert(name.clone(), handler.clone());
        let mut draining = old.draining.clone();
        draining.remove(&handler.sha256);
        if takes_over {
            draining.retain(|_, h| h.info.name != name);
        } else if let Some(r) = replaced
            .as_ref()
            .filter(|r| r.sha256 != handler.sha256 && !book.quarantined.contains(&r.sha256))
        {
            draining.insert(r.sha256.clone(), r.clone());
        }
        // The candidate promoted to serve is no longer a canary.
        let mut canary = old.canary.clone();
        if canary
            .get(&name)
            .is_some_and(|(c, _)| c.sha256 == handler.sha256)
        {
            canary.remove(&name);
        }
        self.current.store(Arc::new(Snapshot {
            by_name,
            by_type,
            draining,
            canary,
        }));
        let stamp = now_ms();
        if let Some(r) = &replaced
            && r.sha256 != handler.sha256
            && !book.quarantined.contains(&r.sha256)
        {
            let stack = book.previous.entry(name.clone()).or_default();
            stack.retain(|h| h.sha256 != r.sha256 && h.sha256 != handler.sha256);
            stack.push(r.clone());
            if stack.len() > PREVIOUS_KEPT {
                stack.remove(0);
            }
            let reason = format!(
                "replaced by version {} (sha256 {})",
                handler.info.version,
                short(&handler.sha256)
            );
            set_state(book, r, VersionState::Unloaded, Some(reason), stamp);
        }
        set_state(book, &handler, VersionState::Active, None, stamp);
        Ok(replaced)
    }

    fn remove_locked(&self, name: &str) -> Option<Arc<Handler>> {
        let old = self.current.load_full();
        let mut by_name = old.by_name.clone();
        let gone = by_name.remove(name)?;
        let by_type = old
            .by_type
            .iter()
            .filter(|(_, n)| *n != name)
            .map(|(t, n)| (t.clone(), n.clone()))
            .collect();
        // Unloaded (its file removed, its release withdrawn): its units wait, whichever
        // version created their jobs.
        let draining = old
            .draining
            .iter()
            .filter(|(_, h)| h.info.name != name)
            .map(|(s, h)| (s.clone(), h.clone()))
            .collect();
        let canary = old
            .canary
            .iter()
            .filter(|(n, _)| *n != name)
            .map(|(n, c)| (n.clone(), c.clone()))
            .collect();
        self.current.store(Arc::new(Snapshot {
            by_name,
            by_type,
            draining,
            canary,
        }));
        Some(gone)
    }

    /// Load (or reload) one file. A refused file changes nothing that serves; the same content
    /// seen again for the same path is not loaded twice. A file that loads is published as a
    /// release and made its handler's current one (the watcher saw it change).
    pub async fn load_path(&self, runtime: &Runtime, path: &Path) -> PathOutcome {
        self.load_path_with(runtime, path, true).await
    }

    /// [`Registry::load_path`]; `promote`: make the file's release current even when it was
    /// published before (false at start-up, when an old file must not roll the cluster back).
    async fn load_path_with(&self, runtime: &Runtime, path: &Path, promote: bool) -> PathOutcome {
        let bytes = match tokio::fs::read(path).await {
            Ok(b) => b,
            Err(e) => return PathOutcome::Refused(format!("reading {}: {e}", path.display())),
        };
        let sha = sha256_hex(&bytes);
        let quarantined = {
            let mut book = self.book.lock();
            if book.files.get(path) == Some(&sha) {
                return PathOutcome::Unchanged;
            }
            book.files.insert(path.to_path_buf(), sha.clone());
            book.quarantined.contains(&sha)
        };
        if quarantined {
            let reason = format!(
                "loading handler {}: version sha256 {} was quarantined by this process",
                path.display(),
                short(&sha)
            );
            return self.refuse(path, &sha, None, reason).await;
        }
        let published = self.history.get().is_some().then(|| bytes.clone());
        let handler = match runtime.load_bytes(path, bytes).await {
            Ok(h) => h,
            Err(e) => return self.refuse(path, &sha, None, format!("{e:#}")).await,
        };
        let inserted = {
            let mut book = self.book.lock();
            let name = handler.info.name.clone();
            check_claim(
                &book.owners,
                runtime.handlers.get(&name),
                &name,
                path,
                &handler.sha256,
            )
            .and_then(|()| self.insert_locked(&mut book, handler.clone()))
            .map(|replaced| {
                book.owners.insert(name, path.to_path_buf());
                let mut journal = vec![record_of(&book, &handler.sha256, path)];
                if let Some(r) = replaced.filter(|r| r.sha256 != handler.sha256) {
                    journal.push(record_of(&book, &r.sha256, &r.path));
                }
                journal
            })
        };
        let journal = match inserted {
            Ok(journal) => journal,
            Err(e) => {
                let reason = format!("loading handler {}: {e}", path.display());
                return self.refuse(path, &sha, Some(&handler), reason).await;
            }
        };
        let outcome = PathOutcome::Loaded {
            name: handler.info.name.clone(),
            version: handler.info.version.clone(),
        };
        tracing::info!(path = %path.display(), handler = %handler.info.name, version = %handler.info.version, sha256 = %short(&handler.sha256), "handler loaded");
        self.metrics().record(|| {
            metrics::counter!("slotd_handler_loads_total", "handler" => handler.info.name.clone())
                .increment(1)
        });
        self.journal(journal.into_iter().flatten()).await;
        if let Some(bytes) = published {
            self.publish_file(path, &handler, bytes, promote).await;
        }
        outcome
    }

    /// The file at `path` is gone: unload the handler it served, if it still serves from
    /// there. Its units wait as pending until a handler for their type returns.
    pub async fn unload_path(&self, path: &Path) -> Option<String> {
        let journal = {
            let mut book = self.book.lock();
            book.files.remove(path);
            // The names this file owned are free again, served or not (quarantined); files
            // refused for claiming them are tried again at their next event or rescan.
            let freed: Vec<String> = book
                .owners
                .iter()
                .filter(|(_, owner)| owner.as_path() == path)
                .map(|(name, _)| name.clone())
                .collect();
            book.owners.retain(|_, owner| owner != path);
            let retry: Vec<PathBuf> = book
                .records
                .iter()
                .filter(|r| {
                    r.state == VersionState::Refused
                        && r.name.as_ref().is_some_and(|n| freed.contains(n))
                })
                .map(|r| PathBuf::from(&r.path))
                .collect();
            for p in retry {
                book.files.remove(&p);
            }
            let snap = self.current.load_full();
            let handler = snap.by_name.values().find(|h| h.path == path)?.clone();
            self.remove_locked(&handler.info.name)?;
            let reason = removed_reason(path);
            set_state(
                &mut book,
                &handler,
                VersionState::Unloaded,
                Some(reason),
                now_ms(),
            );
            tracing::info!(path = %path.display(), handler = %handler.info.name, "handler unloaded; its units wait");
            (
                handler.info.name.clone(),
                record_of(&book, &handler.sha256, path),
            )
        };
        self.journal(journal.1).await;
        self.withdraw_file(path, &journal.0, &removed_reason(path))
            .await;
        Some(journal.0)
    }

    /// Take a version that crossed its quarantine threshold out of service and restore the
    /// newest previous version of the same handler that is not quarantined (or unload the
    /// handler when there is none). Returns the version now serving, if any.
    pub async fn quarantine(&self, tripped: &Tripped) -> Option<String> {
        let (restored, journal) = {
            let mut book = self.book.lock();
            book.quarantined.insert(tripped.sha256.clone());
            // A draining version (or a rollout's candidate) that crashes hands its jobs and
            // its share of new units to the serving one.
            let old = self.current.load_full();
            let canary_hit = old
                .canary
                .get(&tripped.name)
                .is_some_and(|(c, _)| c.sha256 == tripped.sha256);
            if old.draining.contains_key(&tripped.sha256) || canary_hit {
                let mut draining = old.draining.clone();
                draining.remove(&tripped.sha256);
                let mut canary = old.canary.clone();
                if canary_hit {
                    canary.remove(&tripped.name);
                }
                self.current.store(Arc::new(Snapshot {
                    by_name: old.by_name.clone(),
                    by_type: old.by_type.clone(),
                    draining,
                    canary,
                }));
            }
            let reason = format!(
                "{} consecutive faulting calls, the last: {}",
                tripped.count, tripped.fault
            );
            let current = self.by_name(&tripped.name);
            let serving = current.as_ref().is_some_and(|h| h.sha256 == tripped.sha256);
            let mut journal = Vec::new();
            let mut restored = None;
            if let Some(bad) = current.filter(|_| serving) {
                set_state(
                    &mut book,
                    &bad,
                    VersionState::Quarantined,
                    Some(reason),
                    now_ms(),
                );
                journal.push(record_of(&book, &bad.sha256, &bad.path));
                let mut stack = book.previous.remove(&tripped.name).unwrap_or_default();
                let mut back = None;
                while let Some(candidate) = stack.pop() {
                    if !book.quarantined.contains(&candidate.sha256) {
                        back = Some(candidate);
                        break;
                    }
                }
                book.previous.insert(tripped.name.clone(), stack);
                match back {
                    Some(good) => match self.insert_locked(&mut book, good.clone()) {
                        Ok(_) => {
                            journal.push(record_of(&book, &good.sha256, &good.path));
                            restored = Some(good.info.version.clone());
                        }
                        Err(e) => {
                            tracing::warn!(handler = %tripped.name, "previous version cannot be restored: {e}");
                            self.remove_locked(&tripped.name);
                        }
                    },
                    None => {
                        self.remove_locked(&tripped.name);
                    }
                }
                // The quarantined one must not come back as somebody's "previous".
                if let Some(stack) = book.previous.get_mut(&tripped.name) {
                    stack.retain(|h| h.sha256 != tripped.sha256);
                }
            } else if let Some(rec) = book.records.iter_mut().find(|r| r.sha256 == tripped.sha256) {
                rec.state = VersionState::Quarantined;
                rec.reason = Some(reason);
                rec.changed_at = now_ms();
                journal.push(Some(rec.clone()));
            }
            (restored, journal)
        };
        match &restored {
            Some(v) => {
                tracing::error!(handler = %tripped.name, sha256 = %short(&tripped.sha256), fault = %tripped.fault, restored = %v, "handler version quarantined; previous version restored")
            }
            None => {
                tracing::error!(handler = %tripped.name, sha256 = %short(&tripped.sha256), fault = %tripped.fault, "handler version quarantined; no previous version to restore, its units wait")
            }
        }
        self.metrics().record(|| {
            metrics::counter!("slotd_handler_quarantines_total", "handler" => tripped.name.clone())
                .increment(1)
        });
        self.journal(journal.into_iter().flatten()).await;
        restored
    }

    /// Record a refusal (log line, metric, version record, history); nothing serving changes.
    async fn refuse(
        &self,
        path: &Path,
        sha: &str,
        handler: Option<&Arc<Handler>>,
        reason: String,
    ) -> PathOutcome {
        tracing::warn!(path = %path.display(), "handler refused: {reason}");
        self.metrics()
            .record(|| metrics::counter!("slotd_handler_refusals_total").increment(1));
        let record = {
            let mut book = self.book.lock();
            let stamp = now_ms();
            let rec = VersionRecord {
                path: path.display().to_string(),
                name: handler.map(|h| h.info.name.clone()),
                version: handler.map(|h| h.info.version.clone()),
                sha256: sha.to_string(),
                seen_at: stamp,
                changed_at: stamp,
                state: VersionState::Refused,
                reason: Some(reason.clone()),
            };
            upsert(&mut book, rec.clone());
            rec
        };
        self.journal([record]).await;
        PathOutcome::Refused(reason)
    }

    async fn journal(&self, records: impl IntoIterator<Item = VersionRecord>) {
        let Some(store) = self.history.get() else {
            return;
        };
        for r in records {
            let row = HandlerVersionRow {
                id: 0,
                at: r.changed_at,
                path: r.path,
                name: r.name,
                version: r.version,
                sha256: r.sha256,
                state: r.state.as_str().to_string(),
                reason: r.reason,
            };
            if let Err(e) = store.handler_version_record(&row).await {
                tracing::warn!(error = %e, sha256 = %short(&row.sha256), "could not record the handler version history");
            }
        }
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
            match self.load_path_with(runtime, &path, false).await {
                PathOutcome::Loaded { name, version } => summary.loaded.push((path, name, version)),
                PathOutcome::Unchanged => {}
                PathOutcome::Refused(reason) => summary.refused.push((path, reason)),
            }
        }
        summary
    }
}

/// The first 12 hex digits of a hash, for log lines.
fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

fn upsert(book: &mut Book, rec: VersionRecord) {
    match book
        .records
        .iter_mut()
        .find(|r| r.sha256 == rec.sha256 && r.path == rec.path)
    {
        Some(existing) => {
            let seen = existing.seen_at;
            *existing = VersionRecord {
                seen_at: seen,
                ..rec
            };
        }
        None => {
            book.records.push(rec);
            if book.records.len() > RECORDS_KEPT {
                book.records.remove(0);
            }
        }
    }
}

fn set_state(book: &mut Book, h: &Handler, state: VersionState, reason: Option<String>, at: i64) {
    upsert(
        book,
        VersionRecord {
            path: h.path.display().to_string(),
            name: Some(h.info.name.clone()),
            version: Some(h.info.version.clone()),
            sha256: h.sha256.clone(),
            seen_at: h.loaded_at_ms,
            changed_at: at,
            state,
            reason,
        },
    );
}

fn record_of(book: &Book, sha: &str, path: &Path) -> Option<VersionRecord> {
    let shown = path.display().to_string();
    book.records
        .iter()
        .find(|r| r.sha256 == sha && r.path == shown)
        .cloned()
}

/// The `*.wasm` files directly in `dir`, sorted.
pub(crate) fn wasm_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if is_handler_file(&path) && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// A `*.wasm` file whose name does not start with a dot (editors' and installers' temporary
/// files are hidden and renamed into place when whole).
pub(crate) fn is_handler_file(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "wasm")
        && !path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
}
