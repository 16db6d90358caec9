//! What a request's status (`GET status_url`) and result (`GET response_url`) mean for a
//! unit. The status says queued, running or completed (also for failed and cancelled
//! requests); the result decides success.

use serde_json::{Value, json};
use slotd_sdk::client::transport_error;
use slotd_sdk::{Change, Host, Outcome, ProviderError, Response, Unit};

use crate::fal::{self, Answer, UNEXPECTED_ANSWER};
use crate::settings::Config;
use crate::spec::Spec;
use crate::state::State;

/// The code of a request fal does not know (404 on status).
pub const REQUEST_NOT_FOUND: &str = "request_not_found";
/// The code of a request cancelled at fal, not by slotd (its result is 499).
pub const CANCELLED_AT_PROVIDER: &str = "cancelled_at_provider";
/// The code of a result fal no longer has (it keeps results about an hour).
pub const RESULT_GONE: &str = "result_gone";
/// The code of a request that did not start within `start_timeout_s`.
pub const START_TIMEOUT: &str = "start_timeout";
/// Seconds between polls without a webhook, and with one (polls are then a safety net).
pub const POLL_SECS: (f64, f64) = (5.0, 15.0);
/// Never poll a unit faster than this (seconds of fal time).
pub const MIN_POLL_SECS: f64 = 1.0;

/// A request's status, as far as a unit cares.
#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    Queued(Option<u32>),
    Running,
    Completed,
}

/// Read a status answer: the status, or the unit's outcome when it has none.
pub fn status(answer: &Answer, now_ms: u64) -> Result<Status, Outcome> {
    let r = answer
        .as_ref()
        .map_err(|e| Outcome::retry(transport_error(e)))?;
    match r.status {
        200..=299 => {}
        404 => {
            return Err(Outcome::Fail(ProviderError::new(
                Some(REQUEST_NOT_FOUND),
                format!("fal does not know the request ({})", fal::error(r).message),
            )));
        }
        401 | 403 => {
            return Err(fal::account(r, now_ms).unwrap_or_else(|| Outcome::retry(fal::error(r))));
        }
        429 | 500..=599 => return Err(fal::retry(r, now_ms, None)),
        _ => return Err(Outcome::Fail(fal::error(r))),
    }
    let body = fal::json(r).map_err(unexpected)?;
    match body.get("status").and_then(Value::as_str) {
        Some("IN_QUEUE") => Ok(Status::Queued(
            body.get("queue_position")
                .and_then(Value::as_u64)
                .and_then(|p| u32::try_from(p).ok()),
        )),
        Some("IN_PROGRESS") => Ok(Status::Running),
        Some("COMPLETED") => Ok(Status::Completed),
        other => Err(unexpected(format!(
            "fal's status answer has no known status ({other:?})"
        ))),
    }
}

/// The unit's change for a queued or running request: say queued (with the position) and
/// poll again after the hint; record the status when it changed.
pub fn running(host: &dyn Host, unit: &Unit, cfg: &Config, status: &Status) -> Change {
    let old = State::of(unit);
    let (name, position) = match status {
        Status::Queued(position) => {
            host.queued(&unit.id, *position);
            ("IN_QUEUE", *position)
        }
        _ => ("IN_PROGRESS", None),
    };
    let new = State {
        status: Some(name.to_string()),
        queue_position: position,
        ..old.clone()
    };
    Change {
        state: (new != old).then(|| new.to_json()),
        ..Change::of(unit, Outcome::Running(Some(hint(cfg, unit, old.webhook))))
    }
}

