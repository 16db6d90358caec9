//! Quotas beside slots (docs/accounts-deadlines-budgets.md "Quotas"): a pool's `rate` and
//! `daily` limits on creates, and the closures a provider's "not before T" puts on a slot set.
//!
//! - A pool with quotas has a create log (in the slot store, rebuilt from the database's
//!   `pool_creates`); a unit is granted a slot only when every window of the log has room, in
//!   the same atomic step as the slot ([`slotd_coord::slots::SlotStore::acquire_within`]).
//! - A closure comes from the provider: a submit answered `retry-after` with the code
//!   [`QUOTA_CODE`] closes the unit's slot set (`pool` or `pool@account`) until the time the
//!   answer gives, or, when it gives none, until the pool's fullest window frees a create, or
//!   else for the account probe's rest (doubled after each refused probe, up to twenty
//!   times). The unit goes back to `pending` without spending retry budget; while the set is
//!   closed nothing is submitted on it; at the end of the closure one unit goes as the probe,
//!   and the first accepted submit opens it again.
//!
//! Closures live in memory with the pool's scheduler and are shared through Redis in a
//! cluster so `GET /v1/pools` on any process shows them; a restart forgets them (the next
//! refusal closes the set again).

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use slotd_core::config::{Config, Quota};

use slotd_coord::slots::{CreateLog, DynSlots, SlotError, WindowCheck};

/// The error code a handler gives a `retry-after` when the provider refused a create for a
/// quota (a daily limit, a rate, a monthly allowance), with `after-ms` until it resets when
/// the provider says (contract 1.3 convention; `wit/handler.wit`).
pub const QUOTA_CODE: &str = "quota_exhausted";

/// Whether an error code says a quota refused the create.
pub fn is_quota_code(code: Option<&str>) -> bool {
    code == Some(QUOTA_CODE)
}

/// One quota dimension of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolQuota {
    /// `rate` or `daily`.
    pub dimension: &'static str,
    /// The room slotd's own creates may fill (for a discovered quota: the provider's limit less
    /// `others`).
    pub quota: Quota,
    /// `config` or `discovered`.
    pub source: &'static str,
    /// Creates the provider counted in the window beyond slotd's own (discovered quotas).
    pub others: u32,
}

/// The quotas `[pools."NAME"]` sets, in a stable order (rate, then daily).
pub fn configured(config: &Config, pool: &str) -> Vec<PoolQuota> {
    config
        .pools
        .get(pool)
        .map_or_else(Vec::new, |p| of_settings(p.rate, p.daily))
}

/// A provider account's own quotas (rate, then daily).
pub fn of_account(a: &slotd_core::config::Account) -> Vec<PoolQuota> {
    of_settings(a.rate, a.daily)
}

/// Configured `rate` and `daily` settings as quotas, in that order.
fn of_settings(rate: Option<Quota>, daily: Option<Quota>) -> Vec<PoolQuota> {
    [("rate", rate), ("daily", daily)]
        .into_iter()
        .filter_map(|(dimension, quota)| {
            Some(PoolQuota {
                dimension,
                quota: quota?,
                source: super::source::SOURCE_CONFIG,
                others: 0,
            })
        })
        .collect()
}

/// The create log a grant in `pool` must pass at `now`; `None` for a pool without quotas.
pub fn create_log(pool: &str, quotas: &[PoolQuota], now: i64) -> Option<CreateLog> {
    if quotas.is_empty() {
        return None;
    }
    let span = quotas
        .iter()
        .map(|q| q.quota.window.span_ms())
        .max()
        .unwrap_or(0);
    Some(CreateLog {
        key: pool.to_string(),
        checks: quotas
            .iter()
            .map(|q| WindowCheck {
                limit: q.quota.limit,
                since: q.quota.window.since(now),
            })
            .collect(),
        keep_since: now.saturating_sub(span),
    })
}

/// One dimension as `GET /v1/pools` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QuotaView {
    /// `rate` or `daily`.
    pub dimension: String,
    /// Creates allowed in the window.
    pub limit: u32,
    /// The window, e.g. `rolling 1m` or `calendar day (UTC+08:00)`.
    pub window: String,
    /// Creates counted in the window now.
    pub used: u32,
    pub remaining: u32,
    /// When the window next has room for one more create (Unix ms), while it is full; when
    /// the oldest counted create leaves it otherwise (absent when it counts none).
    pub resets_at: Option<i64>,
    /// `config`: from `[pools."NAME"]` (or the account's section); `discovered`: published by
    /// the provider (contract 1.3), lower than any configured one. A discovered quota's limit
    /// and use are the provider's, its use counting other clients' creates too.
    pub source: String,
}

