//! Quotas beside slots (docs/configuration.md "Quotas"): how many creates a pool may make in a
//! window, as `[pools."NAME"] rate = "100/min"` and `daily = 6` (or a table).
//!
//! A quota counts creates (grants of a slot), not jobs running: a slot comes back when its job
//! ends, a create counted in a window only when the window has moved past it. Both kinds are
//! one shape, [`Quota`]: a limit and a [`Window`].

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer};

const DAY_MS: i64 = 86_400_000;

/// Creates allowed in a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    pub limit: u32,
    pub window: Window,
}

/// Which creates count against a [`Quota`] at a given moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// Those of the last duration before now (a rolling window: Runway's "24 hours").
    Rolling(Duration),
    /// Those since the last midnight at a fixed offset from UTC, in minutes east (a calendar
    /// day that resets at once).
    CalendarDay { offset_minutes: i32 },
    /// Those since the last midnight in a named IANA time zone (`"America/New_York"`): a
    /// calendar day whose offset follows the zone's rules, 23 or 25 hours long on the days
    /// its clocks change. The name is interned (see [`zone_name`]) so a window stays `Copy`.
    ZonedDay { zone: &'static str },
}

/// A day as the windows count it, and the longest a zoned day can be (a clock set back).
const LONGEST_DAY_MS: i64 = DAY_MS + 3_600_000;

/// The one copy of a zone name the windows refer to: each distinct name is kept once for the
/// life of the process (a configuration names a handful).
fn zone_name(name: &str) -> &'static str {
    use std::collections::BTreeSet;
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<BTreeSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(n) = names.get(name) {
        return n;
    }
    let leaked: &'static str = Box::leak(name.to_string().into_boxed_str());
    names.insert(leaked);
    leaked
}

/// The zone of an interned name (checked when it was parsed; UTC should it ever fail).
fn zone(name: &str) -> jiff::tz::TimeZone {
    jiff::tz::db().get(name).unwrap_or(jiff::tz::TimeZone::UTC)
}

/// The start (Unix ms) of the calendar day in `zone` containing `t`, and of the next one.
fn zoned_day(zone_name: &str, t: i64) -> (i64, i64) {
    let day = jiff::Timestamp::from_millisecond(t).ok().and_then(|ts| {
        let start = ts.to_zoned(zone(zone_name)).start_of_day().ok()?;
        let next = start.tomorrow().ok()?.start_of_day().ok()?;
        Some((
            start.timestamp().as_millisecond(),
            next.timestamp().as_millisecond(),
        ))
    });
    // Outside jiff's range (years beyond ±9999): a UTC day.
    day.unwrap_or_else(|| {
        let start = t.div_euclid(DAY_MS) * DAY_MS;
        (start, start + DAY_MS)
    })
}

