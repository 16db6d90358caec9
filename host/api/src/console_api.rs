//! What the operator console reads beyond the task and pool API:
//! - `GET /v1/me`: the caller's tenant and whether it is an admin (which filters to offer);
//! - `GET /v1/pools/{pool}/timeline?minutes=N`: the slot timeline (see `timeline.rs`);
//! - `GET /v1/webhooks?tenant=&status=&limit=`: completion webhook deliveries across tasks.
//!
//! Tenants see only their own records. On the timeline, other tenants' intervals stay (the
//! occupancy of a shared pool is what the chart is for, and `GET /v1/pools` shows the slots in
//! use anyway) but anonymized: no unit, task or tenant. An admin sees everything.

use std::collections::HashMap;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::caller::Caller;
use super::error::{ApiError, log_store_error};
use super::timeline::{self, Interval, MINUTE_MS, MinuteStats, Outcome};
use slotd_units::services::Services;

/// The timeline's window when `minutes` is not given.
pub const TIMELINE_MINUTES_DEFAULT: u32 = 10;
/// The longest window.
pub const TIMELINE_MINUTES_MAX: u32 = 60;
/// Most slot transitions one timeline reads (the newest are kept; `truncated` says so).
pub const TIMELINE_EVENTS_MAX: u32 = 20_000;
/// Deliveries listed when `limit` is not given, and the most.
pub const WEBHOOKS_LIMIT_DEFAULT: u32 = 100;
pub const WEBHOOKS_LIMIT_MAX: u32 = 500;

/// Routes of the console's reads.
pub fn router() -> OpenApiRouter<Services> {
    OpenApiRouter::new()
        .routes(routes!(me))
        .routes(routes!(pool_timeline))
        .routes(routes!(webhooks))
}

/// Who the caller is.
#[derive(Debug, Serialize, ToSchema)]
pub struct Me {
    pub tenant: String,
    /// An admin key (or loopback without keys): sees and acts on every tenant's tasks.
    pub admin: bool,
}

/// The caller
///
/// The tenant the request acts for and whether its key is an admin's.
#[utoipa::path(
    get,
    path = "/v1/me",
    tag = "operations",
    operation_id = "me",
    responses((status = 200, description = "The caller", body = Me)),
)]
async fn me(caller: Caller) -> Json<Me> {
    Json(Me {
        tenant: caller.tenant,
        admin: caller.admin,
    })
}

/// A pool's slot timeline.
#[derive(Debug, Serialize, ToSchema)]
pub struct TimelineView {
    pub pool: String,
    /// The window: from `since_ms` to `now_ms` (Unix ms).
    pub since_ms: i64,
    pub now_ms: i64,
    pub minutes: u32,
    /// The pool's configured limit; absent for a pool only stored units name.
    pub max_slots: Option<u32>,
    /// Lanes used by `intervals` (a lane's intervals never overlap).
    pub lanes: u32,
    /// The window held more slot changes than one answer reads; the oldest were left out.
    pub truncated: bool,
    pub intervals: Vec<IntervalView>,
    /// Throughput and provider latency, minute by minute.
    pub per_minute: Vec<MinuteStats>,
    pub latency: Latency,
}

/// One unit's hold of a slot; another tenant's (for a non-admin) without unit, task or tenant.
#[derive(Debug, Serialize, ToSchema)]
pub struct IntervalView {
    pub unit_id: Option<String>,
    pub task_id: Option<String>,
    pub tenant: Option<String>,
    pub start_ms: i64,
    /// Absent while the slot is still held.
    pub end_ms: Option<i64>,
    pub slot: u32,
    pub outcome: Option<Outcome>,
    /// It began before the window.
    pub clipped: bool,
}

/// Provider job durations over the window (jobs that ended in it).
#[derive(Debug, Serialize, ToSchema)]
pub struct Latency {
    pub p50_ms: Option<i64>,
    pub p95_ms: Option<i64>,
}

