//! Each rule against hand-made rows: a clean history passes, each kind of corruption is
//! reported with the ids to look it up by.

use std::collections::BTreeMap;

use super::*;
use crate::{EventRow, Snapshot, UnitRow};

fn unit(id: &str, status: &str) -> UnitRow {
    UnitRow {
        id: id.into(),
        task_id: "t1".into(),
        idx: 0,
        pool: "p".into(),
        stage: "video".into(),
        status: status.into(),
        ..UnitRow::default()
    }
}

fn ev(id: i64, from: Option<&str>, to: &str, detail: Option<&str>) -> EventRow {
    EventRow {
        id,
        at: id,
        from_status: from.map(String::from),
        to_status: to.into(),
        detail: detail.map(String::from),
    }
}

/// A unit's whole clean life: created, marked, accepted, polled, succeeded, finalized.
fn clean_history() -> Vec<EventRow> {
    vec![
        ev(1, None, "pending", Some("created")),
        ev(
            2,
            Some("pending"),
            "submitted",
            Some("submit marked: key u1-video-0"),
        ),
        ev(
            3,
            Some("submitted"),
            "submitted",
            Some("accepted as provider job 42"),
        ),
        ev(4, Some("submitted"), "succeeded", None),
        ev(5, Some("succeeded"), "finalizing", None),
        ev(6, Some("finalizing"), "completed", None),
    ]
}

fn snap(units: Vec<UnitRow>, events: Vec<(&str, Vec<EventRow>)>) -> Snapshot {
    Snapshot {
        tasks: vec!["t1".into()],
        units,
        events: events
            .into_iter()
            .map(|(u, e)| (u.to_string(), e))
            .collect(),
        fences: BTreeMap::new(),
        open_reservations: Vec::new(),
        creates: Vec::new(),
        releases: Vec::new(),
    }
}

#[test]
fn a_clean_history_has_no_findings() {
    let s = snap(vec![unit("u1", "completed")], vec![("u1", clean_history())]);
    assert!(event_paths(&s).is_empty());
    assert!(idempotency(&s).is_empty());
    assert!(tasks(&s).is_empty());
    assert!(finalize_leases(&s, 0, 0).is_empty());
}

#[test]
fn a_completed_unit_set_back_to_submitted_is_reported() {
    let s = snap(vec![unit("u1", "submitted")], vec![("u1", clean_history())]);
    let f = event_paths(&s);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].unit_id.as_deref(), Some("u1"));
    assert!(f[0].message.contains("ends in completed"), "{}", f[0]);
}

#[test]
fn an_illegal_event_is_reported() {
    let mut h = clean_history();
    h.push(ev(7, Some("completed"), "pending", None));
    let s = snap(vec![unit("u1", "pending")], vec![("u1", h)]);
    let f = event_paths(&s);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].kind, "illegal transition");
    assert!(f[0].message.contains("completed -> pending"), "{}", f[0]);
}

#[test]
fn a_gap_in_the_log_and_a_missing_creation_are_reported() {
    let h = vec![
        ev(2, Some("pending"), "submitted", None),
        ev(3, Some("succeeded"), "finalizing", None),
    ];
    let s = snap(vec![unit("u1", "finalizing")], vec![("u1", h)]);
    let f = event_paths(&s);
    assert_eq!(f.len(), 2, "{f:?}");
    assert!(f[0].message.contains("not the creation"), "{}", f[0]);
    assert!(f[1].message.contains("leaves succeeded"), "{}", f[1]);
    let none = snap(vec![unit("u1", "pending")], vec![]);
    assert!(event_paths(&none)[0].message.contains("no events"));
}

#[test]
fn a_key_accepted_as_two_jobs_is_reported() {
    let mut h = clean_history();
    h.insert(
        3,
        ev(
            10,
            Some("submitted"),
            "submitted",
            Some("accepted as provider job 43"),
        ),
    );
    let s = snap(vec![unit("u1", "completed")], vec![("u1", h)]);
    let f = idempotency(&s);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(f[0].message.contains("u1-video-0"), "{}", f[0]);
    assert!(f[0].message.contains("42, 43"), "{}", f[0]);
}

