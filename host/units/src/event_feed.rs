//! One reader of the unit event log per API process, waking the live event streams (SSE) that
//! have something to read.
//!
//! Every stream keeps its own cursor and reads its own scope (a tenant, or one task) with
//! `unit_events_after`, as before; what the feed takes away is the polling. While at least one
//! stream is open, one task reads the whole log every [`POLL`] with one query from its own
//! cursor (`unit_event_scopes_after`: only which tasks, with their tenant, got events, read
//! with the same batches and cursor as a stream) and wakes the streams of those tenants and
//! tasks. An idle stream costs nothing, the store sees one query per round however many
//! streams are open, and a process with no stream open does not read the log at all: the
//! feed starts with the first stream and stops after the last.
//!
//! Nothing is missed: a stream subscribes before its first read, and a wake that comes while
//! it is reading is kept (a [`Notify`] permit), so whatever the feed sees after that read
//! wakes it. The feed starts at the log's head and then wakes every stream once, covering
//! what was committed before its head. When the feed cannot read the log it wakes every
//! stream each round, so each reads on its own schedule (and a failing store ends them with
//! an error, as it always has) until the feed reads again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use slotd_core::telemetry::Metrics;
use slotd_store::{DynServiceStore, EventCursor};

/// How often the feed looks for new events.
pub const POLL: Duration = Duration::from_millis(200);
/// Events per read of the log; a full page is followed by the next at once.
const PAGE: u32 = 1000;

/// The feed of one API process (one per [`Services`](crate::services::Services)). Cheap to
/// clone; idle until a stream subscribes.
#[derive(Clone, Default)]
pub struct EventFeed {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Reads of the whole log by the feed.
    reads: AtomicU64,
    /// Streams woken.
    wakes: AtomicU64,
    /// Reads of their own scope by the streams.
    stream_reads: AtomicU64,
}

#[derive(Default)]
struct State {
    /// Which feed task runs (each start takes the next number); `None`: none does.
    running: Option<u64>,
    starts: u64,
    next_stream: u64,
    streams: usize,
    tenants: HashMap<String, Watchers>,
}

/// The streams of one tenant.
#[derive(Default)]
struct Watchers {
    /// Streams of every task of the tenant.
    tenant: HashMap<u64, Arc<Notify>>,
    /// Streams of one task, by task id.
    tasks: HashMap<String, HashMap<u64, Arc<Notify>>>,
}

impl Watchers {
    fn is_empty(&self) -> bool {
        self.tenant.is_empty() && self.tasks.is_empty()
    }
}

/// What the feed has counted so far (tests, and `/metrics` through the counters of the same
/// names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeedStats {
    /// `slotd_event_feed_reads_total`: reads of the whole log by the feed.
    pub reads: u64,
    /// `slotd_event_feed_wakes_total`: streams woken (by their scope's events, or all of
    /// them when the feed starts or cannot read).
    pub wakes: u64,
    /// `slotd_event_stream_reads_total`: reads of their own scope by the streams.
    pub stream_reads: u64,
    /// Streams open now.
    pub streams: usize,
    /// Whether the feed task runs.
    pub running: bool,
}

/// One stream's place in the feed; leaving it (dropping it) unsubscribes.
pub struct Subscription {
    shared: Arc<Shared>,
    id: u64,
    tenant: String,
    task: Option<String>,
    signal: Arc<Notify>,
    /// What the feed reads with, should it have to be started again.
    store: DynServiceStore,
    metrics: Metrics,
}

impl EventFeed {
    /// Subscribe a stream of `tenant` (of one task with `task`), starting the feed if it is
    /// not running. Subscribe before the stream's first read.
    pub fn subscribe(
        &self,
        store: &DynServiceStore,
        metrics: &Metrics,
        tenant: &str,
        task: Option<&str>,
    ) -> Subscription {
        let signal = Arc::new(Notify::new());
        let id = {
            let mut state = self.shared.state.lock();
            state.next_stream += 1;
            let id = state.next_stream;
            let watchers = state.tenants.entry(tenant.to_string()).or_default();
            match task {
                Some(task) => {
                    watchers
                        .tasks
                        .entry(task.to_string())
                        .or_default()
                        .insert(id, signal.clone());
                }
                None => {
                    watchers.tenant.insert(id, signal.clone());
                }
            }
            state.streams += 1;
            start_locked(&self.shared, &mut state, store, metrics);
            id
        };
        Subscription {
            shared: self.shared.clone(),
            id,
            tenant: tenant.to_string(),
            task: task.map(str::to_string),
            signal,
            store: store.clone(),
            metrics: metrics.clone(),
        }
    }

    /// What the feed has counted so far.
    pub fn stats(&self) -> FeedStats {
        let state = self.shared.state.lock();
        FeedStats {
            reads: self.shared.reads.load(Ordering::Relaxed),
            wakes: self.shared.wakes.load(Ordering::Relaxed),
            stream_reads: self.shared.stream_reads.load(Ordering::Relaxed),
            streams: state.streams,
            running: state.running.is_some(),
        }
    }
}

