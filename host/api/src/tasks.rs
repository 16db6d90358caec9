//! The task resource: read one, list, cancel, retry failed units (and re-finalize units whose
//! finalization gave up), read the event log.
//! Creation lives in `task_create.rs`, the response shapes in `slotd_webhooks::task_view`.
//!
//! Every lookup is by (tenant, id): another tenant's task is answered exactly like a missing
//! one (404), so ids reveal nothing. An admin key looks a task up under the tenant that owns
//! it (see `caller.rs`).

use std::collections::HashMap;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::caller::Caller;
use super::error::{ApiError, log_store_error};
use super::task_create;
use slotd_core::model::{Unit, UnitStatus};
use slotd_store::{TaskFilter, TaskRecord};
use slotd_units::services::Services;
use slotd_webhooks::task_view::{
    DeliveryView, Retried, TaskEvents, TaskList, TaskSummary, TaskView, TaskWebhooks,
};

/// Page size of `GET /v1/tasks` when `limit` is not given.
pub const LIST_LIMIT_DEFAULT: u32 = 50;
/// Largest accepted `limit`.
pub const LIST_LIMIT_MAX: u32 = 500;

/// Routes under `/v1/tasks`.
pub fn router() -> OpenApiRouter<Services> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(read, task_create::create))
        .routes(routes!(cancel))
        .routes(routes!(retry))
        .routes(routes!(events))
        .routes(routes!(webhooks))
}

/// The tenant's task or 404.
async fn find(services: &Services, tenant: &str, id: &str) -> Result<TaskRecord, ApiError> {
    services
        .store
        .task_get(tenant, id)
        .await
        .map_err(log_store_error("reading task"))?
        .ok_or_else(|| ApiError::NotFound(format!("no task {id:?}")))
}

async fn units_of(services: &Services, task_id: &str) -> Result<Vec<Unit>, ApiError> {
    services
        .store
        .task_units(task_id)
        .await
        .map_err(log_store_error("reading units"))
}

/// Read a task
///
/// The task's status and progress, one result per unit, its error and cost. A hot snapshot
/// answers repeated polls without touching the database.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}",
    operation_id = "read_task",
    tag = "tasks",
    params(
        ("id" = String, Path, description = "The task id"),
        ("units" = Option<bool>, Query, description = "Add the full unit records"),
    ),
    responses(
        (status = 200, description = "The task", body = TaskView),
        (status = 400, description = "A bad query parameter"),
        (status = 404, description = "No such task for this tenant"),
    ),
)]
async fn read(
    State(services): State<Services>,
    caller: Caller,
    Path(id): Path<String>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(ApiError::malformed_query)?;
    if let Some(unknown) = query.keys().find(|k| *k != "units") {
        return Err(ApiError::bad_field(
            unknown,
            format!("unknown query parameter {unknown:?}; expected units"),
        ));
    }
    let tenant = caller.tenant_of_task(&services, &id).await?;
    // `?units=true` adds the full unit records.
    let with_units = match query.get("units").map(String::as_str) {
        None | Some("false") | Some("0") => false,
        Some("true") | Some("1") | Some("") => true,
        Some(other) => {
            return Err(ApiError::bad_field(
                "units",
                format!("units must be true or false, got {other:?}"),
            ));
        }
    };
    if with_units {
        let task = find(&services, &tenant, &id).await?;
        let mut units = units_of(&services, &task.id).await?;
        let (queue_position, estimated_completion_at) =
            super::task_eta::estimate(&services, &task, &mut units).await?;
        let view = TaskView {
            queue_position,
            estimated_completion_at,
            ..TaskView::new(&task, units, true)
        };
        return Ok(Json(view).into_response());
    }
    // The hot snapshot first (another tenant's snapshot is a miss: the database answers 404).
    let seen = services.hot.lookup(&id).await;
    if let Some((owner, body)) = seen.as_ref().and_then(|l| l.snapshot.as_ref())
        && *owner == tenant
    {
        return Ok(json_body(body.clone()));
    }
    let task = find(&services, &tenant, &id).await?;
    let mut units = units_of(&services, &task.id).await?;
    let (queue_position, estimated_completion_at) =
        super::task_eta::estimate(&services, &task, &mut units).await?;
    let view = TaskView {
        queue_position,
        estimated_completion_at,
        ..TaskView::new(&task, units, false)
    };
    let body = serde_json::to_string(&view).map_err(|e| {
        tracing::error!(task_id = %id, error = %e, "serializing a task view failed");
        ApiError::Internal
    })?;
    if let Some(l) = &seen {
        services.hot.fill(&id, &tenant, &l.generation, &body).await;
    }
    Ok(json_body(body))
}

