//! The bridge between a Kling component's generated bindings and `kling_common`: the
//! [`kling_common::Host`] implementation over the WIT imports, and the conversions of units
//! and changes.
//!
//! This file is compiled into each Kling component (`#[path]` module), not into
//! `kling_common` (its `lib.rs` does not declare it): the bindings are generated per component,
//! and `crate::slotd` names the including component's own. Keeping one copy keeps the two
//! handlers' bridges identical; it sits under `src/` so `host/build.rs` sees it change.

use kling_common as common;

use crate::slotd::handler::types::{
    CallbackChange, Change, Outcome, PlanError, ProviderError, Retry, Unit,
};
use crate::slotd::handler::{config, http, log, signing};

/// The host imports, as `kling_common` sees them.
pub struct WitHost;

impl common::Host for WitHost {
    fn send_batch(
        &self,
        requests: Vec<common::Request>,
    ) -> Vec<Result<common::Response, common::HttpError>> {
        let requests: Vec<http::Request> = requests
            .into_iter()
            .map(|r| http::Request {
                method: r.method.to_string(),
                url: r.url,
                headers: r.headers,
                body: r.body,
                timeout_ms: r.timeout_ms,
            })
            .collect();
        http::send_batch(&requests)
            .into_iter()
            .map(|answer| match answer {
                Ok(r) => Ok(common::Response {
                    status: r.status,
                    body: r.body,
                }),
                Err(e) => Err(match e {
                    http::HttpError::Denied(h) => common::HttpError::Denied(h),
                    http::HttpError::Timeout => common::HttpError::Timeout,
                    http::HttpError::TooLarge(n) => common::HttpError::TooLarge(n),
                    http::HttpError::Invalid(m) => common::HttpError::Invalid(m),
                    http::HttpError::Transport(m) => common::HttpError::Transport(m),
                }),
            })
            .collect()
    }

    fn hmac_sha256(&self, secret: &str, data: &[u8]) -> Result<Vec<u8>, String> {
        signing::hmac_sha256(secret, data)
    }

    fn config(&self, key: &str) -> Option<String> {
        config::get(key)
    }

    fn wall_clock_ms(&self) -> Option<u64> {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
            .and_then(|d| u64::try_from(d.as_millis()).ok())
    }

    fn warn(&self, message: &str) {
        log::log(log::Level::Warn, message);
    }
}

/// `expected_duration_scale` (default 1): multiplies poll hints, for simulators running faster
/// than the real provider.
pub fn hint_scale(handler: &str) -> Result<f64, String> {
    match config::get("expected_duration_scale") {
        None => Ok(1.0),
        Some(v) => v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite() && *f > 0.0)
            .ok_or_else(|| {
                format!(
                    "handlers.{handler}.expected_duration_scale must be a positive number, got {v:?}"
                )
            }),
    }
}

pub fn unit(u: &Unit) -> common::UnitRef {
    common::UnitRef {
        id: u.id.clone(),
        stage: u.stage.clone(),
        spec: u.spec.clone(),
        state: u.state.clone(),
        job_id: u.provider_job_id.clone(),
        idempotency_key: u.idempotency_key.clone(),
        in_doubt: u.in_doubt,
        submitted_at_ms: u.submitted_at_ms,
        result: u.result.clone(),
    }
}

fn provider_error(e: common::ProviderError) -> ProviderError {
    ProviderError {
        code: e.code,
        message: e.message,
    }
}

fn outcome(o: common::Outcome) -> Outcome {
    match o {
        common::Outcome::Accepted(id) => Outcome::Accepted(id),
        common::Outcome::Running(hint) => Outcome::Running(hint),
        common::Outcome::Succeeded(result) => Outcome::Succeeded(result),
        common::Outcome::NextStage(stage) => Outcome::NextStage(stage),
        common::Outcome::CapacityRejected(hint) => Outcome::CapacityRejected(hint),
        common::Outcome::RetryAfter { after_ms, error } => Outcome::RetryAfter(Retry {
            after_ms,
            error: provider_error(error),
        }),
        common::Outcome::Fail(e) => Outcome::Fail(provider_error(e)),
    }
}

pub fn change(c: common::Change) -> Change {
    Change {
        unit_id: c.unit_id,
        outcome: outcome(c.outcome),
        state: c.state,
        cost: c.cost,
    }
}

pub fn callback_change(c: common::CallbackChange) -> CallbackChange {
    CallbackChange {
        provider_job_id: c.provider_job_id,
        idempotency_key: c.idempotency_key,
        outcome: outcome(c.outcome),
        state: c.state,
        cost: c.cost,
    }
}

pub fn plan_error(e: common::PlanError) -> PlanError {
    PlanError {
        field: e.field,
        message: e.message,
    }
}

/// A unit whose spec or state cannot be turned into a request fails with the reason.
pub fn unusable(unit: &Unit, why: String) -> Change {
    Change {
        unit_id: unit.id.clone(),
        outcome: Outcome::Fail(ProviderError {
            code: Some("bad_spec".into()),
            message: why,
        }),
        state: None,
        cost: None,
    }
}
