//! Routes (docs/routes.md) as the scheduler and the API see them: which pools a route's targets
//! draw on, which routes a pool serves, and how a route's policy picks among the targets that
//! can take a unit now.

use std::collections::{BTreeSet, HashMap};

use slotd_core::config::{Config, RouteConfig, RoutePolicy};
use slotd_core::model::{RouteOption, UnitRouting, route_of_pool};
use slotd_runtime::Registry;

/// The pools the targets of `route` may use: every pool their handlers declare (a target's
/// units go to the pool its handler's `plan-shot` names, one of these).
pub fn target_pools(registry: &Registry, route: &RouteConfig) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for t in &route.targets {
        let Some(h) = registry.by_name(&t.handler) else {
            continue;
        };
        out.extend(h.info.pools.iter().map(|p| p.name.clone()));
        for tt in &h.info.task_types {
            for s in &tt.stages {
                out.insert(s.pool.clone());
                out.extend(s.alt_pools.iter().cloned());
            }
        }
    }
    out
}

/// The pools to wake for `pool`: itself, or, for a route's pool (no loop of its own), its
/// targets' pools.
pub fn pools_to_wake(config: &Config, registry: &Registry, pool: &str) -> Vec<String> {
    match route_of_pool(pool).and_then(|r| config.routes.get(r)) {
        Some(route) => target_pools(registry, route).into_iter().collect(),
        None => vec![pool.to_string()],
    }
}

/// The routes some target of which draws on a pool of `handlers`.
pub fn routes_for_pool<'a>(config: &'a Config, handlers: &[String]) -> Vec<&'a str> {
    config
        .routes
        .iter()
        .filter(|(_, r)| r.targets.iter().any(|t| handlers.contains(&t.handler)))
        .map(|(name, _)| name.as_str())
        .collect()
}

/// What a policy weighs per option: its pool has room, its estimate, its expected duration.
#[derive(Clone, Debug, Default)]
pub struct Candidate {
    pub index: usize,
    pub has_room: bool,
    pub estimate: Option<f64>,
    pub expected_ms: Option<i64>,
    pub weight: u32,
}

/// The option `policy` picks among `candidates` (usable options, in route order) that have
/// room, for unit `unit_id`; `None` when none has room.
pub fn pick(policy: RoutePolicy, unit_id: &str, candidates: &[Candidate]) -> Option<usize> {
    let roomy = candidates.iter().filter(|c| c.has_room);
    let by = |v: Option<f64>| v.unwrap_or(f64::INFINITY);
    match policy {
        RoutePolicy::Ordered => roomy.map(|c| c.index).next(),
        RoutePolicy::Cheapest => roomy
            .min_by(|a, b| by(a.estimate).total_cmp(&by(b.estimate)))
            .map(|c| c.index),
        RoutePolicy::Fastest => roomy
            .min_by_key(|c| c.expected_ms.unwrap_or(i64::MAX))
            .map(|c| c.index),
        RoutePolicy::Weights => {
            let roomy: Vec<&Candidate> = roomy.filter(|c| c.weight > 0).collect();
            let total: u64 = roomy.iter().map(|c| u64::from(c.weight)).sum();
            if total == 0 {
                return None;
            }
            let mut at = spread(unit_id) % total;
            for c in roomy {
                let w = u64::from(c.weight);
                if at < w {
                    return Some(c.index);
                }
                at -= w;
            }
            None
        }
    }
}

