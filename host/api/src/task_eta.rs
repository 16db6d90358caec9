//! The queue position and completion estimate of `GET /v1/tasks/{id}`: the store says where
//! the task stands in its pool, the scheduler's learned durations say how long jobs take, and
//! [`slotd_pools::eta`] replays the pool's near future.

use super::error::{ApiError, log_store_error};
use slotd_core::model::Unit;
use slotd_store::TaskRecord;
use slotd_units::services::Services;

/// The queue position and the completion estimate of an unfinished task with these units (see
/// `eta.rs`): `(queue_position, estimated_completion_at)`. Pending units of a pool that quotas
/// hold closed get a `wait_reason` naming the quota and until when, unless they carry one.
pub(super) async fn estimate(
    services: &Services,
    task: &TaskRecord,
    units: &mut [Unit],
) -> Result<(Option<u64>, Option<i64>), ApiError> {
    if task.counts.task_status().is_final() {
        return Ok((None, None));
    }
    let Some(standing) = services
        .store
        .task_queue_standing(&task.id)
        .await
        .map_err(log_store_error("reading the task's place in its pool"))?
    else {
        return Ok((None, None));
    };
    if let Some(route) =
        slotd_core::model::route_of_pool(&standing.pool).and_then(|r| services.config.routes.get(r))
    {
        let pools: std::collections::BTreeSet<String> = units
            .iter()
            .filter(|u| u.status == slotd_core::model::UnitStatus::Pending)
            .filter_map(Unit::routing)
            .flat_map(|r| r.options.into_iter().filter_map(|o| o.plan.map(|p| p.pool)))
            .collect();
        return Ok(routed(services, route, &pools, standing).await);
    }
    let standing = with_reservations(services, standing).await?;
    let queue_position = (standing.pending > 0).then_some(standing.ahead_first);
    slotd_units::pools_now::refresh_discovered(services).await;
    let limit = slotd_units::pools_now::pool_limits_now(services).remove(&standing.pool);
    let max = limit.as_ref().map_or(1, |l| l.max_slots);
    let now = services.clock.now_ms();
    let held = match &limit {
        Some(l) if standing.pending > 0 => {
            slotd_units::pools_now::closed_until(services, l, now).await
        }
        _ => None,
    };
    if let Some((what, until)) = &held {
        let reason = slotd_pools::pool_state::quotas::wait_reason(what, *until);
        for u in units.iter_mut().filter(|u| {
            u.pool == standing.pool
                && u.status == slotd_core::model::UnitStatus::Pending
                && u.terms.wait_reason.is_none()
        }) {
            u.terms.wait_reason = Some(reason.clone());
        }
    }
    let opens_at = held.map(|(_, t)| t);
    let pace = match &limit {
        Some(l) if standing.pending > 0 && !l.quotas.is_empty() => {
            slotd_pools::pool_state::quotas::pace(
                &services.metrics,
                &services.slots,
                &l.name,
                &l.quotas,
                now,
            )
            .await
        }
        _ => Vec::new(),
    };
    if let Some(u) = units
        .iter()
        .find(|u| u.pool == standing.pool && !u.status.is_terminal())
    {
        slotd_pools::pool_state::durations::ask_unknown(
            &services.durations,
            &services.registry,
            &[u.into()],
        )
        .await;
    }
    let Some(pool) = services.durations.pool_distribution(&standing.pool) else {
        return Ok((queue_position, None));
    };
    let own = units
        .iter()
        .find(|u| u.pool == standing.pool && !u.status.is_terminal())
        .and_then(|u| {
            services
                .durations
                .distribution(&u.pool, &slotd_pools::pool_state::durations::class_of(u))
        });
    let at = slotd_pools::eta::completion(slotd_pools::eta::Inputs {
        now,
        slots: services.capacity.effective(&standing.pool, max),
        standing: &standing,
        pool: &pool,
        own: own.as_deref(),
        opens_at,
        pace: &pace,
    });
    Ok((queue_position, Some(at)))
}

/// A routed task's estimate while units wait on its route (docs/routes.md): the route's
/// queue drains into every target pool at once, so the replay runs over their slots together,
/// with their jobs' durations together; each slot held now is taken as half through a job of
/// its pool's usual length (which job holds it is not read here).
async fn routed(
    services: &Services,
    route: &slotd_core::config::RouteConfig,
    used_by: &std::collections::BTreeSet<String>,
    mut standing: slotd_store::QueueStanding,
) -> (Option<u64>, Option<i64>) {
    let queue_position = (standing.pending > 0).then_some(standing.ahead_first);
    let now = services.clock.now_ms();
    let limits = slotd_units::pools_now::pool_limits_now(services);
    let mut slots = 0u32;
    let mut samples: Vec<i64> = Vec::new();
    for pool in slotd_pools::routing::target_pools(&services.registry, route)
        .into_iter()
        .filter(|p| used_by.contains(p))
    {
        let Some(limit) = limits.get(&pool) else {
            continue;
        };
        let mut max = 0u32;
        let mut used = 0u32;
        for a in &limit.accounts {
            let key = a.slot_key(&pool);
            max += services.capacity.effective(&key, a.max_slots);
            used += services.slots.used(&key).await.unwrap_or(0);
        }
        slots += max.min(limit.max_slots);
        if let Some(d) = services.durations.pool_distribution(&pool) {
            let half = d.mean() / 2;
            standing
                .running
                .extend(std::iter::repeat_n((now - half, false), used as usize));
            samples.extend_from_slice(d.samples());
        }
    }
    let Some(pool) = slotd_pools::pool_state::durations::Distribution::new(samples) else {
        return (queue_position, None);
    };
    let at = slotd_pools::eta::completion(slotd_pools::eta::Inputs {
        now,
        slots: slots.max(1),
        standing: &standing,
        pool: &pool,
        own: None,
        opens_at: None,
        pace: &[],
    });
    (queue_position, Some(at))
}

/// The standing with tenants' unfilled reservations of its pool counted (they are filled
/// first); unchanged when no tenant has a `min_slots` there.
async fn with_reservations(
    services: &Services,
    standing: slotd_store::QueueStanding,
) -> Result<slotd_store::QueueStanding, ApiError> {
    use slotd_pools::pool_state::reservations;
    let shares = reservations::configured(&services.config, &standing.pool);
    if standing.pending == 0 || shares.values().all(|(min, _)| *min == 0) {
        return Ok(standing);
    }
    let held: std::collections::BTreeMap<String, u64> = services
        .store
        .unit_count_submitted_by_tenant(&standing.pool)
        .await
        .map_err(log_store_error("counting slots held per tenant"))?
        .into_iter()
        .collect();
    let pending: Vec<String> = standing
        .others
        .iter()
        .map(|(t, _)| t.clone())
        .chain(std::iter::once(standing.tenant.clone()))
        .collect();
    let lacks = reservations::lacking(&shares, &held, &pending)
        .into_iter()
        .map(|(t, n)| (t, u64::from(n)))
        .collect();
    Ok(standing.with_reservations(&lacks))
}
