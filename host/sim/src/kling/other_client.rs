//! Another client of the same account (another API key of it) that takes a share of the
//! account's concurrency in bursts, so a test or a benchmark can watch slotd live beside it
//! (KLING_API.md, "Concurrency": the quota is per account, shared by all its API keys).
//!
//! The schedule, in simulated seconds from its origin (the first accepted create, or the
//! `POST /_sim/account` that set it): burst `k` begins at `first + k × (burst + gap)` and ends
//! `burst` later. During a burst the other client wants `slots` slots and has priority: whenever
//! the account has a free slot and it holds fewer than `slots`, it takes that slot (at the
//! burst's start it takes what is free; then, as slotd's jobs end, its hold ramps up to
//! `slots`). A create of slotd's is refused 429/1303 when `running + held ≥ concurrency`, like
//! any create over the quota. At the burst's end it releases everything at once. Its jobs are
//! not tasks: no query, list or `/_sim/jobs` shows them; they only count against the quota.
//!
//! The model is lazy and deterministic: slotd's running count changes only at its creates and
//! task ends, so [`OtherClient::sync`], called at each of them (and at each stats snapshot),
//! replays every burst start and end since the previous call against the running count that
//! held in between. No timer of its own.

use serde_json::Value;
use tokio::time::Instant;

use super::stats::OtherClientBurst;
use crate::clock::Clock;

/// Default length of a burst, simulated seconds.
pub const OTHER_CLIENT_BURST_SECS_DEFAULT: f64 = 300.0;
/// Default quiet time between bursts, simulated seconds.
pub const OTHER_CLIENT_GAP_SECS_DEFAULT: f64 = 600.0;

/// The knobs' names on the command line, for error messages.
pub(crate) const FLAGS: Names = Names {
    slots: "--other-client-slots",
    burst_secs: "--other-client-burst-secs",
    gap_secs: "--other-client-gap-secs",
    first_secs: "--other-client-first-secs",
};

/// The knobs' names in `POST /_sim/account`, for error messages.
const FIELDS: Names = Names {
    slots: "other_client.slots",
    burst_secs: "other_client.burst_secs",
    gap_secs: "other_client.gap_secs",
    first_secs: "other_client.first_secs",
};

/// What each knob is called where it was given.
pub(crate) struct Names {
    slots: &'static str,
    burst_secs: &'static str,
    gap_secs: &'static str,
    first_secs: &'static str,
}

/// The other client's burst schedule, in simulated seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct OtherClientPlan {
    /// Slots it wants during a burst (at least 1, below the account's concurrency).
    pub slots: u32,
    /// How long a burst holds.
    pub burst_secs: f64,
    /// Quiet time between a burst's end and the next one's start.
    pub gap_secs: f64,
    /// When the first burst begins, after the schedule's origin.
    pub first_secs: f64,
}

impl OtherClientPlan {
    /// Refuses nonsense, naming the knob as `names` call it.
    pub(crate) fn check(&self, concurrency: u32, names: &Names) -> Result<(), String> {
        if self.slots >= concurrency {
            return Err(format!(
                "{} must be below the account's concurrency {concurrency} (got {}): the other \
                 client leaves slotd at least one slot",
                names.slots, self.slots
            ));
        }
        for (name, secs) in [
            (names.burst_secs, self.burst_secs),
            (names.gap_secs, self.gap_secs),
        ] {
            if !(secs.is_finite() && secs > 0.0) {
                return Err(format!(
                    "{name} must be a positive number of simulated seconds (got {secs})"
                ));
            }
        }
        if !(self.first_secs.is_finite() && self.first_secs >= 0.0) {
            return Err(format!(
                "{} must be a number of simulated seconds ≥ 0 (got {})",
                names.first_secs, self.first_secs
            ));
        }
        Ok(())
    }

    pub(crate) fn to_json(self) -> Value {
        serde_json::json!({
            "slots": self.slots,
            "burst_secs": self.burst_secs,
            "gap_secs": self.gap_secs,
            "first_secs": self.first_secs,
        })
    }
}

