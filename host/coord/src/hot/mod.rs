//! The hot task status cache (seed section 4.2): `GET /v1/tasks/{id}` reads a Redis snapshot
//! first and falls back to the database, which stays the source of truth.
//!
//! Freshness without trusting clocks: every task has a generation counter in Redis. A writer
//! (the scheduler after a tick's commit, the API after a cancel or retry) bumps the
//! generations of the tasks it changed and drops their snapshots, *after* its commit. A reader
//! that misses notes the generation, reads the database and stores its snapshot only if the
//! generation is unchanged (a Lua compare-and-set), so a read that raced a commit can never
//! install an older view over a newer one. The API writes a snapshot right after creating a
//! task the same way.
//!
//! Redis down or flushed: lookups miss (within [`HOT_TIMEOUT`]) and the database answers; a
//! flush drops snapshots and generations together, which is just a cold cache. Snapshots also
//! expire after [`SNAPSHOT_TTL`], bounding the harm of an invalidation lost to a Redis outage.

use std::sync::Arc;
use std::time::Duration;

use redis::Script;

use crate::keyspace::Keyspace;

/// Longest a hot-cache operation may take before the caller goes to the database instead.
pub const HOT_TIMEOUT: Duration = Duration::from_millis(250);
/// Lifetime of a snapshot (a safety net: invalidation, not expiry, keeps snapshots fresh).
pub const SNAPSHOT_TTL: Duration = Duration::from_secs(30);
/// Lifetime of a generation counter after its last bump (longer than any snapshot).
pub const GENERATION_TTL: Duration = Duration::from_secs(3600);

/// What a lookup found.
#[derive(Clone, Debug, Default)]
pub struct Lookup {
    /// The task's generation when looked up ("" when it has none); pass it to [`HotStatus::fill`].
    pub generation: String,
    /// The snapshot's tenant and JSON body, if there is one.
    pub snapshot: Option<(String, String)>,
}

/// Task snapshots in Redis; a no-op without Redis (the embedded default).
pub struct HotStatus {
    keys: Option<Arc<Keyspace>>,
    lookup: Script,
    fill: Script,
    invalidate: Script,
    metrics: slotd_core::telemetry::Metrics,
}

impl HotStatus {
    /// The cache on `keys`, or a disabled one (every lookup misses) when `None`.
    pub fn new(keys: Option<Arc<Keyspace>>, metrics: slotd_core::telemetry::Metrics) -> Self {
        HotStatus {
            keys,
            metrics,
            lookup: Script::new(include_str!("lua/lookup.lua")),
            fill: Script::new(include_str!("lua/fill.lua")),
            invalidate: Script::new(include_str!("lua/invalidate.lua")),
        }
    }

    /// A cache that never holds anything.
    pub fn disabled() -> Self {
        Self::new(None, Default::default())
    }

    /// Whether snapshots are kept at all.
    pub fn enabled(&self) -> bool {
        self.keys.is_some()
    }

    fn snap_keys(keys: &Keyspace, task_id: &str) -> (String, String) {
        (
            keys.key(&format!("task:{task_id}")),
            keys.key(&format!("task:{task_id}:gen")),
        )
    }

    /// The task's snapshot and generation; `None` when disabled or Redis does not answer.
    pub async fn lookup(&self, task_id: &str) -> Option<Lookup> {
        let keys = self.keys.as_ref()?;
        let (snap, generation) = Self::snap_keys(keys, task_id);
        let work = async {
            let mut conn = keys.conn().await.ok()?;
            let (generation, tenant, body): (String, Option<String>, Option<String>) = self
                .lookup
                .key(snap)
                .key(generation)
                .invoke_async(&mut conn)
                .await
                .ok()?;
            Some(Lookup {
                generation,
                snapshot: tenant.zip(body),
            })
        };
        let found = tokio::time::timeout(HOT_TIMEOUT, work).await.ok().flatten();
        let outcome = match &found {
            Some(Lookup {
                snapshot: Some(_), ..
            }) => "hit",
            Some(_) => "miss",
            None => "unavailable",
        };
        self.metrics.record(|| {
            metrics::counter!("slotd_hot_lookups_total", "outcome" => outcome).increment(1)
        });
        found
    }

    /// Store `body` as the task's snapshot if its generation is still `generation` (the one
    /// [`HotStatus::lookup`] returned before the database was read). Returns whether stored.
    pub async fn fill(&self, task_id: &str, tenant: &str, generation: &str, body: &str) -> bool {
        let Some(keys) = self.keys.as_ref() else {
            return false;
        };
        let (snap, gen_key) = Self::snap_keys(keys, task_id);
        let work = async {
            let mut conn = keys.conn().await.ok()?;
            let stored: i64 = self
                .fill
                .key(snap)
                .key(gen_key)
                .arg(generation)
                .arg(tenant)
                .arg(body)
                .arg(u64::try_from(SNAPSHOT_TTL.as_millis()).unwrap_or(u64::MAX))
                .invoke_async(&mut conn)
                .await
                .ok()?;
            Some(stored == 1)
        };
        tokio::time::timeout(HOT_TIMEOUT, work)
            .await
            .ok()
            .flatten()
            .unwrap_or(false)
    }

    /// The tasks changed (call after the commit): their snapshots are dropped and no read
    /// that started before can store one. Failures are logged, not returned: the database is
    /// already right, and snapshots expire.
    pub async fn invalidate<'a>(&self, task_ids: impl IntoIterator<Item = &'a str>) {
        let Some(keys) = self.keys.as_ref() else {
            return;
        };
        let mut ids: Vec<&str> = task_ids.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.is_empty() {
            return;
        }
        let work = async {
            let mut conn = keys.conn().await?;
            for chunk in ids.chunks(500) {
                let mut inv = self.invalidate.prepare_invoke();
                for id in chunk {
                    let (snap, generation) = Self::snap_keys(keys, id);
                    inv.key(snap).key(generation);
                }
                inv.arg(u64::try_from(GENERATION_TTL.as_millis()).unwrap_or(u64::MAX));
                let _: i64 = inv.invoke_async(&mut conn).await?;
            }
            Ok::<(), crate::keyspace::KeyspaceError>(())
        };
        match tokio::time::timeout(HOT_TIMEOUT * 4, work).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, tasks = ids.len(), "hot status not invalidated")
            }
            Err(_) => tracing::warn!(tasks = ids.len(), "hot status invalidation timed out"),
        }
    }
}

#[cfg(test)]
mod tests;
