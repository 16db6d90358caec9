//! A pool's slot timeline, derived from its slot log (pure, no I/O): the intervals during
//! which each unit held a slot, each put in a lane so that intervals of one lane never
//! overlap, and per-minute throughput and provider latency for the console's charts.
//!
//! A slot is held exactly while a unit is `submitted` (docs/state-machine.md), so an interval opens
//! at a transition into `submitted` and closes at the transition out of it. How it closed says
//! what happened at the provider:
//! - [`Outcome::Ended`]: the job ended (succeeded, failed, cancelled, or the unit moved on to
//!   its next stage);
//! - [`Outcome::Returned`]: back to `pending` in the same stage, the job never ran (a
//!   retryable submit error), [`Outcome::OverCapacity`] when the provider said it was full
//!   (Kling's 1303).
//!
//! Intervals are clipped to the window: one that opened before it starts at the window's
//! start (`clipped`), and its duration is not counted as a latency.

use std::collections::HashMap;

use serde::Serialize;

use slotd_store::SlotLog;

/// The scheduler's event detail for a provider's over-capacity answer.
const OVER_CAPACITY_DETAIL: &str = "provider over capacity";
/// One chart bucket.
pub const MINUTE_MS: i64 = 60_000;

/// How an interval closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ended,
    Returned,
    OverCapacity,
}

/// One unit's hold of one slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Interval {
    pub unit_id: String,
    pub task_id: String,
    pub tenant: String,
    pub start_ms: i64,
    /// `None`: still held.
    pub end_ms: Option<i64>,
    /// The lane: intervals of one lane never overlap; the lowest free lane is taken.
    pub slot: u32,
    /// `None` while held.
    pub outcome: Option<Outcome>,
    /// It opened before the window (or before the oldest event read).
    pub clipped: bool,
}

/// One minute of the window.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct MinuteStats {
    pub start_ms: i64,
    /// Jobs that ended in this minute.
    pub ended: u32,
    /// Units that went back to pending without a job (retryable submit errors and
    /// over-capacity answers).
    pub returned: u32,
    /// Of those, the provider's over-capacity answers (1303).
    pub over_capacity: u32,
    /// Median duration at the provider of the jobs that ended in this minute (whole ones).
    pub p50_ms: Option<i64>,
    pub p95_ms: Option<i64>,
}

/// The whole derived timeline.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    pub intervals: Vec<Interval>,
    /// Lanes used (the most slots held at once in the window, as the log shows it).
    pub lanes: u32,
    pub minutes: Vec<MinuteStats>,
    /// Over the whole window.
    pub p50_ms: Option<i64>,
    pub p95_ms: Option<i64>,
}

/// An interval still open while the log is read.
struct Open {
    start: i64,
    stage: String,
    task_id: String,
    tenant: String,
    clipped: bool,
}

/// Derive the timeline of the window `[since, now]` from `log`.
pub fn derive(log: &SlotLog, since: i64, now: i64) -> Timeline {
    let mut open: HashMap<&str, Open> = HashMap::new();
    let mut intervals = Vec::new();
    for e in &log.events {
        if e.to_status == "submitted" {
            // A second start without an end between (events lost to the cap): close the first.
            if let Some(prev) = open.remove(e.unit_id.as_str()) {
                intervals.push(closed(&e.unit_id, prev, e.at, Outcome::Ended));
            }
            open.insert(
                &e.unit_id,
                Open {
                    start: e.at,
                    stage: e.stage.clone(),
                    task_id: e.task_id.clone(),
                    tenant: e.tenant.clone(),
                    clipped: false,
                },
            );
            continue;
        }
        let held = open.remove(e.unit_id.as_str()).unwrap_or_else(|| Open {
            start: since,
            stage: e.stage.clone(),
            task_id: e.task_id.clone(),
            tenant: e.tenant.clone(),
            clipped: true,
        });
        let outcome = if e.to_status == "pending" && e.stage == held.stage {
            let full = e
                .detail
                .as_deref()
                .is_some_and(|d| d.starts_with(OVER_CAPACITY_DETAIL));
            if full {
                Outcome::OverCapacity
            } else {
                Outcome::Returned
            }
        } else {
            Outcome::Ended
        };
        intervals.push(closed(&e.unit_id, held, e.at, outcome));
    }
    for h in &log.holders {
        let held = open.remove(h.unit_id.as_str()).unwrap_or_else(|| Open {
            start: h.since.max(since),
            stage: h.stage.clone(),
            task_id: h.task_id.clone(),
            tenant: h.tenant.clone(),
            clipped: h.since < since,
        });
        intervals.push(still_held(&h.unit_id, held));
    }
    // Opened in the window and ended after the log was read (the holders are read second).
    let mut rest: Vec<(&str, Open)> = open.into_iter().collect();
    rest.sort_by(|a, b| a.0.cmp(b.0));
    for (unit_id, held) in rest {
        intervals.push(still_held(unit_id, held));
    }
    let lanes = assign_lanes(&mut intervals);
    let (minutes, mut all) = per_minute(&intervals, since, now);
    Timeline {
        intervals,
        lanes,
        minutes,
        p50_ms: percentile(&mut all, 50),
        p95_ms: percentile(&mut all, 95),
    }
}