/// Refuse query parameters other than `known`, naming the first unknown one.
fn only_known(query: &HashMap<String, String>, known: &[&str]) -> Result<(), ApiError> {
    match query.keys().find(|k| !known.contains(&k.as_str())) {
        Some(unknown) => Err(ApiError::bad_field(
            unknown,
            format!(
                "unknown query parameter {unknown:?}; expected {}",
                known.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// A number parameter in `1..=max` (digits only), `default` when absent.
fn number(
    query: &HashMap<String, String>,
    name: &str,
    default: u32,
    max: u32,
) -> Result<u32, ApiError> {
    match query.get(name).map(String::as_str) {
        None => Ok(default),
        // Digits only: `?minutes=` and `+5` are not the documented integers.
        Some(v) => match v
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| v.parse::<u32>().ok())
            .flatten()
        {
            Some(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(ApiError::bad_field(
                name,
                format!("{name} {v:?} is not a number from 1 to {max}"),
            )),
        },
    }
}

/// A pool's slot timeline
///
/// Which unit held which slot over the last minutes (from the durable event log), with jobs
/// ended and provider latency per minute: what the console's Gantt chart draws.
#[utoipa::path(
    get,
    path = "/v1/pools/{pool}/timeline",
    tag = "pools",
    operation_id = "pool_timeline",
    params(
        ("pool" = String, Path, description = "The pool"),
        ("minutes" = Option<u32>, Query, minimum = 1, maximum = 60, description = "The window (default 10)"),
    ),
    responses(
        (status = 200, description = "The timeline", body = TimelineView),
        (status = 400, description = "A bad or unknown query parameter"),
        (status = 404, description = "No such pool"),
    ),
)]
async fn pool_timeline(
    State(services): State<Services>,
    caller: Caller,
    Path(pool): Path<String>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Json<TimelineView>, ApiError> {
    let Query(query) = query.map_err(ApiError::malformed_query)?;
    only_known(&query, &["minutes"])?;
    let minutes = number(
        &query,
        "minutes",
        TIMELINE_MINUTES_DEFAULT,
        TIMELINE_MINUTES_MAX,
    )?;
    let now = services.clock.now_ms();
    let since = now - i64::from(minutes) * MINUTE_MS;
    let max_slots = slotd_units::pools_now::pool_limits_now(&services)
        .get(&pool)
        .map(|l| l.max_slots);
    let log = services
        .store
        .pool_slot_log(&pool, since, TIMELINE_EVENTS_MAX)
        .await
        .map_err(log_store_error("reading the pool's slot log"))?;
    if max_slots.is_none() && log.events.is_empty() && log.holders.is_empty() {
        return Err(ApiError::NotFound(format!("no pool {pool:?}")));
    }
    let t = timeline::derive(&log, since, now);
    Ok(Json(TimelineView {
        intervals: t.intervals.iter().map(|i| shown(&caller, i)).collect(),
        pool,
        since_ms: since,
        now_ms: now,
        minutes,
        max_slots,
        lanes: t.lanes,
        truncated: log.truncated,
        per_minute: t.minutes,
        latency: Latency {
            p50_ms: t.p50_ms,
            p95_ms: t.p95_ms,
        },
    }))
}

/// An interval as `caller` may see it: another tenant's without unit, task or tenant.
fn shown(caller: &Caller, i: &Interval) -> IntervalView {
    let visible = caller.sees(&i.tenant);
    let named = |v: &str| visible.then(|| v.to_string());
    IntervalView {
        unit_id: named(&i.unit_id),
        task_id: named(&i.task_id),
        tenant: named(&i.tenant),
        start_ms: i.start_ms,
        end_ms: i.end_ms,
        slot: i.slot,
        outcome: i.outcome,
        clipped: i.clipped,
    }
}

/// The statuses a delivery can be in.
const DELIVERY_STATUSES: [&str; 3] = ["pending", "delivered", "failed"];

/// `GET /v1/webhooks`.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookList {
    /// Newest first.
    pub deliveries: Vec<DeliverySummary>,
}

/// A completion webhook delivery, without its attempts.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliverySummary {
    pub id: String,
    pub task_id: String,
    pub tenant: String,
    pub url: String,
    pub event: String,
    /// `pending`, `delivered` or `failed` (given up).
    pub status: String,
    /// Attempts made so far.
    pub attempts: i64,
    pub next_at: i64,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub created_at: i64,
    pub delivered_at: Option<i64>,
}

/// Webhook deliveries
///
/// The newest completion webhook deliveries across tasks (the tenant's; an admin's, every
/// tenant's or one); the attempts of one task's are at `GET /v1/tasks/{id}/webhooks`.
#[utoipa::path(
    get,
    path = "/v1/webhooks",
    tag = "tasks",
    operation_id = "list_webhooks",
    params(
        ("tenant" = Option<String>, Query, description = "Only this tenant's (another tenant's needs an admin key)"),
        ("status" = Option<String>, Query, pattern = "^(pending|delivered|failed)?$", description = "`pending`, `delivered` or `failed` (empty: any)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Most deliveries (default 100)"),
    ),
    responses(
        (status = 200, description = "The deliveries", body = WebhookList),
        (status = 400, description = "A bad or unknown query parameter"),
        (status = 403, description = "Another tenant's deliveries, asked with a non-admin key"),
    ),
)]
async fn webhooks(
    State(services): State<Services>,
    caller: Caller,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Json<WebhookList>, ApiError> {
    let Query(query) = query.map_err(ApiError::malformed_query)?;
    only_known(&query, &["tenant", "status", "limit"])?;
    let scope = caller.list_scope(query.get("tenant").map(String::as_str))?;
    let status = match query.get("status").map(String::as_str) {
        None | Some("") => None,
        Some(s) if DELIVERY_STATUSES.contains(&s) => Some(s),
        Some(s) => {
            return Err(ApiError::bad_field(
                "status",
                format!(
                    "status {s:?} is not one of {}",
                    DELIVERY_STATUSES.join(", ")
                ),
            ));
        }
    };
    let limit = number(&query, "limit", WEBHOOKS_LIMIT_DEFAULT, WEBHOOKS_LIMIT_MAX)?;
    let list = services
        .store
        .webhook_recent(scope.as_deref(), status, limit)
        .await
        .map_err(log_store_error("listing webhook deliveries"))?;
    let deliveries = list
        .into_iter()
        .map(|d| DeliverySummary {
            id: d.id,
            task_id: d.task_id,
            tenant: d.tenant,
            url: d.url,
            event: d.event,
            status: d.status,
            attempts: d.attempts,
            next_at: d.next_at,
            last_status: d.last_status,
            last_error: d.last_error,
            created_at: d.created_at,
            delivered_at: d.delivered_at,
        })
        .collect();
    Ok(Json(WebhookList { deliveries }))
}
