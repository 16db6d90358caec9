//! The one store test suite, written against [`DynStore`] so that every implementation runs
//! the same checks: instantiate it with [`store_suite!`](crate::store_suite) and a factory
//! returning a fresh, migrated, empty [`TestDb`].
//!
//! Each check is an `async fn(DynStore)`; a failure panics with what was expected.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod budgets;
mod callbacks;
mod claims;
mod console;
mod fencing;
mod finalize;
mod fixtures;
mod moves;
mod outbox;
mod reads;
mod releases;
mod routes;
mod standing;
mod streams;
mod tasks;
mod terms;
mod upgrade;

use std::any::Any;

use super::{
    CANCEL_WAIT_DETAIL, Cancelled, Created, DynStore, Field, HandlerVersionRow, NewTask,
    StoreError, TaskFilter, UnitUpdate,
};
use slotd_core::model::UnitStatus;

pub(crate) use fixtures::task;
use fixtures::{POOL, T0, VIDEO, apply, create, ids, succeed, types, unit};
pub(crate) use fixtures::{submit, update};

pub(crate) use budgets::{
    a_unit_without_an_estimate_takes_nothing_from_a_spent_period,
    concurrent_reservations_never_overrun_a_budget,
    concurrent_reservations_never_overrun_a_spend_limit,
    settled_costs_above_the_estimate_count_in_full,
};
pub(crate) use callbacks::{apply_guard_submit_attempt, host_key_shared};
pub(crate) use claims::{
    applied_in_the_marking_tick_looks_touched, concurrent_claims_are_disjoint,
    fill_order_follows_submission_not_ids,
};
pub(crate) use console::console_reads;
pub(crate) use fencing::{
    fence_concurrent_advance_monotonic, fence_newer_accepted, fence_stale_refused,
};
pub(crate) use finalize::{
    finalize_complete_many, finalize_give_up_then_retry, finalize_lease, finalize_release,
    finalize_renew,
};
pub(crate) use moves::{
    PAIRS, assert_moves_match_the_model, every_pair_is_held_to_the_model,
    illegal_moves_are_refused, provider_queue_is_written_and_counted,
};
pub(crate) use outbox::{webhook_outbox, webhook_reopens_after_a_retry};
pub(crate) use reads::{
    counts_by_pool, event_log_order, find_by_provider, handler_version_history,
    list_paging_and_filters,
};
pub(crate) use releases::{
    handler_loads, handler_releases, release_currency, rollout_signals, unit_releases,
};
pub(crate) use routes::routed_units_bind_once_and_go_back_to_their_route;
pub(crate) use standing::queue_standing_follows_the_fill_order;
pub(crate) use streams::{event_scopes_page_and_resume, event_streams_page_and_resume};
pub(crate) use tasks::{
    cancel_keeps_submitted_until_the_job_ends, create_batch_resolves_keys_in_order,
    retry_bumps_submit_attempt,
};
pub(crate) use terms::{
    deadline_sweep_counts_follow_the_fill_order, deadlines_fill_first_within_a_tenant,
    marker_checks_spend_of_pools_and_accounts, marker_mixes_budgeted_and_plain_tenants,
    marker_records_accounts_and_reserves_budgets, marker_records_creates_of_pools_with_quotas,
};
pub(crate) use upgrade::{check_after_upgrade, fill_before_upgrade, migrations_before};

/// A fresh store plus whatever keeps its database alive (a temp dir, a schema to drop).
pub(crate) struct TestDb {
    pub store: DynStore,
    pub guard: Box<dyn Any + Send>,
}

