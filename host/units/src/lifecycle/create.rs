//! Creating a task: the handler's `plan` turns the payload into units, each is routed to its
//! first stage's pool, the task and its units are stored in one transaction (group commit),
//! and the pools the units wait in are woken. Nothing is stored unless every check passed;
//! a repeated idempotency key stores nothing and names the task it already made.

use slotd_core::model::TaskStatus;
use slotd_runtime::{Handler, PlannedUnit, StageInfo};
use slotd_store::{Created, NewTask, NewUnit, StoreError};

use super::follow_up::FollowUps;
use crate::services::Services;

/// A create request, its envelope checked by the API.
#[derive(Debug, PartialEq)]
pub struct CreateRequest {
    /// The payload as JSON text, as handed to `plan`.
    pub payload: String,
    pub idempotency_key: Option<String>,
    pub priority: i32,
    /// The request's `callback_url`: where the completion webhook goes.
    pub completion_webhook_url: Option<String>,
    /// `deadline`, `start_by`, `deadline_policy` (checked by the API's `task_terms.rs`).
    pub terms: slotd_store::TaskTerms,
}

/// Why a task was not created. The API renders each as its problem response.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// The handler's `plan` refused the payload (422), naming the field when it did.
    #[error("{detail}")]
    Refused {
        detail: String,
        field: Option<String>,
    },
    /// A value the handler accepted is out of the host's bounds (422 naming `field`).
    #[error("{field}: {detail}")]
    Invalid { field: &'static str, detail: String },
    /// The handler failed or broke the contract (503: retry shortly).
    #[error("{0}")]
    HandlerUnavailable(String),
    /// The handler's code crashed on this payload (a trap, its CPU or memory budget, a
    /// deadline spent in its own code): 502, and not worth retrying, since the same payload
    /// meets the same code. Answered so that clients do not send it again, and so that one
    /// tenant's payload retried by default clients does not pile up faults against the
    /// handler every tenant uses.
    #[error("{0}")]
    HandlerFault(String),
    /// Storing failed; `doing` names the step for the log.
    #[error("{doing}: {error}")]
    Store {
        doing: &'static str,
        error: StoreError,
    },
}

/// What [`create_task`] made, or found under the idempotency key.
#[derive(Clone, Debug, PartialEq)]
pub struct CreatedTask {
    pub task_id: String,
    /// `pending` for a new task; for a repeated idempotency key, where that task is now.
    pub status: TaskStatus,
}

/// Plan, route and store a task of `task_type` for `tenant` with `handler` (the one serving
/// the type), then wake the pools its units wait in.
pub async fn create_task(
    services: &Services,
    handler: &Handler,
    tenant: &str,
    task_type: &str,
    request: CreateRequest,
    now: i64,
) -> Result<CreatedTask, CreateError> {
    let first_stage = first_stage(handler, task_type)?;
    let planned = plan(
        handler,
        task_type,
        &request.payload,
        services.config.max_units_per_task,
    )
    .await?;

    let stages = handler.info.stages(task_type).unwrap_or_default();
    let units: Vec<NewUnit> = planned
        .into_iter()
        .map(|p| {
            routed_unit(&handler.info.name, stages, &first_stage, p).map(|u| NewUnit {
                planned_release: Some(handler.sha256.clone()),
                ..u
            })
        })
        .collect::<Result<_, _>>()?;
    // What the handler states of the units' durations (contract 1.3), for ETAs and deadline
    // decisions until the pool's own jobs have ended: asked once per kind of unit.
    let kinds: Vec<slotd_pools::pool_state::durations::UnitKind<'_>> = units
        .iter()
        .map(|u| slotd_pools::pool_state::durations::UnitKind {
            task_type,
            stage: &u.stage,
            pool: &u.pool,
            spec: &u.spec,
        })
        .collect();
    slotd_pools::pool_state::durations::ask_unknown(
        &services.durations,
        &services.registry,
        &kinds,
    )
    .await;
    let mut follow = FollowUps::default();
    for u in &units {
        follow.wake_pool(&u.pool);
    }
    store_task(services, tenant, task_type, request, units, follow, now).await
}

/// Store a task of `task_type` with its planned `units` (group commit), then run `follow`
/// (wake the pools its units wait in); a repeated idempotency key names the task it made.
pub(super) async fn store_task(
    services: &Services,
    tenant: &str,
    task_type: &str,
    request: CreateRequest,
    units: Vec<NewUnit>,
    follow: FollowUps,
    now: i64,
) -> Result<CreatedTask, CreateError> {
    let new = NewTask {
        id: uuid::Uuid::now_v7().to_string(),
        tenant: tenant.to_string(),
        task_type: task_type.to_string(),
        payload: request.payload,
        idempotency_key: request.idempotency_key,
        priority: request.priority,
        completion_webhook_url: request.completion_webhook_url,
        units,
        now,
        terms: request.terms,
    };
    let created = services
        .units
        .tasks
        .create(new)
        .await
        .map_err(|error| CreateError::Store {
            doing: "creating task",
            error,
        })?;

    match created {
        Created::New(id) => {
            services.metrics.record(|| {
                metrics::counter!("slotd_tasks_created_total", "type" => task_type.to_string())
                    .increment(1)
            });
            // A new task has no snapshot to drop and no slot to free: its pools wake.
            if let Err(e) = follow.run(services).await {
                tracing::debug!(error = %e, "waking the new task's pools failed");
            }
            tracing::info!(task_id = %id, task_type = %task_type, "task created");
            Ok(CreatedTask {
                task_id: id,
                status: TaskStatus::Pending,
            })
        }
        Created::Existing(id) => {
            // The key already names a task: report where that task is now.
            let status = services
                .store
                .task_get(tenant, &id)
                .await
                .map_err(|error| CreateError::Store {
                    doing: "reading existing task",
                    error,
                })?
                .map_or(TaskStatus::Pending, |t| t.counts.task_status());
            Ok(CreatedTask {
                task_id: id,
                status,
            })
        }
    }
}

