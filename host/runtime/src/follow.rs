//! [`Follower`]: keeps one process's handlers in step with the shared store's releases
//! (docs/handlers.md, "Releases"), so a handler published once runs in every process of a
//! cluster with nothing copied between machines.
//!
//! At each look (at start-up, when woken — a publish anywhere in the cluster wakes every
//! process through Redis — and every [`FOLLOW_INTERVAL`] as the safety net) it reads the
//! releases, takes each handler's current one (the most recently promoted, not withdrawn) and:
//! - serves it when this process serves that handler from another release, or from a file of
//!   its own plugins directory loaded before the release was promoted (the newer wins, so an
//!   old file on one machine cannot hold back what was published since, and a local build
//!   dropped in after it still serves here);
//! - stops serving a handler whose releases were all withdrawn, when it served from one;
//! - remembers a release it could not load (the reason is its word on it) and does not try it
//!   again: the same bytes fail the same way.
//!
//! Each look ends with the process's word on every release it was given, written to
//! `handler_loads` (`GET /v1/handlers/releases` shows them per process), which doubles as its
//! heartbeat. Reading the store failing is logged and leaves everything serving as it was.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::registry::PathOutcome;
use crate::registry::releases::from_release;
use crate::{Registry, Runtime};
use slotd_store::{DynServiceStore, HandlerLoad, Release, RolloutState, current_releases};

/// How often a process looks at the releases when no wake arrives.
pub const FOLLOW_INTERVAL: Duration = Duration::from_secs(10);
/// Words on releases older than this are pruned (their process is long gone).
pub const LOADS_KEPT: Duration = Duration::from_secs(24 * 3600);

/// Who this process is, as its words on releases name it.
#[derive(Clone, Debug)]
pub struct ProcessId {
    /// Host, pid and a random suffix (new at each start).
    pub id: String,
    /// `api`, `scheduler` or `all`.
    pub role: String,
}

impl ProcessId {
    /// This process, in `role`.
    pub fn this(role: &str) -> ProcessId {
        let host = std::fs::read_to_string("/etc/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".into());
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        ProcessId {
            id: format!("{host}:{}:{}", std::process::id(), &suffix[..6]),
            role: role.to_string(),
        }
    }
}

/// What one look did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Look {
    /// (handler, version) now served from a release.
    pub loaded: Vec<(String, String)>,
    /// (handler, reason) of releases that could not be loaded.
    pub failed: Vec<(String, String)>,
    /// Handlers no longer served (their releases withdrawn).
    pub unloaded: Vec<String>,
    /// (handler, version) of replaced versions dropped once their last job ended.
    pub drained: Vec<(String, String)>,
}

/// Follows the releases for one process.
pub struct Follower {
    store: DynServiceStore,
    process: ProcessId,
    /// This process's word on each release it was given, by sha256.
    words: Mutex<BTreeMap<String, HandlerLoad>>,
    /// Serializes looks (a wake during a look is kept by the `Notify`).
    looking: tokio::sync::Mutex<()>,
}

impl Follower {
    pub fn new(store: DynServiceStore, process: ProcessId) -> Arc<Follower> {
        Arc::new(Follower {
            store,
            process,
            words: Mutex::default(),
            looking: tokio::sync::Mutex::new(()),
        })
    }

    pub fn process(&self) -> &ProcessId {
        &self.process
    }

