//! Spreading pools across scheduler instances (pure): each instance aims at its share,
//! `ceil(pools / live instances)`, tries free pools in its own shuffled order (so instances
//! starting together do not all race for the same pool first) and gives one pool up per round
//! when it holds more than its share (an instance joined).

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};

/// What a coordinator round should do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// Pools to try to take, in order (stop once the share is reached).
    pub try_take: Vec<String>,
    /// A pool to give up this round.
    pub give_up: Option<String>,
}

/// The most pools one instance should hold: `ceil(pools / live)`, at least one.
pub fn share(pools: usize, live: usize) -> usize {
    pools.div_ceil(live.max(1)).max(1)
}

/// The round's placement for the instance `owner` holding `held` among `pools`, with `live`
/// instances alive.
pub fn place(owner: &str, pools: &[String], held: &BTreeSet<String>, live: usize) -> Placement {
    let share = share(pools.len(), live);
    let mut out = Placement::default();
    if held.len() > share {
        // Give up the pool latest in this instance's order: the others' orders differ, so
        // the pool goes to someone for whom it ranks early.
        out.give_up = shuffled(owner, held.iter().cloned().collect()).pop();
    } else if held.len() < share {
        out.try_take = shuffled(
            owner,
            pools
                .iter()
                .filter(|p| !held.contains(*p))
                .cloned()
                .collect(),
        );
    }
    out
}

/// `pools` in an order that is stable for one owner and differs between owners.
fn shuffled(owner: &str, mut pools: Vec<String>) -> Vec<String> {
    pools.sort_by_key(|p| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        owner.hash(&mut h);
        p.hash(&mut h);
        h.finish()
    });
    pools
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pools(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("p{i}")).collect()
    }

    #[test]
    fn share_is_ceil_of_pools_per_instance() {
        assert_eq!(share(2, 2), 1);
        assert_eq!(share(3, 2), 2);
        assert_eq!(share(5, 1), 5);
        assert_eq!(share(1, 4), 1);
        assert_eq!(share(0, 0), 1);
    }

    #[test]
    fn below_share_tries_the_unheld_pools() {
        let held: BTreeSet<String> = ["p1".to_string()].into();
        let p = place("a", &pools(4), &held, 2);
        assert_eq!(p.give_up, None);
        assert_eq!(p.try_take.len(), 3);
        assert!(!p.try_take.contains(&"p1".to_string()));
    }

    #[test]
    fn above_share_gives_one_up_and_at_share_does_nothing() {
        let all = pools(4);
        let held: BTreeSet<String> = all.iter().cloned().collect();
        let p = place("a", &all, &held, 2);
        assert!(p.try_take.is_empty());
        assert!(p.give_up.is_some());
        let two: BTreeSet<String> = all[..2].iter().cloned().collect();
        assert_eq!(place("a", &all, &two, 2), Placement::default());
    }

    #[test]
    fn owners_order_pools_differently() {
        let all = pools(8);
        let none = BTreeSet::new();
        let a = place("owner-a", &all, &none, 1).try_take;
        let b = place("owner-b", &all, &none, 1).try_take;
        assert_eq!(a.len(), 8);
        assert_ne!(
            a, b,
            "two owners should not race for pools in the same order"
        );
    }
}
