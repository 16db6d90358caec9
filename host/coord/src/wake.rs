//! Early wake-ups of the per-pool tick loops: a new task, a freed slot or a provider callback
//! starts the next tick now instead of at the interval; the tick interval is only the floor
//! (docs/unit-journey.md). The finalizer, the lease loop and the completion webhook outbox are
//! woken the same way. Every loop's key is a [`WakeKey`], named here and nowhere else.
//!
//! Within a process a wake is a [`Notify`] per pool. In a cluster (Redis configured) the event
//! may happen in one process (the API applied a callback) while another holds the pool's lease,
//! so every wake is also published on Redis (`PUBLISH {prefix}wake:{pool}`), and each scheduler
//! process relays what it hears to its own loops ([`Wake::relay`]). Publishing never blocks the
//! caller: wakes queue to a publisher task that coalesces repeats. A lost message only delays
//! a tick to the next interval, the safety net; a relay that (re)subscribes wakes every loop of
//! its process at once, since it may have missed messages while away.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::keyspace::Keyspace;

/// Which loop a wake is for. Pools and the host's own loops share the wake channels, so the
/// host's loops are variants of their own rather than strings a pool could be named.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WakeKey<'a> {
    /// A pool's tick loop: a task arrived, a slot freed, a provider callback landed.
    Pool(&'a str),
    /// The finalization workers: a unit reached `succeeded` (or a retry parked one).
    Finalizer,
    /// The lease loop: a scheduler joined or left the cluster.
    Leases,
    /// The completion webhook outbox: a task ended (local only: the outbox is drained by the
    /// process that wrote the delivery, and every process polls it on its interval).
    Webhooks,
    /// The release follower of every process: a handler release was published, promoted or
    /// withdrawn.
    Releases,
}

/// The wire names of the host's own loops (the suffix of their Redis channel). They keep the
/// `slotd:` names earlier releases published, so a cluster can be upgraded one process at a
/// time; a pool that happened to bear one of these names would only see a spurious wake.
const FINALIZER_WIRE: &str = "slotd:finalize";
const LEASES_WIRE: &str = "slotd:leases";
const WEBHOOKS_WIRE: &str = "slotd:webhooks";
const RELEASES_WIRE: &str = "slotd:releases";

impl<'a> WakeKey<'a> {
    /// The key's name on the wire: the suffix of its Redis channel.
    fn wire(&self) -> &'a str {
        match self {
            WakeKey::Pool(pool) => pool,
            WakeKey::Finalizer => FINALIZER_WIRE,
            WakeKey::Leases => LEASES_WIRE,
            WakeKey::Webhooks => WEBHOOKS_WIRE,
            WakeKey::Releases => RELEASES_WIRE,
        }
    }

    /// The key a channel suffix names.
    fn from_wire(name: &'a str) -> Self {
        match name {
            FINALIZER_WIRE => WakeKey::Finalizer,
            LEASES_WIRE => WakeKey::Leases,
            WEBHOOKS_WIRE => WakeKey::Webhooks,
            RELEASES_WIRE => WakeKey::Releases,
            pool => WakeKey::Pool(pool),
        }
    }

    /// The key of this process's notifier map: pools and the host's loops apart.
    fn local(&self) -> (bool, String) {
        match self {
            WakeKey::Pool(pool) => (true, pool.to_string()),
            other => (false, other.wire().to_string()),
        }
    }

    /// The channel of this key's wakes, under the keyspace prefix.
    pub fn channel(&self, keys: &Keyspace) -> String {
        channel(keys, self.wire())
    }
}

/// The channel named `suffix` under the keyspace prefix (`*` for the relay's pattern).
fn channel(keys: &Keyspace, suffix: &str) -> String {
    keys.key(&format!("wake:{suffix}"))
}

