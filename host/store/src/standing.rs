//! Where a task's waiting units stand in their pool's fill order ([`QueueStanding`]), with
//! tenants' reservations (docs/accounts-deadlines-budgets.md "Tenant guarantees").

use std::collections::BTreeMap;

/// Where a task's waiting units stand in their pool's fill order (priority first, then
/// round-robin across tenants, FIFO within one), for the estimate `GET /v1/tasks/{id}` gives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueStanding {
    /// The pool of the task's pending units (of its submitted ones when none is pending).
    pub pool: String,
    /// The task's pending units in `pool`.
    pub pending: u64,
    /// Pending units of the pool filled before the task's first pending unit.
    pub ahead_first: u64,
    /// Pending units of the pool filled before the task's last pending unit.
    pub ahead_last: u64,
    /// Every unit of the pool holding a slot now: its submit time and whether it is the task's.
    pub running: Vec<(i64, bool)>,
    /// The task's tenant, and the 0-based ranks of its first and last pending unit among its
    /// tenant's pending units of the same priority (FIFO).
    pub tenant: String,
    pub rank_first: u64,
    pub rank_last: u64,
    /// Pending units of the pool at a higher priority.
    pub higher: u64,
    /// Other tenants' pending units at the task's priority, per tenant (name order).
    pub others: Vec<(String, u64)>,
}

impl QueueStanding {
    /// Units filled before the task's unit at `rank` of its tenant: the higher priorities,
    /// then round-robin across tenants (each other tenant's units up to the same rank; at
    /// equal rank half of them, the turn order being unknown), the tenant's own before it.
    ///
    /// `lacks`: tenants' reservations (`min_slots`) not yet held, in this pool, for tenants
    /// with pending units. The fill takes them first, tenant by tenant in name order, before
    /// the round-robin: a unit within its tenant's reservation waits only for the
    /// reservations named before its tenant's; a unit beyond it waits for every reservation,
    /// then for the round-robin of the rest.
    pub fn ahead_at(&self, rank: u64, lacks: &BTreeMap<String, u64>) -> u64 {
        let reserved_of =
            |tenant: &str, pending: u64| lacks.get(tenant).copied().unwrap_or(0).min(pending);
        let own_total = self.rank_last.saturating_add(1).max(rank.saturating_add(1));
        let own_reserved = lacks.get(&self.tenant).copied().unwrap_or(0);
        if rank < own_reserved {
            let before: u64 = self
                .others
                .iter()
                .filter(|(t, _)| t.as_str() < self.tenant.as_str())
                .map(|(t, c)| reserved_of(t, *c))
                .sum();
            return before + rank;
        }
        let reserved: u64 = self
            .others
            .iter()
            .map(|(t, c)| reserved_of(t, *c))
            .sum::<u64>()
            + own_reserved.min(own_total);
        let r = rank - own_reserved;
        let mut ahead = reserved + self.higher + r;
        let mut ties = 0;
        for (t, c) in &self.others {
            let c = c - reserved_of(t, *c);
            ahead += c.min(r);
            ties += u64::from(c > r);
        }
        ahead + ties / 2
    }

    /// Recompute `ahead_first` and `ahead_last` with tenants' unfilled reservations (see
    /// [`QueueStanding::ahead_at`]).
    pub fn with_reservations(mut self, lacks: &BTreeMap<String, u64>) -> Self {
        if self.pending > 0 {
            self.ahead_first = self.ahead_at(self.rank_first, lacks);
            self.ahead_last = self.ahead_at(self.rank_last, lacks);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tenant `b`'s task: its units at ranks 0..=3 of `b`; `a` and `c` have 6 pending each.
    fn standing() -> QueueStanding {
        QueueStanding {
            pool: "p".into(),
            pending: 4,
            tenant: "b".into(),
            rank_first: 0,
            rank_last: 3,
            others: vec![("a".into(), 6), ("c".into(), 6)],
            ..QueueStanding::default()
        }
    }

    #[test]
    fn without_reservations_tenants_take_turns() {
        let s = standing().with_reservations(&BTreeMap::new());
        // First unit: half of the two others' first units (turn order unknown).
        assert_eq!(s.ahead_first, 1);
        // Last unit (rank 3): 3 of its own, 3 of each other, half of their 4th.
        assert_eq!(s.ahead_last, 3 + 3 + 3 + 1);
    }

    #[test]
    fn a_reservation_puts_its_tenants_units_first() {
        // b reserves 4 it lacks: its four units go in the reservation pass, after a's 2.
        let lacks = BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 4)]);
        let s = standing().with_reservations(&lacks);
        assert_eq!(
            s.ahead_first, 2,
            "only a's reservation, named before b, is ahead"
        );
        assert_eq!(s.ahead_last, 2 + 3);
    }

    #[test]
    fn others_reservations_go_before_the_round_robin() {
        // c reserves 5: five of c's units go before any of b's, and c has 1 left for turns.
        let lacks = BTreeMap::from([("c".to_string(), 5)]);
        let s = standing().with_reservations(&lacks);
        // b's first: c's 5, then half of the ties (a has one at rank 0, c has one left).
        assert_eq!(s.ahead_first, 5 + 1);
        // b's rank 3: c's 5, 3 own, a's 3, c's remaining 1 (one tie: none counted).
        assert_eq!(s.ahead_last, 5 + 3 + 3 + 1);
    }
}
