//! Live events (SSE): `GET /v1/tasks/{id}/events` with `Accept: text/event-stream` streams one
//! task's unit events as they are committed, from the first, and ends once the task has; `GET
//! /v1/events` streams every task of the caller's tenant from now on. Both resume after a
//! dropped connection from `Last-Event-ID` (or `?after=`), keep the connection alive with
//! comments, and read the durable event log, so any API instance serves any stream.
//!
//! Each event is `event: unit`, `id:` the cursor that resumes right after it, `data:` the event
//! as JSON; a task stream ends with `event: end` and the task's status.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Tenant;
use super::error::{ApiError, log_store_error};
use crate::services::Services;
use slotd_store::{EventCursor, EventScope, UnitEvent};

/// How often a stream looks for new events when it has none to send.
pub const POLL: Duration = Duration::from_millis(200);
/// Events read per query.
const PAGE: u32 = 500;
/// A comment line this often keeps proxies from closing an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Routes: the tenant stream (the task stream shares `/v1/tasks/{id}/events` with the JSON log,
/// see `tasks.rs`).
pub fn router() -> OpenApiRouter<Services> {
    OpenApiRouter::new().routes(routes!(tenant_events))
}

/// `GET /v1/events` without a stream: one page of the log.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EventsPage {
    /// In log order.
    pub events: Vec<UnitEvent>,
    /// Pass as `after` to read on.
    pub next: String,
}

/// `?after=CURSOR`: where to resume when the client cannot send `Last-Event-ID`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct After {
    pub after: Option<String>,
}

/// Whether the request asks for a stream.
pub fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"))
}

/// The cursor to resume from: `Last-Event-ID`, else `?after=`, else none. Both are checked
/// when both are given, so a bad one is named rather than silently outranked.
pub fn resume_from(headers: &HeaderMap, after: &After) -> Result<Option<EventCursor>, ApiError> {
    // An empty value is no value (nothing was seen yet), in the header as in the query.
    let from_query = after
        .after
        .as_deref()
        .filter(|t| !t.is_empty())
        .map(|t| {
            EventCursor::parse(t).map_err(|e| ApiError::BadRequest {
                detail: e.to_string(),
                field: Some("after".into()),
            })
        })
        .transpose()?;
    let Some(header) = headers.get("last-event-id").filter(|v| !v.is_empty()) else {
        return Ok(from_query);
    };
    let text = header
        .to_str()
        .map_err(|_| bad_cursor("Last-Event-ID is not text".into()))?;
    EventCursor::parse(text)
        .map(Some)
        .map_err(|e| bad_cursor(e.to_string()))
}

fn bad_cursor(detail: String) -> ApiError {
    ApiError::BadRequest {
        detail,
        field: Some("Last-Event-ID".into()),
    }
}

/// The tenant's events
///
/// Every event of the tenant's tasks. With `Accept: text/event-stream`, a live stream that
/// starts at the log's end (or after `Last-Event-ID`); without it, one JSON page from `after`
/// (the log's start when absent), for clients that poll.
#[utoipa::path(
    get,
    path = "/v1/events",
    tag = "events",
    operation_id = "tenant_events",
    params(
        ("after" = Option<String>, Query, pattern = r"^([0-9]{1,18}\.[0-9]{1,18}\.[0-9]{1,18})?$", description = "Empty: none. Resume after this event id (`next` of the previous page)"),
        ("Last-Event-ID" = Option<String>, Header, pattern = r"^([0-9]{1,18}\.[0-9]{1,18}\.[0-9]{1,18})?$", description = "Empty: none. Stream: resume after this event id"),
    ),
    responses(
        (status = 200, description = "A page of events, or a live stream", content(
            (EventsPage = "application/json"),
            (String = "text/event-stream"),
        )),
        (status = 400, description = "A resume cursor this API did not hand out"),
    ),
)]
async fn tenant_events(
    State(services): State<Services>,
    Tenant(tenant): Tenant,
    headers: HeaderMap,
    after: Result<Query<After>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(after) = after.map_err(ApiError::malformed_query)?;
    let from = resume_from(&headers, &after)?;
    let start = match from {
        Some(c) => c,
        None => services
            .store
            .unit_events_head()
            .await
            .map_err(log_store_error("reading the event log's end"))?,
    };
    if !wants_stream(&headers) {
        let page = services
            .store
            .unit_events_after(
                EventScope {
                    tenant: &tenant,
                    task_id: None,
                },
                from.unwrap_or_default(),
                PAGE,
            )
            .await
            .map_err(log_store_error("reading events"))?;
        return Ok(Json(EventsPage {
            next: page.next.to_string(),
            events: page.events.into_iter().map(|(_, e)| e).collect(),
        })
        .into_response());
    }
    Ok(stream(services, tenant, None, start).into_response())
}