/// Each quota of `pool` now, counted in the slot store's create log.
pub async fn views(
    metrics: &slotd_core::telemetry::Metrics,
    slots: &DynSlots,
    pool: &str,
    quotas: &[PoolQuota],
    now: i64,
) -> Result<Vec<QuotaView>, SlotError> {
    let mut out = Vec::with_capacity(quotas.len());
    for q in quotas {
        let n = slots.log_count(pool, q.quota.window.since(now)).await?;
        out.push(QuotaView {
            dimension: q.dimension.to_string(),
            limit: q.quota.limit.saturating_add(q.others),
            window: q.quota.window.to_string(),
            used: n.count.saturating_add(q.others),
            remaining: q.quota.limit.saturating_sub(n.count),
            resets_at: n
                .oldest
                .map(|oldest| q.quota.window.frees_at(now, Some(oldest))),
            source: q.source.into(),
        });
        metrics.record(|| {
            metrics::gauge!("slotd_quota_remaining", "pool" => pool.to_string(), "dimension" => q.dimension)
                .set(f64::from(q.quota.limit.saturating_sub(n.count)))
        });
    }
    Ok(out)
}

/// When the first full window of `views` has room again, if one is full.
pub fn full_until(views: &[QuotaView]) -> Option<(String, i64)> {
    views
        .iter()
        .filter(|v| v.remaining == 0)
        .filter_map(|v| v.resets_at.map(|t| (v.dimension.clone(), t)))
        .max_by_key(|(_, t)| *t)
}

/// `pool`'s `quotas` as the ETA reads them (see [`crate::eta::Pace`]); empty when the create
/// log cannot be read (the estimate then ignores quotas rather than failing).
pub async fn pace(
    metrics: &slotd_core::telemetry::Metrics,
    slots: &DynSlots,
    pool: &str,
    quotas: &[PoolQuota],
    now: i64,
) -> Vec<crate::eta::Pace> {
    let Ok(views) = views(metrics, slots, pool, quotas, now).await else {
        return Vec::new();
    };
    views
        .iter()
        .zip(quotas)
        .map(|(v, q)| crate::eta::Pace {
            remaining: v.remaining,
            resets_at: v.resets_at.unwrap_or(now),
            limit: q.quota.limit,
            window_ms: q.quota.window.span_ms(),
        })
        .collect()
}

/// The `wait_reason` of a pending unit held by a quota: `quota daily until
/// 2026-12-03T04:10:00.000Z` (the dimension, or `quota_exhausted` for the provider's refusal).
pub fn wait_reason(what: &str, until: i64) -> String {
    let at =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(until).unwrap_or(0));
    let what = if what == QUOTA_CODE {
        QUOTA_CODE.to_string()
    } else {
        format!("quota {what}")
    };
    format!("{what} until {}", humantime::format_rfc3339_millis(at))
}

/// A slot set closed by the provider's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Closure {
    /// What closed it: `quota_exhausted` (the provider refused a create for a quota).
    pub code: String,
    /// The provider's words, as the handler reported them.
    pub reason: String,
    /// When it closed (Unix ms).
    pub since: i64,
    /// Until when (Unix ms): then one unit is submitted as the probe.
    pub until: i64,
    /// Where `until` comes from: `provider` (the answer said when), `window` (the pool's
    /// fullest window frees a create then), `probe` (a rest before asking again).
    pub basis: String,
    /// The rest before the probe when `basis` is `probe` (ms; doubled after a refused probe).
    #[serde(skip)]
    rest: i64,
}

/// The shortest closure a provider's time makes: an `after-ms` of 0 (or a `Retry-After` in the
/// past) must not turn into one refused create per tick.
pub const PROVIDER_CLOSURE_MIN_MS: i64 = 1_000;
/// The longest: a day and an hour. No provider quota slotd models is longer than a day, and a
/// handler (or a provider's header) naming a time years away must not close a pool for good.
pub const PROVIDER_CLOSURE_MAX_MS: i64 = 25 * 3_600_000;