impl Window {
    /// The length of the window (ms): the rolling duration, or a day.
    pub fn len_ms(&self) -> i64 {
        match *self {
            Window::Rolling(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            Window::CalendarDay { .. } => DAY_MS,
            Window::ZonedDay { .. } => LONGEST_DAY_MS,
        }
    }

    /// The start of the calendar day containing `t` (Unix ms) for the calendar kinds;
    /// `None` for a rolling window.
    pub fn day_start(&self, t: i64) -> Option<i64> {
        match *self {
            Window::Rolling(_) => None,
            Window::CalendarDay { offset_minutes } => {
                let off = i64::from(offset_minutes) * 60_000;
                Some((t + off).div_euclid(DAY_MS) * DAY_MS - off)
            }
            Window::ZonedDay { zone } => Some(zoned_day(zone, t).0),
        }
    }

    /// How much longer than the provider slotd counts a create: its record of a create is the
    /// submit marker, written before the request leaves, so the provider's record is later by
    /// the request's own latency, and a create sent the moment slotd's window frees could
    /// reach the provider before its window does. A tenth of the window, at most a second.
    pub fn margin_ms(&self) -> i64 {
        (self.len_ms() / 10).min(1_000)
    }

    /// Creates made at or after this instant (Unix ms) count at `now_ms`.
    pub fn since(&self, now_ms: i64) -> i64 {
        let start = self
            .day_start(now_ms)
            .unwrap_or_else(|| now_ms.saturating_sub(self.len_ms()) + 1);
        start.saturating_sub(self.margin_ms())
    }

    /// When a full window has room again: a rolling one when its oldest counted create
    /// (`oldest`) leaves it, a calendar day at the next midnight (each with the margin).
    pub fn frees_at(&self, now_ms: i64, oldest: Option<i64>) -> i64 {
        match *self {
            Window::Rolling(_) => oldest
                .unwrap_or(now_ms)
                .saturating_add(self.len_ms())
                .saturating_add(self.margin_ms()),
            Window::CalendarDay { .. } => self
                .since(now_ms)
                .saturating_add(DAY_MS)
                .saturating_add(2 * self.margin_ms()),
            Window::ZonedDay { zone } => zoned_day(zone, now_ms).1.saturating_add(self.margin_ms()),
        }
    }

    /// How long a create can count: records older than this are of no use.
    pub fn span_ms(&self) -> i64 {
        self.len_ms().saturating_add(self.margin_ms())
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Window::Rolling(d) => write!(f, "rolling {}", humantime::format_duration(d)),
            Window::CalendarDay { offset_minutes } => {
                let sign = if offset_minutes < 0 { '-' } else { '+' };
                let m = offset_minutes.unsigned_abs();
                write!(f, "calendar day (UTC{sign}{:02}:{:02})", m / 60, m % 60)
            }
            Window::ZonedDay { zone } => write!(f, "calendar day ({zone})"),
        }
    }
}

/// The longest window a quota may have: records are kept for a day.
pub const QUOTA_WINDOW_MAX: Duration = Duration::from_secs(86_400);

/// `rate`: `"N/unit"` or `"N/duration"`, e.g. `"100/min"`, `"10/s"`, `"6/10s"`, `"1000/h"`.
pub fn parse_rate(text: &str) -> Result<Quota, String> {
    let (n, per) = text
        .split_once('/')
        .ok_or_else(|| format!("{text:?} is not a rate; write it as \"100/min\" or \"6/10s\""))?;
    let limit = parse_limit(n.trim()).map_err(|e| format!("{text:?}: {e}"))?;
    let per = per.trim();
    let window = match per {
        "s" | "sec" | "second" => Duration::from_secs(1),
        "m" | "min" | "minute" => Duration::from_secs(60),
        "h" | "hour" => Duration::from_secs(3600),
        "d" | "day" => Duration::from_secs(86_400),
        other => humantime::parse_duration(other).map_err(|_| {
            format!("{text:?}: {other:?} is not a window (try s, min, h, day or \"10s\")")
        })?,
    };
    check_window(text, window)?;
    Ok(Quota {
        limit,
        window: Window::Rolling(window),
    })
}

fn parse_limit(n: &str) -> Result<u32, String> {
    match n.parse::<u32>() {
        Ok(0) => Err("a limit must be at least 1".into()),
        Ok(v) => Ok(v),
        Err(_) => Err(format!("{n:?} is not a whole number of creates")),
    }
}

fn check_window(what: &str, window: Duration) -> Result<(), String> {
    if window.is_zero() {
        return Err(format!("{what:?}: the window must be longer than zero"));
    }
    if window > QUOTA_WINDOW_MAX {
        return Err(format!("{what:?}: the window may be at most a day"));
    }
    Ok(())
}

