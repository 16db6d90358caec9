//! `slotd check`: an online, read-only audit of a slotd database (and optionally its object
//! store and Redis) against the invariants of docs/state-machine.md, docs/unit-journey.md. Seed 002's promise is
//! "diagnose by query"; this is the set of queries that say whether anything is wrong at all.
//!
//! What is checked:
//! - every unit's event log is a legal path of the state machine ending in its status;
//! - no pool ever held more `submitted` units than its maximum, nor an account more than its
//!   own, replayed over the whole unit log (`history.rs`);
//! - no idempotency key was accepted as two provider jobs, no job sits on two units, and no
//!   unit was submitted again without a recorded failure and retry (`history.rs`);
//! - no unit gave up a provider job that still ran: failed on a spent retry budget, or at its
//!   stage deadline without the job cancelled, after the job was accepted (`rules.rs`);
//! - no unit is `finalizing` without a live lease beyond a grace period;
//! - tasks and units agree (units exist, indexes 0..n, no orphan);
//! - every open budget reservation belongs to a `submitted` unit's current submission, one
//!   per unit (a crash between reservation and submit leaves the unit in doubt, still
//!   `submitted`, so its reservation stays accounted for);
//! - no pool's recorded creates (`pool_creates`, kept a day) exceed a `rate` or `daily` quota
//!   in any of its windows, nor an account's its own in any pool;
//! - every published handler release's stored bytes still hash to its key;
//! - with `--objects`: every `completed` unit's artifacts exist with the recorded size and
//!   sha256;
//! - with Redis: each pool's slot holders are its `submitted` units' submissions (a holder of
//!   an earlier submission is a slot nobody will release), and the database's
//!   fencing token never exceeds the token Redis last issued (tokens only grow).
//!
//! # Layout
//! - `read.rs`: loading rows from SQLite or PostgreSQL, read-only.
//! - `rules.rs`: the invariants as pure functions over the rows.
//! - `history.rs`: the rules that replay the unit log in order (slot peaks, resubmits).
//! - `live.rs`: the checks that read another system (object store, Redis).

mod history;
mod live;
mod read;
mod route_rules;
mod rows;
mod rules;

use std::collections::BTreeMap;
use std::time::Duration;

pub use history::SharedCheck;
pub use rows::{EventRow, Finding, ReleaseRow, Snapshot, UnitRow};

/// How long a `finalizing` unit's lease may be past its expiry before it is reported: the
/// finalize loop claims expired leases at its next interval.
pub const FINALIZE_GRACE_DEFAULT: Duration = Duration::from_secs(60);

/// What to check and where.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// `sqlite://…` or `postgres://…`.
    pub database_url: String,
    /// The object store to verify artifacts in (`file://…`, `s3://…`); `None` skips it.
    pub objects: Option<String>,
    /// Redis to compare slot sets and fencing tokens with; `None` skips it.
    pub redis_url: Option<String>,
    /// Key prefix of slotd's Redis keys.
    pub redis_prefix: String,
    /// Each pool's configured maximum; pools not listed are not limit-checked.
    pub pool_limits: BTreeMap<String, u32>,
    /// Each provider account's maximum in each pool it serves, by account name
    /// (`[[handlers.NAME.accounts]] max_slots`); accounts not listed are not limit-checked.
    pub account_limits: BTreeMap<String, u32>,
    /// Provider accounts whose limit spans pools (`[provider_accounts.NAME]`), by name.
    pub shared_accounts: BTreeMap<String, history::SharedCheck>,
    /// Each pool's quotas on creates (`rate`, `daily`); pools not listed are not checked.
    pub pool_quotas: BTreeMap<String, Vec<slotd_core::config::Quota>>,
    /// Each provider account's own quotas, by account name, checked in every pool its creates
    /// were recorded in (`[[handlers.NAME.accounts]]` `rate`, `daily`).
    pub account_quotas: BTreeMap<String, Vec<slotd_core::config::Quota>>,
    /// See [`FINALIZE_GRACE_DEFAULT`].
    pub finalize_grace: Duration,
    /// "Now" in Unix ms (an injected clock in tests).
    pub now_ms: i64,
}