/// How often a relay sends a probe through Redis to itself: a subscription that stopped
/// delivering is found within this (plus [`crate::keyspace::RESPONSE_TIMEOUT`]) and renewed.
const RELAY_PING: Duration = Duration::from_secs(2);
/// The channel (under `wake:`) of the relays' probes; no pool's loop listens on it.
const RELAY_PROBE: &str = "slotd:relay-probe";
/// Longest pause between a relay's attempts to subscribe while Redis is away.
const RELAY_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// One `Notify` per key, created on first use, and the publisher of a cluster.
pub struct Wake {
    /// Keyed by [`WakeKey::local`].
    loops: Mutex<HashMap<(bool, String), Arc<Notify>>>,
    /// Wakes to publish (cluster mode only).
    publish: Option<mpsc::UnboundedSender<String>>,
    /// This process, as the payload of what it publishes: its relay skips its own messages
    /// (the local loops were woken directly).
    origin: String,
    /// This instance's metrics registry (the relay and the publisher record into it).
    metrics: slotd_core::telemetry::Metrics,
}

impl Wake {
    /// Wakes within this process only (embedded mode, tests).
    pub fn new() -> Arc<Self> {
        Arc::new(Wake {
            loops: Mutex::default(),
            publish: None,
            origin: String::new(),
            metrics: Default::default(),
        })
    }

    /// Wakes within this process and published on `keys`' Redis for the other processes.
    /// Spawns the publisher task (it ends when the `Wake` is dropped).
    pub fn clustered(keys: Arc<Keyspace>, metrics: slotd_core::telemetry::Metrics) -> Arc<Self> {
        let (tx, rx) = mpsc::unbounded_channel();
        let origin = uuid::Uuid::new_v4().simple().to_string();
        tokio::spawn(publisher(keys, origin.clone(), rx, metrics.clone()));
        Arc::new(Wake {
            loops: Mutex::default(),
            publish: Some(tx),
            origin,
            metrics,
        })
    }

    /// The notifier `key`'s loop waits on.
    pub fn listener(&self, key: WakeKey<'_>) -> Arc<Notify> {
        self.loops.lock().entry(key.local()).or_default().clone()
    }

    /// Wake `key`'s loop, in this process and (in a cluster) in whichever process drives it.
    /// A permit is stored if the loop is busy, so the wake is not lost.
    pub fn wake(&self, key: WakeKey<'_>) {
        self.local(key);
        if let Some(tx) = &self.publish {
            // The publisher outlives every caller that could send; a closed channel means
            // shutdown, when a lost wake costs nothing.
            let _ = tx.send(key.wire().to_string());
        }
    }

    /// Wake one pool's loop, here and wherever it runs: [`Wake::wake`] of [`WakeKey::Pool`].
    pub fn pool(&self, pool: &str) {
        self.wake(WakeKey::Pool(pool));
    }

    /// Wake `key`'s loop in this process only.
    pub fn local(&self, key: WakeKey<'_>) {
        self.listener(key).notify_one();
    }

    /// Wake every loop of this process.
    pub fn all(&self) {
        for n in self.loops.lock().values() {
            n.notify_one();
        }
    }

