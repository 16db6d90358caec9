//! The registry and the shared store's handler releases (docs/handlers.md, "Releases"):
//! - a file the plugins directory serves is published as a release (`plugins:<file name>`),
//!   so every process of a cluster can run it; a file the watcher saw change is promoted to
//!   its handler's current release (a file dropped back in is meant to serve);
//! - a file removed from the plugins directory withdraws the releases it published;
//! - [`Registry::load_release`] serves a release read from the store (the release follower,
//!   `follow.rs`, decides which).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{PathOutcome, Registry, record_of, short};
use crate::Runtime;
use crate::handler::{Handler, now_ms};
use slotd_core::config::HandlerConfig;
use slotd_store::{NewRelease, Published, Release};

/// `published_by` of a release the plugins directory published from `file`.
pub fn plugins_publisher(path: &Path) -> String {
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("plugins:{file}")
}

/// The path shown for a handler served from a release (not a file of this process).
pub fn release_path(sha256: &str) -> PathBuf {
    PathBuf::from(format!("releases/{sha256}"))
}

/// Whether `h` serves from a release rather than a file of this process's plugins directory.
pub fn from_release(h: &Handler) -> bool {
    h.path.starts_with("releases") && h.path == release_path(&h.sha256)
}

/// Whether a release may serve handler `name` under its configuration's pins (see
/// `ownership.rs`): pinned to a file, only what the plugins directory published from that file;
/// pinned to content, only that content. The error is the refusal reason.
pub(crate) fn check_pins(config: Option<&HandlerConfig>, release: &Release) -> Result<(), String> {
    let name = &release.name;
    if let Some(file) = config.and_then(|c| c.file.as_deref())
        && release.published_by != format!("plugins:{file}")
    {
        return Err(format!(
            "handler {name:?} is pinned to file {file} by handlers.{name}.file; release {} was \
             published by {}",
            short(&release.sha256),
            release.published_by
        ));
    }
    if let Some(want) = config.and_then(|c| c.sha256.as_deref())
        && !want.eq_ignore_ascii_case(&release.sha256)
    {
        return Err(format!(
            "handler {name:?} is pinned by handlers.{name}.sha256 to content {want}; release \
             {} has other content",
            release.sha256
        ));
    }
    Ok(())
}

impl Registry {
    /// Publish what file `path` serves (`handler`, from `bytes`) as a release; `promote` makes
    /// an already published one current again (the watcher saw the file change). Failing to
    /// publish is logged: the file still serves in this process.
    pub(super) async fn publish_file(
        &self,
        path: &Path,
        handler: &Handler,
        bytes: Vec<u8>,
        promote: bool,
    ) {
        let Some(store) = self.history.get() else {
            return;
        };
        let now = now_ms();
        // At start-up each file is usually published already: ask without sending its bytes.
        if !promote
            && let Ok(known) = store.release_list(Some(&handler.info.name)).await
            && known.iter().any(|r| r.sha256 == handler.sha256)
        {
            return;
        }
        let release = NewRelease {
            name: handler.info.name.clone(),
            version: handler.info.version.clone(),
            contract: handler.contract.clone(),
            bytes,
            published_by: plugins_publisher(path),
            takes_over: false,
            current: true,
            now,
        };
        match store.release_put(&release).await {
            Ok(Published::New(sha)) => {
                tracing::info!(handler = %release.name, version = %release.version, sha256 = %short(&sha), "handler published from the plugins directory");
                self.releases_changed();
            }
            Ok(Published::Already(sha)) if promote => {
                match store.release_promote(&sha, now).await {
                    Ok(_) => self.releases_changed(),
                    Err(e) => {
                        tracing::warn!(error = %e, sha256 = %short(&sha), "could not make the release current")
                    }
                }
            }
            Ok(Published::Already(_)) => {}
            Ok(Published::VersionTaken { sha256, .. }) => {
                tracing::warn!(
                    path = %path.display(),
                    handler = %release.name,
                    version = %release.version,
                    published = %short(&sha256),
                    "not published: this version of the handler is already published as another \
                     file; this file serves in this process only (give a new build a new version)"
                )
            }
            Err(e) => {
                tracing::warn!(error = %e, path = %path.display(), "could not publish the handler; it serves in this process only")
            }
        }
    }