/// The same job recorded by a poll and again by a callback is one job.
#[test]
fn a_job_recorded_by_poll_and_callback_is_one_job() {
    let mut h = clean_history();
    h.insert(
        3,
        ev(
            10,
            Some("submitted"),
            "submitted",
            Some("accepted as provider job 42 (callback)"),
        ),
    );
    let s = snap(vec![unit("u1", "completed")], vec![("u1", h)]);
    assert!(idempotency(&s).is_empty(), "{:?}", idempotency(&s));
}

#[test]
fn a_resubmission_under_the_next_key_is_not_a_duplicate() {
    let mut h = clean_history();
    h.truncate(4);
    h[3] = ev(4, Some("submitted"), "failed", None);
    h.push(ev(5, Some("failed"), "pending", None));
    h.push(ev(
        6,
        Some("pending"),
        "submitted",
        Some("submit marked: key u1-video-1"),
    ));
    h.push(ev(
        7,
        Some("submitted"),
        "submitted",
        Some("accepted as provider job 50"),
    ));
    let s = snap(vec![unit("u1", "submitted")], vec![("u1", h)]);
    assert!(idempotency(&s).is_empty());
    assert!(event_paths(&s).is_empty());
}

#[test]
fn one_job_on_two_units_is_reported() {
    let mut a = unit("u1", "submitted");
    a.provider_job_id = Some("42".into());
    let mut b = unit("u2", "submitted");
    b.idx = 1;
    b.provider_job_id = Some("42".into());
    let s = snap(vec![a, b], vec![]);
    let f = idempotency(&s);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(f[0].message.contains("u1, u2"), "{}", f[0]);
}

#[test]
fn finalizing_without_a_live_lease_is_reported_after_the_grace() {
    let mut u = unit("u1", "finalizing");
    u.lease_owner = Some("sched-a".into());
    u.lease_until = Some(1_000);
    let s = snap(vec![u.clone()], vec![]);
    assert!(finalize_leases(&s, 1_500, 1_000).is_empty(), "within grace");
    let f = finalize_leases(&s, 5_000, 1_000);
    assert_eq!(f.len(), 1);
    assert!(f[0].message.contains("sched-a"), "{}", f[0]);
    u.lease_until = None;
    let s = snap(vec![u], vec![]);
    assert!(
        finalize_leases(&s, 0, 0)[0]
            .message
            .contains("without a lease")
    );
}

#[test]
fn tasks_without_units_gaps_and_orphans_are_reported() {
    let mut s = snap(vec![], vec![]);
    assert!(tasks(&s)[0].message.contains("no units"));
    let mut u = unit("u1", "pending");
    u.idx = 1;
    let mut orphan = unit("u9", "pending");
    orphan.task_id = "gone".into();
    s.units = vec![u, orphan];
    let f = tasks(&s);
    assert_eq!(f.len(), 2, "{f:?}");
    assert!(f[0].message.contains("[1]"), "{}", f[0]);
    assert!(f[1].message.contains("does not exist"), "{}", f[1]);
}

#[test]
fn open_reservations_belong_to_submitted_units() {
    let mut submitted = unit("u1", "submitted");
    submitted.submit_attempt = 1;
    let snap = Snapshot {
        units: vec![submitted, unit("u2", "completed"), unit("u3", "submitted")],
        open_reservations: vec![
            ("u1".into(), "video-1".into()),
            ("u2".into(), "video-0".into()),
            ("u3".into(), "video-0".into()),
            ("u3".into(), "video-0b".into()),
            ("gone".into(), "video-0".into()),
        ],
        ..Snapshot::default()
    };
    let found = reservations(&snap);
    let about = |id: &str| {
        found
            .iter()
            .filter(|f| f.unit_id.as_deref() == Some(id))
            .count()
    };
    assert_eq!(about("u1"), 0, "{found:?}");
    assert_eq!(
        about("u2"),
        1,
        "a completed unit's reservation is open: {found:?}"
    );
    assert_eq!(
        about("u3"),
        2,
        "one for the wrong submission, one for two open: {found:?}"
    );
    assert_eq!(about("gone"), 1, "{found:?}");
}

