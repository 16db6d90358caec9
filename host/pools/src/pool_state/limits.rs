//! Which pools exist and how many slots each has: the operator's `[pools]` settings win over
//! what handlers propose; a pool a stage names without a proposal gets one slot until the
//! operator says otherwise.

use std::collections::BTreeMap;

use serde::Serialize;

use slotd_core::config::Config;
use slotd_runtime::Registry;

use super::source::SOURCE_CONFIG;

/// A pool's effective limit and who uses it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PoolLimit {
    pub name: String,
    pub max_slots: u32,
    /// Where `max_slots` comes from: `config` (the operator's, or the handler's proposal) or
    /// `discovered` (the provider published less; see `discovered.rs`).
    #[serde(skip)]
    pub max_slots_source: &'static str,
    /// Task types (of loaded handlers) whose current stage may occupy this pool.
    pub task_types: Vec<String>,
    /// Handlers that declared or use this pool.
    pub handlers: Vec<String>,
    /// The provider accounts it draws on: `[[handlers.NAME.accounts]]` of its handler, or one
    /// implicit account (name `None`) holding the whole limit.
    pub accounts: Vec<PoolAccount>,
    /// Its quotas on creates (`[pools."NAME"] rate`, `daily`).
    #[serde(skip)]
    pub quotas: Vec<super::PoolQuota>,
    /// What its creates may cost per period (`[pools."NAME"] spend`).
    #[serde(skip)]
    pub spend: Option<slotd_core::config::BudgetConfig>,
}

/// One account's share of a pool.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PoolAccount {
    /// `None`: the handler's implicit account (its section's own settings).
    pub name: Option<String>,
    /// The handler whose account this is (`None` for a pool no loaded handler uses).
    pub handler: Option<String>,
    pub max_slots: u32,
    /// `config` or `discovered`, as for the pool.
    #[serde(skip)]
    pub max_slots_source: &'static str,
    /// The account's own quotas on creates in this pool (`[[handlers.NAME.accounts]]` `rate`,
    /// `daily`); the implicit account has none beyond the pool's.
    #[serde(skip)]
    pub quotas: Vec<super::PoolQuota>,
    /// What the account's creates may cost per period, over every pool it serves
    /// (`[[handlers.NAME.accounts]] spend`); `None` for the implicit account.
    #[serde(skip)]
    pub spend: Option<slotd_core::config::BudgetConfig>,
    /// The provider account whose limit this slot set shares with other pools'
    /// (`[provider_accounts.NAME]`), and which member it is.
    #[serde(skip)]
    pub share: Option<AccountShare>,
}

/// A slot set's place on a shared provider account.
#[derive(Clone, Debug, PartialEq)]
pub struct AccountShare {
    pub account: std::sync::Arc<slotd_coord::slots::SharedAccount>,
    pub this: usize,
}

impl AccountShare {
    /// What a grant on this slot set passes to the slot store.
    pub fn on(&self) -> slotd_coord::slots::OnShared<'_> {
        slotd_coord::slots::OnShared {
            account: &self.account,
            this: self.this,
        }
    }

    /// This member's share.
    pub fn mine(&self) -> Option<&slotd_coord::slots::Share> {
        self.account.members.get(self.this)
    }
}

/// Every provider account shared by pools, built from `[provider_accounts]`: each share's slot
/// set is its pool's own (the handler's implicit account) or `pool@account`.
pub fn shared_accounts(
    config: &Config,
) -> BTreeMap<String, std::sync::Arc<slotd_coord::slots::SharedAccount>> {
    config
        .provider_accounts
        .iter()
        .map(|(name, a)| {
            let members = a
                .pools
                .iter()
                .map(|(pool, share)| slotd_coord::slots::Share {
                    key: slot_key(pool, share.account.as_deref()),
                    pool: pool.clone(),
                    min: share.min,
                    max: share.max_of(a.max_slots),
                })
                .collect();
            (
                name.clone(),
                std::sync::Arc::new(slotd_coord::slots::SharedAccount {
                    name: name.clone(),
                    limit: a.max_slots,
                    members,
                }),
            )
        })
        .collect()
}

/// The shared account slot set `key` is on, if any.
fn share_of(
    shared: &BTreeMap<String, std::sync::Arc<slotd_coord::slots::SharedAccount>>,
    key: &str,
) -> Option<AccountShare> {
    shared.values().find_map(|a| {
        a.member(key).map(|this| AccountShare {
            account: a.clone(),
            this,
        })
    })
}

impl PoolAccount {
    /// The slot set this account's units of `pool` hold.
    pub fn slot_key(&self, pool: &str) -> String {
        slot_key(pool, self.name.as_deref())
    }

    /// The name its health is kept under: its own, or `default` for the implicit account.
    pub fn health_name(&self) -> &str {
        self.name
            .as_deref()
            .unwrap_or(super::accounts::IMPLICIT_ACCOUNT)
    }
}

