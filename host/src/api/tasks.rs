//! The task resource: read one, list, cancel, retry failed units (and re-finalize units whose
//! finalization gave up), read the event log.
//! Creation lives in `task_create.rs`, the response shapes in `task_view.rs`.
//!
//! Every lookup is by (tenant, id): another tenant's task is answered exactly like a missing
//! one (404), so ids reveal nothing. An admin key looks a task up under the tenant that owns
//! it (see `caller.rs`).

use std::collections::{BTreeSet, HashMap};

use axum::Json;
use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::caller::Caller;
use super::error::{ApiError, log_store_error};
use super::task_create;
use super::task_view::{TaskSummary, TaskView};
use crate::model::{Unit, UnitStatus};
use crate::services::Services;
use crate::store::{TaskFilter, TaskRecord};

/// Page size of `GET /v1/tasks` when `limit` is not given.
pub const LIST_LIMIT_DEFAULT: u32 = 50;
/// Largest accepted `limit`.
pub const LIST_LIMIT_MAX: u32 = 500;

/// Routes under `/v1/tasks`.
pub fn router() -> Router<Services> {
    Router::new()
        .route("/v1/tasks", get(list))
        .route("/v1/tasks/{id}", get(read).post(task_create::create))
        .route("/v1/tasks/{id}/cancel", post(cancel))
        .route("/v1/tasks/{id}/retry", post(retry))
        .route("/v1/tasks/{id}/events", get(events))
        .route("/v1/tasks/{id}/webhooks", get(webhooks))
}