/// How much of the provider's words a closure keeps (the handler's message is not trusted to
/// be short).
const REASON_MAX_CHARS: usize = 500;

/// Whether a slot set may submit now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    Open,
    /// Closed; `true` when its probe is due (one unit may go).
    Closed(bool),
}

/// The closed slot sets of this process's pools.
#[derive(Debug, Default)]
pub struct Closures {
    closed: Mutex<BTreeMap<String, Closure>>,
    /// This instance's metrics registry.
    pub metrics: slotd_core::telemetry::Metrics,
}

/// How a refusal dates its closure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// The provider said: this long from now (ms).
    Provider(i64),
    /// The pool's fullest window frees a create at this instant.
    Window(i64),
    /// Nothing said: rest this long (the first time; doubled after a refused probe).
    Probe(i64),
}

impl Closures {
    /// An empty one that records into `metrics`.
    pub fn recording(metrics: slotd_core::telemetry::Metrics) -> Self {
        Closures {
            metrics,
            ..Default::default()
        }
    }

    pub fn gate(&self, key: &str, now: i64) -> Gate {
        match self.closed.lock().get(key) {
            None => Gate::Open,
            Some(c) => Gate::Closed(now >= c.until),
        }
    }

    /// A create on `key` was refused for a quota at `now`: close it (or, closed already and
    /// the refusal is the probe's, close it again, longer when nothing dates it).
    pub fn close(&self, key: &str, reason: &str, now: i64, until: Until) {
        let mut map = self.closed.lock();
        let before = map.get(key).cloned();
        if let Some(c) = &before
            && now < c.until
        {
            // A refusal of a call made before the probe was due says nothing new.
            return;
        }
        let (until_at, basis, rest) = match until {
            Until::Provider(ms) => (
                now.saturating_add(ms.clamp(PROVIDER_CLOSURE_MIN_MS, PROVIDER_CLOSURE_MAX_MS)),
                "provider",
                0,
            ),
            Until::Window(at) if at > now => (at, "window", 0),
            Until::Window(_) | Until::Probe(_) => {
                let first = match until {
                    Until::Probe(r) => r.max(1),
                    _ => 1_000,
                };
                let rest = before.as_ref().filter(|c| c.rest > 0).map_or(first, |c| {
                    c.rest.saturating_mul(2).min(first.saturating_mul(20))
                });
                (now.saturating_add(rest), "probe", rest)
            }
        };
        if before.is_none() {
            tracing::warn!(
                slots = key,
                reason,
                until = until_at,
                basis,
                "provider quota reached: no submits on this slot set until then"
            );
        }
        self.metrics
            .record(|| metrics::gauge!("slotd_quota_closed", "slots" => key.to_string()).set(1.0));
        map.insert(
            key.to_string(),
            Closure {
                code: QUOTA_CODE.to_string(),
                reason: reason.chars().take(REASON_MAX_CHARS).collect(),
                since: before.map_or(now, |c| c.since),
                until: until_at,
                basis: basis.to_string(),
                rest,
            },
        );
    }

    /// The provider accepted a create on `key`: it is open again.
    pub fn open(&self, key: &str) {
        if let Some(c) = self.closed.lock().remove(key) {
            tracing::info!(
                slots = key,
                closed_since = c.since,
                "provider quota has room again; slot set open"
            );
            self.metrics.record(|| {
                metrics::gauge!("slotd_quota_closed", "slots" => key.to_string()).set(0.0)
            });
        }
    }

    pub fn closure_of(&self, key: &str) -> Option<Closure> {
        self.closed.lock().get(key).cloned()
    }
}

/// In a cluster, tell every process a slot set's closure (`closed:{key}` in Redis, removed
/// when it opens), so `GET /v1/pools` anywhere shows it. Fire and forget.
pub fn share(
    keyspace: Option<&Arc<slotd_coord::keyspace::Keyspace>>,
    key: &str,
    closure: Option<&Closure>,
) {
    let Some(keys) = keyspace.cloned() else {
        return;
    };
    let redis_key = keys.key(&format!("closed:{key}"));
    let value = closure.and_then(|c| serde_json::to_string(c).ok());
    tokio::spawn(async move {
        let Ok(mut conn) = keys.conn().await else {
            return;
        };
        let cmd = match &value {
            Some(v) => {
                let mut c = redis::cmd("SET");
                c.arg(&redis_key).arg(v);
                c
            }
            None => {
                let mut c = redis::cmd("DEL");
                c.arg(&redis_key);
                c
            }
        };
        if let Err(e) = cmd.query_async::<()>(&mut conn).await {
            tracing::debug!(error = %e, "sharing a closure failed");
        }
    });
}

