//! `/v1/tenants/{name}`: tenant budgets (README "Tenant budgets").
//!
//! - `PUT /v1/tenants/{name}/budget` `{"limit": 500.0, "period": "1d"}` sets what the tenant's
//!   units may cost per period (admin only; on the loopback default every caller is admin). The
//!   tenant's units held back for budget are filled again at once if the new limit covers them.
//! - `GET /v1/tenants/{name}/usage`: spent, reserved and remaining in the current period, for
//!   the tenant itself or an admin.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::caller::Caller;
use super::error::{ApiError, log_store_error};
use slotd_core::config::BudgetConfig;
use slotd_store::{Budget, Usage};
use slotd_units::services::Services;

/// Routes under `/v1/tenants`.
pub fn router() -> OpenApiRouter<Services> {
    OpenApiRouter::new()
        .routes(routes!(put_budget))
        .routes(routes!(usage))
}

/// The body of `PUT /v1/tenants/{name}/budget`.
#[derive(Debug, serde::Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Read by the OpenAPI document, not by code.
pub struct BudgetBody {
    /// The most the tenant's units may cost per period, in the provider's cost unit.
    #[schema(minimum = 0)]
    limit: f64,
    /// The period, like `"1h"` or `"1d"` (1 second to 366 days); periods are aligned to the
    /// Unix epoch.
    period: String,
}

/// A tenant's budget and what it has used in the current period.
#[derive(Debug, Serialize, ToSchema)]
pub struct UsageView {
    pub tenant: String,
    /// The budget in force; absent when the tenant has none (its use is then not reserved,
    /// only the provider's costs are summed).
    pub budget: Option<Budget>,
    /// The current period's figures; absent without a budget.
    pub period: Option<Usage>,
    /// What is left this period: limit − spent − reserved (never below 0).
    pub remaining: Option<f64>,
    /// Over every unit the tenant ever ran: the provider-reported cost, and the handlers'
    /// estimates.
    pub total_cost: f64,
    pub total_estimated: f64,
}

fn check_name(name: &str) -> Result<(), ApiError> {
    slotd_core::config::check_tenant_name("tenant", name)
        .map_err(|e| ApiError::invalid_field("name", format!("{e:#}")))
}

