//! Limits discovered from the provider (contract 1.3 `provider.limits`): what a handler reads
//! from its provider's account endpoint (Runway's `GET /v1/organization`), per pool and account.
//!
//! The lower of a configured and a discovered limit is in force, for slots and for each quota
//! dimension: the operator may keep slotd below what the provider allows (other clients share
//! the account), and the provider's own number is the ceiling it enforces anyway. A discovered
//! quota also says how many creates the provider counts in its window; those slotd's own create
//! log does not hold (other clients of the key, creates before a restart) are taken off the
//! room, so a pool starts a day knowing what it has left. `GET /v1/pools` shows which source is
//! in force.
//!
//! Read by the scheduler process when a handler loads, every `[scheduler] limits_refresh`, and
//! after a capacity or quota refusal ([`Discovered::ask_again`]); kept in memory.

use std::collections::{BTreeMap, HashMap};

use parking_lot::RwLock;
use slotd_core::config::{Quota, Window};
use slotd_runtime::DiscoveredLimits;

use super::source::SOURCE_DISCOVERED;
use super::{PoolLimit, PoolQuota};

/// What a pool's account publishes, as last read.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    pub max_slots: Option<u32>,
    pub quotas: Vec<FoundQuota>,
    /// When it was read (Unix ms).
    pub at: i64,
}

/// One published quota, with the creates the provider counts beyond slotd's own log.
#[derive(Clone, Debug, PartialEq)]
pub struct FoundQuota {
    pub dimension: &'static str,
    pub limit: u32,
    pub window_ms: u64,
    /// Creates in the window the provider counts and slotd's create log did not (at `at`).
    pub others: u32,
}

/// Discovered limits by (pool, account), and the wish to read them again.
#[derive(Default, Debug)]
pub struct Discovered {
    by: RwLock<HashMap<(String, Option<String>), Found>>,
    /// Notified after a refusal: the discovery loop reads again soon.
    pub notify: tokio::sync::Notify,
    /// When a process that runs no scheduler last read the cluster's (Unix ms).
    pub pulled_at: std::sync::atomic::AtomicI64,
}

impl Discovered {
    /// Record what the provider published for `account` in `pool`.
    pub fn record(&self, pool: &str, account: Option<&str>, found: Found) {
        self.by
            .write()
            .insert((pool.to_string(), account.map(str::to_string)), found);
    }

    /// Replace everything known with `all` (pool, account, found): a process that runs no
    /// scheduler takes the cluster's view whole (`discovered_shared`).
    pub fn replace_all(&self, all: Vec<(String, Option<String>, Found)>) {
        let mut by = self.by.write();
        by.clear();
        for (pool, account, found) in all {
            by.insert((pool, account), found);
        }
    }

    pub fn get(&self, pool: &str, account: Option<&str>) -> Option<Found> {
        self.by
            .read()
            .get(&(pool.to_string(), account.map(str::to_string)))
            .cloned()
    }

    /// A refusal suggests the limits changed: read them again soon.
    pub fn ask_again(&self) {
        self.notify.notify_one();
    }

    /// Apply the discovered limits to configured ones: the lower of each is in force.
    pub fn apply(&self, limits: &mut BTreeMap<String, PoolLimit>) {
        let by = self.by.read();
        if by.is_empty() {
            return;
        }
        for (name, p) in limits.iter_mut() {
            let mut changed = false;
            for a in &mut p.accounts {
                let Some(found) = by.get(&(name.clone(), a.name.clone())) else {
                    continue;
                };
                if let Some(m) = found.max_slots
                    && m < a.max_slots
                {
                    a.max_slots = m;
                    a.max_slots_source = SOURCE_DISCOVERED;
                    changed = true;
                }
                let quotas = if a.name.is_none() {
                    &mut p.quotas
                } else {
                    &mut a.quotas
                };
                for q in &found.quotas {
                    merge(quotas, q);
                }
            }
            if changed {
                let sum: u32 = p.accounts.iter().map(|a| a.max_slots).sum();
                if sum < p.max_slots {
                    p.max_slots = sum;
                    p.max_slots_source = SOURCE_DISCOVERED;
                }
            }
        }
    }
}

