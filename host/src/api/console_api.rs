//! What the operator console reads beyond the task and pool API:
//! - `GET /v1/me`: the caller's tenant and whether it is an admin (which filters to offer);
//! - `GET /v1/pools/{pool}/timeline?minutes=N`: the slot timeline (see `timeline.rs`);
//! - `GET /v1/webhooks?tenant=&status=&limit=`: completion webhook deliveries across tasks.
//!
//! Tenants see only their own records. On the timeline, other tenants' intervals stay (the
//! occupancy of a shared pool is what the chart is for, and `GET /v1/pools` shows the slots in
//! use anyway) but anonymized: no unit, task or tenant. An admin sees everything.

use std::collections::HashMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use super::caller::Caller;
use super::error::{ApiError, log_store_error};
use super::tasks::bad_query;
use super::timeline::{self, Interval, MINUTE_MS};
use crate::services::Services;

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
pub fn router() -> Router<Services> {
    Router::new()
        .route("/v1/me", get(me))
        .route("/v1/pools/{pool}/timeline", get(pool_timeline))
        .route("/v1/webhooks", get(webhooks))
}

/// `GET /v1/me`: `{tenant, admin}`.
async fn me(caller: Caller) -> Json<Value> {
    Json(json!({ "tenant": caller.tenant, "admin": caller.admin }))
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

/// A number parameter in `1..=max`, `default` when absent or empty.
fn number(
    query: &HashMap<String, String>,
    name: &str,
    default: u32,
    max: u32,
) -> Result<u32, ApiError> {
    match query
        .get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
    {
        None => Ok(default),
        Some(v) => match v.parse::<u32>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(ApiError::bad_field(
                name,
                format!("{name} {v:?} is not a number from 1 to {max}"),
            )),
        },
    }
}

/// `GET /v1/pools/{pool}/timeline?minutes=N`:
/// `{pool, since_ms, now_ms, minutes, max_slots, lanes, truncated, intervals: [{unit_id,
/// task_id, tenant, start_ms, end_ms, slot, outcome, clipped}], per_minute: [{start_ms, ended,
/// returned, over_capacity, p50_ms, p95_ms}], latency: {p50_ms, p95_ms}}`.
async fn pool_timeline(
    State(services): State<Services>,
    caller: Caller,
    Path(pool): Path<String>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(bad_query)?;
    only_known(&query, &["minutes"])?;
    let minutes = number(
        &query,
        "minutes",
        TIMELINE_MINUTES_DEFAULT,
        TIMELINE_MINUTES_MAX,
    )?;
    let now = services.clock.now_ms();
    let since = now - i64::from(minutes) * MINUTE_MS;
    let max_slots = crate::scheduler::pool_limits(&services.config, &services.registry)
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
    let intervals: Vec<Value> = t.intervals.iter().map(|i| shown(&caller, i)).collect();
    Ok(Json(json!({
        "pool": pool,
        "since_ms": since,
        "now_ms": now,
        "minutes": minutes,
        "max_slots": max_slots,
        "lanes": t.lanes,
        "truncated": log.truncated,
        "intervals": intervals,
        "per_minute": t.minutes,
        "latency": { "p50_ms": t.p50_ms, "p95_ms": t.p95_ms },
    })))
}

/// An interval as `caller` may see it: another tenant's without unit, task or tenant.
fn shown(caller: &Caller, i: &Interval) -> Value {
    let visible = caller.sees(&i.tenant);
    let named = |v: &str| {
        if visible { Value::from(v) } else { Value::Null }
    };
    json!({
        "unit_id": named(&i.unit_id),
        "task_id": named(&i.task_id),
        "tenant": named(&i.tenant),
        "start_ms": i.start_ms,
        "end_ms": i.end_ms,
        "slot": i.slot,
        "outcome": i.outcome,
        "clipped": i.clipped,
    })
}

/// The statuses a delivery can be in.
const DELIVERY_STATUSES: [&str; 3] = ["pending", "delivered", "failed"];

/// `GET /v1/webhooks?tenant=&status=&limit=`: the newest deliveries across tasks, newest
/// first, `{deliveries: [{id, task_id, tenant, url, event, status, attempts, next_at,
/// last_status, last_error, created_at, delivered_at}]}`; the attempts of one task's are at
/// `GET /v1/tasks/{id}/webhooks`.
async fn webhooks(
    State(services): State<Services>,
    caller: Caller,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(bad_query)?;
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
    let deliveries: Vec<Value> = list
        .into_iter()
        .map(|d| {
            json!({
                "id": d.id,
                "task_id": d.task_id,
                "tenant": d.tenant,
                "url": d.url,
                "event": d.event,
                "status": d.status,
                "attempts": d.attempts,
                "next_at": d.next_at,
                "last_status": d.last_status,
                "last_error": d.last_error,
                "created_at": d.created_at,
                "delivered_at": d.delivered_at,
            })
        })
        .collect();
    Ok(Json(json!({ "deliveries": deliveries })))
}