/// Set a tenant's budget
///
/// Admin only. Replaces the tenant's budget, a configured one too. A budget set here is kept
/// across restarts: the configuration file's `[tenants.NAME] budget` does not replace it.
#[utoipa::path(
    put,
    path = "/v1/tenants/{name}/budget",
    tag = "tenants",
    operation_id = "put_tenant_budget",
    params(("name" = String, Path, description = "The tenant")),
    request_body(content = BudgetBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The budget in force and the current period", body = UsageView),
        (status = 400, description = "Malformed body: bad JSON, an unknown field, a wrong type"),
        (status = 403, description = "Not an admin key"),
        (status = 422, description = "Not a tenant name, a limit below 0 or a period out of range"),
    ),
)]
async fn put_budget(
    State(services): State<Services>,
    caller: Caller,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<UsageView>, ApiError> {
    if !caller.admin {
        return Err(ApiError::Forbidden(
            "setting a budget needs an admin API key (admin = true in [[api_keys]])".into(),
        ));
    }
    check_name(&name)?;
    let body = body.map_err(|r| ApiError::BadRequest {
        detail: format!("could not read the request body: {}", r.body_text()),
        field: None,
    })?;
    let parsed = parse_budget(&body)?;
    let budget = Budget {
        tenant: name.clone(),
        limit: parsed.limit,
        period_ms: parsed.period_ms(),
        source: "api".into(),
        updated_at: services.clock.now_ms(),
    };
    services
        .store
        .budget_set(&budget)
        .await
        .map_err(log_store_error("setting a budget"))?;
    tracing::info!(tenant = %name, limit = budget.limit, period_ms = budget.period_ms, "tenant budget set");
    // Its held-back units may fit now: due again, their tasks' snapshots gone, their pools
    // woken (a lifecycle write with its follow-ups).
    slotd_units::lifecycle::release_holds(&services, &name, budget.updated_at)
        .await
        .map_err(log_store_error("releasing the units the budget held"))?;
    view(&services, &name).await.map(Json)
}

/// A tenant's budget and spending
///
/// For the tenant itself or an admin: the budget, the current period's spent and reserved
/// cost, what remains, and the all-time cost.
#[utoipa::path(
    get,
    path = "/v1/tenants/{name}/usage",
    tag = "tenants",
    operation_id = "tenant_usage",
    params(("name" = String, Path, description = "The tenant")),
    responses(
        (status = 200, description = "The tenant's budget and spending", body = UsageView),
        (status = 403, description = "Another tenant's, without an admin key"),
        (status = 422, description = "Not a tenant name"),
    ),
)]
async fn usage(
    State(services): State<Services>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<UsageView>, ApiError> {
    if !caller.admin && caller.tenant != name {
        return Err(ApiError::Forbidden(format!(
            "tenant {name:?}: only the tenant itself or an admin API key may read its usage"
        )));
    }
    check_name(&name)?;
    view(&services, &name).await.map(Json)
}

async fn view(services: &Services, tenant: &str) -> Result<UsageView, ApiError> {
    let store = &services.store;
    let budget = store
        .budget_get(tenant)
        .await
        .map_err(log_store_error("reading a budget"))?;
    let period = match &budget {
        Some(b) => Some(
            store
                .budget_usage(tenant, b.period_ms, services.clock.now_ms())
                .await
                .map_err(log_store_error("reading a budget's usage"))?,
        ),
        None => None,
    };
    let remaining = budget
        .as_ref()
        .zip(period.as_ref())
        .map(|(b, u)| (b.limit - u.spent - u.reserved).max(0.0));
    let totals = store
        .cost_by_tenant()
        .await
        .map_err(log_store_error("summing costs"))?;
    let (total_cost, total_estimated) = totals
        .into_iter()
        .find(|(t, ..)| t == tenant)
        .map_or((0.0, 0.0), |(_, c, e, _)| (c, e));
    Ok(UsageView {
        tenant: tenant.to_string(),
        budget,
        period,
        remaining,
        total_cost,
        total_estimated,
    })
}

/// Parse `{"limit": …, "period": "…"}`, naming the offending field.
fn parse_budget(body: &[u8]) -> Result<BudgetConfig, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| ApiError::BadRequest {
        detail: format!("request body is not valid JSON: {e}"),
        field: None,
    })?;
    let Value::Object(mut fields) = value else {
        return Err(ApiError::BadRequest {
            detail:
                "request body must be a JSON object like {\"limit\": 500.0, \"period\": \"1d\"}"
                    .into(),
            field: None,
        });
    };
    if let Some(unknown) = fields
        .keys()
        .find(|k| !["limit", "period"].contains(&k.as_str()))
    {
        return Err(ApiError::bad_field(
            unknown,
            format!("unknown field {unknown:?}; expected limit, period"),
        ));
    }
    let limit = match fields.remove("limit") {
        Some(Value::Number(n)) => n
            .as_f64()
            .ok_or_else(|| ApiError::bad_field("limit", "limit must be a number"))?,
        Some(_) => return Err(ApiError::bad_field("limit", "limit must be a number")),
        None => return Err(ApiError::bad_field("limit", "limit is required")),
    };
    let period = match fields.remove("period") {
        Some(Value::String(p)) => slotd_core::config::parse_duration("period", &p)
            .map_err(|e| ApiError::invalid_field("period", format!("{e:#}")))?,
        Some(_) => {
            return Err(ApiError::bad_field(
                "period",
                "period must be a duration string like \"1d\"",
            ));
        }
        None => return Err(ApiError::bad_field("period", "period is required")),
    };
    let budget = BudgetConfig { limit, period };
    budget.check("budget").map_err(|e| {
        let field = if format!("{e:#}").contains(".limit") {
            "limit"
        } else {
            "period"
        };
        ApiError::invalid_field(field, format!("{e:#}"))
    })?;
    Ok(budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(body: &str) -> (u16, Option<String>) {
        parse_budget(body.as_bytes())
            .expect_err("refused")
            .status_and_field()
    }

    #[test]
    fn budget_bodies_are_checked_field_by_field() {
        let ok = parse_budget(br#"{"limit": 12.5, "period": "1h"}"#).expect("valid");
        assert_eq!((ok.limit, ok.period_ms()), (12.5, 3_600_000));
        assert_eq!(field_of("{"), (400, None));
        assert_eq!(field_of(r#"{"limit":1}"#), (400, Some("period".into())));
        assert_eq!(
            field_of(r#"{"limit":"1","period":"1d"}"#),
            (400, Some("limit".into()))
        );
        assert_eq!(
            field_of(r#"{"limit":-1,"period":"1d"}"#),
            (422, Some("limit".into()))
        );
        assert_eq!(
            field_of(r#"{"limit":1,"period":"soon"}"#),
            (422, Some("period".into()))
        );
        assert_eq!(
            field_of(r#"{"limit":1,"period":"500d"}"#),
            (422, Some("period".into()))
        );
        assert_eq!(
            field_of(r#"{"limit":1,"period":"1d","x":0}"#),
            (400, Some("x".into()))
        );
    }
}
