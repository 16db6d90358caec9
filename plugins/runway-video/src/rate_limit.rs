//! What a create answered 429 means. Runway answers 429 both for too many requests in a period
//! (its rate limit) and for a model's daily generation limit (RUNWAY_API.md "Errors"); the
//! answer itself does not say which, and nothing was created either way. The organization's
//! own figures do: `GET /v1/organization`, `usage.models[m].dailyGenerations` against
//! `tier.models[m].maxDailyGenerations`.
//!
//! - The day is spent (Runway counts at least the limit): the daily limit, a quota. Code
//!   [`QUOTA_EXHAUSTED`]: the host closes the model's pool until Runway's `Retry-After` or its
//!   own estimate, and spends no retry budget.
//! - Anything else (generations left, figures that state no daily limit, an organization that
//!   cannot be read): the rate limit, a pace signal. Code [`RATE_LIMITED`] with Runway's
//!   `Retry-After` when sent: the host puts the unit back to `pending` and creates it again
//!   after the delay or its backoff; the pool stays open. A quota is reported only on Runway's
//!   word, since a closure wrongly reported stops the whole pool for as long as it lasts.
//!
//! The organization is read at most once per tick, at the first create answered 429
//! ([`Figures`]); a tick without one reads nothing. It is read whatever `read_organization`
//! says: that setting is about publishing limits (`provider.limits`), and no other answer
//! tells the two 429s apart.

use serde_json::Value;
use slotd_sdk::{Host, ProviderError};

use crate::create::{Created, QUOTA_EXHAUSTED};

/// The code of a create Runway refused for its pace (contract convention beside
/// `not_created`): nothing was made; the host sends the unit back to pending for the delay
/// and spends no retry on it.
pub const RATE_LIMITED: &str = "rate_limited";
use crate::models::Model;
use crate::organization::{self, Daily};
use crate::settings::Config;

/// The organization's figures for one tick: read at the first create answered 429, then kept.
pub struct Figures<'h> {
    host: &'h dyn Host,
    cfg: &'h Config,
    read: Option<Result<Value, String>>,
}

impl<'h> Figures<'h> {
    pub fn new(host: &'h dyn Host, cfg: &'h Config) -> Figures<'h> {
        Figures {
            host,
            cfg,
            read: None,
        }
    }

    /// The organization object, read now if this tick has not read it yet, or why it could
    /// not be read.
    pub fn get(&mut self) -> &Result<Value, String> {
        let (host, cfg) = (self.host, self.cfg);
        self.read
            .get_or_insert_with(|| organization::read(host, cfg))
    }
}

/// What a create of `model` answered 429 means: `error` is Runway's status and text (code
/// `http_429`), `after_ms` its `Retry-After`, `figures` the organization (or why it could not
/// be read). Always "not created"; a quota only when the figures say the day is spent.
pub fn judge(
    error: ProviderError,
    after_ms: Option<u64>,
    model: Model,
    figures: &Result<Value, String>,
) -> Created {
    let (code, said) = match figures
        .as_ref()
        .map(|body| organization::daily(body, model))
    {
        Ok(Some(Daily { used, limit })) if used >= limit => (
            QUOTA_EXHAUSTED,
            format!(
                "Runway's daily generation limit for {model} is reached: {used} of {limit} \
                 generations in its rolling 24 hours; no task was created"
            ),
        ),
        Ok(Some(Daily { used, limit })) => (
            RATE_LIMITED,
            format!(
                "Runway's rate limit, not its daily limit: {used} of {limit} generations of \
                 {model} in its rolling 24 hours; no task was created"
            ),
        ),
        Ok(None) => (
            RATE_LIMITED,
            format!(
                "taken as Runway's rate limit: the organization states no daily limit for \
                 {model}; no task was created"
            ),
        ),
        Err(why) => (
            RATE_LIMITED,
            format!(
                "taken as Runway's rate limit: the daily figures could not be read ({why}); no \
                 task was created"
            ),
        ),
    };
    let status = error.code.unwrap_or_else(|| "http_429".into());
    Created::Refused {
        after_ms,
        error: ProviderError::new(
            Some(code),
            format!("runway {status}: {} ({said})", error.message),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn judged(figures: Result<Value, String>) -> (Option<String>, String) {
        let error = ProviderError::new(Some("http_429"), "HTTP 429: Too many requests");
        match judge(error, Some(2_000), Model::Gen4Turbo, &figures) {
            Created::Refused {
                after_ms: Some(2_000),
                error,
            } => (error.code, error.message),
            other => panic!("{other:?}"),
        }
    }

    fn org(used: Value, limit: Value) -> Result<Value, String> {
        Ok(
            json!({"tier": {"models": {"gen4_turbo": {"maxDailyGenerations": limit}}},
                  "usage": {"models": {"gen4_turbo": {"dailyGenerations": used}}}}),
        )
    }

    #[test]
    fn only_a_spent_day_is_a_quota() {
        let (code, message) = judged(org(json!(50), json!(50)));
        assert_eq!(code.as_deref(), Some(QUOTA_EXHAUSTED));
        assert_eq!(
            message,
            "runway http_429: HTTP 429: Too many requests (Runway's daily generation limit for \
             gen4_turbo is reached: 50 of 50 generations in its rolling 24 hours; no task was \
             created)"
        );
        // Runway counting beyond its limit (another client's creates raced ours) is spent too.
        assert_eq!(
            judged(org(json!(51), json!(50))).0.as_deref(),
            Some(QUOTA_EXHAUSTED)
        );
        for figures in [
            org(json!(49), json!(50)),
            org(json!(4), json!(1_000_000)),
            // No usage listed: none today.
            Ok(json!({"tier": {"models": {"gen4_turbo": {"maxDailyGenerations": 5}}}})),
            org(json!(50), json!("50")),
            org(json!(50), json!(-1)),
            Ok(
                json!({"tier": {"models": {"gen4.5": {"maxDailyGenerations": 1}}},
                      "usage": {"models": {"gen4.5": {"dailyGenerations": 1}}}}),
            ),
            Err("reading /v1/organization: HTTP 503: busy".into()),
        ] {
            let (code, message) = judged(figures.clone());
            assert_eq!(code.as_deref(), Some(RATE_LIMITED), "{figures:?}");
            assert!(
                message.contains("rate limit") && message.contains("no task was created"),
                "{message}"
            );
        }
    }
}