/// `other_client` of a `POST /_sim/account` body: `null` or `{"slots": 0}` switch it off;
/// `{"slots": N, "burst_secs"?, "gap_secs"?, "first_secs"?}` sets a schedule (left out: the
/// defaults, and `first_secs` = `gap_secs`).
pub(crate) fn parse_plan(
    value: Value,
    concurrency: u32,
) -> Result<Option<OtherClientPlan>, String> {
    let map = match value {
        Value::Null => return Ok(None),
        Value::Object(map) => map,
        other => {
            return Err(format!(
                "other_client must be null or an object {{\"slots\", \"burst_secs\"?, \
                 \"gap_secs\"?, \"first_secs\"?}}, got {other}"
            ));
        }
    };
    let mut slots = None;
    let mut secs = [None; 3];
    for (key, value) in map {
        let at = match key.as_str() {
            "slots" => {
                let n = value.as_u64().and_then(|n| u32::try_from(n).ok());
                slots = Some(n.ok_or_else(|| {
                    format!("{} must be a whole number ≥ 0, got {value}", FIELDS.slots)
                })?);
                continue;
            }
            "burst_secs" => 0,
            "gap_secs" => 1,
            "first_secs" => 2,
            other => {
                return Err(format!(
                    "unknown field other_client.{other} (slots, burst_secs, gap_secs, first_secs)"
                ));
            }
        };
        secs[at] = Some(
            value
                .as_f64()
                .ok_or_else(|| format!("other_client.{key} must be a number, got {value}"))?,
        );
    }
    let slots = slots.ok_or_else(|| format!("{} is required", FIELDS.slots))?;
    if slots == 0 {
        return Ok(None);
    }
    let gap_secs = secs[1].unwrap_or(OTHER_CLIENT_GAP_SECS_DEFAULT);
    let plan = OtherClientPlan {
        slots,
        burst_secs: secs[0].unwrap_or(OTHER_CLIENT_BURST_SECS_DEFAULT),
        gap_secs,
        first_secs: secs[2].unwrap_or(gap_secs),
    };
    plan.check(concurrency, &FIELDS)?;
    Ok(Some(plan))
}

/// One burst as the simulator keeps it (instants; [`OtherClient::bursts`] converts).
#[derive(Clone, Debug)]
struct Burst {
    start: Instant,
    /// When it released its slots, once it has.
    end: Option<Instant>,
    slots: u32,
    peak_held: u32,
}

/// The other client's hold now and its bursts so far.
#[derive(Debug, Default)]
pub(crate) struct OtherClient {
    /// The schedule's origin: the first accepted create, or the run-time change that set the
    /// plan; `None` until then.
    anchor: Option<Instant>,
    /// Index of the next burst to begin.
    next: u64,
    /// When the burst in progress ends.
    ends_at: Option<Instant>,
    /// Slots held now.
    held: u32,
    bursts: Vec<Burst>,
}

impl OtherClient {
    /// Slots the other client holds now (as of the last [`OtherClient::sync`]).
    pub(crate) fn held(&self) -> u32 {
        self.held
    }

    /// Sets the schedule's origin if it has none (at the first accepted create).
    pub(crate) fn anchor_at(&mut self, t: Instant) {
        self.anchor.get_or_insert(t);
    }

    /// Brings the hold up to `now`: every burst start and end since the previous call, with
    /// `room` (the slots slotd's jobs leave free) as it stood in between. Call it before slotd's
    /// running count changes, and again after a slot is freed.
    pub(crate) fn sync(
        &mut self,
        plan: Option<&OtherClientPlan>,
        clock: &Clock,
        now: Instant,
        room: u32,
    ) {
        let (Some(plan), Some(anchor)) = (plan, self.anchor) else {
            return;
        };
        loop {
            if let Some(end) = self.ends_at {
                if end <= now {
                    self.release(end);
                    continue;
                }
                self.take(plan.slots, room);
                return;
            }
            let offset = plan.first_secs + self.next as f64 * (plan.burst_secs + plan.gap_secs);
            let Some(start) = anchor.checked_add(clock.scaled(offset)) else {
                return;
            };
            if start > now {
                return;
            }
            self.next += 1;
            self.ends_at = Some(
                start
                    .checked_add(clock.scaled(plan.burst_secs))
                    .unwrap_or(now + clock.scaled(plan.burst_secs).min(FAR)),
            );
            self.bursts.push(Burst {
                start,
                end: None,
                slots: plan.slots,
                peak_held: 0,
            });
            self.take(plan.slots, room);
        }
    }

