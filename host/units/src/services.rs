//! [`Services`]: the shared handles every part of slotd uses, built once by
//! [`crate::assemble::build`] (or by a test) and passed down. Nothing here is global.

use std::sync::Arc;

use slotd_coord::slots::DynSlots;
use slotd_coord::wake::Wake;
use slotd_core::clock::DynClock;
use slotd_core::config::Config;
use slotd_objects::Objects;
use slotd_runtime::{Registry, Runtime};
use slotd_store::DynServiceStore;

/// Shared handles. Cheap to clone.
#[derive(Clone)]
pub struct Services {
    pub config: Arc<Config>,
    /// The store's reads and its records beside the units (budgets, fences, the webhook
    /// outbox, keys, handler history). No unit write compiles through it: those are in
    /// [`Services::units`], which only the lifecycle can use.
    pub store: DynServiceStore,
    /// The unit writes, usable by [`crate::lifecycle`] alone (its fields are private there).
    pub units: crate::lifecycle::UnitWriter,
    pub slots: DynSlots,
    pub runtime: Arc<Runtime>,
    pub registry: Arc<Registry>,
    pub wake: Arc<Wake>,
    pub clock: DynClock,
    /// Where finalized artifacts are stored.
    pub objects: Objects,
    /// Hot task status snapshots (Redis); disabled in the embedded default.
    pub hot: Arc<slotd_coord::hot::HotStatus>,
    /// The shared Redis keyspace when slotd runs at scale (`redis_url` set): scheduler
    /// instances take pool leases on it. `None`: one process drives every pool.
    pub keyspace: Option<Arc<slotd_coord::keyspace::Keyspace>>,
    /// Signs and checks the tokens in callback URLs; the same key on every instance (it lives
    /// in the database).
    pub provider_callback_key: crate::provider_callback_token::ProviderCallbackKey,
    /// Where this instance records its metrics (its own registry: one process may host
    /// several instances, the test suites do).
    pub metrics: slotd_core::telemetry::Metrics,
    /// Renders `/metrics` from that registry; `None` when it records nowhere (some tests).
    pub prometheus: Option<metrics_exporter_prometheus::PrometheusHandle>,
    /// Each pool's adapted limit (adaptive capacity), kept by the scheduler, shown by the API.
    pub capacity: Arc<slotd_pools::pool_state::Capacity>,
    /// Drained provider accounts (credentials refused, balance exhausted), kept by the
    /// scheduler, shown by the API.
    pub accounts: Arc<slotd_pools::pool_state::AccountHealth>,
    /// Slot sets closed by a provider's quota refusal, kept by the scheduler, shown by the
    /// API.
    pub closures: Arc<slotd_pools::pool_state::Closures>,
    /// The provider's observed job durations (learned by ticks and callbacks) and each pool's
    /// next poll round.
    pub durations: Arc<slotd_pools::pool_state::durations::Durations>,
    /// Limits the providers published (contract 1.3), read by the scheduler.
    pub discovered: Arc<slotd_pools::pool_state::Discovered>,
    /// The one reader of the event log that wakes this instance's live event streams; idle
    /// until a stream opens.
    pub events: crate::event_feed::EventFeed,
    /// Provider callbacks' job lookups, read together.
    pub job_lookups: crate::job_lookups::JobLookups,
    /// Keeps this process's handlers in step with the published releases (its loop runs in
    /// `app::run_with`; its first look happens while the services are built).
    pub follower: Arc<slotd_runtime::Follower>,
}