    /// Relay the cluster's wakes to this process's loops until `shutdown`: subscribe to
    /// `{prefix}wake:*`, wake the named pool on each message from another process, and wake
    /// every loop whenever the subscription is (re)established. Redis being away only slows
    /// the loops to their tick interval; the relay keeps trying.
    pub async fn relay(self: Arc<Self>, keys: Arc<Keyspace>, shutdown: CancellationToken) {
        let mut failures: u32 = 0;
        loop {
            let started = Instant::now();
            let e = tokio::select! {
                _ = shutdown.cancelled() => return,
                e = self.relay_once(&keys) => e,
            };
            self.metrics
                .record(|| metrics::gauge!("slotd_wake_relay_subscribed").set(0.0));
            // A subscription that lasted was live: start the backoff afresh.
            if started.elapsed() > RELAY_PING * 2 {
                failures = 0;
            }
            failures = failures.saturating_add(1);
            if failures == 1 {
                tracing::warn!(error = %e, "wake relay lost Redis; loops fall back to their tick interval");
            }
            self.metrics
                .record(|| metrics::counter!("slotd_wake_relay_reconnects_total").increment(1));
            let pause = Duration::from_millis(50)
                .saturating_mul(failures.min(40))
                .min(RELAY_BACKOFF_MAX);
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// One subscription, until it fails or stops answering. It counts as live only once a
    /// probe it published came back through it (a refused subscription is not always reported
    /// as an error), and a probe goes round every [`RELAY_PING`]: one that does not come back
    /// within [`crate::keyspace::RESPONSE_TIMEOUT`] ends the subscription.
    async fn relay_once(&self, keys: &Keyspace) -> anyhow::Error {
        match self.subscription(keys).await {
            Ok(never) => match never {},
            Err(e) => e,
        }
    }

    /// [`Wake::relay_once`]'s body; it returns only with an error.
    async fn subscription(&self, keys: &Keyspace) -> anyhow::Result<std::convert::Infallible> {
        let pubsub = keys.pubsub().await?;
        let (mut sink, mut stream) = pubsub.split();
        sink.psubscribe(channel(keys, "*")).await?;
        let prefix = channel(keys, "");
        let probes = channel(keys, RELAY_PROBE);
        let mut live = false;
        let mut sent: u64 = 0;
        let mut outstanding: Option<(String, Instant)> = None;
        let mut every = tokio::time::interval(RELAY_PING);
        loop {
            tokio::select! {
                msg = stream.next() => {
                    let Some(msg) = msg else {
                        anyhow::bail!("the subscription ended");
                    };
                    let name = msg.get_channel_name();
                    let payload: String = msg.get_payload().unwrap_or_default();
                    if name == probes {
                        if outstanding.as_ref().is_some_and(|(token, _)| *token == payload) {
                            outstanding = None;
                            if !live {
                                live = true;
                                tracing::info!("wake relay subscribed");
                                self.metrics.record(|| metrics::gauge!("slotd_wake_relay_subscribed").set(1.0));
                                // Wakes sent while this process was not listening are gone:
                                // look at everything.
                                self.all();
                            }
                        }
                        continue;
                    }
                    if let Some(suffix) = name.strip_prefix(&prefix)
                        && payload != self.origin
                    {
                        self.metrics.record(|| metrics::counter!("slotd_wake_received_total").increment(1));
                        self.local(WakeKey::from_wire(suffix));
                    }
                }
                _ = every.tick() => {
                    if let Some((_, at)) = &outstanding {
                        if at.elapsed() > crate::keyspace::RESPONSE_TIMEOUT {
                            anyhow::bail!("the relay's probe did not come back in time");
                        }
                        continue;
                    }
                    sent += 1;
                    let token = format!("{}-{sent}", self.origin);
                    let mut conn = keys.conn().await?;
                    redis::cmd("PUBLISH")
                        .arg(&probes)
                        .arg(&token)
                        .query_async::<i64>(&mut conn)
                        .await?;
                    outstanding = Some((token, Instant::now()));
                }
            }
        }
    }
}

/// Publish queued wakes (their keys' wire names), each once per batch, until every sender is
/// gone.
async fn publisher(
    keys: Arc<Keyspace>,
    origin: String,
    mut rx: mpsc::UnboundedReceiver<String>,
    metrics: slotd_core::telemetry::Metrics,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = BTreeSet::from([first]);
        while let Ok(more) = rx.try_recv() {
            batch.insert(more);
        }
        let Ok(mut conn) = keys.conn().await else {
            // Redis away: the loops' tick interval covers for the lost wakes.
            continue;
        };
        let mut pipe = redis::pipe();
        for wire in &batch {
            pipe.cmd("PUBLISH")
                .arg(channel(&keys, wire))
                .arg(&origin)
                .ignore();
        }
        match pipe.query_async::<()>(&mut conn).await {
            Ok(()) => metrics.record(|| {
                metrics::counter!("slotd_wake_published_total").increment(batch.len() as u64)
            }),
            Err(e) => tracing::debug!(error = %e, "publishing wakes failed"),
        }
    }
}
