//! Provider accounts' health [beyond anchors]: an account whose credentials the provider
//! refuses, or whose balance is exhausted, is **drained**: no new submits go to it, its
//! in-flight units keep being polled and finish. It comes back as soon as the provider answers
//! one of its calls normally again: a poll of an in-flight unit, or the probe, one unit
//! submitted to it after a rest (`[scheduler] account_probe`, doubled after each refused probe,
//! up to twenty times). An exhausted balance comes back only with an accepted create (the
//! probe's): the polls of jobs accepted before it ran out answer normally all along.
//!
//! Handlers say which errors are the account's, not the job's: a `retry-after` (or `fail`)
//! whose error code is [`REFUSED_CODE`] or [`EXHAUSTED_CODE`] (WIT `outcome`). Such a submit
//! goes back to `pending` without spending its retry budget, so another account takes it; such
//! a poll keeps the unit `submitted` and polls it again later.
//!
//! The state lives in memory with the pool's scheduler; `GET /v1/pools` shows it with the
//! reason. A restart forgets it: the first refused call drains the account again. A handler
//! without `accounts` has one implicit account, drained the same way (as `default`): with a
//! wrong key its units wait `pending`, probed now and then, instead of failing or hammering the
//! provider.

use std::collections::BTreeMap;

use parking_lot::Mutex;
use serde::Serialize;

/// The account's credentials were refused (Kling 401 codes 1000–1004 after a re-sign; Runway
/// 401).
pub const REFUSED_CODE: &str = "account_refused";
/// The account's balance or resource packs are used up (Kling 1101/1102).
pub const EXHAUSTED_CODE: &str = "account_exhausted";

/// The name under which a handler's implicit account (its section, no `accounts`) is drained
/// and shown.
pub const IMPLICIT_ACCOUNT: &str = "default";

/// Whether an error code names the account rather than the job.
pub fn is_account_code(code: Option<&str>) -> bool {
    matches!(code, Some(REFUSED_CODE | EXHAUSTED_CODE))
}

/// Why an account is drained, since when, and when it is probed next.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Drain {
    /// `account_refused` or `account_exhausted`.
    pub code: String,
    /// The provider's words, as the handler reported them.
    pub reason: String,
    /// When it was drained (Unix ms).
    pub since: i64,
    /// When one unit is next submitted to it as a probe (Unix ms).
    pub next_probe_at: i64,
    /// The rest before that probe (ms).
    #[serde(skip)]
    rest: i64,
}

/// Whether a pool may submit to an account now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Availability {
    Open,
    /// Drained; `true` when a probe is due (one unit may go).
    Drained(bool),
}

/// The health of every (handler, account) this process has seen refused.
#[derive(Debug, Default)]
pub struct AccountHealth {
    drained: Mutex<BTreeMap<(String, String), Drain>>,
    /// This instance's metrics registry.
    pub metrics: slotd_core::telemetry::Metrics,
}

impl AccountHealth {
    /// An empty one that records into `metrics`.
    pub fn recording(metrics: slotd_core::telemetry::Metrics) -> Self {
        AccountHealth {
            metrics,
            ..Default::default()
        }
    }

    /// Whether `handler`'s `account` takes submits at `now`.
    pub fn availability(&self, handler: &str, account: &str, now: i64) -> Availability {
        match self
            .drained
            .lock()
            .get(&(handler.to_string(), account.to_string()))
        {
            None => Availability::Open,
            Some(d) => Availability::Drained(now >= d.next_probe_at),
        }
    }

    /// The provider refused the account: drain it (or, drained already, rest longer before the
    /// next probe, since the probe was refused too). `first_rest` is `[scheduler]
    /// account_probe`.
    pub fn drain(
        &self,
        handler: &str,
        account: &str,
        code: &str,
        reason: &str,
        now: i64,
        first_rest: i64,
    ) {
        let mut map = self.drained.lock();
        let key = (handler.to_string(), account.to_string());
        let rest = match map.get(&key) {
            // A refusal of a call made before the probe was due says nothing new.
            Some(d) if now < d.next_probe_at => return,
            Some(d) => d.rest.saturating_mul(2).min(first_rest.saturating_mul(20)),
            None => {
                tracing::warn!(
                    handler,
                    account,
                    code,
                    reason,
                    "provider account drained: no new submits go to it"
                );
                self.metrics.record(|| {
                    metrics::counter!("slotd_account_drains_total", "handler" => handler.to_string(), "account" => account.to_string())
                        .increment(1)
                });
                first_rest.max(1)
            }
        };
        let since = map.get(&key).map_or(now, |d| d.since);
        map.insert(
            key,
            Drain {
                code: code.to_string(),
                reason: reason.to_string(),
                since,
                next_probe_at: now.saturating_add(rest),
                rest,
            },
        );
        self.metrics.record(|| {
            metrics::gauge!("slotd_account_drained", "handler" => handler.to_string(), "account" => account.to_string())
                .set(1.0)
        });
    }

    /// The provider answered a call of the account normally: it takes submits again.
    pub fn restore(&self, handler: &str, account: &str) {
        let removed = self
            .drained
            .lock()
            .remove(&(handler.to_string(), account.to_string()));
        if let Some(d) = removed {
            tracing::info!(
                handler,
                account,
                drained_since = d.since,
                "provider account answers again; restored"
            );
            self.metrics.record(|| {
                metrics::gauge!("slotd_account_drained", "handler" => handler.to_string(), "account" => account.to_string())
                    .set(0.0)
            });
        }
    }

    /// The drain of one account, if it is drained.
    pub fn drain_of(&self, handler: &str, account: &str) -> Option<Drain> {
        self.drained
            .lock()
            .get(&(handler.to_string(), account.to_string()))
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drains_probes_with_a_growing_rest_and_restores() {
        let h = AccountHealth::default();
        assert_eq!(h.availability("k", "b", 0), Availability::Open);
        h.drain("k", "b", REFUSED_CODE, "kling 1002", 1_000, 100);
        assert_eq!(
            h.availability("k", "b", 1_050),
            Availability::Drained(false)
        );
        assert_eq!(h.availability("k", "b", 1_100), Availability::Drained(true));
        // A refusal from before the probe was due changes nothing.
        h.drain("k", "b", REFUSED_CODE, "late", 1_099, 100);
        assert_eq!(h.drain_of("k", "b").map(|d| d.next_probe_at), Some(1_100));
        // The probe was refused: twice the rest.
        h.drain("k", "b", REFUSED_CODE, "kling 1002", 1_100, 100);
        let d = h.drain_of("k", "b").expect("still drained");
        assert_eq!((d.since, d.next_probe_at), (1_000, 1_300));
        // Capped at twenty times the first rest.
        let mut now = 1_300;
        for _ in 0..10 {
            h.drain("k", "b", EXHAUSTED_CODE, "kling 1102", now, 100);
            now = h.drain_of("k", "b").map_or(now, |d| d.next_probe_at);
        }
        let d = h.drain_of("k", "b").expect("still drained");
        assert_eq!(d.next_probe_at - d.rest, now - 2_000);
        assert_eq!(d.code, EXHAUSTED_CODE);
        // Another account of the handler is untouched; an answer restores this one.
        assert_eq!(h.availability("k", "main", now), Availability::Open);
        h.restore("k", "b");
        assert_eq!(h.availability("k", "b", now), Availability::Open);
    }
}
