//! slotd's Redis keyspace: one lazily connected, self-reconnecting connection and the key
//! prefix every key lives under, shared by the slot store ([`crate::slots::redis`]), the pool
//! leases ([`crate::lease`]) and the hot status cache ([`crate::hot`]).
//!
//! Redis holds only what can be rebuilt from the database (docs/state-machine.md), so Redis being
//! down must never stop slotd from starting: the connection is opened on first use and every
//! command fails fast (short timeouts) with [`KeyspaceError`], which callers turn into "pause
//! the scheduler" or "read the database instead".

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::OnceCell;

/// How long connecting to Redis may take before the caller is told it is unavailable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long one command may take: a stalled Redis must pause the scheduler, not hang it.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Redis could not be reached or answered with an error.
#[derive(Debug, thiserror::Error)]
#[error("redis unavailable: {0}")]
pub struct KeyspaceError(pub String);

impl From<redis::RedisError> for KeyspaceError {
    fn from(e: redis::RedisError) -> Self {
        KeyspaceError(e.to_string())
    }
}

/// A Redis server plus the prefix of slotd's keys on it. Cheap to share behind an `Arc`.
pub struct Keyspace {
    client: redis::Client,
    /// Set on the first successful connect; the manager reconnects by itself afterwards.
    conn: OnceCell<ConnectionManager>,
    prefix: String,
}

impl Keyspace {
    /// Parse `url` (`redis://host:port/db`); does not connect.
    pub fn new(url: &str, prefix: &str) -> anyhow::Result<Self> {
        let client = redis::Client::open(url).map_err(|e| {
            let shown = slotd_core::redact::redact_url(url);
            anyhow::anyhow!("redis_url {shown:?} is not a Redis URL: {e}")
        })?;
        Ok(Keyspace {
            client,
            conn: OnceCell::new(),
            prefix: prefix.to_string(),
        })
    }

    /// The full key for `name` (`{prefix}{name}`).
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The fencing counter of `pool`'s lease (`fence:{pool}`): drawn by the lease's winner,
    /// and read by a slot set's rebuild, which a stale holder may no longer make.
    pub fn fence_key(&self, pool: &str) -> String {
        self.key(&format!("fence:{pool}"))
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A connection (a cheap clone of the shared multiplexed one), connecting on first use.
    pub async fn conn(&self) -> Result<ConnectionManager, KeyspaceError> {
        let conn = self
            .conn
            .get_or_try_init(|| async {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(CONNECT_TIMEOUT)
                    .set_response_timeout(RESPONSE_TIMEOUT)
                    .set_number_of_retries(1)
                    .set_max_delay(200);
                ConnectionManager::new_with_config(self.client.clone(), config).await
            })
            .await?;
        Ok(conn.clone())
    }

    /// A connection of its own in subscriber mode (the shared one cannot subscribe), opened
    /// within [`CONNECT_TIMEOUT`].
    pub async fn pubsub(&self) -> Result<redis::aio::PubSub, KeyspaceError> {
        tokio::time::timeout(CONNECT_TIMEOUT, self.client.get_async_pubsub())
            .await
            .map_err(|_| KeyspaceError("connecting to subscribe timed out".into()))?
            .map_err(KeyspaceError::from)
    }

    /// `PING`: whether Redis answers now.
    pub async fn ping(&self) -> Result<(), KeyspaceError> {
        let mut c = self.conn().await?;
        redis::cmd("PING").query_async::<String>(&mut c).await?;
        Ok(())
    }
}

/// Test helpers: the test Redis and a unique key prefix per test (this crate's tests, and
/// other crates' through the `testing` feature).
#[cfg(any(test, feature = "testing"))]
#[allow(clippy::expect_used)]
pub mod testing {
    use std::sync::Arc;

    use super::Keyspace;

    /// `SLOTD_TEST_REDIS_URL`, else the machine's Redis.
    pub fn redis_url() -> String {
        std::env::var("SLOTD_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
    }

    /// A keyspace with a fresh prefix, so tests run in parallel on one server.
    pub fn fresh() -> Arc<Keyspace> {
        let prefix = format!("slotd-test:{}:", uuid::Uuid::new_v4().simple());
        Arc::new(Keyspace::new(&redis_url(), &prefix).expect("test redis url"))
    }

    /// Another keyspace (its own connection) on the same server and prefix: a second process.
    pub fn fresh_like(keys: &Keyspace) -> Arc<Keyspace> {
        Arc::new(Keyspace::new(&redis_url(), keys.prefix()).expect("test redis url"))
    }

    /// Delete every key under the keyspace's prefix (a "flush" of this test's data only).
    pub async fn flush(keys: &Keyspace) {
        let mut conn = keys.conn().await.expect("test redis reachable");
        let found: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", keys.prefix()))
            .query_async(&mut conn)
            .await
            .expect("KEYS");
        if !found.is_empty() {
            let _: i64 = redis::cmd("DEL")
                .arg(&found)
                .query_async(&mut conn)
                .await
                .expect("DEL");
        }
    }
}