/// Generate one `#[tokio::test]` per check, each on a fresh database from `$factory`
/// (an `async fn() -> TestDb`).
#[macro_export]
macro_rules! store_suite {
    ($factory:path) => {
        $crate::store_suite!(@each $factory;
            create_and_idempotency,
            create_batch_resolves_keys_in_order,
            tenant_isolation,
            fill_order,
            fill_order_follows_submission_not_ids,
            applied_in_the_marking_tick_looks_touched,
            mark_submitted_guard,
            due_polls,
            apply_guard_and_events,
            apply_pure_polls,
            find_by_provider,
            cancel_keeps_submitted_until_the_job_ends,
            retry_bumps_submit_attempt,
            finalize_lease,
            finalize_complete_many,
            finalize_release,
            finalize_renew,
            finalize_give_up_then_retry,
            list_paging_and_filters,
            counts_by_pool,
            event_log_order,
            fence_stale_refused,
            fence_newer_accepted,
            fence_concurrent_advance_monotonic,
            handler_version_history,
            handler_releases,
            handler_loads,
            release_currency,
            unit_releases,
            rollout_signals,
            concurrent_claims_are_disjoint,
            host_key_shared,
            apply_guard_submit_attempt,
            illegal_moves_are_refused,
            provider_queue_is_written_and_counted,
            event_streams_page_and_resume,
            event_scopes_page_and_resume,
            webhook_outbox,
            webhook_reopens_after_a_retry,
            console_reads,
            queue_standing_follows_the_fill_order,
            deadlines_fill_first_within_a_tenant,
            deadline_sweep_counts_follow_the_fill_order,
            marker_records_accounts_and_reserves_budgets,
            marker_mixes_budgeted_and_plain_tenants,
            marker_records_creates_of_pools_with_quotas,
            marker_checks_spend_of_pools_and_accounts,
            concurrent_reservations_never_overrun_a_budget,
            concurrent_reservations_never_overrun_a_spend_limit,
            settled_costs_above_the_estimate_count_in_full,
            a_unit_without_an_estimate_takes_nothing_from_a_spent_period,
            routed_units_bind_once_and_go_back_to_their_route,
        );
    };
    (@each $factory:path; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $check() {
                let db = $factory().await;
                $crate::suite::$check(db.store.clone()).await;
                drop(db.guard);
            }
        )*
    };
}

pub(crate) async fn create_and_idempotency(store: DynStore) {
    let mut first = task("t1", "acme", VIDEO, POOL, 2, 0);
    first.idempotency_key = Some("k1".into());
    create(&store, first).await;

    let mut again = task("t2", "acme", VIDEO, POOL, 3, 0);
    again.idempotency_key = Some("k1".into());
    assert_eq!(
        store.task_create(again).await.unwrap(),
        Created::Existing("t1".into())
    );
    assert!(store.task_get("acme", "t2").await.unwrap().is_none());
    assert!(store.task_units("t2").await.unwrap().is_empty());
    assert!(store.unit_events("t2").await.unwrap().is_empty());

    // The same key belongs to each tenant separately; no key never collides.
    let mut other = task("t3", "globex", VIDEO, POOL, 1, 0);
    other.idempotency_key = Some("k1".into());
    create(&store, other).await;
    create(&store, task("t4", "acme", VIDEO, POOL, 1, 0)).await;
    create(&store, task("t5", "acme", VIDEO, POOL, 1, 0)).await;

    let t1 = store.task_get("acme", "t1").await.unwrap().unwrap();
    assert_eq!(t1.idempotency_key.as_deref(), Some("k1"));
    assert_eq!(
        (t1.created_at, t1.counts.pending, t1.counts.total()),
        (T0, 2, 2)
    );
    let units = store.task_units("t1").await.unwrap();
    assert_eq!(ids(&units), ["t1-u0", "t1-u1"]);
    let u = &units[1];
    assert_eq!(
        (u.index, u.status, u.submit_attempt, u.next_at),
        (1, UnitStatus::Pending, 0, T0)
    );
    assert_eq!(
        (u.tenant.as_str(), u.task_type.as_str(), u.pool.as_str()),
        ("acme", VIDEO, POOL)
    );
    assert_eq!(u.spec, r#"{"shot":1}"#);
    assert_eq!(store.unit_events("t1").await.unwrap().len(), 2);

    // A duplicate task id is an error, not a silent overwrite.
    assert!(
        store
            .task_create(task("t1", "acme", VIDEO, POOL, 1, 0))
            .await
            .is_err()
    );
}

pub(crate) async fn tenant_isolation(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 1, 0)).await;
    assert!(store.task_get("acme", "t1").await.unwrap().is_some());
    assert!(store.task_get("globex", "t1").await.unwrap().is_none());
    let page = store
        .task_list("globex", &TaskFilter::default())
        .await
        .unwrap();
    assert!(page.tasks.is_empty());
    assert!(
        store
            .task_cancel("globex", "t1", T0)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .task_retry_failed("globex", "t1", T0)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(unit(&store, "t1", 0).await.status, UnitStatus::Pending);
    assert!(
        store
            .task_cancel("acme", "nope", T0)
            .await
            .unwrap()
            .is_none()
    );
}

