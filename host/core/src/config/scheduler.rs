//! `[scheduler]`: the tick loop and its policies, and how its timings follow the tick interval.

use std::time::Duration;

use anyhow::bail;
use serde::Deserialize;

use super::values;

/// The seed's tick: the floor between ticks when nothing wakes the loop earlier.
pub const TICK_INTERVAL_DEFAULT: Duration = Duration::from_secs(10);
/// The seed's rest after an overrunning tick.
pub const MIN_REST_DEFAULT: Duration = Duration::from_secs(2);
pub const POLL_INITIAL_DEFAULT: Duration = Duration::from_secs(5);
pub const POLL_MAX_DEFAULT: Duration = Duration::from_secs(30);
/// Growth of the poll delay after each poll that finds a job still running.
pub const POLL_FACTOR_DEFAULT: f64 = 1.5;
pub const RETRY_BUDGET_DEFAULT: u32 = 5;
/// First retry backoff; doubled per attempt up to [`RETRY_MAX_DEFAULT`].
pub const RETRY_BASE_DEFAULT: Duration = Duration::from_secs(2);
pub const RETRY_MAX_DEFAULT: Duration = Duration::from_secs(120);
pub const RECONCILE_INTERVAL_DEFAULT: Duration = Duration::from_secs(30);
pub const MAX_BATCH_DEFAULT: u32 = 1000;
/// How long a unit may stay submitted in one stage (from the submit marker of the stage's
/// current job) before it fails: the only limit on waiting out a slow provider.
pub const STAGE_DEADLINE_DEFAULT: Duration = Duration::from_secs(2 * 60 * 60);
pub const FINALIZE_CONCURRENCY_DEFAULT: usize = 8;
pub const FINALIZE_LEASE_DEFAULT: Duration = Duration::from_secs(300);
/// Finalization attempts before a unit stays `succeeded` with the reason (until a retry).
pub const FINALIZE_ATTEMPTS_DEFAULT: u32 = 8;
/// How long a scheduler's pool lease lasts unless renewed (with Redis; docs/operations.md).
pub const LEASE_TTL_DEFAULT: Duration = Duration::from_secs(10);
pub const ARTIFACT_MAX_BYTES_DEFAULT: u64 = 4 * 1024 * 1024 * 1024;
/// Timeout of one artifact download (the whole stream).
pub const ARTIFACT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(600);

/// Shortest finalizer lease a scaled-down tick gives: it is renewed every third of itself
/// while a download streams, and a shorter one would be a busy loop.
const SCALED_FINALIZE_LEASE_MIN: Duration = Duration::from_millis(500);

/// A drained account's first rest before a probe.
pub const ACCOUNT_PROBE_DEFAULT: Duration = Duration::from_secs(30);
/// Wait before the first create above a capacity ceiling learned from the provider's refusals.
pub const CAPACITY_PROBE_DEFAULT: Duration = Duration::from_secs(10);
/// Longest wait between such probes; also how long an accepted level counts as recent.
pub const CAPACITY_PROBE_MAX_DEFAULT: Duration = Duration::from_secs(120);
/// How often the limits a provider publishes are read again (contract 1.3 `provider.limits`).
pub const LIMITS_REFRESH_DEFAULT: Duration = Duration::from_secs(600);

