//! Redis slots: the holder set of each pool is a Redis set, changed only by Lua scripts so that
//! a grant is atomic against the pool's maximum across every slotd instance (docs/state-machine.md,
//! seed section 3.2). Scripts are loaded once and called by SHA (`redis::Script` sends
//! `EVALSHA` and falls back to loading the script when Redis lost it, e.g. after a restart).
//!
//! Keys, under the configured prefix: `slots:{pool}` (the holders), `slots:{pool}:ok`
//! (written by reconciliation) and `slots:counts` (a hash of every set's size, written by the
//! scripts that change a set, so that a tick reads all its accounts' counts with one `HMGET`
//! instead of a script call per account). A flush or a Redis restart removes them all; while
//! the marker is missing the set is not trusted: `used` and `acquire` answer [`SlotError::NotReconciled`]
//! and the scheduler rebuilds the set from the database before granting anything. No blanket
//! TTL: leaks are freed by reconciliation, not by expiry.

use std::sync::Arc;

use async_trait::async_trait;
use redis::Script;

use super::{CreateLog, LogCount, OnShared, Rebuild, Reconciled, SlotError, SlotStore};
use crate::keyspace::{Keyspace, KeyspaceError};

/// Ids sent to one script call at most (Lua's argument stack is bounded).
const IDS_PER_CALL: usize = 1000;

impl From<KeyspaceError> for SlotError {
    fn from(e: KeyspaceError) -> Self {
        SlotError::Unavailable(e.0)
    }
}

impl From<redis::RedisError> for SlotError {
    fn from(e: redis::RedisError) -> Self {
        SlotError::Unavailable(e.to_string())
    }
}

/// Slots in Redis, shared by every slotd instance that uses the same server and prefix.
pub struct RedisSlots {
    keys: Arc<Keyspace>,
    acquire: Script,
    release: Script,
    used: Script,
    reconcile: Script,
    log_restore: Script,
}

impl RedisSlots {
    /// Slots under `keys`' prefix. Does not connect: Redis may come up later.
    pub fn new(keys: Arc<Keyspace>) -> Self {
        RedisSlots {
            keys,
            acquire: Script::new(include_str!("lua/acquire.lua")),
            release: Script::new(include_str!("lua/release.lua")),
            used: Script::new(include_str!("lua/used.lua")),
            reconcile: Script::new(include_str!("lua/reconcile.lua")),
            log_restore: Script::new(include_str!("lua/log_restore.lua")),
        }
    }

    fn set_key(&self, pool: &str) -> String {
        self.keys.key(&format!("slots:{pool}"))
    }

    fn marker_key(&self, pool: &str) -> String {
        self.keys.key(&format!("slots:{pool}:ok"))
    }

    /// The hash of every set's size (field: the set's key), kept by the scripts that change a
    /// set: a tick reads all its accounts' counts with one `HMGET`.
    fn counts_key(&self) -> String {
        self.keys.key("slots:counts")
    }

    fn log_key(&self, key: &str) -> String {
        self.keys.key(&format!("creates:{key}"))
    }

    /// A shared account's waiting flags: a hash of member set key → until (ms).
    fn waiting_key(&self, account: &str) -> String {
        self.keys.key(&format!("slots:waiting:{account}"))
    }

    fn lost(pool: &str) -> SlotError {
        SlotError::NotReconciled(pool.to_string())
    }
}