/// The SSE response for `scope` from `start` (a task stream when `task` is set).
pub fn stream(
    services: Services,
    tenant: String,
    task: Option<String>,
    start: EventCursor,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    services.metrics.record(|| metrics::counter!("slotd_event_streams_total", "scope" => if task.is_some() { "task" } else { "tenant" }).increment(1));
    let state = Reader {
        services,
        tenant,
        task,
        cursor: start,
        queued: VecDeque::new(),
        done: false,
    };
    let events = futures::stream::unfold(state, |mut r| async move {
        let event = r.next().await?;
        Some((Ok(event), r))
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

/// One stream's reading state.
struct Reader {
    services: Services,
    tenant: String,
    task: Option<String>,
    cursor: EventCursor,
    queued: VecDeque<(EventCursor, UnitEvent)>,
    done: bool,
}

impl Reader {
    /// The next SSE event, waiting for one; `None` once the stream is over.
    async fn next(&mut self) -> Option<Event> {
        if self.done {
            return None;
        }
        loop {
            if let Some((cursor, e)) = self.queued.pop_front() {
                return Some(unit_event(cursor, &e));
            }
            match self.read().await {
                Ok(true) => continue,
                Ok(false) => {}
                Err(message) => {
                    // The stream says why it stops; the client resumes from its last id.
                    self.done = true;
                    return Some(
                        Event::default()
                            .event("error")
                            .data(json!({ "message": message }).to_string()),
                    );
                }
            }
            if let Some(status) = self.ended().await {
                self.done = true;
                return Some(
                    Event::default()
                        .event("end")
                        .data(json!({ "task_id": self.task, "status": status }).to_string()),
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Read a page into the queue; whether it brought events.
    async fn read(&mut self) -> Result<bool, String> {
        let scope = EventScope {
            tenant: &self.tenant,
            task_id: self.task.as_deref(),
        };
        let page = self
            .services
            .store
            .unit_events_after(scope, self.cursor, PAGE)
            .await
            .map_err(|e| format!("reading events: {e}"))?;
        self.cursor = page.next;
        let any = !page.events.is_empty();
        self.queued.extend(page.events);
        Ok(any)
    }

    /// For a task stream: the task's status once it has ended and every one of its events has
    /// been read (on PostgreSQL the last ones may still be settling when the task shows ended).
    async fn ended(&self) -> Option<&'static str> {
        use slotd_core::model::TaskStatus;
        let id = self.task.as_deref()?;
        let store = &self.services.store;
        let task = store.task_get(&self.tenant, id).await.ok()??;
        let status = task.counts.task_status();
        if !matches!(
            status,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        ) {
            return None;
        }
        let behind = store
            .unit_events_behind(id, self.cursor)
            .await
            .unwrap_or(true);
        (!behind && self.queued.is_empty()).then(|| status.as_str())
    }
}

fn unit_event(cursor: EventCursor, e: &UnitEvent) -> Event {
    Event::default()
        .event("unit")
        .id(cursor.to_string())
        .data(serde_json::to_string(e).unwrap_or_else(|_| "{}".into()))
}

/// `GET /v1/tasks/{id}/events` as a stream (the route in `tasks.rs` calls this when the client
/// accepts `text/event-stream`): from the first event, or `Last-Event-ID`.
pub async fn task_stream(
    services: Services,
    tenant: String,
    id: String,
    headers: &HeaderMap,
    after: &After,
) -> Result<Response, ApiError> {
    let start = resume_from(headers, after)?.unwrap_or_default();
    Ok(stream(services, tenant, Some(id), start).into_response())
}