impl CheckOptions {
    /// What a configuration names, as `slotd check` reads it: its database, object store
    /// (artifacts verified), Redis when it has one, the pools' and accounts' limits and
    /// quotas. An account name two handlers configure differently counts with the larger
    /// maximum and without quotas (the records do not say whose it is).
    pub fn for_config(config: &slotd_core::config::Config, now_ms: i64) -> CheckOptions {
        let mut account_limits = BTreeMap::<String, u32>::new();
        let mut account_quotas = BTreeMap::<String, Vec<slotd_core::config::Quota>>::new();
        let mut ambiguous = std::collections::BTreeSet::new();
        for a in config.handlers.values().flat_map(|h| &h.accounts) {
            let max = account_limits.entry(a.name.clone()).or_default();
            *max = (*max).max(a.max_slots);
            let quotas: Vec<_> = a.rate.into_iter().chain(a.daily).collect();
            if quotas.is_empty() {
                continue;
            }
            match account_quotas.get(&a.name) {
                Some(other) if *other != quotas => {
                    ambiguous.insert(a.name.clone());
                }
                _ => {
                    account_quotas.insert(a.name.clone(), quotas);
                }
            }
        }
        account_quotas.retain(|name, _| !ambiguous.contains(name));
        CheckOptions {
            database_url: config.database_url.clone(),
            objects: Some(config.object_store.clone()),
            redis_url: config.redis_url.clone(),
            redis_prefix: config.redis_prefix.clone(),
            pool_limits: config
                .pools
                .iter()
                .filter_map(|(name, p)| Some((name.clone(), p.max_slots?)))
                .collect(),
            account_limits,
            shared_accounts: config
                .provider_accounts
                .iter()
                .map(|(name, a)| {
                    let members = a
                        .pools
                        .iter()
                        .map(|(pool, share)| {
                            (
                                (pool.clone(), share.account.clone()),
                                share.max_of(a.max_slots),
                            )
                        })
                        .collect();
                    (
                        name.clone(),
                        history::SharedCheck {
                            limit: a.max_slots,
                            members,
                        },
                    )
                })
                .collect(),
            pool_quotas: config
                .pools
                .iter()
                .map(|(name, p)| (name.clone(), p.rate.into_iter().chain(p.daily).collect()))
                .collect(),
            account_quotas,
            finalize_grace: FINALIZE_GRACE_DEFAULT,
            now_ms,
        }
    }
}

/// What a check found, and how much it looked at.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub findings: Vec<Finding>,
    pub tasks: usize,
    pub units: usize,
    pub events: usize,
    /// Artifacts verified in the object store (0 without `--objects`).
    pub objects: usize,
    /// Which optional parts ran ("objects", "redis").
    pub checked: Vec<&'static str>,
}

/// Run every check. Errors are reasons the check could not run (database unreachable, …);
/// what is wrong with the data is in [`Report::findings`].
pub async fn run(opts: &CheckOptions) -> anyhow::Result<Report> {
    let snap = read::snapshot(&opts.database_url).await?;
    let grace = i64::try_from(opts.finalize_grace.as_millis()).unwrap_or(i64::MAX);
    let mut report = Report {
        tasks: snap.tasks.len(),
        units: snap.units.len(),
        events: snap.events.values().map(Vec::len).sum(),
        ..Report::default()
    };
    let f = &mut report.findings;
    f.extend(rules::event_paths(&snap));
    f.extend(history::slot_peaks(
        &snap,
        &opts.pool_limits,
        &opts.account_limits,
    ));
    f.extend(history::shared_peaks(&snap, &opts.shared_accounts));
    f.extend(history::resubmits(&snap));
    f.extend(rules::idempotency(&snap));
    f.extend(rules::abandoned_jobs(&snap));
    f.extend(route_rules::two_providers(&snap));
    f.extend(rules::finalize_leases(&snap, opts.now_ms, grace));
    f.extend(rules::tasks(&snap));
    f.extend(rules::reservations(&snap));
    f.extend(rules::quota_windows(&snap, &opts.pool_quotas));
    f.extend(rules::account_quota_windows(&snap, &opts.account_quotas));
    f.extend(rules::releases(&snap));
    if let Some(url) = &opts.objects {
        let (found, checked) = live::objects(url, &snap).await?;
        report.findings.extend(found);
        report.objects = checked;
        report.checked.push("objects");
    }
    if let Some(url) = &opts.redis_url {
        let found = live::redis(url, &opts.redis_prefix, &opts.database_url, &snap).await?;
        report.findings.extend(found);
        report.checked.push("redis");
    }
    Ok(report)
}
