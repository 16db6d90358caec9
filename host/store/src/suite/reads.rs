//! What the API and operators read: task lists with paging and filters, unit counts per pool,
//! the unit event log, the handler version history, and the lookup of a unit by a provider's
//! job id or idempotency key (webhooks).

use super::*;

pub(crate) async fn list_paging_and_filters(store: DynStore) {
    for i in 0..5 {
        let ty = if i % 2 == 0 { VIDEO } else { "avatar_clone" };
        create(&store, task(&format!("t{i}"), "acme", ty, POOL, 2, 0)).await;
    }
    create(&store, task("other", "globex", VIDEO, POOL, 1, 0)).await;
    let page_ids = |p: &crate::TaskPage| p.tasks.iter().map(|t| t.id.clone()).collect::<Vec<_>>();

    let mut filter = TaskFilter {
        limit: 2,
        ..TaskFilter::default()
    };
    let p1 = store.task_list("acme", &filter).await.unwrap();
    assert_eq!(page_ids(&p1), ["t4", "t3"]);
    assert_eq!(p1.tasks[0].counts.pending, 2, "counts are filled");
    filter.before = p1.next;
    let p2 = store.task_list("acme", &filter).await.unwrap();
    assert_eq!(page_ids(&p2), ["t2", "t1"]);
    filter.before = p2.next;
    let p3 = store.task_list("acme", &filter).await.unwrap();
    assert_eq!((page_ids(&p3), p3.next), (vec!["t0".to_string()], None));

    let videos = TaskFilter {
        task_type: Some(VIDEO.into()),
        ..TaskFilter::default()
    };
    assert_eq!(
        page_ids(&store.task_list("acme", &videos).await.unwrap()),
        ["t4", "t2", "t0"]
    );

    submit(&store, &["t1-u1"], T0).await;
    apply(
        &store,
        update("t1-u1", UnitStatus::Submitted, UnitStatus::Failed),
        T0,
    )
    .await;
    let failed = TaskFilter {
        unit_status: Some(UnitStatus::Failed),
        ..TaskFilter::default()
    };
    let page = store.task_list("acme", &failed).await.unwrap();
    assert_eq!(page_ids(&page), ["t1"]);
    let c = page.tasks[0].counts;
    assert_eq!((c.failed, c.pending), (1, 1));
    let exact = TaskFilter {
        limit: 5,
        ..TaskFilter::default()
    };
    assert_eq!(
        store.task_list("acme", &exact).await.unwrap().next,
        None,
        "no empty last page"
    );
}

pub(crate) async fn counts_by_pool(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 3, 0)).await;
    create(
        &store,
        task("t2", "acme", "avatar_clone", "kling:avatar", 2, 0),
    )
    .await;
    submit(&store, &["t1-u0", "t2-u0"], T0).await;
    let mut got: Vec<(String, UnitStatus, u64)> = store
        .unit_count_by_pool()
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.pool, c.status, c.count))
        .collect();
    got.sort();
    let want = [
        ("kling:avatar", UnitStatus::Pending, 1),
        ("kling:avatar", UnitStatus::Submitted, 1),
        (POOL, UnitStatus::Pending, 2),
        (POOL, UnitStatus::Submitted, 1),
    ];
    let want: Vec<_> = want
        .iter()
        .map(|(p, s, n)| (p.to_string(), *s, *n))
        .collect();
    assert_eq!(got, want);
}