pub(crate) async fn fill_order(store: DynStore) {
    create(&store, task("a1", "alpha", VIDEO, POOL, 3, 0)).await;
    create(&store, task("a2", "alpha", VIDEO, POOL, 1, 0)).await;
    create(&store, task("b1", "beta", VIDEO, POOL, 1, 0)).await;
    create(&store, task("c1", "gamma", VIDEO, POOL, 1, 5)).await;
    // Not eligible: another type, another pool, not yet due.
    create(&store, task("x1", "beta", "avatar_clone", POOL, 1, 9)).await;
    create(&store, task("y1", "beta", VIDEO, "kling:avatar", 1, 9)).await;
    create(&store, task("z1", "beta", VIDEO, POOL, 1, 9)).await;
    let mut later = update("z1-u0", UnitStatus::Pending, UnitStatus::Pending);
    later.next_at = Some(T0 + 60_000);
    apply(&store, later, T0).await;

    let video = types(&[VIDEO]);
    let got = store
        .unit_list_pending(POOL, &video, T0, 100)
        .await
        .unwrap();
    assert_eq!(
        ids(&got),
        ["c1-u0", "a1-u0", "b1-u0", "a1-u1", "a1-u2", "a2-u0"],
        "priority first, then tenants in turn, FIFO within a tenant"
    );
    let first2 = store.unit_list_pending(POOL, &video, T0, 2).await.unwrap();
    assert_eq!(ids(&first2), ["c1-u0", "a1-u0"]);
    // A limit cuts across tenants, not down one tenant's backlog.
    let first4 = store.unit_list_pending(POOL, &video, T0, 4).await.unwrap();
    assert_eq!(ids(&first4), ["c1-u0", "a1-u0", "b1-u0", "a1-u1"]);
    assert!(
        store
            .unit_list_pending(POOL, &[], T0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Once due, the delayed unit leads (priority 9).
    let due = store
        .unit_list_pending(POOL, &video, T0 + 60_000, 1)
        .await
        .unwrap();
    assert_eq!(ids(&due), ["z1-u0"]);
    let both = types(&[VIDEO, "avatar_clone"]);
    let all = store.unit_list_pending(POOL, &both, T0, 100).await.unwrap();
    assert_eq!(all.len(), 7);
    assert_eq!(all[0].id, "x1-u0");
}

pub(crate) async fn mark_submitted_guard(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 3, 0)).await;
    apply(
        &store,
        update("t1-u1", UnitStatus::Pending, UnitStatus::Cancelled),
        T0,
    )
    .await;
    let asked = types(&["t1-u2", "t1-u1", "t1-u0", "missing"]);
    let moved = store
        .unit_mark_submitted(&asked, T0 + 5, T0 + 5, None)
        .await
        .unwrap();
    assert_eq!(
        ids(&moved),
        ["t1-u2", "t1-u0"],
        "cancelled unit must not be marked"
    );
    for u in &moved {
        assert_eq!(u.status, UnitStatus::Submitted);
        assert_eq!(
            (u.submitted_at, u.provider_job_id.as_deref()),
            (Some(T0 + 5), None)
        );
    }
    assert!(
        store
            .unit_mark_submitted(&asked, T0 + 6, T0 + 6, None)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .unit_mark_submitted(&[], T0 + 6, T0 + 6, None)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(unit(&store, "t1", 1).await.status, UnitStatus::Cancelled);
}

pub(crate) async fn due_polls(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 4, 0)).await;
    create(&store, task("x1", "acme", "avatar_clone", POOL, 1, 0)).await;
    submit(&store, &["t1-u0", "t1-u1", "t1-u2"], T0).await;
    submit(&store, &["x1-u0"], T0).await;
    for (id, at) in [("t1-u0", T0 + 100), ("t1-u1", T0 + 50), ("t1-u2", T0 + 300)] {
        let mut u = update(id, UnitStatus::Submitted, UnitStatus::Submitted);
        u.next_at = Some(at);
        u.polls = Some(1);
        apply(&store, u, T0).await;
    }
    let video = types(&[VIDEO]);
    let due = store
        .unit_list_due(POOL, &video, T0 + 200, 10)
        .await
        .unwrap();
    assert_eq!(
        ids(&due),
        ["t1-u1", "t1-u0"],
        "soonest first, pending and later excluded"
    );
    assert_eq!(due[0].polls, 1);
    let one = store
        .unit_list_due(POOL, &video, T0 + 1000, 1)
        .await
        .unwrap();
    assert_eq!(ids(&one), ["t1-u1"]);
    assert!(
        store
            .unit_list_due("other", &video, T0 + 1000, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let mut submitted = store.unit_list_submitted_ids(POOL).await.unwrap();
    submitted.sort();
    assert_eq!(submitted, ["t1-u0", "t1-u1", "t1-u2", "x1-u0"]);
}

/// "Still running" polls (status and stage guard, schedule only) apply in bulk, write no
/// events, and skip units that moved or changed stage, mixed with ordinary updates in order.
pub(crate) async fn apply_pure_polls(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 3, 0)).await;
    submit(&store, &["t1-u0", "t1-u1"], T0).await;
    let poll = |id: &str, stage: &str, polls: u32| {
        let mut u = update(id, UnitStatus::Submitted, UnitStatus::Submitted);
        u.from_stage = Some(stage.into());
        u.polls = Some(polls);
        u.next_at = Some(T0 + 1000 * i64::from(polls));
        u
    };
    let mut fail = update("t1-u1", UnitStatus::Submitted, UnitStatus::Failed);
    fail.detail = Some("failed".into());
    let events_before = store.unit_events("t1").await.unwrap().len();
    let report = store
        .unit_apply(
            &[
                poll("t1-u0", "main", 2),
                fail,
                poll("t1-u2", "main", 1),
                poll("t1-u0", "other-stage", 3),
            ],
            T0 + 5,
            None,
        )
        .await
        .unwrap();
    assert_eq!(report.applied, ["t1-u0", "t1-u1"]);
    assert_eq!(
        report.skipped,
        ["t1-u2", "t1-u0"],
        "pending unit and wrong stage are skipped"
    );
    let u0 = unit(&store, "t1", 0).await;
    assert_eq!(
        (u0.polls, u0.next_at, u0.updated_at),
        (2, T0 + 2000, T0 + 5)
    );
    let u2 = unit(&store, "t1", 2).await;
    assert_eq!((u2.status, u2.polls), (UnitStatus::Pending, 0));
    let events_after = store.unit_events("t1").await.unwrap().len();
    assert_eq!(
        events_after,
        events_before + 1,
        "only the failure is an event"
    );
}

