//! Which pools exist and how many slots each has: the operator's `[pools]` settings win over
//! what handlers propose; a pool a stage names without a proposal gets one slot until the
//! operator says otherwise.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::Config;
use crate::runtime::Registry;

/// A pool's effective limit and who uses it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PoolLimit {
    pub name: String,
    pub max_slots: u32,
    /// Task types (of loaded handlers) whose current stage may occupy this pool.
    pub task_types: Vec<String>,
    /// Handlers that declared or use this pool.
    pub handlers: Vec<String>,
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
                task_types: Vec::new(),
                handlers: Vec::new(),
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
    for (name, p) in out.iter_mut() {
        p.max_slots = config.pool_max(name, proposed.get(name).copied().unwrap_or(1));
    }
    out
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
