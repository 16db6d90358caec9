//! Pool leases (docs/operations.md): with Redis, each pool is driven by one scheduler at a time.
//!
//! A lease is `SET lease:{pool} owner NX PX ttl`, renewed by a Lua compare-and-extend and
//! given up by a compare-and-delete, so only its holder can extend or drop it. Winning a lease
//! also draws a fencing token (`INCR fence:{pool}`); the scheduler advances the database's
//! token to it and passes it on every write, so an ex-holder that was paused past its lease
//! has its writes refused by the database rather than trusted.
//!
//! [`Leases`] is the Redis side; [`place`] (pure) decides which pools an instance should try to
//! take or give up to spread pools across live instances; the scheduler's coordinator loop
//! (`scheduler/service.rs`) runs both.

mod placement;

pub use placement::{Placement, place, share};

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

    fn held_until_key(&self, pool: &str) -> String {
        self.keys.key(&format!("lease-held-until:{pool}"))
    }

    /// Take `pool`'s lease if it is free: the fencing token and how long the pool went
    /// without a holder, or how long the current holder's lease still runs. `now_ms` seeds
    /// the token counter if Redis lost it, keeping tokens increasing across a flush.
    pub async fn acquire(&self, pool: &str, now_ms: i64) -> Result<Acquire, KeyspaceError> {
        let mut conn = self.keys.conn().await?;
        let (token, ms): (i64, i64) = self
            .acquire
            .key(self.lease_key(pool))
            .key(self.keys.fence_key(pool))
            .key(self.held_until_key(pool))
            .key(unheld_key(&self.keys, pool))
            .arg(&self.owner)
            .arg(self.ttl_ms())
            .arg(now_ms.max(0).saturating_mul(1000))
            .invoke_async(&mut conn)
            .await?;
        Ok(if token > 0 {
            Acquire::Won {
                token,
                unheld: u64::try_from(ms).ok().map(Duration::from_millis),
            }
        } else {
            // PTTL is -1 for a key without expiry and -2 for one just gone: look again soon.
            Acquire::Held {
                expires_in: Duration::from_millis(u64::try_from(ms).unwrap_or(0)),
            }
        })
    }

    /// [`Leases::acquire`], keeping only the fencing token of a lease won.
    pub async fn try_acquire(&self, pool: &str, now_ms: i64) -> Result<Option<i64>, KeyspaceError> {
        Ok(match self.acquire(pool, now_ms).await? {
            Acquire::Won { token, .. } => Some(token),
            Acquire::Held { .. } => None,
        })
    }

    /// Extend `pool`'s lease if this instance still holds it; false when it was lost.
    pub async fn renew(&self, pool: &str) -> Result<bool, KeyspaceError> {
        let mut conn = self.keys.conn().await?;
        let renewed: i64 = self
            .renew
            .key(self.lease_key(pool))
            .key(self.held_until_key(pool))
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
            .key(self.held_until_key(pool))
            .arg(&self.owner)
            .invoke_async(&mut conn)
            .await?;
        Ok(released == 1)
    }

    /// Announce this instance as live for one lease period: how many are live, and when the
    /// soonest other instance drops out unless it announces itself again.
    pub async fn heartbeat(&self) -> Result<Live, KeyspaceError> {
        let mut conn = self.keys.conn().await?;
        let (live, soonest): (i64, i64) = self
            .heartbeat
            .key(self.keys.key("schedulers"))
            .arg(&self.owner)
            .arg(self.ttl_ms())
            .invoke_async(&mut conn)
            .await?;
        Ok(Live {
            count: usize::try_from(live).unwrap_or(1).max(1),
            next_expiry: u64::try_from(soonest).ok().map(Duration::from_millis),
        })
    }

    /// Tell the other instances to look at the leases now (this one gave its pools up).
    pub async fn announce_free(&self) -> Result<(), KeyspaceError> {
        let mut conn = self.keys.conn().await?;
        redis::cmd("PUBLISH")
            .arg(crate::wake::WakeKey::Leases.channel(&self.keys))
            .arg(&self.owner)
            .query_async::<i64>(&mut conn)
            .await?;
        Ok(())
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

/// What [`Leases::heartbeat`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Live {
    /// Live instances, this one included.
    pub count: usize,
    /// When the soonest other instance drops out unless it announces itself again.
    pub next_expiry: Option<Duration>,
}

/// What [`Leases::acquire`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// The lease is this instance's now.
    Won {
        /// The fencing token of this tenure.
        token: i64,
        /// How long the pool had no holder before (`None`: it never had one).
        unheld: Option<Duration>,
    },
    /// Another instance holds it, for this long unless renewed.
    Held { expires_in: Duration },
}

fn unheld_key(keys: &Keyspace, pool: &str) -> String {
    keys.key(&format!("lease-unheld-ms:{pool}"))
}

/// Who holds a pool's lease, as any process sees it in Redis (the API shows it).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct LeaseView {
    /// The holding scheduler's owner id (`slotd_scheduler_info` on its metrics), if any.
    pub holder: Option<String>,
    /// Milliseconds the pool has spent without a holder between tenures, all told.
    pub unheld_ms_total: u64,
}

/// [`LeaseView`] of `pool`.
pub async fn lease_view(keys: &Keyspace, pool: &str) -> Result<LeaseView, KeyspaceError> {
    let mut conn = keys.conn().await?;
    let (holder, unheld): (Option<String>, Option<u64>) = redis::pipe()
        .cmd("GET")
        .arg(keys.key(&format!("lease:{pool}")))
        .cmd("GET")
        .arg(unheld_key(keys, pool))
        .query_async(&mut conn)
        .await?;
    Ok(LeaseView {
        holder,
        unheld_ms_total: unheld.unwrap_or(0),
    })
}

#[cfg(test)]
mod tests;
