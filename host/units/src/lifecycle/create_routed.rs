//! Creating a task of a route (docs/routes.md): the payload's canonical shots are checked for
//! shape, then every target's handler plans each shot (`routes.plan-shot`, contract 1.5) with
//! its model, its estimate and expected duration; a target that cannot make a shot is left out
//! for that shot, with its reason. A shot no target can make refuses the task (422, naming the
//! shot and each target's reason). Each unit waits in the route's pool (`route:NAME`) until a
//! target pool grants it a slot and binds it.

use std::collections::BTreeSet;

use slotd_core::config::RouteConfig;
use slotd_core::model::{
    ROUTE_STAGE, Refusal, RouteOption, TargetUnit, UnitRouting, canonical_shots, route_pool,
};
use slotd_runtime::Handler;
use slotd_store::NewUnit;

use super::create::{CreateError, CreateRequest, CreatedTask, store_task};
use super::follow_up::FollowUps;
use crate::services::Services;

/// Plan, store and wake a task of route `name`.
pub async fn create_routed_task(
    services: &Services,
    name: &str,
    route: &RouteConfig,
    tenant: &str,
    request: CreateRequest,
    now: i64,
) -> Result<CreatedTask, CreateError> {
    let shots =
        canonical_shots(&request.payload, services.config.max_units_per_task).map_err(|e| {
            CreateError::Refused {
                detail: e.message,
                field: Some(e.field),
            }
        })?;
    // options[shot][target]
    let mut options: Vec<Vec<RouteOption>> =
        vec![Vec::with_capacity(route.targets.len()); shots.len()];
    for target in &route.targets {
        let planned = plan_target(services, target, &shots, now).await?;
        for (shot, option) in options.iter_mut().zip(planned) {
            shot.push(option);
        }
    }
    let mut follow = FollowUps::default();
    let mut kinds = Vec::new();
    let mut units = Vec::with_capacity(shots.len());
    for (i, (shot, opts)) in shots.into_iter().zip(options).enumerate() {
        if !opts.iter().any(|o| o.plan.is_some()) {
            let reasons: Vec<String> = opts
                .iter()
                .map(|o| {
                    let why = o.refused.as_ref().map_or("refused", |r| r.message.as_str());
                    format!("{}: {why}", o.label())
                })
                .collect();
            return Err(CreateError::Refused {
                detail: format!(
                    "no target of route {name:?} can make this shot ({})",
                    reasons.join("; ")
                ),
                field: Some(format!("shots[{i}]")),
            });
        }
        for p in opts.iter().filter_map(|o| o.plan.as_ref()) {
            follow.wake_pool(&p.pool);
            kinds.push(p.clone());
        }
        let routing = UnitRouting {
            route: name.to_string(),
            options: opts,
            bound: None,
        };
        units.push(NewUnit {
            id: uuid::Uuid::now_v7().to_string(),
            pool: route_pool(name),
            stage: ROUTE_STAGE.to_string(),
            spec: shot,
            state: "{}".into(),
            routes: None,
            routing: Some(routing.to_json()),
            cost_estimate: None,
            // Planned by the route, not a release; a target's release plans it when bound.
            planned_release: None,
        });
    }
    let kinds: Vec<slotd_pools::pool_state::durations::UnitKind<'_>> = kinds
        .iter()
        .map(|p| slotd_pools::pool_state::durations::UnitKind {
            task_type: &p.task_type,
            stage: &p.stage,
            pool: &p.pool,
            spec: &p.spec,
        })
        .collect();
    slotd_pools::pool_state::durations::ask_unknown(
        &services.durations,
        &services.registry,
        &kinds,
    )
    .await;
    store_task(services, tenant, name, request, units, follow, now).await
}