#[test]
fn creates_beyond_a_quota_window_are_reported() {
    use slotd_core::config::{Quota, Window};
    use std::time::Duration;
    let at = |ms: &[i64]| {
        ms.iter()
            .map(|t| ("p".to_string(), None, *t))
            .collect::<Vec<_>>()
    };
    let rate = Quota {
        limit: 2,
        window: Window::Rolling(Duration::from_secs(10)),
    };
    let quotas = BTreeMap::from([("p".to_string(), vec![rate])]);
    // Two per 10 s, the third 10 s after the first: clean.
    let clean = Snapshot {
        creates: at(&[0, 5_000, 10_000, 19_000]),
        ..Snapshot::default()
    };
    assert!(quota_windows(&clean, &quotas).is_empty());
    // Three within 10 s.
    let over = Snapshot {
        creates: at(&[0, 5_000, 9_999]),
        ..Snapshot::default()
    };
    let found = quota_windows(&over, &quotas);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, "quota window");
    assert!(
        found[0].message.contains("3 creates"),
        "{}",
        found[0].message
    );
    // A calendar day at UTC: three on one day against a limit of two.
    let daily = Quota {
        limit: 2,
        window: Window::CalendarDay { offset_minutes: 0 },
    };
    let quotas = BTreeMap::from([("p".to_string(), vec![daily])]);
    let days = Snapshot {
        creates: at(&[
            86_400_000 - 1,
            86_400_000,
            86_400_000 + 5,
            2 * 86_400_000 - 1,
        ]),
        ..Snapshot::default()
    };
    assert_eq!(quota_windows(&days, &quotas).len(), 1);
    // Other pools' creates and pools without quotas are not counted.
    assert!(quota_windows(&days, &BTreeMap::new()).is_empty());
}

#[test]
fn an_accounts_creates_beyond_its_own_quota_are_reported_per_pool() {
    use slotd_core::config::{Quota, Window};
    use std::time::Duration;
    let rate = Quota {
        limit: 2,
        window: Window::Rolling(Duration::from_secs(10)),
    };
    let quotas = BTreeMap::from([("backup".to_string(), vec![rate])]);
    let row = |pool: &str, account: Option<&str>, at: i64| {
        (pool.to_string(), account.map(str::to_string), at)
    };
    // Two per pool for backup (clean: its quota counts in each pool), three for main (no
    // quota of its own).
    let snap = Snapshot {
        creates: vec![
            row("p", Some("backup"), 0),
            row("q", Some("backup"), 1),
            row("p", Some("backup"), 2),
            row("q", Some("backup"), 3),
            row("p", Some("main"), 4),
            row("p", Some("main"), 5),
            row("p", Some("main"), 6),
        ],
        ..Snapshot::default()
    };
    assert!(account_quota_windows(&snap, &quotas).is_empty());
    let mut over = snap.clone();
    over.creates.push(row("p", Some("backup"), 7));
    let found = account_quota_windows(&over, &quotas);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].message.contains("account backup in pool p"),
        "{}",
        found[0].message
    );
}

#[test]
fn a_zoned_calendar_day_is_judged_by_its_own_midnight() {
    use slotd_core::config::{Quota, Window};
    let at = |ms: &[i64]| -> Vec<(String, Option<String>, i64)> {
        ms.iter().map(|t| ("p".to_string(), None, *t)).collect()
    };
    let daily = Quota {
        limit: 2,
        window: Window::ZonedDay { zone: "Asia/Tokyo" },
    };
    let quotas = BTreeMap::from([("p".to_string(), vec![daily])]);
    // Tokyo's day starts at 15:00Z: three creates around UTC midnight fall in one Tokyo day.
    let h = 3_600_000;
    let over = Snapshot {
        creates: at(&[16 * h, 23 * h, 25 * h]),
        ..Snapshot::default()
    };
    let found = quota_windows(&over, &quotas);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].message.contains("Asia/Tokyo"),
        "{}",
        found[0].message
    );
    // Across Tokyo's midnight: two days of two each.
    let clean = Snapshot {
        creates: at(&[16 * h, 17 * h, 40 * h, 41 * h]),
        ..Snapshot::default()
    };
    assert!(quota_windows(&clean, &quotas).is_empty());
}

fn release(sha256: &str, content: &str) -> crate::ReleaseRow {
    crate::ReleaseRow {
        sha256: sha256.into(),
        name: "kling-video".into(),
        version: "1.0.0".into(),
        content_sha256: content.into(),
    }
}