fn closed(unit_id: &str, held: Open, end: i64, outcome: Outcome) -> Interval {
    Interval {
        unit_id: unit_id.to_string(),
        task_id: held.task_id,
        tenant: held.tenant,
        start_ms: held.start,
        end_ms: Some(end.max(held.start)),
        slot: 0,
        outcome: Some(outcome),
        clipped: held.clipped,
    }
}

fn still_held(unit_id: &str, held: Open) -> Interval {
    Interval {
        unit_id: unit_id.to_string(),
        task_id: held.task_id,
        tenant: held.tenant,
        start_ms: held.start,
        end_ms: None,
        slot: 0,
        outcome: None,
        clipped: held.clipped,
    }
}

/// Sort by start and give each interval the lowest lane free at its start (an interval ending
/// exactly when another starts frees its lane for it). Returns the number of lanes.
pub fn assign_lanes(intervals: &mut [Interval]) -> u32 {
    intervals.sort_by(|a, b| {
        (a.start_ms, a.end_ms.unwrap_or(i64::MAX), &a.unit_id).cmp(&(
            b.start_ms,
            b.end_ms.unwrap_or(i64::MAX),
            &b.unit_id,
        ))
    });
    // The end of each lane's last interval (`i64::MAX`: still held).
    let mut lane_end: Vec<i64> = Vec::new();
    for iv in intervals.iter_mut() {
        let end = iv.end_ms.unwrap_or(i64::MAX);
        let lane = match lane_end.iter().position(|&e| e <= iv.start_ms) {
            Some(free) => free,
            None => {
                lane_end.push(i64::MIN);
                lane_end.len() - 1
            }
        };
        lane_end[lane] = end;
        iv.slot = u32::try_from(lane).unwrap_or(u32::MAX);
    }
    u32::try_from(lane_end.len()).unwrap_or(u32::MAX)
}

/// Per-minute buckets from the minute `since` falls in to the one `now` falls in, and every
/// whole ended job's duration.
fn per_minute(intervals: &[Interval], since: i64, now: i64) -> (Vec<MinuteStats>, Vec<i64>) {
    let first = since.div_euclid(MINUTE_MS) * MINUTE_MS;
    let count = usize::try_from((now.max(since) - first) / MINUTE_MS + 1).unwrap_or(1);
    let mut minutes: Vec<MinuteStats> = (0..count)
        .map(|i| MinuteStats {
            start_ms: first + MINUTE_MS * i as i64,
            ..MinuteStats::default()
        })
        .collect();
    let mut durations: Vec<Vec<i64>> = vec![Vec::new(); count];
    let mut all = Vec::new();
    for iv in intervals {
        let (Some(end), Some(outcome)) = (iv.end_ms, iv.outcome) else {
            continue;
        };
        let Ok(i) = usize::try_from((end - first) / MINUTE_MS) else {
            continue;
        };
        let Some(m) = minutes.get_mut(i) else {
            continue;
        };
        match outcome {
            Outcome::Ended => {
                m.ended += 1;
                if !iv.clipped {
                    durations[i].push(end - iv.start_ms);
                    all.push(end - iv.start_ms);
                }
            }
            Outcome::Returned => m.returned += 1,
            Outcome::OverCapacity => {
                m.returned += 1;
                m.over_capacity += 1;
            }
        }
    }
    for (m, d) in minutes.iter_mut().zip(durations.iter_mut()) {
        m.p50_ms = percentile(d, 50);
        m.p95_ms = percentile(d, 95);
    }
    (minutes, all)
}