/// The stage a new unit starts in: the task type's first. A handler that declares the type
/// without stages breaks the contract (503, logged).
fn first_stage(handler: &Handler, task_type: &str) -> Result<StageInfo, CreateError> {
    handler
        .info
        .stages(task_type)
        .and_then(|s| s.first())
        .cloned()
        .ok_or_else(|| {
            tracing::error!(
                handler = %handler.info.name,
                task_type = %task_type,
                "handler declares the task type without stages"
            );
            CreateError::HandlerUnavailable(format!(
                "the handler for {task_type:?} is misconfigured"
            ))
        })
}

/// How a fault of a `plan` call is answered, `whose` naming the handler in the detail: a
/// crash of the handler's own code on this payload is [`CreateError::HandlerFault`] (the
/// same payload would crash it again); a handler that could not be started, or that waited
/// on something else, is [`CreateError::HandlerUnavailable`] (another try may succeed). The
/// fault itself stays in the log.
pub(crate) fn plan_fault(fault: &slotd_runtime::HandlerFault, whose: &str) -> CreateError {
    use slotd_runtime::HandlerFault as F;
    match fault {
        F::Trap(_) | F::Deadline(_) | F::CpuBudget(_) | F::ResourceCap(_) => {
            CreateError::HandlerFault(format!(
                "{whose} failed while planning this payload ({}); sending the same payload \
                 again will fail the same way, so it is not worth retrying (the fault is in \
                 slotd's log for the handler's operators)",
                fault.kind()
            ))
        }
        F::Instantiate(_) | F::Error(_) | F::ProviderDeadline(_) => {
            CreateError::HandlerUnavailable(format!("{whose} is unavailable; retry shortly"))
        }
    }
}

/// Plan `payload`: the handler's `plan` export, which must describe between one and `max`
/// units.
async fn plan(
    handler: &Handler,
    task_type: &str,
    payload: &str,
    max: usize,
) -> Result<Vec<PlannedUnit>, CreateError> {
    let planned = match handler.plan(task_type, payload).await {
        Ok(Ok(units)) => units,
        Ok(Err(refused)) => {
            return Err(CreateError::Refused {
                detail: refused.message,
                field: refused.field,
            });
        }
        Err(fault) => {
            tracing::warn!(
                handler = %handler.info.name,
                fault = %fault,
                kind = fault.kind(),
                "plan failed"
            );
            return Err(plan_fault(
                &fault,
                &format!("the handler for {task_type:?}"),
            ));
        }
    };
    if planned.is_empty() {
        return Err(CreateError::Invalid {
            field: "payload",
            detail: "the payload describes no work (the handler planned zero units)".into(),
        });
    }
    if planned.len() > max {
        return Err(CreateError::Invalid {
            field: "payload",
            detail: format!(
                "the payload describes {} units; at most {max} are allowed per task",
                planned.len()
            ),
        });
    }
    Ok(planned)
}

/// A planned unit as stored: in its first stage's pool (the one `plan-routed` chose, else the
/// default), with its routes. A route to a stage or pool the handler did not declare breaks
/// the contract: the task is refused (503 at the API) and the handler's mistake logged.
fn routed_unit(
    handler: &str,
    stages: &[StageInfo],
    first: &StageInfo,
    p: PlannedUnit,
) -> Result<NewUnit, CreateError> {
    let mut routes = std::collections::BTreeMap::new();
    for (stage, pool) in p.pools {
        let allowed = stages
            .iter()
            .find(|s| s.name == stage)
            .is_some_and(|s| s.allows(&pool));
        if !allowed {
            tracing::error!(
                handler,
                stage = %stage,
                pool = %pool,
                "plan-routed chose a pool the stage does not declare"
            );
            return Err(CreateError::HandlerUnavailable(format!(
                "the handler {handler:?} routed a unit to pool {pool:?} for stage {stage:?}, \
                 which it did not declare"
            )));
        }
        routes.insert(stage, pool);
    }
    let pool = routes
        .get(&first.name)
        .cloned()
        .unwrap_or_else(|| first.pool.clone());
    let routes = if routes.is_empty() {
        None
    } else {
        serde_json::to_string(&routes).ok()
    };
    Ok(NewUnit {
        id: uuid::Uuid::now_v7().to_string(),
        pool,
        stage: first.name.clone(),
        spec: p.spec,
        state: p.state,
        routes,
        routing: None,
        cost_estimate: p.cost,
        planned_release: None,
    })
}
