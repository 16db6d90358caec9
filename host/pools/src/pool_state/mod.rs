//! The live state of the pools: what the scheduler learns and keeps while it runs, and what
//! the API, the ETAs and `slotd check` read. Its crate sits below the scheduler's, so those readers
//! (and `slotd_units::services::Services`, which holds it) cannot import the scheduler.
//!
//! - [`limits`]: each pool's configured limit and accounts, and the slot set names.
//! - [`capacity`]: the adapted (effective) limit per pool and account (adaptive capacity),
//!   shared through Redis in a cluster.
//! - [`accounts`]: drained provider accounts (credentials refused, balance exhausted) and their
//!   probes.
//! - [`discovered`]: limits the provider publishes (contract 1.3 `provider.limits`); the
//!   lower of a configured and a discovered limit is in force; [`discovered_shared`] shares
//!   them through Redis with processes that run no scheduler.
//! - [`durations`]: the provider's observed job durations per class (and the ones handlers
//!   state before any has ended).
//! - [`quotas`]: pools' `rate` and `daily` quotas on creates, and slot sets closed by a
//!   provider's "not before T".
//! - [`reservations`]: tenants' `min_slots` still lacking (the fill's first grants, the ETA).
//! - [`spend`]: pools' and accounts' `spend` limits (decided by the submit marker).
//! - [`source`]: where a limit in force comes from (`config`, `discovered`).

pub mod accounts;
pub mod capacity;
pub mod discovered;
pub mod discovered_shared;
pub mod durations;
pub mod limits;
pub mod quotas;
pub mod reservations;
pub mod source;
pub mod spend;

pub use accounts::{AccountHealth, Availability, Drain, IMPLICIT_ACCOUNT};
pub use capacity::shared as shared_capacity;
pub use capacity::{Capacity, Observed};
pub use discovered::Discovered;
pub use durations::Durations;
pub use limits::{AccountShare, PoolAccount, PoolLimit, pool_limits, shared_accounts, slot_key};
pub use quotas::{Closure, Closures, Gate, PoolQuota, QuotaView};
pub use spend::SpendView;
