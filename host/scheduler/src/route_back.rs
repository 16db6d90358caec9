//! Failover of routed units (docs/routes.md): a target that refuses a bound unit before it
//! accepted the job (over capacity, the account refused or exhausted, a quota, `not_created`,
//! a permanent refusal of the request) sends it back to its route, where the next fill of
//! another target's pool takes it; the refusing target is left out for a while (for good when
//! it failed the request). A unit whose submit may have created a job (in doubt, or a job id
//! recorded) stays bound: a second provider's submit while the first might run would bill
//! twice. A unit every target has refused for good fails with the last reason.

use slotd_core::config::SchedulerConfig;
use slotd_core::model::{Change, Outcome, ROUTE_STAGE, Refusal, Unit, UnitStatus, route_pool};
use slotd_store::{Field, UnitUpdate};

use super::policy::{capacity_delay_ms, retry_delay_ms};

/// The error code of a create the provider answered with an error and holds no job for
/// (contract 1.5 convention on `retry-after`).
pub const NOT_CREATED_CODE: &str = "not_created";

/// The error code of a create the provider refused for its pace (a rate limit, such as
/// Runway's per-period 429, told apart by the handler from a daily or monthly limit): nothing
/// was created, and trying again later is the whole remedy, so no retry budget is spent. A
/// routed unit goes back to its route, as for [`NOT_CREATED_CODE`].
pub const RATE_LIMITED_CODE: &str = "rate_limited";

/// Why a target refused a unit before accepting it, and until when it is left out (`None`:
/// for good), if `change` says so of a fresh submit.
fn refusal(
    cfg: &SchedulerConfig,
    unit: &Unit,
    change: &Change,
    in_doubt: bool,
    now: i64,
) -> Option<(String, String, Option<i64>)> {
    if unit.provider_job_id.is_some() || in_doubt || unit.status != UnitStatus::Submitted {
        return None;
    }
    match &change.outcome {
        Outcome::CapacityRejected { after_ms } => Some((
            "capacity".into(),
            "the provider was over capacity".into(),
            Some(now + capacity_delay_ms(cfg, *after_ms, &unit.id, now)),
        )),
        Outcome::RetryAfter { after_ms, error } => {
            let code = error.code.as_deref()?;
            let counted = slotd_pools::pool_state::accounts::is_account_code(Some(code))
                || slotd_pools::pool_state::quotas::is_quota_code(Some(code))
                || code == NOT_CREATED_CODE
                || code == RATE_LIMITED_CODE;
            counted.then(|| {
                let attempt = unit.attempts.saturating_add(1);
                (
                    code.to_string(),
                    error.message.clone(),
                    Some(now + retry_delay_ms(cfg, attempt, *after_ms)),
                )
            })
        }
        Outcome::Fail { error } => Some((
            error.code.clone().unwrap_or_else(|| "failed".into()),
            error.message.clone(),
            None,
        )),
        _ => None,
    }
}

/// Turn `update` (decided for a fresh submit of routed `unit`) into its way back to the route
/// when the target refused the unit before accepting it; returns the (route, target, reason)
/// refused, for the metrics. Leaves every other update alone.
pub fn route_back(
    cfg: &SchedulerConfig,
    unit: &Unit,
    change: &Change,
    in_doubt: bool,
    update: &mut UnitUpdate,
    now: i64,
) -> Option<(String, String, String)> {
    let mut routing = unit.routing()?;
    let bound = routing.bound?;
    // A refusal that spent the last retry fails the unit like any other.
    if !matches!(
        update.to,
        Some(UnitStatus::Pending) | Some(UnitStatus::Failed)
    ) {
        return None;
    }
    let (reason, message, until) = refusal(cfg, unit, change, in_doubt, now)?;
    let option = routing.options.get_mut(bound)?;
    let label = option.label();
    option.refused = Some(Refusal {
        reason: reason.clone(),
        message: message.clone(),
        at: now,
        until,
    });
    routing.bound = None;
    let error = slotd_core::model::ProviderError {
        code: Some(reason.clone()),
        message: format!("{label}: {message}"),
    };
    update.error = Field::Set(error.to_json());
    let route = routing.route.clone();
    // Back on the route either way: a failed unit a client retries is routed again.
    update.pool = Some(route_pool(&route));
    update.stage = Some(ROUTE_STAGE.to_string());
    update.task_type = Some(route.clone());
    update.provider_job_id = Field::Clear;
    update.submitted_at = Field::Clear;
    if !routing.options.iter().any(|o| o.open()) {
        update.to = Some(UnitStatus::Failed);
        update.detail = Some(format!(
            "route {route}: {label} refused it ({reason}: {message}); no target is left"
        ));
        update.routing = Some(routing.to_json());
        return Some((route, label, reason));
    }
    update.to = Some(UnitStatus::Pending);
    update.next_at = Some(routing.next_usable_at(now).unwrap_or(now).max(now));
    update.detail = Some(format!(
        "route {route}: {label} refused it ({reason}: {message}); back to the route"
    ));
    update.routing = Some(routing.to_json());
    Some((route, label, reason))
}
