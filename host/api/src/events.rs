//! Live events (SSE): `GET /v1/tasks/{id}/events` with `Accept: text/event-stream` streams one
//! task's unit events as they are committed, from the first, and ends once the task has; `GET
//! /v1/events` streams every task of the caller's tenant from now on. Both resume after a
//! dropped connection from `Last-Event-ID` (or `?after=`), keep the connection alive with
//! comments, and read the durable event log, so any API instance serves any stream.
//!
//! Each event is `event: unit`, `id:` the cursor that resumes right after it, `data:` the event
//! as JSON; a task stream ends with `event: end` and the task's status.
//!
//! A stream does not poll: it reads its scope once when it opens, then again each time the
//! process's one reader of the log ([`EventFeed`](slotd_units::event_feed::EventFeed)) says its
//! tenant (or its task) got events. A task stream also checks every half minute whether its
//! task ended, should the end ever come without an event to wake it.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

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
use slotd_store::{EventCursor, EventScope, UnitEvent};
use slotd_units::event_feed::{POLL, Subscription};
use slotd_units::services::Services;

/// How often a task stream checks whether its task ended when no event woke it (give or take
/// a fifth, so that streams opened together do not check together). A safety net: every unit
/// transition writes an event in its own transaction, so the move that ends a task wakes its
/// streams, which then see it ended; this only bounds how long a stream could outlive its task
/// should an end ever come without one.
const END_CHECK: Duration = Duration::from_secs(30);
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
    // Subscribed before the first read: whatever the feed sees after it wakes this stream.
    let feed =
        services
            .events
            .subscribe(&services.store, &services.metrics, &tenant, task.as_deref());
    let state = Reader {
        services,
        tenant,
        task,
        cursor: start,
        queued: VecDeque::new(),
        done: false,
        feed,
        stale: true,
        check_end: true,
        settling: false,
        next_check: Instant::now() + end_check(),
    };
    let events = futures::stream::unfold(state, |mut r| async move {
        let event = r.next().await?;
        Some((Ok(event), r))
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

/// [`END_CHECK`], jittered.
fn end_check() -> Duration {
    END_CHECK.mul_f64(rand::rng().random_range(0.8..1.2))
}

/// One stream's reading state.
struct Reader {
    services: Services,
    tenant: String,
    task: Option<String>,
    cursor: EventCursor,
    queued: VecDeque<(EventCursor, UnitEvent)>,
    done: bool,
    /// What wakes the stream when its scope got events.
    feed: Subscription,
    /// Read the scope before waiting again: the stream just opened, or was woken.
    stale: bool,
    /// A task stream checks whether its task ended before waiting again.
    check_end: bool,
    /// The task ended but its last events are not all read yet: check (and read) again soon.
    settling: bool,
    /// When a task stream checks whether its task ended, whatever the feed says.
    next_check: Instant,
}

/// Where a task stream's task stands.
enum Ending {
    /// Not ended (or not a task stream).
    Open,
    /// Ended, with events the stream has not read yet (on PostgreSQL the last ones may still
    /// be settling when the task shows ended).
    Settling,
    /// Ended and every event read: the stream ends with this status.
    Ended(&'static str),
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
            if self.stale {
                match self.read().await {
                    // Sent, then read on until a read brings nothing.
                    Ok(true) => continue,
                    Ok(false) => self.stale = false,
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
            }
            if self.check_end && self.task.is_some() {
                self.check_end = false;
                match self.ended().await {
                    Ending::Ended(status) => {
                        self.done = true;
                        return Some(
                            Event::default().event("end").data(
                                json!({ "task_id": self.task, "status": status }).to_string(),
                            ),
                        );
                    }
                    Ending::Settling => {
                        self.settling = true;
                        self.next_check = Instant::now() + POLL;
                    }
                    Ending::Open => self.settling = false,
                }
            }
            self.wait().await;
        }
    }

    /// Until there may be something to read: the feed wakes the stream, or (a task stream)
    /// it is time to check whether the task ended.
    async fn wait(&mut self) {
        if self.task.is_none() {
            self.feed.woken().await;
            self.stale = true;
            return;
        }
        tokio::select! {
            () = self.feed.woken() => {
                self.stale = true;
                self.check_end = true;
            }
            () = tokio::time::sleep_until(self.next_check) => {
                self.check_end = true;
                // Still settling: read too, as the events may have settled since.
                self.stale |= self.settling;
                self.next_check = Instant::now() + end_check();
            }
        }
    }

    /// Read a page into the queue; whether it brought events. A read that brings none has
    /// read everything committed before it (on PostgreSQL, what is settled at its horizon).
    async fn read(&mut self) -> Result<bool, String> {
        loop {
            let scope = EventScope {
                tenant: &self.tenant,
                task_id: self.task.as_deref(),
            };
            let before = self.cursor;
            self.feed.count_read();
            let page = self
                .services
                .store
                .unit_events_after(scope, self.cursor, PAGE)
                .await
                .map_err(|e| format!("reading events: {e}"))?;
            self.cursor = page.next;
            if !page.events.is_empty() {
                self.queued.extend(page.events);
                return Ok(true);
            }
            // An empty end of a batch (PostgreSQL) read what was settled at an older horizon:
            // read once more, from a horizon taken now.
            if before.horizon == 0 {
                return Ok(false);
            }
        }
    }

    /// For a task stream: whether the task has ended and every one of its events has been
    /// read.
    async fn ended(&self) -> Ending {
        use slotd_core::model::TaskStatus;
        let Some(id) = self.task.as_deref() else {
            return Ending::Open;
        };
        let store = &self.services.store;
        let Ok(Some(task)) = store.task_get(&self.tenant, id).await else {
            return Ending::Open;
        };
        let status = task.counts.task_status();
        if !matches!(
            status,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        ) {
            return Ending::Open;
        }
        let behind = store
            .unit_events_behind(id, self.cursor)
            .await
            .unwrap_or(true);
        if behind || !self.queued.is_empty() {
            Ending::Settling
        } else {
            Ending::Ended(status.as_str())
        }
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

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
