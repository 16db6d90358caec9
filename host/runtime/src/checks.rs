//! What the host keeps of a guest's optional answers (contract 1.2 `costs.estimate`, 1.3
//! `provider.durations` and `provider.limits`): only usable values, each dropped value with a
//! warning naming the handler. A wrong answer never fails the call that asked.

use super::bindings::provider;
use super::{DiscoveredLimits, DiscoveredQuota, Expected};

/// A guest's estimates, as the host keeps them: one per unit, each finite and non-negative or
/// unknown (with a warning naming the handler).
pub(crate) fn checked_estimates(
    handler: &str,
    estimates: Vec<Option<f64>>,
    units: usize,
) -> Vec<Option<f64>> {
    if estimates.len() != units {
        tracing::warn!(
            handler,
            answered = estimates.len(),
            units,
            "costs.estimate answered a list of the wrong length; the units' costs are unknown"
        );
        return vec![None; units];
    }
    estimates
        .into_iter()
        .enumerate()
        .map(|(index, e)| match e {
            Some(v) if !v.is_finite() || v < 0.0 => {
                tracing::warn!(handler, index, value = %v, "costs.estimate answered a negative or non-finite cost; unknown");
                None
            }
            other => other,
        })
        .collect()
}

/// A guest's expected durations, as the host keeps them: one per spec, each with a positive
/// median and a p95 at least the median, or unknown (with a warning naming the handler).
pub(crate) fn checked_durations(
    handler: &str,
    answer: Vec<Option<provider::ExpectedDuration>>,
    specs: usize,
) -> Vec<Option<Expected>> {
    if answer.len() != specs {
        tracing::warn!(
            handler,
            answered = answer.len(),
            specs,
            "provider.durations answered a list of the wrong length; the units' durations are unknown"
        );
        return vec![None; specs];
    }
    answer
        .into_iter()
        .enumerate()
        .map(|(index, e)| match e {
            Some(e) if e.p50_ms > 0 && e.p95_ms >= e.p50_ms => Some(Expected {
                p50_ms: e.p50_ms,
                p95_ms: e.p95_ms,
            }),
            Some(e) => {
                tracing::warn!(
                    handler,
                    index,
                    p50_ms = e.p50_ms,
                    p95_ms = e.p95_ms,
                    "provider.durations answered a zero median or a p95 below it; unknown"
                );
                None
            }
            None => None,
        })
        .collect()
}

/// A guest's published limits, as the host keeps them: quotas with a known dimension, a
/// positive window of at most a day (the longest a configured quota may have, and what the
/// create record keeps); anything else dropped with a warning.
pub(crate) fn checked_limits(
    handler: &str,
    pools: Vec<provider::PoolLimits>,
) -> Vec<DiscoveredLimits> {
    pools
        .into_iter()
        .map(|p| {
            let quotas = p
                .quotas
                .into_iter()
                .filter_map(|q| {
                    let dimension = match q.dimension.as_str() {
                        "rate" => "rate",
                        "daily" => "daily",
                        other => {
                            tracing::warn!(handler, pool = %p.pool, dimension = %other, "provider.limits named a quota dimension other than rate or daily; ignored");
                            return None;
                        }
                    };
                    let longest = u64::try_from(slotd_core::config::QUOTA_WINDOW_MAX.as_millis())
                        .unwrap_or(u64::MAX);
                    if q.window_ms == 0 || q.window_ms > longest {
                        tracing::warn!(handler, pool = %p.pool, window_ms = q.window_ms, "provider.limits gave a quota window of zero or over a day; ignored");
                        return None;
                    }
                    Some(DiscoveredQuota {
                        dimension,
                        limit: q.limit,
                        window_ms: q.window_ms,
                        used: q.used,
                    })
                })
                .collect();
            DiscoveredLimits {
                pool: p.pool,
                max_slots: p.max_slots,
                quotas,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(dimension: &str, window_ms: u64) -> provider::Quota {
        provider::Quota {
            dimension: dimension.into(),
            limit: 10,
            window_ms,
            used: Some(1),
        }
    }

    #[test]
    fn unusable_durations_are_unknown() {
        let e = |p50_ms, p95_ms| Some(provider::ExpectedDuration { p50_ms, p95_ms });
        let kept = checked_durations("h", vec![e(10, 20), e(0, 5), e(30, 20), None], 4);
        assert_eq!(
            kept,
            [
                Some(Expected {
                    p50_ms: 10,
                    p95_ms: 20
                }),
                None,
                None,
                None
            ]
        );
        assert_eq!(checked_durations("h", vec![e(10, 20)], 2), [None, None]);
    }

    #[test]
    fn unusable_quotas_are_dropped_and_the_rest_kept() {
        let kept = checked_limits(
            "h",
            vec![provider::PoolLimits {
                pool: "p".into(),
                max_slots: Some(2),
                quotas: vec![
                    quota("daily", 86_400_000),
                    quota("monthly", 1_000),
                    quota("rate", 0),
                    quota("daily", 86_400_001),
                    quota("rate", 60_000),
                ],
            }],
        );
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].max_slots, Some(2));
        let dims: Vec<(&str, u64)> = kept[0]
            .quotas
            .iter()
            .map(|q| (q.dimension, q.window_ms))
            .collect();
        assert_eq!(dims, [("daily", 86_400_000), ("rate", 60_000)]);
    }
}