    /// Look at the releases once and bring `registry` in step (see the module docs).
    pub async fn look(&self, runtime: &Runtime, registry: &Registry) -> anyhow::Result<Look> {
        let _one = self.looking.lock().await;
        let now = crate::handler::now_ms();
        let releases = self.store.release_list(None).await?;
        let by_sha: BTreeMap<&str, &Release> =
            releases.iter().map(|r| (r.sha256.as_str(), r)).collect();
        let current = current_releases(&releases);
        let mut look = Look::default();
        for (name, release) in &current {
            let serving = registry.by_name(name);
            if let Some(s) = &serving {
                if s.sha256 == release.sha256 {
                    continue;
                }
                // A file of this process loaded after the release was promoted, and not
                // published itself (a local build): the newer wins.
                if !by_sha.contains_key(s.sha256.as_str()) && s.loaded_at_ms >= release.promoted_at
                {
                    continue;
                }
            }
            if self.failed(&release.sha256) {
                continue;
            }
            let outcome = match self.store.release_get(&release.sha256).await {
                Ok(Some((release, bytes))) => registry.load_release(runtime, &release, bytes).await,
                Ok(None) => continue, // gone since the list was read
                Err(e) => PathOutcome::Refused(format!("reading the release: {e}")),
            };
            match outcome {
                PathOutcome::Loaded { name, version } => look.loaded.push((name, version)),
                PathOutcome::Unchanged => {}
                PathOutcome::Refused(reason) => {
                    self.say(release, "failed", Some(reason.clone()), now);
                    look.failed.push((name.clone(), reason));
                }
            }
        }
        // Handlers served from a release that is no longer any handler's current one.
        for h in registry.all() {
            if from_release(&h) && !current.contains_key(&h.info.name) {
                let reason = by_sha
                    .get(h.sha256.as_str())
                    .and_then(|r| r.withdrawn_reason.clone())
                    .unwrap_or_else(|| "its release was withdrawn".into());
                if registry
                    .unload_release(&h.info.name, &reason)
                    .await
                    .is_some()
                {
                    look.unloaded.push(h.info.name.clone());
                }
            }
        }
        self.follow_rollouts(runtime, registry, now, &mut look)
            .await?;
        // Versions kept for their jobs: dropped once the last job they created has ended.
        let draining = registry.draining();
        if !draining.is_empty() {
            let jobs: BTreeMap<String, i64> =
                self.store.unit_job_releases().await?.into_iter().collect();
            for h in draining {
                if jobs.get(&h.sha256).copied().unwrap_or(0) == 0
                    && registry
                        .drained(&h.sha256, "its last provider job ended")
                        .await
                        .is_some()
                {
                    look.drained
                        .push((h.info.name.clone(), h.info.version.clone()));
                }
            }
        }
        self.record(registry, &by_sha, now).await;
        Ok(look)
    }

    /// Each handler's newest rollout: while it runs (or is paused) its candidate is loaded as
    /// the canary taking the stage's share of new units; once rolled back it takes none and
    /// drains. A promoted candidate is the current release (the loop above serves it).
    async fn follow_rollouts(
        &self,
        runtime: &Runtime,
        registry: &Registry,
        now: i64,
        look: &mut Look,
    ) -> anyhow::Result<()> {
        let rollouts = self.store.rollout_list(None, 200).await?;
        let mut seen = std::collections::BTreeSet::new();
        for r in rollouts {
            if !seen.insert(r.name.clone()) {
                continue;
            }
            let canary = registry.canary(&r.name);
            match r.state {
                RolloutState::Running | RolloutState::Paused => {
                    if let Some((c, _)) = canary.filter(|(c, _)| c.sha256 == r.candidate) {
                        let _ = registry.set_canary(c, r.share());
                        continue;
                    }
                    if self.failed(&r.candidate) {
                        continue;
                    }
                    let Some((release, bytes)) = self.store.release_get(&r.candidate).await? else {
                        continue;
                    };
                    let path = crate::registry::releases::release_path(&release.sha256);
                    let loaded = runtime
                        .load_bytes(&path, bytes)
                        .await
                        .map_err(|e| format!("{e:#}"))
                        .and_then(|h| {
                            if h.info.name == r.name {
                                Ok(h)
                            } else {
                                Err(format!("the candidate declares handler {:?}", h.info.name))
                            }
                        })
                        .and_then(|h| registry.set_canary(h, r.share()));
                    match loaded {
                        Ok(()) => look
                            .loaded
                            .push((release.name.clone(), release.version.clone())),
                        Err(reason) => {
                            tracing::warn!(handler = %r.name, "rollout candidate refused: {reason}");
                            self.say(&release, "failed", Some(reason.clone()), now);
                            look.failed.push((r.name.clone(), reason));
                        }
                    }
                }
                RolloutState::RolledBack => {
                    if canary.is_some_and(|(c, _)| c.sha256 == r.candidate) {
                        registry.clear_canary(&r.name);
                    }
                }
                RolloutState::Promoted => {}
            }
        }
        Ok(())
    }