/// The slot set of `account`'s units in `pool`: the pool's own for the implicit account (so a
/// configuration without accounts keeps its slot sets), `pool@account` otherwise.
pub fn slot_key(pool: &str, account: Option<&str>) -> String {
    match account {
        None => pool.to_string(),
        Some(a) => format!("{pool}@{a}"),
    }
}

/// Every pool known from configuration and loaded handlers.
pub fn pool_limits(config: &Config, registry: &Registry) -> BTreeMap<String, PoolLimit> {
    let mut proposed: BTreeMap<String, u32> = BTreeMap::new();
    let mut out: BTreeMap<String, PoolLimit> = BTreeMap::new();
    let entry = |out: &mut BTreeMap<String, PoolLimit>, name: &str| {
        out.entry(name.to_string())
            .or_insert_with(|| PoolLimit {
                name: name.to_string(),
                max_slots: 1,
                max_slots_source: SOURCE_CONFIG,
                task_types: Vec::new(),
                handlers: Vec::new(),
                accounts: Vec::new(),
                quotas: super::quotas::configured(config, name),
                spend: config.pools.get(name).and_then(|c| c.spend),
            })
            .name
            .len()
    };
    for name in config.pools.keys() {
        entry(&mut out, name);
    }
    for h in registry.all() {
        for p in &h.info.pools {
            proposed.insert(p.name.clone(), p.default_max_slots);
            entry(&mut out, &p.name);
            push_unique(&mut out, &p.name, None, Some(&h.info.name));
        }
        for t in &h.info.task_types {
            for s in &t.stages {
                for pool in std::iter::once(&s.pool).chain(&s.alt_pools) {
                    entry(&mut out, pool);
                    push_unique(&mut out, pool, Some(&t.name), Some(&h.info.name));
                }
            }
        }
    }
    let shared = shared_accounts(config);
    for (name, p) in out.iter_mut() {
        p.max_slots = config.pool_max(name, proposed.get(name).copied().unwrap_or(1));
        // The accounts of the first of its handlers that has any: a pool drawn on by accounts
        // belongs to one handler (README "Several accounts per pool").
        let accounts = p.handlers.iter().find_map(|h| {
            config
                .handlers
                .get(h)
                .filter(|c| !c.accounts.is_empty())
                .map(|c| (h, &c.accounts))
        });
        p.accounts = match accounts {
            Some((h, accounts)) => {
                let sum: u32 = accounts.iter().map(|a| a.max_slots).sum();
                // An explicit `[pools."NAME"] max_slots` still caps the pool.
                p.max_slots = config
                    .pools
                    .get(name)
                    .and_then(|c| c.max_slots)
                    .map_or(sum, |m| m.min(sum));
                accounts
                    .iter()
                    .map(|a| PoolAccount {
                        name: Some(a.name.clone()),
                        handler: Some(h.clone()),
                        max_slots: a.max_slots,
                        max_slots_source: SOURCE_CONFIG,
                        quotas: super::quotas::of_account(a),
                        spend: a.spend,
                        share: None,
                    })
                    .collect()
            }
            None => vec![PoolAccount {
                name: None,
                handler: p.handlers.first().cloned(),
                max_slots: p.max_slots,
                max_slots_source: SOURCE_CONFIG,
                quotas: Vec::new(),
                spend: None,
                share: None,
            }],
        };
        if !shared.is_empty() {
            on_shared_accounts(config, name, p, &shared);
        }
    }
    out
}

/// Place the pool's slot sets on the provider accounts they share: each such set holds at
/// most its share's `max` (and, for a named handler account, that account's `max_slots`; an
/// explicit `[pools."NAME"] max_slots` still caps the pool), and the pool's capacity is the
/// sum again.
fn on_shared_accounts(
    config: &Config,
    name: &str,
    p: &mut PoolLimit,
    shared: &BTreeMap<String, std::sync::Arc<slotd_coord::slots::SharedAccount>>,
) {
    let mut any = false;
    for a in &mut p.accounts {
        let Some(share) = share_of(shared, &a.slot_key(name)) else {
            continue;
        };
        let max = share.mine().map_or(a.max_slots, |m| m.max);
        a.max_slots = match a.name {
            Some(_) => a.max_slots.min(max),
            None => max,
        };
        a.share = Some(share);
        any = true;
    }
    if any {
        let sum: u32 = p.accounts.iter().map(|a| a.max_slots).sum();
        p.max_slots = config
            .pools
            .get(name)
            .and_then(|c| c.max_slots)
            .map_or(sum, |m| m.min(sum))
            .max(1);
    }
}

fn push_unique(
    out: &mut BTreeMap<String, PoolLimit>,
    pool: &str,
    task_type: Option<&str>,
    handler: Option<&str>,
) {
    if let Some(p) = out.get_mut(pool) {
        if let Some(t) = task_type
            && !p.task_types.iter().any(|x| x == t)
        {
            p.task_types.push(t.to_string());
        }
        if let Some(h) = handler
            && !p.handlers.iter().any(|x| x == h)
        {
            p.handlers.push(h.to_string());
        }
    }
}
