//! Tenants' shares of a pool (docs/accounts-deadlines-budgets.md "Tenant guarantees"):
//! `[tenants.NAME] min_slots` reserves capacity for a tenant while it has pending units in the
//! pool (the fill takes its reservation from its own units first; while it has none the slots
//! are everyone's, and they come back to it only as they free, never by cancelling a running
//! job), and `max_slots` caps what its units hold.
//!
//! Read once per fill from the store (slots held per tenant, pending per tenant), only for a
//! pool some tenant has a share of.

use std::collections::BTreeMap;

use super::Scheduler;
use super::error::SchedulerError;

/// One fill's view of the tenants' shares of its pool.
#[derive(Debug, Default)]
pub(super) struct Shares {
    /// Tenants with a `min_slots` of the pool and pending units, and how many slots their
    /// reservation still lacks, in name order.
    reserved: Vec<(String, u32)>,
    /// Per tenant with a `max_slots`: how many more slots it may take in this fill.
    room: BTreeMap<String, u32>,
    /// Every tenant with pending units in the pool.
    pending: Vec<String>,
}

impl Shares {
    /// From each tenant's share (min, max), the slots it holds and whether it has pending
    /// units.
    pub(super) fn new(
        shares: &BTreeMap<String, (u32, Option<u32>)>,
        held: &BTreeMap<String, u64>,
        pending: Vec<String>,
    ) -> Shares {
        let holds = |t: &str| u32::try_from(held.get(t).copied().unwrap_or(0)).unwrap_or(u32::MAX);
        let reserved = slotd_pools::pool_state::reservations::lacking(shares, held, &pending);
        let room = shares
            .iter()
            .filter_map(|(t, (_, max))| Some((t.clone(), max.as_ref()?.saturating_sub(holds(t)))))
            .collect();
        Shares {
            reserved,
            room,
            pending,
        }
    }

    /// The reservations to fill first: (tenant, slots).
    pub(super) fn reserved(&self) -> Vec<(String, u32)> {
        self.reserved.clone()
    }

    /// The tenants with pending units other than `tenant` (left out of its reservation's
    /// query).
    pub(super) fn others(&self, tenant: &str) -> Vec<String> {
        self.pending
            .iter()
            .filter(|t| t.as_str() != tenant)
            .cloned()
            .collect()
    }

    /// Tenants at their cap.
    pub(super) fn capped(&self) -> Vec<String> {
        self.room
            .iter()
            .filter(|(_, r)| **r == 0)
            .map(|(t, _)| t.clone())
            .collect()
    }

    /// `tenant` was given `n` slots (its reservation): they count against its cap.
    pub(super) fn took(&mut self, tenant: &str, n: u32) {
        if let Some(r) = self.room.get_mut(tenant) {
            *r = r.saturating_sub(n);
        }
    }

    /// Whether one more unit of `tenant` fits under its cap (and count it).
    pub(super) fn take(&mut self, tenant: &str) -> bool {
        match self.room.get_mut(tenant) {
            None => true,
            Some(0) => false,
            Some(r) => {
                *r -= 1;
                true
            }
        }
    }
}

impl Scheduler {
    /// The tenants' shares of `pool` for this fill; `None` when no tenant has one.
    pub(super) async fn shares(&self, pool: &str) -> Result<Option<Shares>, SchedulerError> {
        let s = &self.services;
        let configured = slotd_pools::pool_state::reservations::configured(&s.config, pool);
        if configured.is_empty() {
            return Ok(None);
        }
        let held: BTreeMap<String, u64> = s
            .store
            .unit_count_submitted_by_tenant(pool)
            .await?
            .into_iter()
            .collect();
        let mut pending: Vec<String> = s
            .store
            .unit_pending_groups(pool, i32::MIN)
            .await?
            .into_iter()
            .filter(|g| g.pending > 0)
            .map(|g| g.tenant)
            .collect();
        pending.sort();
        pending.dedup();
        Ok(Some(Shares::new(&configured, &held, pending)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimum_is_reserved_only_while_the_tenant_waits_and_a_cap_counts_down() {
        let shares = BTreeMap::from([
            ("a".to_string(), (4, None)),
            ("b".to_string(), (0, Some(3))),
            ("c".to_string(), (2, Some(2))),
        ]);
        let held = BTreeMap::from([
            ("a".to_string(), 1),
            ("b".to_string(), 2),
            ("c".to_string(), 2),
        ]);
        let mut sh = Shares::new(
            &shares,
            &held,
            vec!["a".into(), "b".into(), "c".into(), "d".into()],
        );
        // a lacks 3 of its 4; c holds its 2; b has no minimum.
        assert_eq!(sh.reserved(), vec![("a".to_string(), 3)]);
        assert_eq!(sh.others("a"), vec!["b", "c", "d"]);
        assert_eq!(sh.capped(), vec!["c"]);
        assert!(sh.take("b"), "b holds 2 of 3");
        assert!(!sh.take("b"), "now 3 of 3");
        assert!(sh.take("d"), "no cap");
        assert_eq!(sh.capped(), vec!["b", "c"]);
        // A reservation given counts against the cap.
        let mut capped_min = Shares::new(
            &BTreeMap::from([("e".to_string(), (3, Some(4)))]),
            &BTreeMap::new(),
            vec!["e".into()],
        );
        assert_eq!(capped_min.reserved(), vec![("e".to_string(), 3)]);
        capped_min.took("e", 3);
        assert!(capped_min.take("e"));
        assert!(!capped_min.take("e"), "3 reserved + 1 = its cap of 4");
        // Without pending units, nothing is reserved: the slots are lent.
        let idle = Shares::new(&shares, &BTreeMap::new(), vec!["b".into()]);
        assert!(idle.reserved().is_empty());
    }
}