impl RedisSlots {
    /// [`SlotStore::acquire`], also returning the slots in use right after the grant as the
    /// script counted them (tests check the invariant on it).
    pub async fn acquire_counted(
        &self,
        pool: &str,
        unit_ids: &[String],
        max: u32,
        logs: &[CreateLog],
        now: i64,
        shared: Option<OnShared<'_>>,
    ) -> Result<(u32, Vec<String>), SlotError> {
        let mut conn = self.keys.conn().await?;
        let mut granted = Vec::new();
        let mut used_after = 0u32;
        for chunk in unit_ids.chunks(IDS_PER_CALL) {
            let mut call = self.acquire.prepare_invoke();
            call.key(self.set_key(pool)).key(self.marker_key(pool));
            for l in logs {
                call.key(self.log_key(&l.key));
            }
            if let Some(on) = shared {
                for m in &on.account.members {
                    call.key(self.set_key(&m.key)).key(self.marker_key(&m.key));
                }
                call.key(self.waiting_key(&on.account.name));
            }
            call.key(self.counts_key());
            call.arg(max).arg(now).arg(logs.len());
            for l in logs {
                call.arg(l.keep_since).arg(l.checks.len());
                for c in &l.checks {
                    call.arg(c.limit).arg(c.since);
                }
            }
            match shared {
                Some(on) => {
                    call.arg(on.account.members.len())
                        .arg(on.account.limit)
                        .arg(on.this + 1);
                    for m in &on.account.members {
                        call.arg(m.min).arg(m.max);
                    }
                }
                None => {
                    call.arg(0);
                }
            }
            let (used, got, lost): (i64, Vec<String>, i64) =
                call.arg(chunk).invoke_async(&mut conn).await?;
            if used < 0 {
                let member = usize::try_from(lost)
                    .ok()
                    .and_then(|i| i.checked_sub(1))
                    .and_then(|i| shared.and_then(|on| on.account.members.get(i)));
                return Err(Self::lost(member.map_or(pool, |m| m.key.as_str())));
            }
            // The script's own count is the first witness of the invariant.
            if used > i64::from(max) {
                tracing::error!(pool, used, max, "slot set above its maximum");
            }
            used_after = u32::try_from(used).unwrap_or(u32::MAX);
            let full = got.len() < chunk.len();
            granted.extend(got);
            if full {
                break;
            }
        }
        Ok((used_after, granted))
    }
}

#[async_trait]
impl SlotStore for RedisSlots {
    async fn acquire_within(
        &self,
        pool: &str,
        unit_ids: &[String],
        max: u32,
        logs: &[CreateLog],
        now: i64,
        shared: Option<OnShared<'_>>,
    ) -> Result<Vec<String>, SlotError> {
        Ok(self
            .acquire_counted(pool, unit_ids, max, logs, now, shared)
            .await?
            .1)
    }

    async fn set_waiting(&self, account: &str, key: &str, until: i64) -> Result<(), SlotError> {
        let mut conn = self.keys.conn().await?;
        redis::cmd("HSET")
            .arg(self.waiting_key(account))
            .arg(self.set_key(key))
            .arg(until)
            .query_async::<()>(&mut conn)
            .await?;
        Ok(())
    }