/// A calendar day's zone: `"UTC"`, `"Z"`, a fixed offset (`"+08:00"`, `"-05:30"`) or an IANA
/// zone name (`"America/New_York"`, `"Asia/Shanghai"`), whose offset follows its rules.
fn parse_tz(tz: &str) -> Result<Window, String> {
    let t = tz.trim();
    if matches!(t, "UTC" | "utc" | "Z" | "GMT") {
        return Ok(Window::CalendarDay { offset_minutes: 0 });
    }
    let (sign, rest) = match t.as_bytes().first() {
        Some(b'+') => (1, &t[1..]),
        Some(b'-') => (-1, &t[1..]),
        _ => {
            return match jiff::tz::db().get(t) {
                Ok(_) => Ok(Window::ZonedDay { zone: zone_name(t) }),
                Err(_) => Err(format!(
                    "tz {tz:?}: not a time zone; give an IANA name such as \"America/New_York\", \
                     \"UTC\" or an offset such as \"+09:00\""
                )),
            };
        }
    };
    let (h, m) = rest.split_once(':').unwrap_or((rest, "0"));
    let h: i32 = h.parse().map_err(|_| format!("tz {tz:?}: bad hours"))?;
    let m: i32 = m.parse().map_err(|_| format!("tz {tz:?}: bad minutes"))?;
    if !(0..=14).contains(&h) || !(0..60).contains(&m) {
        return Err(format!("tz {tz:?}: offsets run from -14:00 to +14:00"));
    }
    Ok(Window::CalendarDay {
        offset_minutes: sign * (h * 60 + m),
    })
}

/// A calendar-day window in `tz` (`"+08:00"`, `"Asia/Tokyo"`), for code that builds a
/// configuration (tests, tools); the file's `daily = { limit, tz }` reads the same.
pub fn calendar_day(tz: &str) -> Result<Window, String> {
    parse_tz(tz)
}