#[test]
fn a_release_whose_bytes_no_longer_hash_to_its_key_is_reported() {
    let mut snap = Snapshot {
        releases: vec![release("aa", "aa"), release("bb", "cc")],
        ..Snapshot::default()
    };
    let found = releases(&snap);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, "handler release");
    assert!(
        found[0].message.contains("release bb of kling-video 1.0.0"),
        "{}",
        found[0]
    );
    assert!(found[0].message.contains("hash to cc"), "{}", found[0]);
    snap.releases.pop();
    assert!(releases(&snap).is_empty());
}

/// The whole check over a real SQLite database: a release published through the store passes,
/// the same release with its bytes altered behind the store's back is reported.
#[tokio::test]
async fn the_check_hashes_the_releases_the_store_keeps() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let url = format!("sqlite://{}", dir.path().join("releases.db").display());
    let store = slotd_store::open(&url).await.expect("open");
    let published = store
        .release_put(&slotd_store::NewRelease {
            name: "kling-video".into(),
            version: "1.0.0".into(),
            contract: "1.3.0".into(),
            bytes: b"\0asm the checked build".to_vec(),
            published_by: "team-kling".into(),
            takes_over: false,
            current: true,
            now: 1,
        })
        .await
        .expect("published");
    let slotd_store::Published::New(key) = published else {
        panic!("{published:?}")
    };
    let opts = crate::CheckOptions::for_config(
        &slotd_core::config::Config {
            database_url: url.clone(),
            ..slotd_core::config::Config::default()
        },
        1_000,
    );
    let opts = crate::CheckOptions {
        objects: None,
        ..opts
    };
    let clean = crate::run(&opts).await.expect("check runs");
    assert!(clean.findings.is_empty(), "{:?}", clean.findings);

    let raw = sqlx::SqlitePool::connect(&url).await.expect("raw");
    sqlx::query("UPDATE handler_releases SET bytes = X'0061736d'")
        .execute(&raw)
        .await
        .expect("alter");
    raw.close().await;
    let report = crate::run(&opts).await.expect("check runs");
    let kinds: Vec<&str> = report.findings.iter().map(|f| f.kind).collect();
    assert_eq!(kinds, ["handler release"], "{:?}", report.findings);
    assert!(
        report.findings[0].message.contains(&key),
        "{}",
        report.findings[0]
    );
}

/// A submission whose job was accepted and then failed on a spent retry budget, or at the stage
/// deadline without the job cancelled, gave up a job the provider still ran; a job that ended
/// (failed, cancelled for the deadline) or a unit failed before any job was accepted is clean.
#[test]
fn a_unit_failed_while_its_job_ran_is_reported() {
    let marked = |id| {
        ev(
            id,
            Some("pending"),
            "submitted",
            Some("submit marked: key u1-video-0"),
        )
    };
    let accepted = |id| {
        ev(
            id,
            Some("submitted"),
            "submitted",
            Some("accepted as provider job 42"),
        )
    };
    let abandoned = vec![
        ev(1, None, "pending", Some("created")),
        marked(2),
        accepted(3),
        ev(
            4,
            Some("submitted"),
            "failed",
            Some("retry budget of 5 spent"),
        ),
    ];
    let late = vec![
        ev(1, None, "pending", Some("created")),
        marked(2),
        accepted(3),
        ev(
            4,
            Some("submitted"),
            "failed",
            Some("stage video had no result within scheduler.stage_deadline of 2h"),
        ),
    ];
    let cancelled = vec![
        ev(1, None, "pending", Some("created")),
        marked(2),
        accepted(3),
        ev(
            4,
            Some("submitted"),
            "failed",
            Some(
                "stage video had no result within scheduler.stage_deadline of 2h; the provider \
                 job was cancelled; slot released",
            ),
        ),
    ];
    let never_created = vec![
        ev(1, None, "pending", Some("created")),
        marked(2),
        ev(
            3,
            Some("submitted"),
            "failed",
            Some("retry budget of 5 spent"),
        ),
    ];
    let found = |events: Vec<EventRow>| {
        abandoned_jobs(&snap(vec![unit("u1", "failed")], vec![("u1", events)]))
    };
    let f = found(abandoned);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].kind, "abandoned job");
    assert!(f[0].message.contains("provider job 42"), "{f:?}");
    assert_eq!(found(late).len(), 1);
    assert!(found(cancelled).is_empty());
    assert!(found(never_created).is_empty());
    assert!(found(clean_history()).is_empty());
}
