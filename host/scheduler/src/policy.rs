//! Timing policies: when to poll a submitted unit again, when to retry after a transient error.
//! Pure functions of the configuration, so the tick loop stays free of arithmetic.

use std::time::Duration;

use slotd_core::config::SchedulerConfig;

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Delay before the next poll of a unit that has been polled `polls` times in its stage.
///
/// Without a hint the delay grows geometrically from `poll_initial` to `poll_max` (5 s → 30 s
/// with the seed's numbers). A handler's hint (expected remaining time) wins, clamped to
/// `[min(poll_initial, tick_interval), poll_max]` so that a handler can neither spin the
/// provider nor park a unit for hours. The delay of a hinted poll (and of a new job's first
/// poll) is a floor: poll rounds never read the job sooner (see `rounds.rs`).
pub fn poll_delay_ms(cfg: &SchedulerConfig, polls: u32, hint_ms: Option<u64>) -> i64 {
    let floor = ms(cfg.poll_initial.min(cfg.tick_interval)).max(1);
    let ceil = ms(cfg.poll_max).max(floor);
    if let Some(h) = hint_ms {
        return i64::try_from(h).unwrap_or(i64::MAX).clamp(floor, ceil);
    }
    let grown = cfg.poll_initial.as_secs_f64() * cfg.poll_factor.powi(polls.min(64) as i32);
    let grown = Duration::try_from_secs_f64(grown).unwrap_or(cfg.poll_max);
    ms(grown).clamp(floor, ceil)
}

/// Delay before retry number `attempt` (1-based) after a transient error or a handler fault:
/// `retry_base` doubled per attempt, capped at `retry_max`. A hint from the provider (e.g. a
/// `Retry-After`) wins when it is longer.
pub fn retry_delay_ms(cfg: &SchedulerConfig, attempt: u32, hint_ms: Option<u64>) -> i64 {
    let exp = cfg
        .retry_base
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
    let backoff = ms(exp.min(cfg.retry_max)).max(1);
    match hint_ms {
        Some(h) => i64::try_from(h)
            .unwrap_or(i64::MAX)
            .clamp(backoff, ms(cfg.retry_max).max(backoff)),
        None => backoff,
    }
}

/// Delay before a unit whose call was cut off while awaiting a slow provider is tried again.
/// No retry is spent, so the delay grows with the time the unit has already waited on the
/// provider in this stage (`waited_ms`, since its submit marker): a tenth of it, between
/// `retry_base` and `retry_max`.
pub fn slow_provider_delay_ms(cfg: &SchedulerConfig, waited_ms: i64) -> i64 {
    let floor = ms(cfg.retry_base).max(1);
    (waited_ms.max(0) / 10).clamp(floor, ms(cfg.retry_max).max(floor))
}

/// Whether a submitted unit has been in its stage's current submission longer than
/// `stage_deadline` (a unit waiting in `pending` is never expired).
pub fn stage_expired(cfg: &SchedulerConfig, unit: &slotd_core::model::Unit, now: i64) -> bool {
    unit.status == slotd_core::model::UnitStatus::Submitted
        && unit
            .submitted_at
            .is_some_and(|t| now.saturating_sub(t) >= ms(cfg.stage_deadline))
}

/// Delay before a capacity-rejected unit is offered again: the provider's back-off (its hint,
/// at least `min(poll_initial, tick_interval)`), never less, plus up to a quarter more drawn
/// from the unit's id and the moment, so units refused together do not come back together.
/// The slot set's own wait after a refusal is the capacity estimate's hold.
pub fn capacity_delay_ms(
    cfg: &SchedulerConfig,
    hint_ms: Option<u64>,
    unit_id: &str,
    now: i64,
) -> i64 {
    let base = ms(cfg.poll_initial.min(cfg.tick_interval)).max(1);
    let delay = match hint_ms {
        Some(h) => i64::try_from(h)
            .unwrap_or(i64::MAX)
            .clamp(base, ms(cfg.retry_max).max(base)),
        None => base,
    };
    delay.saturating_add(jitter_ms(delay / 4, unit_id, now))
}

/// A spread in `0..=span` drawn from `key` and `now` (FNV-1a): the same inputs, the same
/// spread, so decisions stay pure.
fn jitter_ms(span: i64, key: &str, now: i64) -> i64 {
    if span <= 0 {
        return 0;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes().chain(now.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    i64::try_from(h % (span as u64 + 1)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_back_off_from_initial_to_max() {
        let cfg = SchedulerConfig::default();
        assert_eq!(poll_delay_ms(&cfg, 0, None), 5_000);
        assert_eq!(poll_delay_ms(&cfg, 1, None), 7_500);
        assert_eq!(poll_delay_ms(&cfg, 50, None), 30_000);
        assert_eq!(poll_delay_ms(&cfg, u32::MAX, None), 30_000);
    }

    #[test]
    fn hints_are_clamped() {
        let cfg = SchedulerConfig::default();
        assert_eq!(poll_delay_ms(&cfg, 0, Some(0)), 5_000);
        assert_eq!(poll_delay_ms(&cfg, 0, Some(12_000)), 12_000);
        assert_eq!(poll_delay_ms(&cfg, 0, Some(u64::MAX)), 30_000);
    }

    #[test]
    fn retries_double_and_cap() {
        let cfg = SchedulerConfig::default();
        assert_eq!(retry_delay_ms(&cfg, 1, None), 2_000);
        assert_eq!(retry_delay_ms(&cfg, 2, None), 4_000);
        assert_eq!(retry_delay_ms(&cfg, 30, None), 120_000);
        assert_eq!(retry_delay_ms(&cfg, 1, Some(10_000)), 10_000);
    }

    #[test]
    fn slow_provider_delays_grow_with_the_wait() {
        let cfg = SchedulerConfig::default();
        assert_eq!(slow_provider_delay_ms(&cfg, 0), 2_000);
        assert_eq!(slow_provider_delay_ms(&cfg, 600_000), 60_000);
        assert_eq!(slow_provider_delay_ms(&cfg, i64::MAX), 120_000);
    }

    #[test]
    fn capacity_retries_wait_the_providers_pace_with_jitter() {
        let cfg = SchedulerConfig::default();
        let delays: Vec<i64> = (0..50)
            .map(|i| capacity_delay_ms(&cfg, Some(8_000), &format!("u{i}"), 1_000))
            .collect();
        assert!(
            delays.iter().all(|d| (8_000..=10_000).contains(d)),
            "{delays:?}"
        );
        let spread = delays.iter().max().unwrap_or(&0) - delays.iter().min().unwrap_or(&0);
        assert!(
            spread > 1_000,
            "units refused together come back apart: {delays:?}"
        );
        assert_eq!(
            capacity_delay_ms(&cfg, Some(8_000), "u1", 1_000),
            capacity_delay_ms(&cfg, Some(8_000), "u1", 1_000)
        );
        // Never sooner than the floor, whatever the hint.
        assert!(capacity_delay_ms(&cfg, Some(1), "u", 0) >= 5_000);
    }

    #[test]
    fn scaled_config_scales_delays() {
        let cfg = SchedulerConfig::scaled_to(Duration::from_millis(50));
        assert_eq!(poll_delay_ms(&cfg, 0, None), 25);
        assert_eq!(retry_delay_ms(&cfg, 1, None), 10);
    }
}
