//! Routed units in a target pool's fill (docs/routes.md). A routed unit waits on its route
//! (`route:NAME`); every pool one of the route's targets draws on looks at the route's
//! pending units when it fills, and takes a unit only when the route's policy, among the
//! targets that may take it now (planned, not refused, their pool with room), picks an option
//! in this pool. A unit whose pick is another pool is left for that pool, which is woken and
//! counted as one slot less in this fill's picture, so a burst overflows to the next target
//! instead of all waiting for the first. Taken units are bound with their submit marker
//! (`slotd_store::Bind`).

use std::collections::{BTreeSet, HashMap};

use slotd_core::model::{TargetUnit, UnitRouting, route_pool};
use slotd_store::Bind;

use super::Scheduler;
use super::error::SchedulerError;
use slotd_pools::pool_state::{Availability, Gate, PoolLimit};
use slotd_pools::routing::{candidates, pick, routes_for_pool};

/// How many of a route's pending units one fill reads per free slot (units meant for other
/// targets are passed over).
const READ_PER_SLOT: u32 = 4;
/// At most this many routed units read per route and fill.
const READ_MAX: u32 = 1000;

/// The routes a pool serves and the picture of their other pools' room during one fill.
#[derive(Default)]
pub(super) struct RouteFill {
    routes: Vec<String>,
    /// Free slots per pool (this pool's own is set before each pass).
    room: HashMap<String, u32>,
    /// Pools left units this fill: woken when it ends.
    pub wake: BTreeSet<String>,
}

/// A routed unit taken: the unit as it will be once bound, and its bind.
pub(super) struct Taken {
    pub unit: slotd_core::model::Unit,
    pub bind: Bind,
    pub label: String,
}

impl RouteFill {
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}

impl Scheduler {
    /// The routes `limit`'s pool serves, with the room of every pool their targets use.
    pub(super) async fn route_fill(&self, limit: &PoolLimit, now: i64) -> RouteFill {
        let s = &self.services;
        let routes: Vec<String> = routes_for_pool(&s.config, &limit.handlers)
            .into_iter()
            .map(str::to_string)
            .collect();
        let mut fill = RouteFill {
            routes,
            ..RouteFill::default()
        };
        if fill.is_empty() {
            return fill;
        }
        let limits = slotd_units::pools_now::pool_limits_now(s);
        let mut pools = BTreeSet::new();
        for r in &fill.routes {
            if let Some(route) = s.config.routes.get(r) {
                pools.extend(slotd_pools::routing::target_pools(&s.registry, route));
            }
        }
        for p in pools.into_iter().filter(|p| *p != limit.name) {
            let room = match limits.get(&p) {
                Some(l) => self.room_of(l, now).await,
                None => 0,
            };
            fill.room.insert(p, room);
        }
        fill
    }

    /// A pool's free slots as another pool's fill sees them: its accounts' effective limits
    /// less what they hold, closed and drained accounts none (their probe: one). Quota windows
    /// are left to the pool's own fill.
    async fn room_of(&self, limit: &PoolLimit, now: i64) -> u32 {
        let s = &self.services;
        let mut free = 0u32;
        let mut used_all = 0u32;
        for account in &limit.accounts {
            let key = account.slot_key(&limit.name);
            let max = s.capacity.effective(&key, account.max_slots);
            // A slot set not rebuilt yet (its pool has not ticked since a start or a lost
            // Redis) counts as empty: the unit left for that pool comes back here from its
            // fill if it has no room after all.
            let used = match s.slots.used(&key).await {
                Ok(n) => n,
                Err(slotd_coord::slots::SlotError::NotReconciled(_)) => 0,
                Err(_) => continue,
            };
            used_all = used_all.saturating_add(used);
            let mut f = max.saturating_sub(used);
            match s.closures.gate(&key, now) {
                Gate::Open => {}
                Gate::Closed(true) => f = f.min(1),
                Gate::Closed(false) => f = 0,
            }
            if let Some(handler) = &account.handler {
                f = match s.accounts.availability(handler, account.health_name(), now) {
                    Availability::Open => f,
                    Availability::Drained(true) => f.min(1),
                    Availability::Drained(false) => 0,
                };
            }
            free = free.saturating_add(f);
        }
        free.min(limit.max_slots.saturating_sub(used_all))
    }

    /// Up to `want` pending routed units this pool (`pool`, with `free` slots) takes now, in
    /// their routes' fill order, each in the form it will have once bound.
    pub(super) async fn routed_pending(
        &self,
        pool: &str,
        fill: &mut RouteFill,
        free: u32,
        now: i64,
        except: &[String],
    ) -> Result<Vec<Taken>, SchedulerError> {
        let s = &self.services;
        let mut out = Vec::new();
        if free == 0 {
            return Ok(out);
        }
        fill.room.insert(pool.to_string(), free);
        let read = free
            .saturating_mul(READ_PER_SLOT)
            .saturating_add(16)
            .min(READ_MAX);
        for name in fill.routes.clone() {
            let Some(route) = s.config.routes.get(&name) else {
                continue;
            };
            let units = s
                .store
                .unit_list_fill(
                    &route_pool(&name),
                    std::slice::from_ref(&name),
                    now,
                    read,
                    except,
                )
                .await?;
            for unit in units {
                if out.len() >= free as usize {
                    return Ok(out);
                }
                let Some(routing) = unit.routing() else {
                    continue;
                };
                let expected = |p: &TargetUnit| self.expected_ms(p);
                let cands = candidates(route, &routing, now, &fill.room, expected);
                let Some(i) = pick(route.policy, &unit.id, &cands) else {
                    continue;
                };
                let Some(plan) = routing.options[i].plan.clone() else {
                    continue;
                };
                if let Some(r) = fill.room.get_mut(&plan.pool) {
                    *r = r.saturating_sub(1);
                }
                if plan.pool != pool {
                    fill.wake.insert(plan.pool);
                    continue;
                }
                out.push(bound(unit, routing, i, plan));
            }
        }
        Ok(out)
    }

    /// An option's expected duration: what the pool's jobs of its kind took (or its handler
    /// stated), as the median.
    fn expected_ms(&self, p: &TargetUnit) -> Option<i64> {
        let class =
            slotd_pools::pool_state::durations::class_of_parts(&p.task_type, &p.stage, &p.spec);
        self.services
            .durations
            .distribution(&p.pool, &class)
            .map(|d| d.quantile(0.5))
    }
}

/// `unit` bound to option `i` (`plan`): its bind, and the unit as the marker will leave it.
fn bound(
    mut unit: slotd_core::model::Unit,
    mut routing: UnitRouting,
    i: usize,
    plan: TargetUnit,
) -> Taken {
    routing.bound = Some(i);
    let label = routing.options[i].label();
    let route_pool = unit.pool.clone();
    let detail = format!(
        "route {}: bound to {label} in pool {}",
        routing.route, plan.pool
    );
    let json = routing.to_json();
    unit.pool = plan.pool.clone();
    unit.task_type = plan.task_type.clone();
    unit.stage = plan.stage.clone();
    unit.spec = plan.spec.clone();
    unit.state = plan.state.clone();
    unit.terms.cost_estimate = plan.estimate;
    unit.routing = Some(json.clone());
    Taken {
        unit,
        label,
        bind: Bind {
            route_pool,
            pool: plan.pool,
            task_type: plan.task_type,
            stage: plan.stage,
            spec: plan.spec,
            state: plan.state,
            estimate: plan.estimate,
            routing: json,
            detail,
        },
    }
}
