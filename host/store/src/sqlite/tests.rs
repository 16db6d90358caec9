//! The store suite on real SQLite files in temp dirs, plus what only SQLite has: the file is
//! created, migrations are idempotent, corrupt rows are reported by name, the query plans
//! use the indexes the scheduler depends on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use sqlx::Row;

use super::SqliteStore;
use crate::prelude::*;
use crate::suite::{TestDb, assert_corrupt_names, assert_moves_match_the_model};
use crate::{DynStore, open};

async fn sqlite_db() -> TestDb {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("slotd.db").display());
    let store = SqliteStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    TestDb {
        store: Arc::new(store),
        guard: Box::new(dir),
    }
}

crate::store_suite!(sqlite_db);

#[tokio::test]
async fn open_creates_and_migrates_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    let url = format!("sqlite://{}", path.display());
    let store: DynStore = open(&url).await.unwrap();
    assert!(path.exists());
    store.ping().await.unwrap();
    // Running the migrations again is a no-op, and the data survives a reopen.
    store.migrate().await.unwrap();
    let again = open(&url).await.unwrap();
    again.ping().await.unwrap();
    assert!(open("mysql://x").await.is_err());
}

#[tokio::test]
async fn in_memory_url_works_on_one_connection() {
    let store = open("sqlite::memory:").await.unwrap();
    let page = store
        .task_list("acme", &crate::TaskFilter::default())
        .await
        .unwrap();
    assert!(page.tasks.is_empty());
}

#[tokio::test]
async fn corrupt_status_names_the_unit() {
    let db = sqlite_db().await;
    let task = crate::suite::task("t1", "acme", "video", "p", 1, 0);
    db.store.task_create(task).await.unwrap();
    let path = db
        .guard
        .downcast_ref::<tempfile::TempDir>()
        .unwrap()
        .path()
        .join("slotd.db");
    let raw = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    // A database corrupted by other means (an old backup, a hand edit without the trigger).
    sqlx::query("DROP TRIGGER units_legal_move")
        .execute(&raw)
        .await
        .unwrap();
    sqlx::query("UPDATE units SET status = 'exploded' WHERE id = 't1-u0'")
        .execute(&raw)
        .await
        .unwrap();
    let err = db.store.task_units("t1").await.unwrap_err();
    assert_corrupt_names(err, "t1-u0");
    let err = db.store.task_get("acme", "t1").await.unwrap_err();
    assert_corrupt_names(err, "t1");
    sqlx::query("UPDATE units SET status = 'pending', idx = -4 WHERE id = 't1-u0'")
        .execute(&raw)
        .await
        .unwrap();
    let err = db.store.task_units("t1").await.unwrap_err();
    assert_corrupt_names(err, "t1-u0");
}