/// A query string that does not even decode.
pub(super) fn bad_query(rejection: QueryRejection) -> ApiError {
    ApiError::BadRequest {
        detail: format!("the query string is malformed: {}", rejection.body_text()),
        field: None,
    }
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

/// `GET /v1/tasks/{id}`.
async fn read(
    State(services): State<Services>,
    caller: Caller,
    Path(id): Path<String>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(bad_query)?;
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
        let units = units_of(&services, &task.id).await?;
        return Ok(Json(TaskView::new(&task, units, true)).into_response());
    }
    // The hot snapshot first (another tenant's snapshot is a miss: the database answers 404).
    let seen = services.hot.lookup(&id).await;
    if let Some((owner, body)) = seen.as_ref().and_then(|l| l.snapshot.as_ref())
        && *owner == tenant
    {
        return Ok(json_body(body.clone()));
    }
    let task = find(&services, &tenant, &id).await?;
    let units = units_of(&services, &task.id).await?;
    let body = serde_json::to_string(&TaskView::new(&task, units, false)).map_err(|e| {
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

/// `GET /v1/tasks?type=&status=&limit=&cursor=&tenant=`: newest first, cursor paging.
async fn list(
    State(services): State<Services>,
    caller: Caller,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(bad_query)?;
    let filter = list_filter(&query)?;
    // `?tenant=`: an admin's filter (all tenants when absent); see `Caller::list_scope`.
    let scope = caller.list_scope(query.get("tenant").map(String::as_str))?;
    let page = services
        .store
        .task_list_any(scope.as_deref(), &filter)
        .await
        .map_err(log_store_error("listing tasks"))?;
    let tasks: Vec<TaskSummary> = page.tasks.iter().map(TaskSummary::new).collect();
    Ok(Json(json!({
        "tasks": tasks,
        "next_cursor": page.next.map(|c| c.to_string()),
    })))
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
    let non_empty = |k: &str| query.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let unit_status = non_empty("status")
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
    let limit = match non_empty("limit") {
        None => LIST_LIMIT_DEFAULT,
        Some(l) => match l.parse::<u32>() {
            Ok(n) if (1..=LIST_LIMIT_MAX).contains(&n) => n,
            _ => {
                return Err(ApiError::bad_field(
                    "limit",
                    format!("limit {l:?} is not a number from 1 to {LIST_LIMIT_MAX}"),
                ));
            }
        },
    };
    let before = non_empty("cursor")
        .map(|c| {
            c.parse::<i64>().map_err(|_| {
                ApiError::bad_field(
                    "cursor",
                    format!("cursor {c:?} is not one this API returned as next_cursor"),
                )
            })
        })
        .transpose()?;
    Ok(TaskFilter {
        task_type: non_empty("type").map(str::to_string),
        unit_status,
        before,
        limit,
    })
}

/// `POST /v1/tasks/{id}/cancel`: cancel every unit not yet finished. Units whose job is at the
/// provider (`submitted`) keep their slots until the job ends, because the provider keeps
/// running it; the scheduler then ends them `cancelled`. Repeating it changes nothing.
async fn cancel(
    State(services): State<Services>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<TaskView>, ApiError> {
    let tenant = caller.tenant_of_task(&services, &id).await?;
    let now = services.clock.now_ms();
    let cancelled = services
        .store
        .task_cancel(&tenant, &id, now)
        .await
        .map_err(log_store_error("cancelling task"))?
        .ok_or_else(|| ApiError::NotFound(format!("no task {id:?}")))?;
    tracing::info!(
        task_id = %id,
        units = cancelled.units,
        waiting = cancelled.waiting,
        "task cancelled"
    );
    services.hot.invalidate([id.as_str()]).await;

    let task = find(&services, &tenant, &id).await?;
    let units = units_of(&services, &task.id).await?;
    Ok(Json(TaskView::new(&task, units, false)))
}

/// `POST /v1/tasks/{id}/retry`: failed units back to pending with a fresh submit attempt;
/// units whose finalization gave up are finalized again (no new provider job).
async fn retry(
    State(services): State<Services>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let tenant = caller.tenant_of_task(&services, &id).await?;
    let now = services.clock.now_ms();
    let retried = services
        .store
        .task_retry_failed(&tenant, &id, now)
        .await
        .map_err(log_store_error("retrying task"))?
        .ok_or_else(|| ApiError::NotFound(format!("no task {id:?}")))?;
    if retried > 0 {
        services.hot.invalidate([id.as_str()]).await;
        let units = units_of(&services, &id).await?;
        let pools: BTreeSet<&str> = units
            .iter()
            .filter(|u| u.status == UnitStatus::Pending)
            .map(|u| u.pool.as_str())
            .collect();
        for pool in pools {
            services.wake.pool(pool);
        }
        if units.iter().any(|u| u.status == UnitStatus::Succeeded) {
            services.wake.pool(crate::scheduler::FINALIZE_WAKE);
        }
        tracing::info!(task_id = %id, retried, "failed units retried");
    }
    Ok(Json(json!({ "task_id": id, "retried": retried })))
}

/// `GET /v1/tasks/{id}/events`: the task's unit event log, oldest first, as JSON.
/// `GET /v1/tasks/{id}/events`: the task's event log as JSON, or, with `Accept:
/// text/event-stream`, as a live stream (see `events.rs`).
async fn events(
    State(services): State<Services>,
    caller: Caller,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    after: Result<Query<super::events::After>, QueryRejection>,
) -> Result<Response, ApiError> {
    let tenant = caller.tenant_of_task(&services, &id).await?;
    let Query(after) = after.map_err(bad_query)?;
    let task = find(&services, &tenant, &id).await?;
    if super::events::wants_stream(&headers) {
        return super::events::task_stream(services, tenant, task.id, &headers, &after).await;
    }
    let events = services
        .store
        .unit_events(&task.id)
        .await
        .map_err(log_store_error("reading events"))?;
    Ok(Json(json!({ "task_id": task.id, "events": events })).into_response())
}

/// `GET /v1/tasks/{id}/webhooks`: the task's completion webhook deliveries, each with its
/// attempts (status, error, duration), oldest first.
async fn webhooks(
    State(services): State<Services>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let tenant = caller.tenant_of_task(&services, &id).await?;
    let task = find(&services, &tenant, &id).await?;
    let list = services
        .store
        .webhook_list(&task.id)
        .await
        .map_err(log_store_error("reading webhook deliveries"))?;
    let deliveries: Vec<Value> = list
        .into_iter()
        .map(|(d, attempts)| {
            let mut v = serde_json::to_value(&d).unwrap_or_default();
            v["attempts_made"] = v["attempts"].take();
            v["attempts"] = serde_json::to_value(attempts).unwrap_or_default();
            v
        })
        .collect();
    Ok(Json(json!({
        "task_id": task.id,
        "callback_url": task.callback_url,
        "deliveries": deliveries,
    })))
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
    }
}
