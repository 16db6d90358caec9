//! The simulators' one clock. Every simulated duration is a real one times `time_scale`
//! ([`Clock::scaled`]), and `/_sim/…` shows real spans divided by it ([`Clock::simulated`]).
//! The fal queue model also counts real milliseconds since the simulator started (tokio's
//! clock, so a paused test runtime pauses it too) and shows them as wall-clock times (history,
//! logs) through [`Clock::unix_ms`] and [`Clock::iso`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

pub struct Clock {
    epoch: Instant,
    epoch_unix_ms: i64,
    time_scale: f64,
}

impl Clock {
    pub(crate) fn new(time_scale: f64) -> Clock {
        Clock {
            epoch: Instant::now(),
            epoch_unix_ms: unix_ms_now(),
            time_scale,
        }
    }

    /// The factor on every simulated duration.
    pub(crate) fn time_scale(&self) -> f64 {
        self.time_scale
    }

    /// When the simulator started.
    pub(crate) fn epoch(&self) -> Instant {
        self.epoch
    }

    /// Simulated seconds as real time (`Duration::MAX` when too long to say).
    pub(crate) fn scaled(&self, simulated_s: f64) -> Duration {
        scaled(self.time_scale, simulated_s)
    }

    /// A real span in simulated seconds.
    pub(crate) fn simulated(&self, real: Duration) -> f64 {
        real.as_secs_f64() / self.time_scale
    }

    /// Simulated seconds from `origin` to `t` (0 when `t` is earlier).
    pub(crate) fn simulated_since(&self, origin: Instant, t: Instant) -> f64 {
        self.simulated(t.saturating_duration_since(origin))
    }

    /// Real milliseconds since the start: the queue model's `now`.
    pub(crate) fn now_ms(&self) -> i64 {
        i64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    /// The instant of queue time `ms` (timers sleep until it); a day from now when `ms` is
    /// beyond what an `Instant` holds (a timeout of 1e300 seconds, say).
    pub(crate) fn instant(&self, ms: i64) -> Instant {
        let since = Duration::from_millis(u64::try_from(ms).unwrap_or(0));
        self.epoch
            .checked_add(since)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400))
    }

    /// Unix milliseconds of queue time `ms`.
    pub(crate) fn unix_ms(&self, ms: i64) -> i64 {
        self.epoch_unix_ms.saturating_add(ms)
    }

    /// RFC 3339 UTC with milliseconds of queue time `ms`.
    pub(crate) fn iso(&self, ms: i64) -> String {
        let unix = u64::try_from(self.unix_ms(ms)).unwrap_or(0);
        let at = UNIX_EPOCH
            .checked_add(Duration::from_millis(unix))
            .unwrap_or(UNIX_EPOCH);
        humantime::format_rfc3339_millis(at).to_string()
    }

    /// A real span of milliseconds in simulated seconds.
    pub(crate) fn simulated_s(&self, ms: i64) -> f64 {
        ms as f64 / 1000.0 / self.time_scale
    }

    /// Simulated seconds as real milliseconds (rounded, at least 0).
    pub(crate) fn real_ms(&self, simulated_s: f64) -> i64 {
        (simulated_s * self.time_scale * 1000.0).round().max(0.0) as i64
    }
}

/// Simulated seconds as real time at `time_scale` (`Duration::MAX` when too long to say).
pub(crate) fn scaled(time_scale: f64, simulated_s: f64) -> Duration {
    Duration::try_from_secs_f64((simulated_s * time_scale).max(0.0)).unwrap_or(Duration::MAX)
}

/// Wall-clock Unix milliseconds now.
pub(crate) fn unix_ms_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Wall-clock Unix seconds now (JWT checks, webhook timestamps).
pub(crate) fn unix_secs_now() -> i64 {
    unix_ms_now() / 1000
}

/// Wall-clock now, RFC 3339 UTC with milliseconds, e.g. `2026-08-11T06:12:01.171Z`.
pub(crate) fn iso_now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// Unix milliseconds of an RFC 3339 time, `Z` or with a `±HH:MM` offset.
pub(crate) fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let s = s.trim();
    let (base, offset_min) = match s
        .len()
        .checked_sub(6)
        .and_then(|i| s.get(i..).map(|t| (i, t)))
    {
        Some((i, tail))
            if (tail.starts_with('+') || tail.starts_with('-'))
                && tail.as_bytes().get(3) == Some(&b':') =>
        {
            let h: i64 = tail.get(1..3)?.parse().ok()?;
            let m: i64 = tail.get(4..6)?.parse().ok()?;
            let sign = if tail.starts_with('-') { -1 } else { 1 };
            (s.get(..i)?, sign * (h * 60 + m))
        }
        _ => (s, 0),
    };
    let t = humantime::parse_rfc3339_weak(base).ok()?;
    let ms = i64::try_from(t.duration_since(UNIX_EPOCH).ok()?.as_millis()).ok()?;
    Some(ms - offset_min * 60_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_with_and_without_offsets() {
        let z = parse_rfc3339_ms("2026-01-02T03:04:05Z");
        assert_eq!(z, Some(1_767_323_045_000));
        assert_eq!(parse_rfc3339_ms("2026-01-02T04:04:05+01:00"), z);
        assert_eq!(parse_rfc3339_ms("2026-01-02T00:04:05.000-03:00"), z);
        assert_eq!(parse_rfc3339_ms("yesterday"), None);
        assert_eq!(parse_rfc3339_ms(""), None);
    }
}
