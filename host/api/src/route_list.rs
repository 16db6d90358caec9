//! `GET /v1/routes`: each route (docs/routes.md) with its policy, the units waiting on it,
//! and per target whether it can serve, the room of its pools and its recent refusals.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::caller::Caller;
use super::error::{ApiError, log_store_error};
use slotd_units::services::Services;

/// How many of the newest events (of every task) the refusal counts are read from.
const REFUSALS_SCAN: i64 = 5_000;

pub fn router() -> OpenApiRouter<Services> {
    OpenApiRouter::new().routes(routes!(list))
}

/// One route as shown.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RouteView {
    pub name: String,
    /// `ordered`, `cheapest`, `fastest` or `weights`.
    pub policy: &'static str,
    /// Units waiting on the route for a target with room.
    pub pending: u64,
    pub targets: Vec<TargetView>,
}

/// One target of a route.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TargetView {
    pub handler: String,
    pub model: String,
    pub weight: Option<u32>,
    /// `ready`; or why it takes nothing: `handler not loaded`, `handler serves no routes`
    /// (contract before 1.5), `model not served`.
    pub state: &'static str,
    /// The pools its handler draws on, with their room now.
    pub pools: Vec<TargetPool>,
    /// Free slots over its pools now.
    pub free: u32,
    /// Its refusals among the newest events, by reason.
    #[schema(value_type = BTreeMap<String, u64>)]
    pub recent_refusals: BTreeMap<String, u64>,
    /// The newest of them: what the provider said (admins only: it may quote another
    /// tenant's request).
    pub last_refusal: Option<String>,
}

/// A target's pool and its room.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TargetPool {
    pub name: String,
    pub effective_max_slots: u32,
    /// Slots held now; `None` when the slot store could not be asked.
    pub used: Option<u32>,
}

/// List routes
///
/// Every configured route: its policy, the units waiting on it, and each target's state,
/// pools with their room, and recent refusals (why units failed over; the last one's words
/// for admins only).
#[utoipa::path(
    get,
    path = "/v1/routes",
    tag = "pools",
    operation_id = "list_routes",
    responses((status = 200, description = "The routes", body = Vec<RouteView>)),
)]
async fn list(
    State(services): State<Services>,
    caller: Caller,
) -> Result<Json<Vec<RouteView>>, ApiError> {
    let counts = services
        .store
        .unit_count_by_pool()
        .await
        .map_err(log_store_error("counting units by pool"))?;
    let limits = slotd_units::pools_now::pool_limits_now(&services);
    let mut out = Vec::new();
    for (name, route) in &services.config.routes {
        let pool = slotd_core::model::route_pool(name);
        let pending = counts
            .iter()
            .filter(|c| c.pool == pool && c.status == slotd_core::model::UnitStatus::Pending)
            .map(|c| c.count)
            .sum();
        let prefix = format!("route {name}: ");
        let events = services
            .store
            .unit_events_recent_with(&prefix, REFUSALS_SCAN)
            .await
            .map_err(log_store_error("reading route refusals"))?;
        let mut targets = Vec::new();
        for t in &route.targets {
            let label = t.label();
            let state = match services.registry.by_name(&t.handler) {
                None => "handler not loaded",
                Some(h) if !h.routable() => "handler serves no routes",
                Some(h) if !h.route_models.contains(&t.model) => "model not served",
                Some(_) => "ready",
            };
            let mut pools = Vec::new();
            let mut free = 0u32;
            for l in limits.values().filter(|l| l.handlers.contains(&t.handler)) {
                let mut used = Some(0u32);
                let mut max = 0u32;
                for a in &l.accounts {
                    let key = a.slot_key(&l.name);
                    max += services.capacity.effective(&key, a.max_slots);
                    used = used
                        .zip(services.slots.used(&key).await.ok())
                        .map(|(x, y)| x + y);
                }
                let max = max.min(l.max_slots);
                free += max.saturating_sub(used.unwrap_or(max));
                pools.push(TargetPool {
                    name: l.name.clone(),
                    effective_max_slots: max,
                    used,
                });
            }
            let marker = format!("{prefix}{label} refused it (");
            let mut recent_refusals: BTreeMap<String, u64> = BTreeMap::new();
            let mut last_refusal = None;
            for e in &events {
                let Some(rest) = e.detail.as_deref().and_then(|d| d.strip_prefix(&marker)) else {
                    continue;
                };
                let reason = rest.split(':').next().unwrap_or("").to_string();
                *recent_refusals.entry(reason).or_default() += 1;
                if caller.admin {
                    last_refusal = e.detail.clone();
                }
            }
            targets.push(TargetView {
                handler: t.handler.clone(),
                model: t.model.clone(),
                weight: t.weight,
                state,
                pools,
                free,
                recent_refusals,
                last_refusal,
            });
        }
        out.push(RouteView {
            name: name.clone(),
            policy: route.policy.as_str(),
            pending,
            targets,
        });
    }
    Ok(Json(out))
}