/// A ready JSON body (a hot snapshot or a freshly serialized view).
fn json_body(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// List tasks
///
/// The tenant's tasks, newest first, a page at a time (`cursor` from `next_cursor`); an admin
/// key's lists every tenant's unless `tenant` names one. Unknown parameters are refused, so a
/// typo does not silently list everything.
#[utoipa::path(
    get,
    path = "/v1/tasks",
    operation_id = "list_tasks",
    tag = "tasks",
    params(
        ("type" = Option<String>, Query, description = "Only tasks of this type"),
        ("status" = Option<UnitStatus>, Query, description = "Only tasks with a unit in this status"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Page size (default 50)"),
        ("cursor" = Option<String>, Query, pattern = "^-?[0-9]{1,18}$", description = "`next_cursor` of the previous page"),
        ("tenant" = Option<String>, Query, description = "Only this tenant's tasks (another tenant's needs an admin key)"),
    ),
    responses(
        (status = 200, description = "A page of tasks", body = TaskList),
        (status = 400, description = "A bad or unknown query parameter"),
        (status = 403, description = "Another tenant's list, asked with a key that is not an admin's"),
    ),
)]
async fn list(
    State(services): State<Services>,
    caller: Caller,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Json<TaskList>, ApiError> {
    let Query(query) = query.map_err(ApiError::malformed_query)?;
    let filter = list_filter(&query)?;
    // `?tenant=`: an admin's filter (all tenants when absent); see `Caller::list_scope`.
    let scope = caller.list_scope(query.get("tenant").map(String::as_str))?;
    let page = services
        .store
        .task_list_any(scope.as_deref(), &filter)
        .await
        .map_err(log_store_error("listing tasks"))?;
    Ok(Json(TaskList {
        tasks: page.tasks.iter().map(TaskSummary::new).collect(),
        next_cursor: page.next.map(|c| c.to_string()),
    }))
}

/// Check the list parameters, naming the bad one. Unknown parameters are refused too, so that
/// a typo (`?staus=failed`) does not silently list everything.
fn list_filter(query: &HashMap<String, String>) -> Result<TaskFilter, ApiError> {
    const KNOWN: [&str; 5] = ["type", "status", "limit", "cursor", "tenant"];
    if let Some(unknown) = query.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(ApiError::bad_field(
            unknown,
            format!(
                "unknown query parameter {unknown:?}; expected type, status, limit, cursor, tenant"
            ),
        ));
    }
    // An empty `type` lists every type; the others must hold a value when given (`?cursor=` is
    // not a cursor this API handed out).
    let value = |k: &str| query.get(k).map(String::as_str);
    let unit_status = value("status")
        .map(|s| {
            s.parse::<UnitStatus>().map_err(|_| {
                let names: Vec<&str> = UnitStatus::ALL.iter().map(|s| s.as_str()).collect();
                ApiError::bad_field(
                    "status",
                    format!("status {s:?} is not one of {}", names.join(", ")),
                )
            })
        })
        .transpose()?;
    let limit = match value("limit") {
        None => LIST_LIMIT_DEFAULT,
        Some(l) => match plain_integer(l).and_then(|n| u32::try_from(n).ok()) {
            Some(n) if (1..=LIST_LIMIT_MAX).contains(&n) => n,
            _ => {
                return Err(ApiError::bad_field(
                    "limit",
                    format!("limit {l:?} is not a number from 1 to {LIST_LIMIT_MAX}"),
                ));
            }
        },
    };
    let before = value("cursor")
        .map(|c| {
            plain_integer(c).ok_or_else(|| {
                ApiError::bad_field(
                    "cursor",
                    format!("cursor {c:?} is not one this API returned as next_cursor"),
                )
            })
        })
        .transpose()?;
    Ok(TaskFilter {
        task_type: value("type").filter(|t| !t.is_empty()).map(str::to_string),
        unit_status,
        before,
        limit,
    })
}

