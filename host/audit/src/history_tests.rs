//! The replayed rules against hand-made logs: overlaps in time are found even when nothing is
//! `submitted` at the end, releases before grants are not overlaps, resubmits need a retry.

use std::collections::BTreeMap;

use super::*;

fn unit(id: &str, status: &str) -> UnitRow {
    UnitRow {
        id: id.into(),
        task_id: "t1".into(),
        pool: "p".into(),
        stage: "video".into(),
        status: status.into(),
        ..UnitRow::default()
    }
}

fn ev(id: i64, from: Option<&str>, to: &str, detail: Option<&str>) -> EventRow {
    EventRow {
        id,
        at: 1_000 + id,
        from_status: from.map(String::from),
        to_status: to.into(),
        detail: detail.map(String::from),
    }
}

fn mark(id: i64, unit: &str, place: &str) -> EventRow {
    ev(
        id,
        Some("pending"),
        "submitted",
        Some(&format!("submit marked: key {unit}-video-0{place}")),
    )
}

/// Units of one pool; each `(unit, mark event id, release event id)`.
fn timeline(spans: &[(&str, i64, i64)], place: &str) -> Snapshot {
    let mut s = Snapshot::default();
    for (u, on, off) in spans {
        s.units.push(unit(u, "completed"));
        s.events.insert(
            u.to_string(),
            vec![
                ev(on - 100, None, "pending", Some("created")),
                mark(*on, u, place),
                ev(*off, Some("submitted"), "succeeded", None),
            ],
        );
    }
    s
}

fn limit(name: &str, n: u32) -> BTreeMap<String, u32> {
    BTreeMap::from([(name.to_string(), n)])
}

#[test]
fn markers_name_their_key_pool_and_account() {
    assert_eq!(
        marker("submit marked: key u1-video-0 in pool kling:video account acct-2"),
        Some(Marker {
            key: "u1-video-0",
            pool: Some("kling:video"),
            account: Some("acct-2"),
        })
    );
    assert_eq!(
        marker("submit marked: key u1-video-0 in pool route pool"),
        Some(Marker {
            key: "u1-video-0",
            pool: Some("route pool"),
            account: None,
        })
    );
    assert_eq!(
        marker("submit marked: key u1-video-0"),
        Some(Marker {
            key: "u1-video-0",
            pool: None,
            account: None,
        })
    );
    assert_eq!(marker("accepted as provider job 7"), None);
}

#[test]
fn an_overlap_during_the_run_is_found_though_nothing_is_submitted_at_the_end() {
    // a [10, 40], b [20, 50], c [30, 60]: three at once from event 30.
    let s = timeline(&[("a", 10, 40), ("b", 20, 50), ("c", 30, 60)], " in pool p");
    assert!(slot_peaks(&s, &limit("p", 3), &BTreeMap::new()).is_empty());
    let f = slot_peaks(&s, &limit("p", 2), &BTreeMap::new());
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].kind, "pool limit");
    assert!(
        f[0].message.contains("held 3 submitted units at once")
            && f[0].message.contains("event #30")
            && f[0].message.contains("maximum is 2"),
        "{}",
        f[0]
    );
    // Another pool's limit says nothing about this one.
    assert!(slot_peaks(&s, &limit("q", 1), &BTreeMap::new()).is_empty());
}

#[test]
fn a_release_before_the_next_grant_is_no_overlap() {
    // One slot, handed on three times: a release always precedes the next grant.
    let s = timeline(&[("a", 10, 20), ("b", 21, 30), ("c", 31, 40)], " in pool p");
    assert!(slot_peaks(&s, &limit("p", 1), &BTreeMap::new()).is_empty());
}

#[test]
fn the_marker_s_pool_counts_not_the_unit_s_pool_now() {
    // Both units sit in pool `p` now, but their slots were taken in `r1` and `r2`.
    let mut s = timeline(&[("a", 10, 40)], " in pool r1");
    let other = timeline(&[("b", 20, 50)], " in pool r2");
    s.units.extend(other.units);
    s.events.extend(other.events);
    assert!(slot_peaks(&s, &limit("p", 1), &BTreeMap::new()).is_empty());
    // An older marker without a pool falls back to the unit's.
    let s = timeline(&[("a", 10, 40), ("b", 20, 50)], "");
    assert_eq!(slot_peaks(&s, &limit("p", 1), &BTreeMap::new()).len(), 1);
}