/// The scheduler's hot reads must be index range scans: fill order runs its window over the
/// covering `units_fill` in partition order, due polls read `units_pool_status_next` in order,
/// finalization claims the partial `units_status_next`.
/// (`due_sql` answers as one JSON array; its plan is read with the same parameters.)
#[tokio::test]
async fn hot_queries_use_their_indexes() {
    let db = sqlite_db().await;
    let dir = db.guard.downcast_ref::<tempfile::TempDir>().unwrap();
    let url = format!("sqlite://{}", dir.path().join("slotd.db").display());
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let mut plans = Vec::new();
    for sql in [super::units::pending_sql(), super::units::due_sql()] {
        let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {sql}"))
            .bind("p")
            .bind(5_i64)
            .bind(r#"["video"]"#)
            .bind(10_i64)
            .fetch_all(&pool)
            .await
            .unwrap();
        let plan: Vec<String> = rows.iter().map(|r| r.get::<String, _>("detail")).collect();
        plans.push(plan.join(" | "));
    }
    let (pending, due) = (&plans[0], &plans[1]);
    // The window reads only the covering index; the table is read for the winners alone.
    assert!(
        pending.contains("USING COVERING INDEX units_fill"),
        "{pending}"
    );
    assert!(pending.contains("USING INTEGER PRIMARY KEY"), "{pending}");
    assert!(due.contains("USING INDEX units_pool_status_next"), "{due}");
    // Index order is poll order: the LIMIT needs no sort of the due units (the JSON answer
    // orders at most `limit` rows, once they are picked).
    assert!(!due.contains("TEMP B-TREE FOR ORDER BY"), "{due}");
    // Finalization claims read the partial index (it holds only succeeded and finalizing
    // units), both branches.
    let rows = sqlx::query(&format!(
        "EXPLAIN QUERY PLAN {}",
        super::finalize::claim_due_sql()
    ))
    .bind(5_i64)
    .bind(10_i64)
    .fetch_all(&pool)
    .await
    .unwrap();
    let claim: Vec<String> = rows.iter().map(|r| r.get::<String, _>("detail")).collect();
    let uses = claim
        .iter()
        .filter(|d| d.contains("USING INDEX units_status_next"))
        .count();
    assert_eq!(uses, 2, "{claim:?}");
}

/// Any writer, even a hand-written UPDATE, is held to the state machine by the database: the
/// trigger's table equals the model, an illegal change is refused (and named as such by the
/// store's error mapping), a legal one passes.
#[tokio::test]
async fn the_database_refuses_illegal_moves_from_any_writer() {
    let db = sqlite_db().await;
    let dir = db.guard.downcast_ref::<tempfile::TempDir>().unwrap();
    let url = format!("sqlite://{}", dir.path().join("slotd.db").display());
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT from_status, to_status FROM unit_moves")
            .fetch_all(&raw)
            .await
            .unwrap();
    assert_moves_match_the_model(&rows);
    let task = crate::suite::task("t1", "acme", "video", "p", 1, 0);
    db.store.task_create(task).await.unwrap();
    let err = sqlx::query("UPDATE units SET status = 'completed' WHERE id = 't1-u0'")
        .execute(&raw)
        .await
        .unwrap_err();
    match crate::StoreError::from(err) {
        crate::StoreError::IllegalTransition(msg) => {
            assert!(msg.contains("illegal unit transition"), "{msg}")
        }
        other => panic!("expected IllegalTransition, got {other:?}"),
    }
    let units = db.store.task_units("t1").await.unwrap();
    assert_eq!(units[0].status, slotd_core::model::UnitStatus::Pending);
    sqlx::query("UPDATE units SET status = 'cancelled' WHERE id = 't1-u0'")
        .execute(&raw)
        .await
        .unwrap();
    // Every other pair, each on a unit of its own.
    let pairs = crate::suite::task("t2", "acme", "video", "p", crate::suite::PAIRS, 0);
    db.store.task_create(pairs).await.unwrap();
    crate::suite::every_pair_is_held_to_the_model("t2", |sql| {
        let raw = raw.clone();
        async move {
            sqlx::query(&sql)
                .execute(&raw)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    })
    .await;
}

/// The console's slot timeline reads the window, not the log: the events from the window's
/// start on by their primary key (the bound found by reading the log backwards), each unit by
/// its primary key.
#[tokio::test]
async fn slot_log_reads_only_the_window() {
    let db = sqlite_db().await;
    let dir = db.guard.downcast_ref::<tempfile::TempDir>().unwrap();
    let url = format!("sqlite://{}", dir.path().join("slotd.db").display());
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let rows = sqlx::query(&format!(
        "EXPLAIN QUERY PLAN {}",
        crate::shared::SLOT_LOG_SQL
    ))
    .bind("p")
    .bind(5_i64)
    .bind(10_i64)
    .fetch_all(&pool)
    .await
    .unwrap();
    let plan: Vec<String> = rows.iter().map(|r| r.get::<String, _>("detail")).collect();
    let plan = plan.join(" | ");
    assert!(
        plan.contains("SEARCH e USING INTEGER PRIMARY KEY (rowid>?)"),
        "{plan}"
    );
    assert!(
        plan.contains("SEARCH u USING INDEX sqlite_autoindex_units_1 (id=?)"),
        "{plan}"
    );
}

#[tokio::test]
async fn a_release_whose_bytes_changed_is_reported_not_returned() {
    let db = sqlite_db().await;
    let published = db
        .store
        .release_put(&crate::NewRelease {
            name: "kling-video".into(),
            version: "1.0.0".into(),
            contract: "1.3.0".into(),
            bytes: b"\0asm the real build".to_vec(),
            published_by: "team-kling".into(),
            takes_over: false,
            current: true,
            now: 1,
        })
        .await
        .unwrap();
    let crate::Published::New(key) = published else {
        panic!("{published:?}")
    };
    let path = db
        .guard
        .downcast_ref::<tempfile::TempDir>()
        .unwrap()
        .path()
        .join("slotd.db");
    let raw = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    // The stored file altered by other means (a hand edit, a damaged restore).
    sqlx::query("UPDATE handler_releases SET bytes = X'00616263'")
        .execute(&raw)
        .await
        .unwrap();
    raw.close().await;
    match db.store.release_get(&key).await {
        Err(crate::StoreError::Corrupt(msg)) => {
            assert!(
                msg.contains(&key) && msg.contains("kling-video 1.0.0"),
                "{msg}"
            );
        }
        other => panic!("expected Corrupt naming the release, got {other:?}"),
    }
}

/// The first of the lean-write migrations (`migrations/sqlite/0023_lean_unit_writes.sql`).
const LEAN_LAYOUT: i64 = 23;

/// A file filled by the schema before the lean layout upgrades without losing or changing a
/// row, and the fill order index (pending units only again) serves the same reads.
#[tokio::test]
async fn a_file_filled_by_the_previous_schema_upgrades_without_loss() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("slotd.db").display());
    let store = SqliteStore::connect(&url).await.unwrap();
    let previous = crate::suite::migrations_before(&super::MIGRATOR, LEAN_LAYOUT);
    previous.run(&store.writer).await.unwrap();
    let writer = store.writer.clone();
    let fill_index = || {
        let writer = writer.clone();
        async move {
            sqlx::query_scalar::<_, String>(
                "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'units_fill'",
            )
            .fetch_one(&writer)
            .await
            .unwrap()
        }
    };
    assert!(!fill_index().await.contains("WHERE"));
    let store: DynStore = Arc::new(store);
    let held = crate::suite::fill_before_upgrade(&store).await;
    store.migrate().await.unwrap();
    crate::suite::check_after_upgrade(&store, held).await;
    assert!(fill_index().await.contains("WHERE status = 'pending'"));
}