    /// A new plan takes effect at `now`: the burst in progress ends (its slots are released),
    /// and the schedule starts again from `now`, or from the first create when there has been
    /// none (`anchored` false).
    pub(crate) fn restart(&mut self, now: Instant, anchored: bool) {
        if self.ends_at.is_some() {
            self.release(now);
        }
        self.next = 0;
        self.anchor = anchored.then_some(now);
    }

    /// The bursts begun so far, in simulated seconds since `origin` (the first create).
    pub(crate) fn bursts(&self, clock: &Clock, origin: Instant) -> Vec<OtherClientBurst> {
        self.bursts
            .iter()
            .map(|b| OtherClientBurst {
                start: clock.simulated_since(origin, b.start),
                end: b.end.map(|t| clock.simulated_since(origin, t)),
                slots: b.slots,
                peak_held: b.peak_held,
            })
            .collect()
    }

    /// Takes free slots up to `slots`.
    fn take(&mut self, slots: u32, room: u32) {
        self.held = self.held.max(slots.min(room));
        if let Some(burst) = self.bursts.last_mut() {
            burst.peak_held = burst.peak_held.max(self.held);
        }
    }

    /// Releases everything at `at`.
    fn release(&mut self, at: Instant) {
        self.held = 0;
        self.ends_at = None;
        if let Some(burst) = self.bursts.last_mut() {
            burst.end = Some(at);
        }
    }
}