/// The tick loop and its policies. The file's `[scheduler]` keys are these fields' names.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    /// Longest wait between ticks of a pool; events (new task, freed slot, callback) wake it
    /// earlier.
    #[serde(deserialize_with = "values::duration")]
    pub tick_interval: Duration,
    /// Shortest wait between the end of one tick and the start of the next.
    #[serde(deserialize_with = "values::duration")]
    pub min_rest: Duration,
    /// First poll delay after a submit; grows by `poll_factor` up to `poll_max`.
    #[serde(deserialize_with = "values::duration")]
    pub poll_initial: Duration,
    #[serde(deserialize_with = "values::duration")]
    pub poll_max: Duration,
    pub poll_factor: f64,
    /// Most units handed to one handler call.
    pub max_batch: u32,
    /// Transient errors and handler faults a unit may spend per stage before it fails. A call
    /// cut off while awaiting a slow provider spends none of it.
    pub retry_budget: u32,
    /// Longest a unit may stay submitted in one stage, counted from the submit marker of the
    /// stage's current job (waiting in `pending` for a slot does not count). Past it the unit
    /// fails with a reason saying so; before it, a slow provider never fails a unit.
    #[serde(deserialize_with = "values::duration")]
    pub stage_deadline: Duration,
    /// Backoff for retries: base doubled per attempt, capped.
    #[serde(deserialize_with = "values::duration")]
    pub retry_base: Duration,
    #[serde(deserialize_with = "values::duration")]
    pub retry_max: Duration,
    /// How often slots are reconciled with the database's submitted units.
    #[serde(deserialize_with = "values::duration")]
    pub reconcile_interval: Duration,
    /// Finalizations running at once (never on provider slots).
    pub finalize_concurrency: usize,
    /// How long a finalizer's lease lasts before another may take the unit over (a dead
    /// finalizer's); a live one renews it every third of this while it downloads.
    #[serde(deserialize_with = "values::duration")]
    pub finalize_lease: Duration,
    /// Finalization attempts before giving up: the unit then stays `succeeded` with the
    /// reason, until `POST /v1/tasks/{id}/retry` finalizes it again.
    pub finalize_attempts: u32,
    /// How long a drained provider account (credentials refused, balance exhausted) rests
    /// before one unit is submitted to it as a probe; doubled after each refused probe, up to
    /// twenty times this.
    #[serde(deserialize_with = "values::duration")]
    pub account_probe: Duration,
    /// The lowest limit the provider's capacity refusals can bring a slot set to.
    pub capacity_floor: u32,
    /// After refusals set a capacity ceiling below the configured limit: the wait before one
    /// create above it is tried; doubled after each refused probe, up to `capacity_probe_max`.
    #[serde(deserialize_with = "values::duration")]
    pub capacity_probe: Duration,
    /// The longest wait between capacity probes, and how long a level the provider accepted
    /// counts as recent (a refusal at such a level is noise: it costs one request).
    #[serde(deserialize_with = "values::duration")]
    pub capacity_probe_max: Duration,
    /// How often the limits and usage a provider publishes are read again (handlers with the
    /// contract 1.3 `provider` export; also after a capacity or quota refusal, at most every
    /// `min_rest`).
    #[serde(deserialize_with = "values::duration")]
    pub limits_refresh: Duration,
    /// A pool lease's lifetime (with Redis): renewed every third of it; a dead scheduler's
    /// pools are taken over within one lease period (a stopped one's at once).
    #[serde(deserialize_with = "values::duration")]
    pub lease_ttl: Duration,
    /// Largest artifact a finalization downloads. Not a file key.
    #[serde(skip)]
    pub artifact_max_bytes: u64,
    /// Timeout of one artifact download (the whole stream). Not a file key.
    #[serde(skip)]
    pub artifact_timeout: Duration,
    /// With provider callbacks on, polling is only the safety net: a running unit is polled
    /// at most this often. `None` (no public URL): poll on the normal schedule. Set from
    /// `poll_max` when slotd has a public URL ([`super::Config::finish`]). Not a file key.
    #[serde(skip)]
    pub callback_safety_poll: Option<Duration>,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            tick_interval: TICK_INTERVAL_DEFAULT,
            min_rest: MIN_REST_DEFAULT,
            poll_initial: POLL_INITIAL_DEFAULT,
            poll_max: POLL_MAX_DEFAULT,
            poll_factor: POLL_FACTOR_DEFAULT,
            max_batch: MAX_BATCH_DEFAULT,
            retry_budget: RETRY_BUDGET_DEFAULT,
            stage_deadline: STAGE_DEADLINE_DEFAULT,
            retry_base: RETRY_BASE_DEFAULT,
            retry_max: RETRY_MAX_DEFAULT,
            reconcile_interval: RECONCILE_INTERVAL_DEFAULT,
            finalize_concurrency: FINALIZE_CONCURRENCY_DEFAULT,
            finalize_lease: FINALIZE_LEASE_DEFAULT,
            finalize_attempts: FINALIZE_ATTEMPTS_DEFAULT,
            account_probe: ACCOUNT_PROBE_DEFAULT,
            capacity_floor: 1,
            capacity_probe: CAPACITY_PROBE_DEFAULT,
            capacity_probe_max: CAPACITY_PROBE_MAX_DEFAULT,
            limits_refresh: LIMITS_REFRESH_DEFAULT,
            lease_ttl: LEASE_TTL_DEFAULT,
            artifact_max_bytes: ARTIFACT_MAX_BYTES_DEFAULT,
            artifact_timeout: ARTIFACT_TIMEOUT_DEFAULT,
            callback_safety_poll: None,
        }
    }
}

/// A field of [`SchedulerConfig`], to read or write it.
type Field = fn(&mut SchedulerConfig) -> &mut Duration;