/// A decimal integer as written in a query (`-12`, `40`), nothing else: Rust's parser would
/// also take `+40`, which the documented pattern does not.
fn plain_integer(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || digits.len() > 18 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Cancel a task
///
/// Cancel every unit not yet finished. Units whose job is at the
/// provider (`submitted`) keep their slots until the job ends, because the provider keeps
/// running it; the scheduler then ends them `cancelled`. Repeating it changes nothing.
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/cancel",
    operation_id = "cancel_task",
    tag = "tasks",
    params(("id" = String, Path, description = "The task id")),
    responses(
        (status = 200, description = "The task after the cancel", body = TaskView),
        (status = 404, description = "No such task for this tenant"),
    ),
)]
async fn cancel(
    State(services): State<Services>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<TaskView>, ApiError> {
    let tenant = caller.tenant_of_task(&services, &id).await?;
    let now = services.clock.now_ms();
    slotd_units::lifecycle::cancel_task(&services, &tenant, &id, now)
        .await
        .map_err(log_store_error("cancelling task"))?
        .ok_or_else(|| ApiError::NotFound(format!("no task {id:?}")))?;

    let task = find(&services, &tenant, &id).await?;
    let units = units_of(&services, &task.id).await?;
    Ok(Json(TaskView::new(&task, units, false)))
}

/// Retry a task's failed units
///
/// Failed units go back to pending with a fresh submit attempt; units whose finalization gave
/// up are finalized again (no new provider job).
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/retry",
    operation_id = "retry_task",
    tag = "tasks",
    params(("id" = String, Path, description = "The task id")),
    responses(
        (status = 200, description = "How many units were retried", body = Retried),
        (status = 404, description = "No such task for this tenant"),
    ),
)]
async fn retry(
    State(services): State<Services>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Retried>, ApiError> {
    let tenant = caller.tenant_of_task(&services, &id).await?;
    let now = services.clock.now_ms();
    let retried = slotd_units::lifecycle::retry_task(&services, &tenant, &id, now)
        .await
        .map_err(log_store_error("retrying task"))?
        .ok_or_else(|| ApiError::NotFound(format!("no task {id:?}")))?;
    Ok(Json(Retried {
        task_id: id,
        retried,
    }))
}

/// A task's events
///
/// The task's unit event log, oldest first, as JSON; with `Accept: text/event-stream`, a live
/// stream of the same events (`event: unit`, `id:` a resume cursor, `data:` the event), ending
/// with `event: end` once the task has ended and every event was sent. Resume with
/// `Last-Event-ID` (or `?after=`).
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}/events",
    operation_id = "task_events",
    tag = "events",
    params(
        ("id" = String, Path, description = "The task id"),
        ("after" = Option<String>, Query, pattern = r"^([0-9]{1,18}\.[0-9]{1,18}\.[0-9]{1,18})?$", description = "Empty: none. Stream only: resume after this event id"),
        ("Last-Event-ID" = Option<String>, Header, pattern = r"^([0-9]{1,18}\.[0-9]{1,18}\.[0-9]{1,18})?$", description = "Empty: none. Stream only: resume after this event id"),
    ),
    responses(
        (status = 200, description = "The event log, or a live stream of it", content(
            (TaskEvents = "application/json"),
            (String = "text/event-stream"),
        )),
        (status = 400, description = "A resume cursor this API did not hand out"),
        (status = 404, description = "No such task for this tenant"),
    ),
)]
async fn events(
    State(services): State<Services>,
    caller: Caller,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    after: Result<Query<super::events::After>, QueryRejection>,
) -> Result<Response, ApiError> {
    let tenant = caller.tenant_of_task(&services, &id).await?;
    let Query(after) = after.map_err(ApiError::malformed_query)?;
    // Checked in both forms; the JSON log is always whole.
    super::events::resume_from(&headers, &after)?;
    let task = find(&services, &tenant, &id).await?;
    if super::events::wants_stream(&headers) {
        return super::events::task_stream(services, tenant, task.id, &headers, &after).await;
    }
    let events = services
        .store
        .unit_events(&task.id)
        .await
        .map_err(log_store_error("reading events"))?;
    Ok(Json(TaskEvents {
        task_id: task.id,
        events,
    })
    .into_response())
}