#[test]
fn an_account_over_its_own_maximum_is_found() {
    let mut s = timeline(&[("a", 10, 40), ("b", 20, 50)], " in pool p account acct1");
    let other = timeline(&[("c", 30, 60)], " in pool p account acct2");
    s.units.extend(other.units);
    s.events.extend(other.events);
    let accounts = limit("acct1", 1);
    let f = slot_peaks(&s, &limit("p", 3), &accounts);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].kind, "account limit");
    assert!(f[0].message.contains("p@acct1 held 2"), "{}", f[0]);
    assert!(slot_peaks(&s, &limit("p", 3), &limit("acct1", 2)).is_empty());
}

fn life(events: Vec<EventRow>) -> Snapshot {
    let mut s = Snapshot::default();
    s.units.push(unit("u1", "submitted"));
    s.events.insert("u1".into(), events);
    s
}

#[test]
fn a_new_attempt_needs_a_recorded_retry() {
    let submitted_twice = |retry: bool| {
        let mut e = vec![
            ev(1, None, "pending", Some("created")),
            ev(
                2,
                Some("pending"),
                "submitted",
                Some("submit marked: key u1-video-0 in pool p"),
            ),
            ev(3, Some("submitted"), "failed", Some("provider said no")),
        ];
        if retry {
            e.push(ev(
                4,
                Some("failed"),
                "pending",
                Some("retry requested: submit attempt 1"),
            ));
        } else {
            e.push(ev(4, Some("failed"), "pending", Some("moved by hand")));
        }
        e.push(ev(
            5,
            Some("pending"),
            "submitted",
            Some("submit marked: key u1-video-1 in pool p"),
        ));
        life(e)
    };
    assert!(resubmits(&submitted_twice(true)).is_empty());
    let f = resubmits(&submitted_twice(false));
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].kind, "resubmitted");
    assert!(f[0].message.contains("attempt 1"), "{}", f[0]);
}

#[test]
fn an_accepted_key_is_not_submitted_again_without_a_retry() {
    let base = || {
        vec![
            ev(1, None, "pending", Some("created")),
            ev(
                2,
                Some("pending"),
                "submitted",
                Some("submit marked: key u1-video-0 in pool p"),
            ),
            ev(
                3,
                Some("submitted"),
                "submitted",
                Some("accepted as provider job 9"),
            ),
            ev(4, Some("submitted"), "pending", Some("capacity")),
        ]
    };
    let mut again = base();
    again.push(ev(
        5,
        Some("pending"),
        "submitted",
        Some("submit marked: key u1-video-0 in pool p"),
    ));
    let f = resubmits(&life(again));
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].message.contains("after the provider accepted it"),
        "{}",
        f[0]
    );
    // Refused before acceptance: marking the same key again is the normal way back.
    let refused = vec![
        ev(1, None, "pending", Some("created")),
        ev(
            2,
            Some("pending"),
            "submitted",
            Some("submit marked: key u1-video-0 in pool p"),
        ),
        ev(3, Some("submitted"), "pending", Some("capacity")),
        ev(
            4,
            Some("pending"),
            "submitted",
            Some("submit marked: key u1-video-0 in pool p"),
        ),
    ];
    assert!(resubmits(&life(refused)).is_empty());
    // A next stage is a new key.
    let mut next = base();
    next.push(ev(
        5,
        Some("pending"),
        "submitted",
        Some("submit marked: key u1-voice-0 in pool p"),
    ));
    assert!(resubmits(&life(next)).is_empty());
}

#[test]
fn a_provider_account_over_its_limit_across_pools_is_found() {
    // video on account main: a [10, 40], b [20, 50]; avatar (implicit account): c [30, 60].
    let mut s = timeline(&[("a", 10, 40), ("b", 20, 50)], " in pool v account main");
    let other = timeline(&[("c", 30, 60)], " in pool av");
    s.units.extend(other.units);
    s.events.extend(other.events);
    let check = |limit: u32, video_max: u32| {
        let members = [
            (("v".to_string(), Some("main".to_string())), video_max),
            (("av".to_string(), None), 1),
        ]
        .into_iter()
        .collect();
        let shared = [("kling".to_string(), SharedCheck { limit, members })].into();
        shared_peaks(&s, &shared)
    };
    assert!(check(3, 2).is_empty(), "three at once on an account of 3");
    let f = check(2, 2);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].message.contains("provider account kling held 3")
            && f[0].message.contains("event #30"),
        "{}",
        f[0]
    );
    let f = check(3, 1);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(f[0].message.contains("kling/v@main held 2"), "{}", f[0]);
}