/// The timings that follow the tick interval, by their file key (`[scheduler]`). Scaled from
/// their defaults by the tick's ratio to [`TICK_INTERVAL_DEFAULT`], so a 50 ms tick keeps the
/// seed's rhythm: 10 ms rests, 25 ms → 150 ms polls.
pub(super) const TICK_SCALED: [(&str, Field); 11] = [
    ("account_probe", |s| &mut s.account_probe),
    ("capacity_probe", |s| &mut s.capacity_probe),
    ("capacity_probe_max", |s| &mut s.capacity_probe_max),
    ("limits_refresh", |s| &mut s.limits_refresh),
    ("min_rest", |s| &mut s.min_rest),
    ("poll_initial", |s| &mut s.poll_initial),
    ("poll_max", |s| &mut s.poll_max),
    ("retry_base", |s| &mut s.retry_base),
    ("retry_max", |s| &mut s.retry_max),
    ("reconcile_interval", |s| &mut s.reconcile_interval),
    ("finalize_lease", |s| &mut s.finalize_lease),
];

impl SchedulerConfig {
    /// Scale every time-based setting for a given tick interval, keeping the seed's ratios
    /// (10 s tick, 2 s rest, 5 s → 30 s polls). What `SLOTD_TICK_INTERVAL` alone gives.
    pub fn scaled_to(tick: Duration) -> Self {
        let mut s = SchedulerConfig {
            tick_interval: tick,
            ..SchedulerConfig::default()
        };
        s.follow_tick(&|_| false);
        s
    }

    /// Set the timings of [`TICK_SCALED`] that `explicit` (the file's `[scheduler]` keys)
    /// does not name to their defaults scaled to `tick_interval`. At the default tick this
    /// leaves them at their defaults.
    pub(super) fn follow_tick(&mut self, explicit: &dyn Fn(&str) -> bool) {
        let ratio = self.tick_interval.as_secs_f64() / TICK_INTERVAL_DEFAULT.as_secs_f64();
        let mut defaults = SchedulerConfig::default();
        for (key, field) in TICK_SCALED {
            if !explicit(key) {
                let scaled = field(&mut defaults).as_secs_f64() * ratio;
                // A tick of centuries saturates instead of panicking.
                *field(self) = Duration::try_from_secs_f64(scaled).unwrap_or(Duration::MAX);
            }
        }
        if !explicit("finalize_lease") {
            self.finalize_lease = self.finalize_lease.max(SCALED_FINALIZE_LEASE_MIN);
        }
    }

    /// Check values that parse but make no sense, naming the key. A unit must outlive at least
    /// one handler call, hence `call_deadline`.
    pub(super) fn validate(&self, call_deadline: Duration) -> anyhow::Result<()> {
        if self.tick_interval < Duration::from_millis(1) {
            bail!("scheduler.tick_interval must be at least 1ms");
        }
        if self.poll_initial.is_zero() || self.poll_max < self.poll_initial {
            bail!("scheduler.poll_initial must be > 0 and scheduler.poll_max >= poll_initial");
        }
        if !(1.0..=10.0).contains(&self.poll_factor) {
            bail!(
                "scheduler.poll_factor must be between 1.0 and 10.0, got {}",
                self.poll_factor
            );
        }
        if self.capacity_floor == 0 {
            bail!("scheduler.capacity_floor must be at least 1");
        }
        if self.capacity_probe.is_zero() || self.capacity_probe_max < self.capacity_probe {
            bail!(
                "scheduler.capacity_probe must be > 0 and scheduler.capacity_probe_max >= \
                 capacity_probe"
            );
        }
        if self.max_batch == 0 {
            bail!("scheduler.max_batch must be at least 1");
        }
        if self.lease_ttl < Duration::from_millis(100) {
            bail!("scheduler.lease_ttl must be at least 100ms");
        }
        if self.stage_deadline <= call_deadline {
            bail!(
                "scheduler.stage_deadline ({:?}) must be longer than limits.call_deadline ({:?}): \
                 a unit must outlive at least one handler call",
                self.stage_deadline,
                call_deadline
            );
        }
        if self.finalize_concurrency == 0 {
            bail!("scheduler.finalize_concurrency must be at least 1");
        }
        // Renewed every third of itself while a download streams: not a busy loop.
        if self.finalize_lease < Duration::from_millis(100) {
            bail!("scheduler.finalize_lease must be at least 100ms");
        }
        Ok(())
    }
}