/// Put a discovered quota beside the configured ones: it replaces a configured one of the same
/// dimension when its room is smaller, else it is added when there is none.
fn merge(quotas: &mut Vec<PoolQuota>, q: &FoundQuota) {
    let window = Window::Rolling(std::time::Duration::from_millis(q.window_ms));
    let found = PoolQuota {
        dimension: q.dimension,
        quota: Quota {
            limit: q.limit.saturating_sub(q.others),
            window,
        },
        source: SOURCE_DISCOVERED,
        others: q.others,
    };
    match quotas.iter_mut().find(|c| c.dimension == q.dimension) {
        Some(c) if found.quota.limit < c.quota.limit => *c = found,
        Some(_) => {}
        None => quotas.push(found),
    }
}

/// What a handler's answer means for one pool, given slotd's own create counts in each quota's
/// window (`own(window_ms)`).
pub fn found_of(limits: &DiscoveredLimits, at: i64, own: impl Fn(u64) -> u32) -> Found {
    Found {
        max_slots: limits.max_slots.filter(|m| *m > 0),
        quotas: limits
            .quotas
            .iter()
            .map(|q| FoundQuota {
                dimension: q.dimension,
                limit: q.limit,
                window_ms: q.window_ms,
                others: q.used.unwrap_or(0).saturating_sub(own(q.window_ms)),
            })
            .collect(),
        at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool_state::PoolAccount;
    use crate::pool_state::source::SOURCE_CONFIG;

    fn pool(max: u32, quotas: Vec<PoolQuota>) -> BTreeMap<String, PoolLimit> {
        let mut m = BTreeMap::new();
        m.insert(
            "p".to_string(),
            PoolLimit {
                name: "p".into(),
                max_slots: max,
                max_slots_source: SOURCE_CONFIG,
                task_types: vec![],
                handlers: vec![],
                accounts: vec![PoolAccount {
                    name: None,
                    handler: None,
                    max_slots: max,
                    max_slots_source: SOURCE_CONFIG,
                    quotas: vec![],
                    spend: None,
                    share: None,
                }],
                quotas,
                spend: None,
            },
        );
        m
    }

    #[test]
    fn the_lower_limit_is_in_force_and_others_creates_take_room() {
        let d = Discovered::default();
        let mut limits = pool(5, vec![]);
        d.apply(&mut limits);
        assert_eq!(
            limits["p"].max_slots, 5,
            "nothing discovered: configuration"
        );
        d.record(
            "p",
            None,
            Found {
                max_slots: Some(3),
                quotas: vec![FoundQuota {
                    dimension: "daily",
                    limit: 10,
                    window_ms: 86_400_000,
                    others: 4,
                }],
                at: 0,
            },
        );
        d.apply(&mut limits);
        let p = &limits["p"];
        assert_eq!((p.max_slots, p.max_slots_source), (3, SOURCE_DISCOVERED));
        assert_eq!(p.accounts[0].max_slots, 3);
        assert_eq!(p.quotas.len(), 1);
        assert_eq!(p.quotas[0].quota.limit, 6, "10 a day, 4 used by others");
        assert_eq!(p.quotas[0].source, SOURCE_DISCOVERED);
        // A configured limit below the discovered one stays in force.
        let configured = PoolQuota {
            dimension: "daily",
            quota: Quota {
                limit: 2,
                window: Window::Rolling(std::time::Duration::from_secs(86_400)),
            },
            source: SOURCE_CONFIG,
            others: 0,
        };
        let mut limits = pool(2, vec![configured]);
        d.apply(&mut limits);
        assert_eq!(limits["p"].max_slots, 2);
        assert_eq!(limits["p"].max_slots_source, SOURCE_CONFIG);
        assert_eq!(limits["p"].quotas, vec![configured]);
    }

    #[test]
    fn others_are_the_providers_count_beyond_slotds_own() {
        let l = DiscoveredLimits {
            pool: "p".into(),
            max_slots: Some(0),
            quotas: vec![slotd_runtime::DiscoveredQuota {
                dimension: "daily",
                limit: 10,
                window_ms: 1_000,
                used: Some(7),
            }],
        };
        let f = found_of(&l, 5, |_| 3);
        assert_eq!(f.max_slots, None, "zero slots is not a limit to obey");
        assert_eq!(f.quotas[0].others, 4);
        assert_eq!(found_of(&l, 5, |_| 9).quotas[0].others, 0);
    }
}
