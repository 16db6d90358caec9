//! Tenants' reservations of a pool (`[tenants.NAME] min_slots`, docs/accounts-deadlines-
//! budgets.md "Tenant guarantees"): what each still lacks. The fill takes them first
//! (`scheduler::shares`) and the ETA counts them ahead (`api::task_eta`), from the same
//! reading.

use std::collections::BTreeMap;

use slotd_core::config::Config;

/// Each tenant's share of `pool`: (`min_slots`, `max_slots`), for tenants that set either.
pub fn configured(config: &Config, pool: &str) -> BTreeMap<String, (u32, Option<u32>)> {
    config
        .tenants
        .iter()
        .filter_map(|(name, t)| {
            let min = t.min_slots.get(pool).copied();
            let max = t.max_slots.get(pool).copied();
            (min.is_some() || max.is_some()).then(|| (name.clone(), (min.unwrap_or(0), max)))
        })
        .collect()
}

/// The reservations still lacking, in name order: for each tenant with a `min_slots` (capped
/// by its `max_slots`) and pending units (`pending`), how many slots it holds fewer than that
/// (`held`); tenants lacking none are left out.
pub fn lacking(
    shares: &BTreeMap<String, (u32, Option<u32>)>,
    held: &BTreeMap<String, u64>,
    pending: &[String],
) -> Vec<(String, u32)> {
    let holds = |t: &str| u32::try_from(held.get(t).copied().unwrap_or(0)).unwrap_or(u32::MAX);
    shares
        .iter()
        .filter(|(t, (min, _))| *min > 0 && pending.contains(t))
        .map(|(t, (min, max))| {
            let want = max.map_or(*min, |m| (*min).min(m));
            (t.clone(), want.saturating_sub(holds(t)))
        })
        .filter(|(_, lacks)| *lacks > 0)
        .collect()
}