/// The unit's change for a result answer (the status said `COMPLETED`).
pub fn result(unit: &Unit, spec: &Spec, cfg: &Config, answer: &Answer, now_ms: u64) -> Change {
    let r = match answer {
        Ok(r) => r,
        Err(e) => return Change::of(unit, Outcome::retry(transport_error(e))),
    };
    let outcome = match r.status {
        200..=299 => return succeeded(unit, spec, r),
        422 => {
            let e = fal::error(r);
            Outcome::Fail(ProviderError::new(
                e.code.as_deref(),
                format!("fal refused the input: {}", e.message),
            ))
        }
        499 => Outcome::Fail(ProviderError::new(
            Some(CANCELLED_AT_PROVIDER),
            format!(
                "the request was cancelled at fal (not by slotd): {}; a retry of the task \
                 resubmits it",
                fal::error(r).message
            ),
        )),
        400 if fal::error(r).message.contains("in progress") => {
            Outcome::Running(Some(hint(cfg, unit, false)))
        }
        401 | 403 | 429 => fal::account(r, now_ms).unwrap_or_else(|| fal::retry(r, now_ms, None)),
        504 if r.header("x-fal-request-timeout-type") == Some("user") => {
            Outcome::Fail(ProviderError::new(
                Some(START_TIMEOUT),
                format!(
                    "the request did not start within handlers.fal-video.start_timeout_s: {}",
                    fal::error(r).message
                ),
            ))
        }
        400..=499 => Outcome::Fail(ProviderError::new(
            Some(RESULT_GONE),
            format!(
                "fal no longer has the result (it keeps results about an hour): {}",
                fal::error(r).message
            ),
        )),
        _ => fal::retry(r, now_ms, None),
    };
    Change::of(unit, outcome)
}

/// A 2xx result: the video, with the listed price as the cost.
fn succeeded(unit: &Unit, spec: &Spec, r: &Response) -> Change {
    let body = match fal::json(r) {
        Ok(body) => body,
        Err(why) => return Change::of(unit, unexpected(why)),
    };
    let video = body.get("video").filter(|v| {
        v.get("url")
            .and_then(Value::as_str)
            .is_some_and(|u| !u.trim().is_empty())
    });
    let Some(video) = video else {
        return Change::of(
            unit,
            unexpected("fal's result has no video.url".to_string()),
        );
    };
    let result = json!({
        "request_id": unit.provider_job_id.clone().unwrap_or_default(),
        "video": video,
    });
    Change {
        cost: Some(spec.usd().to_string()),
        ..Change::of(unit, Outcome::Succeeded(result.to_string()))
    }
}

/// An answer that cannot be read: retried within the retry budget.
fn unexpected(why: String) -> Outcome {
    Outcome::retry(ProviderError::new(Some(UNEXPECTED_ANSWER), why))
}

/// When to poll a unit again: 5 s (15 s when a webhook will say it ended), ± 20 % by the
/// unit's id so the units of a batch spread out, never below 1 s; all × scale, at least 1 ms.
pub fn hint(cfg: &Config, unit: &Unit, webhook: bool) -> u64 {
    let base = if webhook { POLL_SECS.1 } else { POLL_SECS.0 };
    let secs = (base * (0.8 + 0.4 * spread(&unit.id))).max(MIN_POLL_SECS);
    cfg.scaled_ms(secs).max(cfg.scaled_ms(MIN_POLL_SECS)).max(1)
}

/// A fraction in [0, 1) fixed by a text (FNV-1a).
fn spread(text: &str) -> f64 {
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    (hash % 1000) as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use slotd_sdk::testing::ScriptedHost;

    #[test]
    fn hints_spread_by_unit_and_respect_the_floor() {
        let cfg = Config::read(&ScriptedHost::new()).unwrap_or_else(|e| panic!("{e}"));
        let unit = |id: &str| Unit {
            id: id.into(),
            ..Unit::default()
        };
        let hints: Vec<u64> = ["a", "b", "c", "d"]
            .iter()
            .map(|id| hint(&cfg, &unit(id), false))
            .collect();
        assert!(
            hints.iter().all(|h| (4_000..=6_000).contains(h)),
            "{hints:?}"
        );
        assert!(hints.windows(2).any(|w| w[0] != w[1]));
        assert_eq!(hint(&cfg, &unit("a"), false), hints[0], "stable per unit");
        assert!(hint(&cfg, &unit("a"), true) >= 12_000);
        let fast = Config {
            scale: 0.0001,
            ..cfg
        };
        assert_eq!(hint(&fast, &unit("a"), false), 1);
    }
}