/// One target's option for each shot, in order.
async fn plan_target(
    services: &Services,
    target: &slotd_core::config::RouteTarget,
    shots: &[String],
    now: i64,
) -> Result<Vec<RouteOption>, CreateError> {
    let refuse = |reason: &str, message: String| RouteOption {
        handler: target.handler.clone(),
        model: target.model.clone(),
        plan: None,
        refused: Some(Refusal {
            reason: reason.into(),
            message,
            at: now,
            until: None,
        }),
    };
    let Some(handler) = services.registry.by_name(&target.handler) else {
        let why = format!("handler {:?} is not loaded", target.handler);
        return Ok(shots
            .iter()
            .map(|_| refuse("unavailable", why.clone()))
            .collect());
    };
    if !handler.routable() {
        let why = format!(
            "handler {:?} (contract {}) serves no routes",
            target.handler, handler.contract
        );
        return Ok(shots
            .iter()
            .map(|_| refuse("unavailable", why.clone()))
            .collect());
    }
    if !handler.route_models.iter().any(|m| m == &target.model) {
        let why = format!(
            "handler {:?} serves no model {:?} in routes (it serves {})",
            target.handler,
            target.model,
            handler.route_models.join(", ")
        );
        return Ok(shots
            .iter()
            .map(|_| refuse("unavailable", why.clone()))
            .collect());
    }
    let mut out = Vec::with_capacity(shots.len());
    let mut planned: Vec<(usize, TargetUnit)> = Vec::new();
    for (i, shot) in shots.iter().enumerate() {
        match handler.plan_shot(&target.model, shot).await {
            Ok(Ok(r)) => match checked_plan(&handler, r) {
                Ok(plan) => {
                    planned.push((i, plan));
                    out.push(None);
                }
                Err(why) => {
                    tracing::error!(handler = %target.handler, model = %target.model, %why, "plan-shot broke the contract");
                    out.push(Some(refuse("contract", why)));
                }
            },
            Ok(Err(e)) => {
                let message = match e.field {
                    Some(f) => format!("{f}: {}", e.message),
                    None => e.message,
                };
                out.push(Some(refuse("plan", message)));
            }
            Err(fault) => {
                tracing::warn!(handler = %target.handler, %fault, kind = fault.kind(), "plan-shot failed");
                return Err(super::create::plan_fault(
                    &fault,
                    &format!("the handler {:?} of a target", target.handler),
                ));
            }
        }
    }
    annotate(&handler, &mut planned).await;
    let mut planned = planned.into_iter().peekable();
    Ok(out
        .into_iter()
        .enumerate()
        .map(|(i, refused)| match refused {
            Some(r) => r,
            None => {
                let plan = planned.next_if(|(j, _)| *j == i).map(|(_, p)| p);
                RouteOption {
                    handler: target.handler.clone(),
                    model: target.model.clone(),
                    plan,
                    refused: None,
                }
            }
        })
        .collect())
}

/// A routed shot checked against the handler's declaration: a task type it serves, a pool its
/// first stage may use.
fn checked_plan(handler: &Handler, r: slotd_runtime::RoutedShot) -> Result<TargetUnit, String> {
    let first = handler
        .info
        .stages(&r.task_type)
        .and_then(|s| s.first())
        .ok_or_else(|| {
            format!(
                "it named task type {:?}, which it does not serve",
                r.task_type
            )
        })?;
    if !first.allows(&r.pool) {
        return Err(format!(
            "it named pool {:?}, which stage {:?} of {:?} does not use",
            r.pool, first.name, r.task_type
        ));
    }
    Ok(TargetUnit {
        task_type: r.task_type,
        stage: first.name.clone(),
        pool: r.pool,
        spec: r.spec,
        state: r.state,
        estimate: None,
        expected_ms: None,
    })
}

/// Each plan's estimate and stated duration (contracts 1.2 and 1.3), asked per task type.
async fn annotate(handler: &Handler, planned: &mut [(usize, TargetUnit)]) {
    let types: BTreeSet<String> = planned.iter().map(|(_, p)| p.task_type.clone()).collect();
    for t in types {
        let idx: Vec<usize> = (0..planned.len())
            .filter(|&k| planned[k].1.task_type == t)
            .collect();
        let specs: Vec<String> = idx.iter().map(|&k| planned[k].1.spec.clone()).collect();
        let costs = handler.estimate_specs(&t, &specs).await;
        let durations = handler.durations(&t, &specs).await;
        for ((&k, cost), d) in idx.iter().zip(costs).zip(durations) {
            planned[k].1.estimate = cost;
            planned[k].1.expected_ms = d.map(|d| d.p50_ms);
        }
    }
}