/// `daily`: a number (creates per rolling 24 h), or a table: `{ limit = 6 }`, `{ limit = 6,
/// window = "40s" }` (a shorter "day", for simulators), `{ limit = 6, tz = "+08:00" }` or
/// `{ limit = 6, tz = "America/New_York" }` (per calendar day at that offset, in that zone).
fn daily_from(value: DailyValue) -> Result<Quota, String> {
    match value {
        DailyValue::Limit(n) => {
            let limit = u32::try_from(n)
                .ok()
                .filter(|v| *v > 0)
                .ok_or_else(|| format!("{n} is not a daily limit (1 or more)"))?;
            Ok(Quota {
                limit,
                window: Window::Rolling(QUOTA_WINDOW_MAX),
            })
        }
        DailyValue::Table { limit, window, tz } => {
            let limit = u32::try_from(limit)
                .ok()
                .filter(|v| *v > 0)
                .ok_or_else(|| format!("limit {limit} is not a daily limit (1 or more)"))?;
            let window = match (window, tz) {
                (Some(_), Some(_)) => {
                    return Err("give window (rolling) or tz (calendar day), not both".into());
                }
                (Some(w), None) => {
                    let d = humantime::parse_duration(w.trim())
                        .map_err(|_| format!("window {w:?} is not a duration (try \"24h\")"))?;
                    check_window(&w, d)?;
                    Window::Rolling(d)
                }
                (None, Some(tz)) => parse_tz(&tz)?,
                (None, None) => Window::Rolling(QUOTA_WINDOW_MAX),
            };
            Ok(Quota { limit, window })
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum DailyValue {
    Limit(i64),
    Table {
        limit: i64,
        window: Option<String>,
        tz: Option<String>,
    },
}

/// `daily` as a TOML value (a provider account's table is read by hand).
pub(super) fn daily_of(value: &toml::Value) -> Result<Quota, String> {
    let v = DailyValue::deserialize(value.clone()).map_err(|_| {
        "expected a number (creates per 24 h) or a table { limit, window } or { limit, tz }"
            .to_string()
    })?;
    daily_from(v)
}

/// Serde: an optional `rate`.
pub(super) fn rate<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Quota>, D::Error> {
    let text = String::deserialize(d)?;
    parse_rate(&text).map(Some).map_err(de::Error::custom)
}

/// Serde: an optional `daily`.
pub(super) fn daily<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Quota>, D::Error> {
    let v = DailyValue::deserialize(d).map_err(|_| {
        de::Error::custom(
            "daily: expected a number (creates per 24 h) or a table { limit, window } or \
             { limit, tz }",
        )
    })?;
    daily_from(v).map(Some).map_err(de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_with_units_and_durations() {
        let r = parse_rate("100/min").expect("rate");
        assert_eq!(r.limit, 100);
        assert_eq!(r.window, Window::Rolling(Duration::from_secs(60)));
        let r = parse_rate(" 6 / 10s ").expect("rate");
        assert_eq!((r.limit, r.window.len_ms()), (6, 10_000));
        for bad in ["100", "0/min", "x/min", "5/fortnight", "5/0s", "5/2d"] {
            let e = parse_rate(bad).expect_err(bad);
            assert!(e.contains(bad.trim()), "{bad}: {e}");
        }
    }

    #[test]
    fn daily_takes_a_number_or_a_table() {
        let q = daily_from(DailyValue::Limit(6)).expect("daily");
        assert_eq!(q.window.len_ms(), DAY_MS);
        let q = daily_from(DailyValue::Table {
            limit: 6,
            window: Some("40s".into()),
            tz: None,
        })
        .expect("daily");
        assert_eq!(q.window, Window::Rolling(Duration::from_secs(40)));
        let q = daily_from(DailyValue::Table {
            limit: 6,
            window: None,
            tz: Some("+08:00".into()),
        })
        .expect("daily");
        assert_eq!(
            q.window,
            Window::CalendarDay {
                offset_minutes: 480
            }
        );
        assert!(daily_from(DailyValue::Limit(0)).is_err());
        let q = daily_from(DailyValue::Table {
            limit: 6,
            window: None,
            tz: Some("Europe/Paris".into()),
        })
        .expect("named zone");
        assert_eq!(
            q.window,
            Window::ZonedDay {
                zone: "Europe/Paris"
            }
        );
        let e = daily_from(DailyValue::Table {
            limit: 6,
            window: None,
            tz: Some("Mars/Olympus_Mons".into()),
        })
        .expect_err("no such zone");
        assert!(e.contains("Mars/Olympus_Mons") && e.contains("IANA"), "{e}");
    }

    #[test]
    fn a_named_zone_follows_its_clock_changes() {
        // New York sets its clocks back on 2026-11-01: that day runs from 04:00Z (EDT
        // midnight) to 05:00Z the next day (EST midnight), 25 hours.
        let w = Window::ZonedDay {
            zone: zone_name("America/New_York"),
        };
        let now = 1_793_552_400_000; // 2026-11-01T17:00:00Z, noon EST
        assert_eq!(w.day_start(now), Some(1_793_505_600_000));
        assert_eq!(w.since(now), 1_793_505_600_000 - 1_000);
        assert_eq!(w.frees_at(now, None), 1_793_595_600_000 + 1_000);
        assert!(
            w.span_ms() >= 25 * 3_600_000,
            "records kept for the long day"
        );
        assert_eq!(w.to_string(), "calendar day (America/New_York)");
        // The next day is 24 hours again.
        let next = 1_793_595_600_000 + 3_600_000;
        assert_eq!(w.day_start(next), Some(1_793_595_600_000));
        // One name, one copy.
        assert!(std::ptr::eq(
            zone_name("America/New_York"),
            zone_name("America/New_York")
        ));
    }

    #[test]
    fn windows_say_what_counts_and_when_room_comes_back() {
        // 40 s rolling, counted with a margin of a second.
        let w = Window::Rolling(Duration::from_secs(40));
        assert_eq!(w.since(100_000), 59_001);
        assert_eq!(w.frees_at(100_000, Some(70_000)), 111_000);
        assert_eq!(w.span_ms(), 41_000);
        // A short window's margin is a tenth of it.
        assert_eq!(Window::Rolling(Duration::from_secs(1)).margin_ms(), 100);
        // Calendar day at +01:00: 2026-12-03T00:30Z is 01:30 there; the day began at 00:00
        // there, 23:00Z (and a second before, the margin).
        let w = Window::CalendarDay { offset_minutes: 60 };
        let now = 1_796_257_800_000; // 2026-12-03T00:30:00Z
        let since = w.since(now);
        assert_eq!(now - since, 90 * 60_000 + 1_000);
        assert_eq!(w.frees_at(now, None), since + DAY_MS + 2_000);
        assert_eq!(w.to_string(), "calendar day (UTC+01:00)");
    }
}