/// A slot set's closure as its scheduler last shared it.
pub async fn shared(
    keys: &slotd_coord::keyspace::Keyspace,
    key: &str,
) -> Result<Option<Closure>, slotd_coord::keyspace::KeyspaceError> {
    let mut conn = keys.conn().await?;
    let raw: Option<String> = redis::cmd("GET")
        .arg(keys.key(&format!("closed:{key}")))
        .query_async(&mut conn)
        .await?;
    Ok(raw.and_then(|r| serde_json::from_str(&r).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use slotd_core::config::Window;
    use std::time::Duration;

    #[test]
    fn a_closure_dated_by_the_provider_ends_in_one_probe() {
        let c = Closures::default();
        assert_eq!(c.gate("p", 0), Gate::Open);
        c.close("p", "daily limit", 1_000, Until::Provider(40_000));
        assert_eq!(c.gate("p", 40_999), Gate::Closed(false));
        assert_eq!(c.gate("p", 41_000), Gate::Closed(true));
        // A late refusal of a call made before then changes nothing.
        c.close("p", "late", 2_000, Until::Provider(90_000));
        assert_eq!(c.closure_of("p").map(|x| x.until), Some(41_000));
        // The probe is refused again: closed anew from then.
        c.close("p", "daily limit", 41_000, Until::Provider(5_000));
        let x = c.closure_of("p").expect("closed");
        assert_eq!(
            (x.since, x.until, x.basis.as_str()),
            (1_000, 46_000, "provider")
        );
        c.open("p");
        assert_eq!(c.gate("p", 46_000), Gate::Open);
    }

    #[test]
    fn a_providers_time_is_kept_within_a_second_and_a_day() {
        let c = Closures::default();
        c.close("zero", "429", 1_000, Until::Provider(0));
        assert_eq!(c.closure_of("zero").map(|x| x.until), Some(2_000));
        c.close("forever", "429", 1_000, Until::Provider(i64::MAX));
        assert_eq!(
            c.closure_of("forever").map(|x| x.until),
            Some(1_000 + PROVIDER_CLOSURE_MAX_MS)
        );
        c.close("negative", "429", 1_000, Until::Provider(-5));
        assert_eq!(c.closure_of("negative").map(|x| x.until), Some(2_000));
        // A handler's message is kept short.
        c.close(
            "long",
            &"x".repeat(1_000_000),
            1_000,
            Until::Provider(5_000),
        );
        assert_eq!(c.closure_of("long").map(|x| x.reason.len()), Some(500));
    }

    #[test]
    fn an_undated_refusal_waits_for_the_window_or_rests_longer_each_probe() {
        let c = Closures::default();
        c.close("w", "429", 1_000, Until::Window(30_000));
        assert_eq!(c.closure_of("w").map(|x| x.until), Some(30_000));
        c.close("p", "429", 1_000, Until::Probe(100));
        c.close("p", "429", 1_100, Until::Probe(100));
        c.close("p", "429", 1_300, Until::Probe(100));
        let x = c.closure_of("p").expect("closed");
        assert_eq!((x.until, x.basis.as_str()), (1_700, "probe"));
    }

    #[test]
    fn the_create_log_checks_every_window() {
        let quotas = [
            PoolQuota {
                dimension: "rate",
                quota: Quota {
                    limit: 10,
                    window: Window::Rolling(Duration::from_secs(60)),
                },
                source: "config",
                others: 0,
            },
            PoolQuota {
                dimension: "daily",
                quota: Quota {
                    limit: 100,
                    window: Window::Rolling(Duration::from_secs(86_400)),
                },
                source: "config",
                others: 0,
            },
        ];
        assert_eq!(create_log("p", &[], 5), None);
        let log = create_log("p", &quotas, 100_000_000).expect("log");
        assert_eq!(log.checks.len(), 2);
        // Each window counted a second longer (the margin for the request's latency).
        assert_eq!(log.checks[0].since, 100_000_000 - 60_000 + 1 - 1_000);
        assert_eq!(log.keep_since, 100_000_000 - 86_400_000 - 1_000);
    }
}