    async fn waiting(
        &self,
        account: &str,
    ) -> Result<std::collections::HashMap<String, i64>, SlotError> {
        let mut conn = self.keys.conn().await?;
        let flags: std::collections::HashMap<String, i64> = redis::cmd("HGETALL")
            .arg(self.waiting_key(account))
            .query_async(&mut conn)
            .await?;
        let prefix = self.set_key("");
        Ok(flags
            .into_iter()
            .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|k| (k.to_string(), v)))
            .collect())
    }

    async fn log_count(&self, key: &str, since: i64) -> Result<LogCount, SlotError> {
        let mut conn = self.keys.conn().await?;
        let key = self.log_key(key);
        let (count, oldest): (i64, Vec<(String, i64)>) = redis::pipe()
            .cmd("ZCOUNT")
            .arg(&key)
            .arg(since)
            .arg("+inf")
            .cmd("ZRANGEBYSCORE")
            .arg(&key)
            .arg(since)
            .arg("+inf")
            .arg("WITHSCORES")
            .arg("LIMIT")
            .arg(0)
            .arg(1)
            .query_async(&mut conn)
            .await?;
        Ok(LogCount {
            count: u32::try_from(count).unwrap_or(0),
            oldest: oldest.first().map(|(_, at)| *at),
        })
    }

    async fn log_forget(&self, key: &str, entries: &[String]) -> Result<(), SlotError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut conn = self.keys.conn().await?;
        for chunk in entries.chunks(IDS_PER_CALL) {
            redis::cmd("ZREM")
                .arg(self.log_key(key))
                .arg(chunk)
                .query_async::<()>(&mut conn)
                .await?;
        }
        Ok(())
    }

    async fn log_trim_oldest(&self, key: &str, since: i64, n: u32) -> Result<u32, SlotError> {
        if n == 0 {
            return Ok(0);
        }
        let mut conn = self.keys.conn().await?;
        let key = self.log_key(key);
        let oldest: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(&key)
            .arg(since)
            .arg("+inf")
            .arg("LIMIT")
            .arg(0)
            .arg(n)
            .query_async(&mut conn)
            .await?;
        if oldest.is_empty() {
            return Ok(0);
        }
        let removed: i64 = redis::cmd("ZREM")
            .arg(&key)
            .arg(&oldest)
            .query_async(&mut conn)
            .await?;
        Ok(u32::try_from(removed.max(0)).unwrap_or(u32::MAX))
    }

    async fn log_restore(&self, key: &str, entries: &[(String, i64)]) -> Result<(), SlotError> {
        let mut conn = self.keys.conn().await?;
        let mut call = self.log_restore.prepare_invoke();
        call.key(self.log_key(key));
        for (entry, at) in entries {
            call.arg(*at).arg(entry);
        }
        let _: i64 = call.invoke_async(&mut conn).await?;
        Ok(())
    }

    async fn release(&self, pool: &str, unit_ids: &[String]) -> Result<(), SlotError> {
        if unit_ids.is_empty() {
            return Ok(());
        }
        let mut conn = self.keys.conn().await?;
        for chunk in unit_ids.chunks(IDS_PER_CALL) {
            let _: i64 = self
                .release
                .key(self.set_key(pool))
                .key(self.counts_key())
                .arg(chunk)
                .invoke_async(&mut conn)
                .await?;
        }
        Ok(())
    }

    async fn used(&self, pool: &str) -> Result<u32, SlotError> {
        let mut conn = self.keys.conn().await?;
        let used: i64 = self
            .used
            .key(self.set_key(pool))
            .key(self.marker_key(pool))
            .invoke_async(&mut conn)
            .await?;
        if used < 0 {
            return Err(Self::lost(pool));
        }
        Ok(u32::try_from(used).unwrap_or(u32::MAX))
    }

    /// One `HMGET` of the counts hash, whatever the number of sets. A set with no count there
    /// (never reconciled, lost, or last changed by a slotd before the hash) is asked on its
    /// own, with its marker: the counts are a fast path, the marker stays the word on trust.
    async fn used_many(&self, pools: &[String]) -> Result<Vec<Option<u32>>, SlotError> {
        let mut out = Vec::with_capacity(pools.len());
        if pools.is_empty() {
            return Ok(out);
        }
        let mut conn = self.keys.conn().await?;
        for chunk in pools.chunks(IDS_PER_CALL) {
            let fields: Vec<String> = chunk.iter().map(|p| self.set_key(p)).collect();
            let counts: Vec<Option<i64>> = redis::cmd("HMGET")
                .arg(self.counts_key())
                .arg(&fields)
                .query_async(&mut conn)
                .await?;
            if counts.len() != chunk.len() {
                return Err(SlotError::Unavailable(format!(
                    "HMGET of the slot counts answered {} values for {} sets",
                    counts.len(),
                    chunk.len()
                )));
            }
            for (pool, count) in chunk.iter().zip(counts) {
                out.push(match count {
                    Some(n) => Some(u32::try_from(n.max(0)).unwrap_or(u32::MAX)),
                    None => match self.used(pool).await {
                        Ok(n) => Some(n),
                        Err(SlotError::NotReconciled(_)) => None,
                        Err(e) => return Err(e),
                    },
                });
            }
        }
        Ok(out)
    }

    async fn reconcile(
        &self,
        pool: &str,
        submitted: &[String],
        guard: Rebuild<'_>,
    ) -> Result<Reconciled, SlotError> {
        let mut conn = self.keys.conn().await?;
        // One script call keeps the rebuild and its guard atomic. A pool has at most `max`
        // submitted units, far below Lua's limits; the ids travel as arguments, not unpacked.
        // The guard's pool is the set's own (`pool` or `pool@account`, fenced by the pool).
        let fence_pool = guard.fence.map(|(p, _)| p).unwrap_or(pool);
        let (status, freed, restored, current): (String, Vec<String>, Vec<String>, i64) = self
            .reconcile
            .key(self.set_key(pool))
            .key(self.marker_key(pool))
            .key(self.counts_key())
            .key(self.keys.fence_key(fence_pool))
            .arg(guard.fence.map(|(_, t)| t.to_string()).unwrap_or_default())
            .arg(if guard.only_if_lost { "1" } else { "0" })
            .arg(submitted)
            .invoke_async(&mut conn)
            .await?;
        match (status.as_str(), guard.fence) {
            ("fenced", Some((fenced, token))) => Err(SlotError::Fenced {
                pool: fenced.to_string(),
                token,
                current,
            }),
            _ => Ok(Reconciled { freed, restored }),
        }
    }
}

#[cfg(test)]
#[path = "redis_tests.rs"]
mod tests;
