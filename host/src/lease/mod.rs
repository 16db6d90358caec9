//! Pool leases (SPEC section 11): with Redis, each pool is driven by one scheduler at a time.
//!
//! A lease is `SET lease:{pool} owner NX PX ttl`, renewed by a Lua compare-and-extend and
//! given up by a compare-and-delete, so only its holder can extend or drop it. Winning a lease
//! also draws a fencing token (`INCR fence:{pool}`); the scheduler advances the database's
//! token to it and passes it on every write, so an ex-holder that was paused past its lease
//! has its writes refused by the database rather than trusted.
//!
//! [`Leases`] is the Redis side; [`plan`] (pure) decides which pools an instance should try to
//! take or give up to spread pools across live instances; the scheduler's coordinator loop
//! (`scheduler/service.rs`) runs both.

mod plan;

pub use plan::{Plan, plan, share};

use std::sync::Arc;
use std::time::Duration;

use redis::Script;

use crate::keyspace::{Keyspace, KeyspaceError};

/// Lease operations of one scheduler instance (`owner`) on the shared Redis.
pub struct Leases {
    keys: Arc<Keyspace>,
    owner: String,
    ttl: Duration,
    acquire: Script,
    renew: Script,
    release: Script,
    heartbeat: Script,
    leave: Script,
}

impl Leases {
    /// Leases held as `owner` (unique per process) lasting `ttl` unless renewed.
    pub fn new(keys: Arc<Keyspace>, owner: &str, ttl: Duration) -> Self {
        Leases {
            keys,
            owner: owner.to_string(),
            ttl,
            acquire: Script::new(include_str!("lua/acquire.lua")),
            renew: Script::new(include_str!("lua/renew.lua")),
            release: Script::new(include_str!("lua/release.lua")),
            heartbeat: Script::new(include_str!("lua/heartbeat.lua")),
            leave: Script::new(include_str!("lua/leave.lua")),
        }
    }

    /// Who this instance is.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The lease period.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    fn lease_key(&self, pool: &str) -> String {
        self.keys.key(&format!("lease:{pool}"))
    }

    /// Take `pool`'s lease if it is free; the fencing token when taken. `now_ms` seeds the
    /// token counter if Redis lost it, keeping tokens increasing across a flush.
    pub async fn try_acquire(&self, pool: &str, now_ms: i64) -> Result<Option<i64>, KeyspaceError> {
        let mut conn = self.keys.conn().await?;
        let token: i64 = self
            .acquire
            .key(self.lease_key(pool))
            .key(self.keys.key(&format!("fence:{pool}")))
            .arg(&self.owner)
            .arg(self.ttl_ms())
            .arg(now_ms.max(0).saturating_mul(1000))
            .invoke_async(&mut conn)
            .await?;
        Ok((token > 0).then_some(token))
    }

    /// Extend `pool`'s lease if this instance still holds it; false when it was lost.
    pub async fn renew(&self, pool: &str) -> Result<bool, KeyspaceError> {
        let mut conn = self.keys.conn().await?;
        let renewed: i64 = self
            .renew
            .key(self.lease_key(pool))
            .arg(&self.owner)
            .arg(self.ttl_ms())
            .invoke_async(&mut conn)
            .await?;
        Ok(renewed == 1)
    }

    /// Give `pool`'s lease up (if still held) so another instance can take it at once.
    pub async fn release(&self, pool: &str) -> Result<bool, KeyspaceError> {
        let mut conn = self.keys.conn().await?;
        let released: i64 = self
            .release
            .key(self.lease_key(pool))
            .arg(&self.owner)
            .invoke_async(&mut conn)
            .await?;
        Ok(released == 1)
    }

    /// Announce this instance as live for one lease period; returns how many are live.
    pub async fn heartbeat(&self) -> Result<usize, KeyspaceError> {
        let mut conn = self.keys.conn().await?;
        let live: i64 = self
            .heartbeat
            .key(self.keys.key("schedulers"))
            .arg(&self.owner)
            .arg(self.ttl_ms())
            .invoke_async(&mut conn)
            .await?;
        Ok(usize::try_from(live).unwrap_or(1).max(1))
    }

    /// Stop counting this instance as live (at shutdown).
    pub async fn leave(&self) -> Result<(), KeyspaceError> {
        let mut conn = self.keys.conn().await?;
        let _: i64 = self
            .leave
            .key(self.keys.key("schedulers"))
            .arg(&self.owner)
            .invoke_async(&mut conn)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
