//! `POST /v1/tasks/{type}`: check the request, let the type's handler `plan` it into units, store
//! the task and its units in one transaction, wake the pool.
//!
//! Nothing is stored unless every check passed: the envelope (400/422), the task type (404),
//! the handler's own validation (422), the unit count (422). A repeated idempotency key of the
//! same tenant answers the task it already names (the store decides, atomically).

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Map, Value};

use super::auth::Tenant;
use super::error::{ApiError, log_store_error};
use slotd_core::model::TaskStatus;
use slotd_units::lifecycle::CreateError;
pub use slotd_units::lifecycle::CreateRequest;
use slotd_units::services::Services;

/// Accepted `priority` range; higher runs first.
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i64> = -1000..=1000;
/// Longest accepted `idempotency_key`.
pub const IDEMPOTENCY_KEY_MAX: usize = 255;
/// Longest accepted `callback_url`.
pub const CALLBACK_URL_MAX: usize = 2048;

/// The fields of a create's body ([`CreateBody`] documents them).
pub const KNOWN_FIELDS: [&str; 7] = [
    "payload",
    "idempotency_key",
    "priority",
    "callback_url",
    "deadline",
    "start_by",
    "deadline_policy",
];

/// Parse and check the envelope, naming the offending field. Malformed JSON, unknown fields
/// and wrong types are 400; values of the right type but out of range are 422.
pub fn parse_request(body: &[u8]) -> Result<CreateRequest, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| ApiError::BadRequest {
        detail: format!("request body is not valid JSON: {e}"),
        field: None,
    })?;
    let Value::Object(mut fields) = value else {
        return Err(ApiError::BadRequest {
            detail: "request body must be a JSON object like {\"payload\": {...}}".into(),
            field: None,
        });
    };
    if let Some(unknown) = fields.keys().find(|k| !KNOWN_FIELDS.contains(&k.as_str())) {
        return Err(ApiError::bad_field(
            unknown,
            format!(
                "unknown field {unknown:?}; expected payload, idempotency_key, priority, \
                 callback_url, deadline, start_by, deadline_policy"
            ),
        ));
    }
    let payload = match fields.remove("payload") {
        Some(p @ Value::Object(_)) => p.to_string(),
        Some(_) => {
            return Err(ApiError::bad_field(
                "payload",
                "payload must be a JSON object",
            ));
        }
        None => return Err(ApiError::bad_field("payload", "payload is required")),
    };
    Ok(CreateRequest {
        payload,
        idempotency_key: idempotency_key(&mut fields)?,
        priority: priority(&mut fields)?,
        completion_webhook_url: callback_url(&mut fields)?,
        terms: super::task_terms::parse(&mut fields)?,
    })
}

fn idempotency_key(fields: &mut Map<String, Value>) -> Result<Option<String>, ApiError> {
    const F: &str = "idempotency_key";
    match fields.remove(F) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(k)) if k.is_empty() => Err(ApiError::invalid_field(
            F,
            "idempotency_key must not be empty",
        )),
        Some(Value::String(k)) if k.len() > IDEMPOTENCY_KEY_MAX => Err(ApiError::invalid_field(
            F,
            format!("idempotency_key is longer than {IDEMPOTENCY_KEY_MAX} bytes"),
        )),
        Some(Value::String(k)) => Ok(Some(k)),
        Some(_) => Err(ApiError::bad_field(F, "idempotency_key must be a string")),
    }
}

fn priority(fields: &mut Map<String, Value>) -> Result<i32, ApiError> {
    const F: &str = "priority";
    match fields.remove(F) {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => {
            // JSON has one number type: 3.0 is the integer 3 (as JSON Schema reads it too).
            let p = n
                .as_i64()
                .or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 1e15)
                        .map(|f| f as i64)
                })
                .ok_or_else(|| ApiError::bad_field(F, "priority must be an integer"))?;
            if !PRIORITY_RANGE.contains(&p) {
                return Err(ApiError::invalid_field(
                    F,
                    format!(
                        "priority {p} is out of range {}..={}",
                        PRIORITY_RANGE.start(),
                        PRIORITY_RANGE.end()
                    ),
                ));
            }
            // In range, so it fits.
            i32::try_from(p).map_err(|_| ApiError::invalid_field(F, "priority is out of range"))
        }
        Some(_) => Err(ApiError::bad_field(F, "priority must be an integer")),
    }
}