/// The nearest-rank percentile `p` of `values` (sorted in place); `None` when empty.
pub fn percentile(values: &mut [i64], p: usize) -> Option<i64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let rank = (p * values.len()).div_ceil(100).max(1);
    values.get(rank - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use slotd_store::{SlotEvent, SlotHolder};

    fn ev(unit: &str, at: i64, from: &str, to: &str, stage: &str, detail: &str) -> SlotEvent {
        SlotEvent {
            id: at,
            unit_id: unit.into(),
            task_id: format!("t-{unit}"),
            tenant: "a".into(),
            at,
            from_status: Some(from.into()),
            to_status: to.into(),
            stage: stage.into(),
            detail: (!detail.is_empty()).then(|| detail.to_string()),
        }
    }

    fn iv(start: i64, end: Option<i64>) -> Interval {
        Interval {
            unit_id: format!("u{start}"),
            task_id: "t".into(),
            tenant: "a".into(),
            start_ms: start,
            end_ms: end,
            slot: 99,
            outcome: None,
            clipped: false,
        }
    }

    #[test]
    fn lanes_never_overlap_and_the_lowest_free_one_is_taken() {
        let mut list = vec![
            iv(0, Some(10)),
            iv(5, Some(20)),
            iv(10, Some(15)), // lane 0 frees at 10
            iv(12, None),     // lanes 0 (until 15) and 1 (until 20) are busy
            iv(21, Some(30)), // lane 0 (free at 15) is the lowest
        ];
        let lanes = assign_lanes(&mut list);
        let slots: Vec<(i64, u32)> = list.iter().map(|i| (i.start_ms, i.slot)).collect();
        assert_eq!(slots, [(0, 0), (5, 1), (10, 0), (12, 2), (21, 0)]);
        assert_eq!(lanes, 3);
        // No two intervals of a lane overlap.
        for a in &list {
            for b in &list {
                if a.unit_id != b.unit_id && a.slot == b.slot {
                    let a_end = a.end_ms.unwrap_or(i64::MAX);
                    let b_end = b.end_ms.unwrap_or(i64::MAX);
                    assert!(a_end <= b.start_ms || b_end <= a.start_ms, "{a:?} {b:?}");
                }
            }
        }
    }

    #[test]
    fn intervals_outcomes_and_charts_come_from_the_log() {
        let since = 0;
        let log = SlotLog {
            events: vec![
                // Opened before the window: clipped, no latency.
                ev("old", 1_000, "submitted", "succeeded", "main", ""),
                ev("u1", 2_000, "pending", "submitted", "main", ""),
                ev("u2", 3_000, "pending", "submitted", "main", ""),
                ev(
                    "u2",
                    3_500,
                    "submitted",
                    "pending",
                    "main",
                    "provider over capacity; back to pending",
                ),
                ev("u3", 4_000, "pending", "submitted", "voice", ""),
                // Next stage: the voice job ended well.
                ev("u3", 9_000, "submitted", "pending", "element", ""),
                ev("u1", 62_000, "submitted", "failed", "main", ""),
                ev("u4", 63_000, "pending", "submitted", "main", ""),
            ],
            holders: vec![SlotHolder {
                unit_id: "u4".into(),
                task_id: "t-u4".into(),
                tenant: "a".into(),
                stage: "main".into(),
                since: 63_000,
            }],
            truncated: false,
        };
        let t = derive(&log, since, 70_000);
        let by_unit = |u: &str| {
            t.intervals
                .iter()
                .find(|i| i.unit_id == u)
                .cloned()
                .unwrap_or_else(|| panic!("no interval of {u}"))
        };
        let old = by_unit("old");
        assert!(old.clipped && old.start_ms == 0 && old.outcome == Some(Outcome::Ended));
        assert_eq!(by_unit("u2").outcome, Some(Outcome::OverCapacity));
        assert_eq!(by_unit("u3").outcome, Some(Outcome::Ended));
        assert_eq!(by_unit("u4").end_ms, None, "still held");
        assert_eq!(t.intervals.len(), 5, "u4 once, from its event and its hold");
        assert_eq!(t.minutes.len(), 2);
        let m0 = &t.minutes[0];
        assert_eq!((m0.ended, m0.returned, m0.over_capacity), (2, 1, 1));
        assert_eq!(m0.p50_ms, Some(5_000), "only u3's whole job");
        let m1 = &t.minutes[1];
        assert_eq!((m1.start_ms, m1.ended), (60_000, 1));
        assert_eq!(m1.p95_ms, Some(60_000));
        assert_eq!((t.p50_ms, t.p95_ms), (Some(5_000), Some(60_000)));
    }

    #[test]
    fn a_holder_from_before_the_window_is_clipped() {
        let log = SlotLog {
            events: vec![],
            holders: vec![SlotHolder {
                unit_id: "u".into(),
                task_id: "t".into(),
                tenant: "a".into(),
                stage: "main".into(),
                since: 500,
            }],
            truncated: false,
        };
        let t = derive(&log, 1_000, 2_000);
        assert_eq!(t.intervals.len(), 1);
        assert!(t.intervals[0].clipped);
        assert_eq!(t.intervals[0].start_ms, 1_000);
        assert_eq!(t.lanes, 1);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        assert_eq!(percentile(&mut [], 50), None);
        assert_eq!(percentile(&mut [7], 95), Some(7));
        let mut v: Vec<i64> = (1..=100).rev().collect();
        assert_eq!(percentile(&mut v, 50), Some(50));
        assert_eq!(percentile(&mut v, 95), Some(95));
    }
}