    /// Whether this process already failed to load `sha256`.
    fn failed(&self, sha256: &str) -> bool {
        self.words
            .lock()
            .get(sha256)
            .is_some_and(|w| w.state == "failed")
    }

    fn say(&self, release: &Release, state: &str, reason: Option<String>, at: i64) {
        self.words.lock().insert(
            release.sha256.clone(),
            HandlerLoad {
                process: self.process.id.clone(),
                role: self.process.role.clone(),
                sha256: release.sha256.clone(),
                name: release.name.clone(),
                version: release.version.clone(),
                state: state.to_string(),
                reason,
                at,
            },
        );
    }

    /// Update the words from what serves now (loaded; a release served before and no longer:
    /// unloaded) and write them all, stamped `now`.
    async fn record(&self, registry: &Registry, by_sha: &BTreeMap<&str, &Release>, now: i64) {
        let serving: std::collections::BTreeSet<String> = registry
            .all()
            .into_iter()
            .map(|h| h.sha256.clone())
            .collect();
        let mut draining: std::collections::BTreeSet<String> = registry
            .draining()
            .into_iter()
            .map(|h| h.sha256.clone())
            .collect();
        let canaries: BTreeMap<String, u32> = registry
            .snapshot()
            .canary
            .values()
            .map(|(c, share)| (c.sha256.clone(), *share))
            .collect();
        draining.extend(canaries.keys().cloned());
        let words: Vec<HandlerLoad> = {
            let mut words = self.words.lock();
            for sha in serving.iter().chain(&draining) {
                if let Some(release) = by_sha.get(sha.as_str()) {
                    let w = words.entry(sha.clone()).or_insert_with(|| HandlerLoad {
                        process: self.process.id.clone(),
                        role: self.process.role.clone(),
                        sha256: sha.clone(),
                        name: release.name.clone(),
                        version: release.version.clone(),
                        state: String::new(),
                        reason: None,
                        at: now,
                    });
                    if serving.contains(sha) {
                        w.state = "loaded".into();
                        w.reason = None;
                    } else if let Some(share) = canaries.get(sha) {
                        w.state = "canary".into();
                        w.reason = Some(format!("rollout candidate: {share} % of new units"));
                    } else {
                        w.state = "draining".into();
                        w.reason = Some("replaced; kept for the provider jobs it created".into());
                    }
                }
            }
            for (sha, w) in words.iter_mut() {
                if matches!(w.state.as_str(), "loaded" | "draining" | "canary")
                    && !serving.contains(sha)
                    && !draining.contains(sha)
                {
                    w.state = "unloaded".into();
                    w.reason = None;
                }
            }
            words
                .values_mut()
                .map(|w| {
                    w.at = now;
                    w.clone()
                })
                .collect()
        };
        let me = slotd_store::ReleaseFollower {
            process: self.process.id.clone(),
            role: self.process.role.clone(),
            last_seen: now,
        };
        if let Err(e) = self.store.handler_load_put(&me, &words).await {
            tracing::warn!(error = %e, "could not record which handler releases this process runs");
        }
    }

    /// Look at start-up, then whenever `wake` is notified and every `interval`, until
    /// `shutdown`. Also prunes words of processes long gone.
    pub async fn run(
        self: Arc<Self>,
        runtime: Arc<Runtime>,
        registry: Arc<Registry>,
        wake: Arc<Notify>,
        interval: Duration,
        shutdown: CancellationToken,
    ) {
        let mut looks: u64 = 0;
        loop {
            match self.look(&runtime, &registry).await {
                Ok(look) if look != Look::default() => {
                    tracing::debug!(?look, "handler releases followed")
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "could not read the handler releases; what serves stays")
                }
            }
            looks += 1;
            if looks % 360 == 1 {
                let before = crate::handler::now_ms()
                    - i64::try_from(LOADS_KEPT.as_millis()).unwrap_or(i64::MAX);
                if let Err(e) = self.store.handler_load_prune(before).await {
                    tracing::debug!(error = %e, "pruning old handler load records failed");
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = wake.notified() => {}
                _ = tokio::time::sleep(interval) => {}
            }
        }
    }
}