pub(crate) async fn event_log_order(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 3, 0)).await;
    submit(&store, &["t1-u2"], T0 + 1).await;
    apply(
        &store,
        update("t1-u2", UnitStatus::Submitted, UnitStatus::Failed),
        T0 + 2,
    )
    .await;
    store.task_retry_failed("acme", "t1", T0 + 3).await.unwrap();
    let events = store.unit_events("t1").await.unwrap();
    let seen: Vec<(&str, Option<&str>, &str)> = events
        .iter()
        .map(|e| {
            (
                e.unit_id.as_str(),
                e.from_status.as_deref(),
                e.to_status.as_str(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("t1-u0", None, "pending"),
            ("t1-u1", None, "pending"),
            ("t1-u2", None, "pending"),
            ("t1-u2", Some("pending"), "submitted"),
            ("t1-u2", Some("submitted"), "failed"),
            ("t1-u2", Some("failed"), "pending"),
        ]
    );
    assert!(
        events
            .windows(2)
            .all(|w| w[0].id < w[1].id && w[0].at <= w[1].at)
    );
    assert!(
        events
            .iter()
            .all(|e| e.task_id == "t1" && e.stage == "main")
    );
    assert!(store.unit_events("nope").await.unwrap().is_empty());
}

/// The handler version history is append-only, newest first, filterable by handler name, and
/// keeps refusals (no name, no version) with their reason.
pub(crate) async fn handler_version_history(store: DynStore) {
    let row = |at: i64, name: Option<&str>, sha: &str, state: &str, reason: Option<&str>| {
        HandlerVersionRow {
            id: 0,
            at,
            path: "plugins/fixture.wasm".into(),
            name: name.map(String::from),
            version: name.map(|_| "1.0.0".to_string()),
            sha256: sha.into(),
            state: state.into(),
            reason: reason.map(String::from),
        }
    };
    store
        .handler_version_record(&row(T0, Some("fixture"), "aa", "active", None))
        .await
        .unwrap();
    store
        .handler_version_record(&row(
            T0 + 1,
            None,
            "bb",
            "refused",
            Some("not a WebAssembly file"),
        ))
        .await
        .unwrap();
    store
        .handler_version_record(&row(
            T0 + 2,
            Some("fixture"),
            "aa",
            "quarantined",
            Some("trap"),
        ))
        .await
        .unwrap();
    store
        .handler_version_record(&row(T0 + 3, Some("other"), "cc", "active", None))
        .await
        .unwrap();
    let all = store.handler_version_list(None, 10).await.unwrap();
    let states: Vec<(&str, &str)> = all
        .iter()
        .map(|r| (r.sha256.as_str(), r.state.as_str()))
        .collect();
    assert_eq!(
        states,
        [
            ("cc", "active"),
            ("aa", "quarantined"),
            ("bb", "refused"),
            ("aa", "active")
        ]
    );
    assert!(
        all.windows(2).all(|w| w[0].id > w[1].id),
        "ids ascend with time"
    );
    assert_eq!(all[2].name, None);
    assert_eq!(all[2].reason.as_deref(), Some("not a WebAssembly file"));
    let fixture = store
        .handler_version_list(Some("fixture"), 10)
        .await
        .unwrap();
    assert_eq!(fixture.len(), 2);
    assert_eq!(fixture[0].at, T0 + 2);
    assert_eq!(store.handler_version_list(None, 1).await.unwrap().len(), 1);
}

pub(crate) async fn find_by_provider(store: DynStore) {
    create(&store, task("t-1", "acme", VIDEO, POOL, 2, 0)).await;
    submit(&store, &["t-1-u0", "t-1-u1"], T0).await;
    let mut accepted = update("t-1-u0", UnitStatus::Submitted, UnitStatus::Submitted);
    accepted.provider_job_id = Field::Set("job-9".into());
    apply(&store, accepted, T0).await;
    let video = types(&[VIDEO]);

    let by_job = store
        .unit_find_by_provider(&video, Some("job-9"), None)
        .await
        .unwrap();
    assert_eq!(by_job.map(|u| u.id).as_deref(), Some("t-1-u0"));
    let key = unit(&store, "t-1", 1).await.idempotency_key();
    assert_eq!(key, "t-1-u1-main-0");
    let by_key = store
        .unit_find_by_provider(&video, Some("unknown"), Some(&key))
        .await
        .unwrap();
    assert_eq!(by_key.map(|u| u.id).as_deref(), Some("t-1-u1"));
    let other_type = types(&["avatar_clone"]);
    assert!(
        store
            .unit_find_by_provider(&other_type, Some("job-9"), Some(&key))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .unit_find_by_provider(&video, None, Some("t-1-u1-main-1"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .unit_find_by_provider(&video, None, Some(&"-".repeat(100_000)))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .unit_find_by_provider(&video, None, None)
            .await
            .unwrap()
            .is_none()
    );

    // The batched read: the known job among unknown and empty ones, one unit per job, none
    // for another handler's task types or for no jobs at all.
    let jobs = |j: &[&str]| j.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let found = store
        .unit_find_by_provider_refs(&video, &jobs(&["nope", "job-9", "", "job-9"]), &[])
        .await
        .unwrap();
    assert_eq!(ids(&found), ["t-1-u0"]);
    assert!(
        store
            .unit_find_by_provider_refs(&other_type, &jobs(&["job-9"]), &[])
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .unit_find_by_provider_refs(&video, &[], &[])
            .await
            .unwrap()
            .is_empty()
    );
    // By key in the same read: the unit with no job yet is found by its key (a wrong
    // attempt, a key too long or one naming no unit finds nothing), and a unit named both
    // ways comes once.
    let keys = jobs(&[
        &key,
        "t-1-u1-main-1",
        "nobody-main-0",
        &"-".repeat(100_000),
        "t-1-u0-main-0",
    ]);
    let found = store
        .unit_find_by_provider_refs(&video, &jobs(&["job-9"]), &keys)
        .await
        .unwrap();
    let mut found = ids(&found);
    found.sort_unstable();
    assert_eq!(found, ["t-1-u0", "t-1-u1"]);
    assert!(
        store
            .unit_find_by_provider_refs(&other_type, &[], &keys)
            .await
            .unwrap()
            .is_empty()
    );
    // Only submitted units: once the job has ended, a late callback finds nothing.
    let mut ended = update("t-1-u0", UnitStatus::Submitted, UnitStatus::Failed);
    ended.error = Field::Set(r#"{"code":"x","message":"y"}"#.into());
    apply(&store, ended, T0 + 1).await;
    assert!(
        store
            .unit_find_by_provider_refs(&video, &jobs(&["job-9"]), &[])
            .await
            .unwrap()
            .is_empty()
    );
}