    /// File `path`, which served `name`, is gone: withdraw the releases it published.
    pub(super) async fn withdraw_file(&self, path: &Path, name: &str, reason: &str) {
        let Some(store) = self.history.get() else {
            return;
        };
        match store
            .release_withdraw(name, &plugins_publisher(path), reason, now_ms())
            .await
        {
            Ok(gone) => {
                for sha in &gone {
                    tracing::info!(handler = %name, sha256 = %short(sha), "release withdrawn: its file left the plugins directory");
                }
                if !gone.is_empty() {
                    self.releases_changed();
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, handler = %name, "could not withdraw the releases of a removed file")
            }
        }
    }

    /// Serve release `release` (its `bytes` read from the store): compiled off the async
    /// runtime, checked as a file is (contract, declaration, the configuration's pins, its
    /// name against the release's), swapped in. A refusal changes nothing that serves.
    pub async fn load_release(
        &self,
        runtime: &Runtime,
        release: &Release,
        bytes: Vec<u8>,
    ) -> PathOutcome {
        // (A release published as taking over the jobs of those before it keeps none draining.)
        let path = release_path(&release.sha256);
        let sha = release.sha256.clone();
        if self.book.lock().quarantined.contains(&sha) {
            let reason = format!(
                "release {} of {} {}: quarantined by this process",
                short(&sha),
                release.name,
                release.version
            );
            return self.refuse(&path, &sha, None, reason).await;
        }
        if let Err(reason) = check_pins(runtime.handlers.get(&release.name), release) {
            return self.refuse(&path, &sha, None, reason).await;
        }
        let handler = match runtime.load_bytes(&path, bytes).await {
            Ok(h) => h,
            Err(e) => return self.refuse(&path, &sha, None, format!("{e:#}")).await,
        };
        if handler.info.name != release.name || handler.sha256 != sha {
            let reason = format!(
                "release {} was published as handler {:?}, but the component declares {:?}",
                short(&sha),
                release.name,
                handler.info.name
            );
            return self.refuse(&path, &sha, Some(&handler), reason).await;
        }
        let inserted = {
            let mut book = self.book.lock();
            self.insert_with(&mut book, handler.clone(), release.takes_over)
                .map(|replaced| {
                    let mut journal = vec![record_of(&book, &sha, &path)];
                    if let Some(r) = replaced.filter(|r| r.sha256 != sha) {
                        journal.push(record_of(&book, &r.sha256, &r.path));
                    }
                    journal
                })
        };
        let journal = match inserted {
            Ok(journal) => journal,
            Err(e) => {
                let reason = format!("loading release {}: {e}", short(&sha));
                return self.refuse(&path, &sha, Some(&handler), reason).await;
            }
        };
        tracing::info!(handler = %handler.info.name, version = %handler.info.version, sha256 = %short(&sha), "handler release loaded");
        self.metrics().record(|| {
            metrics::counter!("slotd_handler_loads_total", "handler" => handler.info.name.clone())
                .increment(1)
        });
        self.journal(journal.into_iter().flatten()).await;
        PathOutcome::Loaded {
            name: handler.info.name.clone(),
            version: handler.info.version.clone(),
        }
    }

    /// Stop serving `name` when it serves from a release (its release was withdrawn and none
    /// is current); a handler served from a file of this process is left alone.
    pub async fn unload_release(&self, name: &str, reason: &str) -> Option<Arc<Handler>> {
        let (gone, record) = {
            let mut book = self.book.lock();
            let serving = self.current.load().by_name.get(name).cloned()?;
            if !from_release(&serving) {
                return None;
            }
            let gone = self.remove_locked(name)?;
            super::set_state(
                &mut book,
                &gone,
                crate::VersionState::Unloaded,
                Some(reason.to_string()),
                now_ms(),
            );
            let record = record_of(&book, &gone.sha256, &gone.path);
            (gone, record)
        };
        tracing::info!(handler = %name, sha256 = %short(&gone.sha256), "handler release unloaded: {reason}");
        self.journal(record).await;
        Some(gone)
    }

    /// Whether this process quarantined content `sha256`.
    pub fn is_quarantined(&self, sha256: &str) -> bool {
        self.book.lock().quarantined.contains(sha256)
    }
}