/// A task's webhook deliveries
///
/// The task's completion webhook deliveries, each with its attempts (status, error,
/// duration), oldest first.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}/webhooks",
    operation_id = "task_webhooks",
    tag = "tasks",
    params(("id" = String, Path, description = "The task id")),
    responses(
        (status = 200, description = "The deliveries", body = TaskWebhooks),
        (status = 404, description = "No such task for this tenant"),
    ),
)]
async fn webhooks(
    State(services): State<Services>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<TaskWebhooks>, ApiError> {
    let tenant = caller.tenant_of_task(&services, &id).await?;
    let task = find(&services, &tenant, &id).await?;
    let list = services
        .store
        .webhook_list(&task.id)
        .await
        .map_err(log_store_error("reading webhook deliveries"))?;
    Ok(Json(TaskWebhooks {
        task_id: task.id,
        callback_url: task.completion_webhook_url,
        deliveries: list
            .into_iter()
            .map(|(delivery, attempts)| DeliveryView { delivery, attempts })
            .collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn bad_field(query: &[(&str, &str)]) -> Option<String> {
        match list_filter(&q(query)) {
            Err(ApiError::BadRequest { field, .. }) => field,
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn list_parameters() {
        let f = list_filter(&q(&[])).expect("defaults");
        assert_eq!(f.limit, LIST_LIMIT_DEFAULT);
        assert!(f.unit_status.is_none() && f.before.is_none() && f.task_type.is_none());
        let f = list_filter(&q(&[
            ("type", "video"),
            ("status", "failed"),
            ("limit", "500"),
            ("cursor", "17"),
        ]))
        .expect("valid");
        assert_eq!(f.task_type.as_deref(), Some("video"));
        assert_eq!(f.unit_status, Some(UnitStatus::Failed));
        assert_eq!((f.limit, f.before), (500, Some(17)));
        assert_eq!(bad_field(&[("limit", "501")]).as_deref(), Some("limit"));
        assert_eq!(bad_field(&[("limit", "0")]).as_deref(), Some("limit"));
        assert_eq!(bad_field(&[("status", "done")]).as_deref(), Some("status"));
        assert_eq!(bad_field(&[("cursor", "x")]).as_deref(), Some("cursor"));
        assert_eq!(bad_field(&[("staus", "failed")]).as_deref(), Some("staus"));
        // Empty values and a sign are not the documented forms.
        assert_eq!(bad_field(&[("cursor", "")]).as_deref(), Some("cursor"));
        assert_eq!(bad_field(&[("cursor", "+17")]).as_deref(), Some("cursor"));
        assert_eq!(bad_field(&[("limit", "+5")]).as_deref(), Some("limit"));
        assert_eq!(bad_field(&[("status", "")]).as_deref(), Some("status"));
        let f = list_filter(&q(&[("type", ""), ("cursor", "-3")])).expect("valid");
        assert_eq!((f.task_type, f.before), (None, Some(-3)));
    }
}