fn callback_url(fields: &mut Map<String, Value>) -> Result<Option<String>, ApiError> {
    const F: &str = "callback_url";
    let text = match fields.remove(F) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(u)) => u,
        Some(_) => return Err(ApiError::bad_field(F, "callback_url must be a string")),
    };
    if text.len() > CALLBACK_URL_MAX {
        return Err(ApiError::invalid_field(
            F,
            format!("callback_url is longer than {CALLBACK_URL_MAX} bytes"),
        ));
    }
    let url = url::Url::parse(&text)
        .map_err(|e| ApiError::invalid_field(F, format!("callback_url is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(ApiError::invalid_field(
            F,
            "callback_url must be an http:// or https:// URL with a host",
        ));
    }
    Ok(Some(text))
}

/// The SSRF rule at the door (docs/trust-model.md): a `callback_url` naming a loopback, private or
/// link-local address (or `localhost`) is refused now, unless `[webhooks] allow_private`.
/// Names are resolved and checked again at every delivery.
fn refuse_internal_target(text: &str, allow_private: bool) -> Result<(), ApiError> {
    if allow_private {
        return Ok(());
    }
    let Some(host) = url::Url::parse(text)
        .ok()
        .and_then(|u| u.host_str().map(str::to_string))
    else {
        return Ok(());
    };
    if slotd_core::address::names_internal_host(&host) {
        return Err(ApiError::invalid_field(
            "callback_url",
            format!(
                "callback_url targets {host}, a loopback, private or link-local address; \
                 completion webhooks go to public addresses only (unless [webhooks] \
                 allow_private = true)"
            ),
        ));
    }
    Ok(())
}

/// The request body of `POST /v1/tasks/{type}`, as documented. The body is checked by
/// [`parse_request`] (field by field, naming the culprit); a test keeps the two in step.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Read by the OpenAPI document, not by code.
pub struct CreateBody {
    /// What to do, in the task type's own terms; the handler's `plan` splits it into units
    /// (and refuses it with 422 when it is not valid).
    #[schema(value_type = Object)]
    payload: Map<String, Value>,
    /// A repeat with the same key (per tenant) answers the task it already created.
    #[schema(min_length = 1, max_length = 255)]
    idempotency_key: Option<String>,
    /// Higher runs first within the tenant's fair share (default 0).
    #[schema(minimum = -1000, maximum = 1000)]
    priority: Option<i32>,
    /// Where the task's completion webhook goes (a public `http`/`https` URL).
    #[schema(max_length = 2048, pattern = "^[hH][tT][tT][pP][sS]?://")]
    callback_url: Option<String>,
    /// Complete by this time (RFC 3339). A unit whose projected completion (projected start
    /// plus the provider's p95 duration) is later fails with `deadline_unreachable` before any
    /// provider request, unless `deadline_policy` is `best_effort`. Earlier deadlines fill
    /// first within a priority.
    #[schema(format = DateTime)]
    deadline: Option<String>,
    /// Be submitted by this time (RFC 3339), under the same policy.
    #[schema(format = DateTime)]
    start_by: Option<String>,
    /// `refuse` (default): fail units that cannot meet their terms before submitting them;
    /// `best_effort`: run them anyway and record the decision in their events.
    #[schema(value_type = Option<DeadlinePolicy>)]
    deadline_policy: Option<String>,
}

/// What happens to a unit that cannot meet its deadline or start-by time.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)] // Read by the OpenAPI document, not by code.
pub enum DeadlinePolicy {
    Refuse,
    BestEffort,
}

/// What a create answers.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Accepted {
    pub task_id: String,
    /// `pending` for a new task; for a repeated idempotency key, where that task is now.
    pub status: TaskStatus,
}