pub(crate) async fn apply_guard_and_events(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 2, 0)).await;
    submit(&store, &["t1-u0", "t1-u1"], T0).await;

    let mut accepted = update("t1-u0", UnitStatus::Submitted, UnitStatus::Submitted);
    accepted.provider_job_id = Field::Set("job-1".into());
    accepted.state = Some(r#"{"n":1}"#.into());
    accepted.detail = Some("accepted job job-1".into());
    let stale = update("t1-u1", UnitStatus::Pending, UnitStatus::Submitted);
    let mut wrong_stage = update("t1-u1", UnitStatus::Submitted, UnitStatus::Failed);
    wrong_stage.from_stage = Some("element".into());
    let mut retry = update("t1-u1", UnitStatus::Submitted, UnitStatus::Pending);
    retry.from_stage = Some("main".into());
    retry.error = Field::Set(r#"{"message":"5xx"}"#.into());
    retry.attempts = Some(1);
    retry.submitted_at = Field::Clear;
    retry.next_at = Some(T0 + 500);
    let report = store
        .unit_apply(&[accepted, stale, wrong_stage, retry], T0 + 1, None)
        .await
        .unwrap();
    assert_eq!(report.applied, ["t1-u0", "t1-u1"]);
    assert_eq!(report.skipped, ["t1-u1", "t1-u1"]);

    let u0 = unit(&store, "t1", 0).await;
    assert_eq!(
        (u0.status, u0.provider_job_id.as_deref()),
        (UnitStatus::Submitted, Some("job-1"))
    );
    assert_eq!((u0.state.as_str(), u0.updated_at), (r#"{"n":1}"#, T0 + 1));
    assert_eq!(u0.spec, r#"{"shot":0}"#, "fields not given are left alone");
    let u1 = unit(&store, "t1", 1).await;
    assert_eq!(
        (u1.status, u1.attempts, u1.next_at),
        (UnitStatus::Pending, 1, T0 + 500)
    );
    assert_eq!(
        (u1.submitted_at, u1.error.as_deref()),
        (None, Some(r#"{"message":"5xx"}"#))
    );

    // A stage change, then clearing the error and the job id with `Field::Clear`.
    let mut next = update("t1-u1", UnitStatus::Pending, UnitStatus::Pending);
    next.stage = Some("element".into());
    next.pool = Some("kling:avatar".into());
    next.error = Field::Clear;
    next.provider_job_id = Field::Clear;
    apply(&store, next, T0 + 2).await;
    let u1 = unit(&store, "t1", 1).await;
    assert_eq!(
        (u1.stage.as_str(), u1.pool.as_str(), u1.error),
        ("element", "kling:avatar", None)
    );

    let events = store.unit_events("t1").await.unwrap();
    let u0_events: Vec<_> = events.iter().filter(|e| e.unit_id == "t1-u0").collect();
    assert_eq!(u0_events.len(), 3, "created, submitted, accepted");
    let last = u0_events[2];
    assert_eq!(
        (last.from_status.as_deref(), last.to_status.as_str()),
        (Some("submitted"), "submitted")
    );
    assert_eq!(
        (last.detail.as_deref(), last.at),
        (Some("accepted job job-1"), T0 + 1)
    );
    let u1_events: Vec<_> = events.iter().filter(|e| e.unit_id == "t1-u1").collect();
    assert_eq!(u1_events.len(), 4, "skipped updates write no event");
    assert_eq!(u1_events[2].error.as_deref(), Some(r#"{"message":"5xx"}"#));
    assert_eq!(u1_events[3].stage, "element");

    // An update without a status guard applies whatever the status, logging the real one.
    let mut free = UnitUpdate {
        unit_id: "t1-u0".into(),
        cost: Some("1.5".into()),
        ..UnitUpdate::default()
    };
    free.detail = Some("cost".into());
    apply(&store, free, T0 + 3).await;
    let events = store.unit_events("t1").await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(
        (last.from_status.as_deref(), last.to_status.as_str()),
        (Some("submitted"), "submitted")
    );
    assert_eq!(unit(&store, "t1", 0).await.cost.as_deref(), Some("1.5"));
    let gone = store
        .unit_apply(
            &[update("nope", UnitStatus::Pending, UnitStatus::Submitted)],
            T0,
            None,
        )
        .await;
    assert_eq!(gone.unwrap().skipped, ["nope"]);
}

/// Shared assertion for implementation-specific corruption tests.
pub(crate) fn assert_corrupt_names(err: StoreError, what: &str) {
    match err {
        StoreError::Corrupt(msg) => assert!(msg.contains(what), "{msg:?} should name {what}"),
        other => panic!("expected Corrupt naming {what}, got {other:?}"),
    }
}