impl Subscription {
    /// Wait until the stream may have something to read: its scope got events, the feed
    /// (re)started, or the feed cannot read the log. Without a feed (no runtime to run it
    /// on), after [`POLL`]: the stream then reads on its own schedule.
    pub async fn woken(&self) {
        let running = {
            let mut state = self.shared.state.lock();
            start_locked(&self.shared, &mut state, &self.store, &self.metrics);
            state.running.is_some()
        };
        if running {
            self.signal.notified().await;
        } else {
            tokio::time::sleep(POLL).await;
        }
    }

    /// Count one read of the stream's own scope.
    pub fn count_read(&self) {
        self.shared.stream_reads.fetch_add(1, Ordering::Relaxed);
        self.metrics
            .record(|| metrics::counter!("slotd_event_stream_reads_total").increment(1));
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock();
        state.streams = state.streams.saturating_sub(1);
        let Some(watchers) = state.tenants.get_mut(&self.tenant) else {
            return;
        };
        match &self.task {
            Some(task) => {
                if let Some(streams) = watchers.tasks.get_mut(task) {
                    streams.remove(&self.id);
                    if streams.is_empty() {
                        watchers.tasks.remove(task);
                    }
                }
            }
            None => {
                watchers.tenant.remove(&self.id);
            }
        }
        if watchers.is_empty() {
            state.tenants.remove(&self.tenant);
        }
    }
}

/// Start the feed task if streams are open and none runs (and a runtime is there to run it).
fn start_locked(
    shared: &Arc<Shared>,
    state: &mut State,
    store: &DynServiceStore,
    metrics: &Metrics,
) {
    if state.running.is_some() || state.streams == 0 {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    state.starts += 1;
    let run = state.starts;
    state.running = Some(run);
    runtime.spawn(feed(shared.clone(), run, store.clone(), metrics.clone()));
}

/// What one round tells the streams.
enum Round {
    /// These `(tenant, task)` got events.
    Scopes(Vec<(String, String)>),
    /// Every stream should read: the feed just started, or cannot read the log.
    Everyone,
}

/// Marks the feed stopped however its task ends; if it ends while streams are still open (a
/// panic, the runtime shutting down), wakes them so that none waits on a feed that is gone
/// (the next wait starts a new one).
struct Running {
    shared: Arc<Shared>,
    run: u64,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock();
        if state.running == Some(self.run) {
            state.running = None;
            wake_locked(&self.shared, &state, &Round::Everyone);
        }
    }
}

/// The feed task: follow the log until no stream is open.
async fn feed(shared: Arc<Shared>, run: u64, store: DynServiceStore, metrics: Metrics) {
    let _running = Running {
        shared: shared.clone(),
        run,
    };
    let mut cursor: Option<EventCursor> = None;
    let mut failing = false;
    loop {
        {
            let mut state = shared.state.lock();
            if state.streams == 0 {
                state.running = None;
                return;
            }
        }
        let read = match cursor {
            // From the head: what was committed before it, every stream reads once.
            None => store.unit_events_head().await.map(|head| {
                cursor = Some(head);
                (Round::Everyone, false)
            }),
            Some(at) => store.unit_event_scopes_after(at, PAGE).await.map(|page| {
                cursor = Some(page.next);
                (Round::Scopes(page.scopes), page.more)
            }),
        };
        shared.reads.fetch_add(1, Ordering::Relaxed);
        metrics.record(|| metrics::counter!("slotd_event_feed_reads_total").increment(1));
        let (round, more) = match read {
            Ok(r) => {
                if failing {
                    failing = false;
                    tracing::info!("the event log reads again: live streams are woken by it");
                }
                r
            }
            Err(e) => {
                metrics
                    .record(|| metrics::counter!("slotd_event_feed_failures_total").increment(1));
                if !failing {
                    failing = true;
                    tracing::warn!(
                        error = %e,
                        "reading the event log for live streams failed: every stream reads on \
                         its own until it answers"
                    );
                }
                (Round::Everyone, false)
            }
        };
        let woken = {
            let state = shared.state.lock();
            wake_locked(&shared, &state, &round)
        };
        if woken > 0 {
            metrics.record(|| metrics::counter!("slotd_event_feed_wakes_total").increment(woken));
        }
        if !more {
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Wake the streams `round` names; how many.
fn wake_locked(shared: &Shared, state: &State, round: &Round) -> u64 {
    let mut woken = 0_u64;
    let mut wake = |streams: &HashMap<u64, Arc<Notify>>| {
        for signal in streams.values() {
            signal.notify_one();
            woken += 1;
        }
    };
    match round {
        Round::Everyone => {
            for watchers in state.tenants.values() {
                wake(&watchers.tenant);
                watchers.tasks.values().for_each(&mut wake);
            }
        }
        Round::Scopes(scopes) => {
            let mut tenants_woken: HashSet<&str> = HashSet::new();
            for (tenant, task) in scopes {
                let Some(watchers) = state.tenants.get(tenant) else {
                    continue;
                };
                if tenants_woken.insert(tenant) {
                    wake(&watchers.tenant);
                }
                if let Some(streams) = watchers.tasks.get(task) {
                    wake(streams);
                }
            }
        }
    }
    shared.wakes.fetch_add(woken, Ordering::Relaxed);
    woken
}