/// Create a task
///
/// The handler serving the type plans the payload into units, stored with the task in one
/// transaction; the units then wait for slots of their pools. Nothing is stored unless every
/// check passed.
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}",
    tag = "tasks",
    operation_id = "create_task",
    params(("id" = String, Path, description = "The task type (one a loaded handler serves, see `GET /v1/handlers`)")),
    request_body(content = CreateBody, content_type = "application/json"),
    responses(
        (status = 202, description = "Created (or, for a repeated idempotency key, the task it names)", body = Accepted,
            links(
                ("read" = (operation_id = "read_task", parameters(("id" = "$response.body#/task_id")))),
                ("cancel" = (operation_id = "cancel_task", parameters(("id" = "$response.body#/task_id")))),
                ("retry" = (operation_id = "retry_task", parameters(("id" = "$response.body#/task_id")))),
                ("events" = (operation_id = "task_events", parameters(("id" = "$response.body#/task_id")))),
                ("webhooks" = (operation_id = "task_webhooks", parameters(("id" = "$response.body#/task_id")))),
            )),
        (status = 400, description = "Malformed body: bad JSON, an unknown field, a wrong type"),
        (status = 404, description = "No loaded handler serves this task type"),
        (status = 422, description = "Refused: the handler's plan said no, a value is out of range, too many units, a private callback_url"),
        (status = 502, description = "The handler crashed planning this payload (a trap, its CPU or memory budget): the same payload fails the same way, so clients do not retry it; nothing is stored"),
    ),
)]
pub async fn create(
    State(services): State<Services>,
    Tenant(tenant): Tenant,
    Path(task_type): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Accepted>), ApiError> {
    let body = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge {
                limit: services.config.max_body_bytes,
            }
        } else {
            ApiError::BadRequest {
                detail: format!("could not read the request body: {}", r.body_text()),
                field: None,
            }
        }
    })?;

    // A route's name is a task type too; it wins over a handler's type of the same name.
    let route = services.config.routes.get(&task_type);
    let handler = match route {
        Some(_) => None,
        None => services.registry.for_type(&task_type),
    };
    if route.is_none() && handler.is_none() {
        return Err(ApiError::NotFound(format!(
            "no loaded handler or route serves task type {task_type:?}"
        )));
    }
    let request = parse_request(&body)?;
    let now = services.clock.now_ms();
    super::task_terms::check_not_past(&request.terms, now)?;
    if let Some(url) = &request.completion_webhook_url {
        refuse_internal_target(url, services.config.webhooks.allow_private)?;
    }

    let created = match (route, handler) {
        (Some(route), _) => {
            slotd_units::lifecycle::create_routed_task(
                &services, &task_type, route, &tenant, request, now,
            )
            .await
        }
        (None, Some(handler)) => {
            slotd_units::lifecycle::create_task(
                &services, &handler, &tenant, &task_type, request, now,
            )
            .await
        }
        (None, None) => return Err(ApiError::NotFound(format!("task type {task_type:?}"))),
    }
    .map_err(refused)?;
    let (task_id, status) = (created.task_id, created.status);
    Ok((StatusCode::ACCEPTED, Json(Accepted { task_id, status })))
}

/// A create the lifecycle refused, as the client sees it.
fn refused(e: CreateError) -> ApiError {
    match e {
        CreateError::Refused { detail, field } => ApiError::Unprocessable { detail, field },
        CreateError::Invalid { field, detail } => ApiError::invalid_field(field, detail),
        CreateError::HandlerUnavailable(detail) => ApiError::Unavailable(detail),
        CreateError::HandlerFault(detail) => ApiError::HandlerFault(detail),
        CreateError::Store { doing, error } => log_store_error(doing)(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(e: ApiError) -> (u16, Option<String>) {
        e.status_and_field()
    }

    #[test]
    fn envelope_checks_name_the_field() {
        let bad = |body: &str| field_of(parse_request(body.as_bytes()).expect_err("refused"));
        assert_eq!(bad("{"), (400, None));
        assert_eq!(bad("[]"), (400, None));
        assert_eq!(bad(r#"{"payload":{},"x":1}"#), (400, Some("x".into())));
        assert_eq!(bad(r#"{}"#), (400, Some("payload".into())));
        assert_eq!(bad(r#"{"payload":3}"#), (400, Some("payload".into())));
        assert_eq!(
            bad(r#"{"payload":{},"priority":"high"}"#),
            (400, Some("priority".into()))
        );
        assert_eq!(
            bad(r#"{"payload":{},"priority":1001}"#),
            (422, Some("priority".into()))
        );
        assert_eq!(
            bad(r#"{"payload":{},"priority":1.5}"#),
            (400, Some("priority".into()))
        );
        assert_eq!(
            bad(r#"{"payload":{},"callback_url":"ftp://x/y"}"#),
            (422, Some("callback_url".into()))
        );
        assert_eq!(
            bad(r#"{"payload":{},"idempotency_key":""}"#),
            (422, Some("idempotency_key".into()))
        );
    }

    #[test]
    fn envelope_defaults_and_values() {
        let ok = parse_request(
            br#"{"payload":{"a":1},"priority":-1000,"idempotency_key":"k",
                 "callback_url":"https://example.com/hook"}"#,
        )
        .expect("valid");
        assert_eq!(
            ok,
            CreateRequest {
                payload: r#"{"a":1}"#.into(),
                idempotency_key: Some("k".into()),
                priority: -1000,
                completion_webhook_url: Some("https://example.com/hook".into()),
                terms: Default::default(),
            }
        );
        let min = parse_request(br#"{"payload":{}}"#).expect("valid");
        assert_eq!(min.priority, 0);
        assert_eq!(min.idempotency_key, None);
    }
}