/// A burst too long for an `Instant` ends this far from its start instead (a year).
const FAR: std::time::Duration = std::time::Duration::from_secs(365 * 86_400);

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn plan(slots: u32, burst_secs: f64, gap_secs: f64, first_secs: f64) -> OtherClientPlan {
        OtherClientPlan {
            slots,
            burst_secs,
            gap_secs,
            first_secs,
        }
    }

    /// Simulated seconds as seen from the schedule's origin (time scale 1).
    fn at(origin: Instant, secs: u64) -> Instant {
        origin + Duration::from_secs(secs)
    }

    #[test]
    fn the_hold_ramps_with_the_room_and_is_released_at_the_end() {
        let clock = Clock::new(1.0);
        let t0 = Instant::now();
        let p = plan(3, 10.0, 20.0, 5.0);
        let mut other = OtherClient::default();
        other.sync(Some(&p), &clock, at(t0, 1), 10);
        assert_eq!(other.held(), 0, "no origin yet: no burst");
        other.anchor_at(t0);
        other.sync(Some(&p), &clock, at(t0, 4), 0);
        assert_eq!(other.held(), 0, "before the first burst");
        // The burst begins at 5 with one slot free, then slotd's jobs end one by one.
        other.sync(Some(&p), &clock, at(t0, 6), 1);
        assert_eq!(other.held(), 1);
        other.sync(Some(&p), &clock, at(t0, 8), 2);
        assert_eq!(other.held(), 2);
        other.sync(Some(&p), &clock, at(t0, 9), 7);
        assert_eq!(other.held(), 3, "never more than it wants");
        other.sync(Some(&p), &clock, at(t0, 16), 0);
        assert_eq!(other.held(), 0, "the burst ended at 15");
        let bursts = other.bursts(&clock, t0);
        assert_eq!(bursts.len(), 1);
        let b = &bursts[0];
        assert!((b.start - 5.0).abs() < 1e-6 && b.end.is_some_and(|e| (e - 15.0).abs() < 1e-6));
        assert_eq!((b.slots, b.peak_held), (3, 3));
    }

    #[test]
    fn bursts_between_two_events_are_replayed_with_the_room_of_then() {
        let clock = Clock::new(1.0);
        let t0 = Instant::now();
        let p = plan(4, 10.0, 20.0, 0.0);
        let mut other = OtherClient::default();
        other.anchor_at(t0);
        // Nothing happened for 95 s with two slots free: bursts at 0, 30, 60 passed, 90 runs.
        other.sync(Some(&p), &clock, at(t0, 95), 2);
        assert_eq!(other.held(), 2);
        let bursts = other.bursts(&clock, t0);
        let starts: Vec<f64> = bursts.iter().map(|b| b.start.round()).collect();
        assert_eq!(starts, [0.0, 30.0, 60.0, 90.0]);
        assert!(
            bursts[..3]
                .iter()
                .all(|b| b.end.is_some() && b.peak_held == 2)
        );
        assert_eq!(bursts[3].end, None, "in progress");

        // A new plan at 96 ends the burst in progress there and starts again from 96.
        other.restart(at(t0, 96), true);
        assert_eq!(other.held(), 0);
        let q = plan(1, 5.0, 5.0, 2.0);
        other.sync(Some(&q), &clock, at(t0, 97), 3);
        assert_eq!(other.held(), 0, "the new schedule's first burst is at 98");
        other.sync(Some(&q), &clock, at(t0, 99), 3);
        assert_eq!(other.held(), 1);
        let bursts = other.bursts(&clock, t0);
        assert_eq!(bursts[3].end.map(f64::round), Some(96.0));
        assert_eq!(bursts[4].start.round(), 98.0);
        other.sync(None, &clock, at(t0, 200), 3);
        assert_eq!(other.bursts(&clock, t0).len(), 5, "no plan: nothing begins");
    }

    #[test]
    fn plans_are_checked_naming_the_knob() {
        let err = |p: OtherClientPlan| p.check(5, &FLAGS).err().unwrap_or_default();
        assert!(err(plan(5, 1.0, 1.0, 0.0)).contains("--other-client-slots"));
        assert!(err(plan(2, 0.0, 1.0, 0.0)).contains("--other-client-burst-secs"));
        assert!(err(plan(2, 1.0, f64::NAN, 0.0)).contains("--other-client-gap-secs"));
        assert!(err(plan(2, 1.0, 1.0, -1.0)).contains("--other-client-first-secs"));
        assert_eq!(plan(4, 1.0, 1.0, 0.0).check(5, &FLAGS), Ok(()));
    }

    #[test]
    fn run_time_plans_parse_with_defaults() {
        assert_eq!(parse_plan(Value::Null, 5), Ok(None));
        assert_eq!(parse_plan(json!({"slots": 0}), 5), Ok(None));
        assert_eq!(
            parse_plan(json!({"slots": 2}), 5),
            Ok(Some(plan(
                2,
                OTHER_CLIENT_BURST_SECS_DEFAULT,
                OTHER_CLIENT_GAP_SECS_DEFAULT,
                OTHER_CLIENT_GAP_SECS_DEFAULT
            )))
        );
        assert_eq!(
            parse_plan(json!({"slots": 3, "burst_secs": 50, "gap_secs": 70}), 5),
            Ok(Some(plan(3, 50.0, 70.0, 70.0)))
        );
        assert_eq!(
            parse_plan(json!({"slots": 1, "first_secs": 0}), 5).map(|p| p.map(|p| p.first_secs)),
            Ok(Some(0.0))
        );
        for (bad, names) in [
            (json!(3), "other_client"),
            (json!({}), "other_client.slots"),
            (json!({"slots": 5}), "other_client.slots"),
            (json!({"slots": -1}), "other_client.slots"),
            (
                json!({"slots": 1, "burst_secs": "9"}),
                "other_client.burst_secs",
            ),
            (json!({"slots": 1, "gap_secs": 0}), "other_client.gap_secs"),
            (
                json!({"slots": 1, "first_secs": -3}),
                "other_client.first_secs",
            ),
            (json!({"slots": 1, "width": 3}), "other_client.width"),
        ] {
            let err = parse_plan(bad.clone(), 5).err().unwrap_or_default();
            assert!(err.contains(names), "{bad}: {err}");
        }
    }
}