/// A stable spread of unit ids (FNV-1a), so a unit's weighted pick does not change between
/// the fills of its targets' pools.
fn spread(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A target's weight under `policy = "weights"` (1 when not configured).
pub fn weight_of(route: &RouteConfig, option: &RouteOption) -> u32 {
    route
        .targets
        .iter()
        .find(|t| t.handler == option.handler && t.model == option.model)
        .and_then(|t| t.weight)
        .unwrap_or(1)
}

/// The candidates of `routing` at `now` (usable options), with `room` telling whether a
/// pool has a free slot and `expected` an option's expected duration. A unit waiting with no
/// target left (every one refused it for good: it failed, and a client retried it) gets every
/// target that planned it again.
pub fn candidates(
    route: &RouteConfig,
    routing: &UnitRouting,
    now: i64,
    room: &HashMap<String, u32>,
    expected: impl Fn(&slotd_core::model::TargetUnit) -> Option<i64>,
) -> Vec<Candidate> {
    let retried = !routing.options.iter().any(RouteOption::open);
    routing
        .options
        .iter()
        .enumerate()
        .filter(|(_, o)| o.usable(now) || (retried && o.plan.is_some()))
        .filter_map(|(index, o)| {
            let plan = o.plan.as_ref()?;
            Some(Candidate {
                index,
                has_room: room.get(&plan.pool).copied().unwrap_or(0) > 0,
                estimate: plan.estimate,
                expected_ms: expected(plan)
                    .or_else(|| plan.expected_ms.and_then(|e| i64::try_from(e).ok())),
                weight: weight_of(route, o),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(index: usize, room: bool, estimate: f64, expected: i64, weight: u32) -> Candidate {
        Candidate {
            index,
            has_room: room,
            estimate: Some(estimate),
            expected_ms: Some(expected),
            weight,
        }
    }

    #[test]
    fn each_policy_picks_among_the_targets_with_room() {
        let all = [
            c(0, true, 5.0, 300, 1),
            c(1, true, 2.0, 100, 1),
            c(2, true, 3.0, 50, 1),
        ];
        assert_eq!(pick(RoutePolicy::Ordered, "u", &all), Some(0));
        assert_eq!(pick(RoutePolicy::Cheapest, "u", &all), Some(1));
        assert_eq!(pick(RoutePolicy::Fastest, "u", &all), Some(2));
        // Without room the next in each policy's order.
        let full = [
            c(0, false, 5.0, 300, 1),
            c(1, false, 2.0, 100, 1),
            c(2, true, 3.0, 50, 1),
        ];
        assert_eq!(pick(RoutePolicy::Ordered, "u", &full), Some(2));
        assert_eq!(pick(RoutePolicy::Cheapest, "u", &full), Some(2));
        let none = [c(0, false, 5.0, 300, 1)];
        assert_eq!(pick(RoutePolicy::Ordered, "u", &none), None);
        assert_eq!(pick(RoutePolicy::Weights, "u", &none), None);
    }

    #[test]
    fn a_retried_unit_every_target_refused_gets_them_all_again() {
        use slotd_core::model::{Refusal, TargetUnit};
        let option = |pool: &str, until: Option<Option<i64>>| RouteOption {
            handler: "h".into(),
            model: pool.into(),
            plan: Some(TargetUnit {
                task_type: "t".into(),
                stage: "main".into(),
                pool: pool.into(),
                spec: "{}".into(),
                state: "{}".into(),
                estimate: None,
                expected_ms: None,
            }),
            refused: until.map(|until| Refusal {
                reason: "failed".into(),
                message: "no".into(),
                at: 0,
                until,
            }),
        };
        let route = RouteConfig {
            policy: RoutePolicy::Ordered,
            targets: Vec::new(),
        };
        let room: HashMap<String, u32> = [("a".to_string(), 1), ("b".to_string(), 1)].into();
        let mut routing = UnitRouting {
            route: "r".into(),
            options: vec![option("a", Some(None)), option("b", Some(Some(50)))],
            bound: None,
        };
        // One target left for good, one for a while: only the second, once its time is over.
        let at = |routing: &UnitRouting, now| -> Vec<usize> {
            candidates(&route, routing, now, &room, |_| None)
                .iter()
                .map(|c| c.index)
                .collect()
        };
        assert!(at(&routing, 10).is_empty());
        assert_eq!(at(&routing, 60), [1]);
        // Both for good (the unit failed; a retry put it back): both again.
        routing.options[1] = option("b", Some(None));
        assert_eq!(at(&routing, 10), [0, 1]);
    }

    #[test]
    fn weights_spread_units_in_proportion() {
        let all = [c(0, true, 1.0, 1, 3), c(1, true, 1.0, 1, 1)];
        let mut n = [0u32; 2];
        for i in 0..4000 {
            if let Some(k) = pick(RoutePolicy::Weights, &format!("unit-{i}"), &all) {
                n[k] += 1;
            }
        }
        // 3:1 within a few percent.
        assert!((2800..3200).contains(&n[0]), "{n:?}");
        // The same unit always gets the same pick.
        assert_eq!(
            pick(RoutePolicy::Weights, "unit-7", &all),
            pick(RoutePolicy::Weights, "unit-7", &all)
        );
    }
}
