//! The store suite on real PostgreSQL, one fresh schema per test, plus what only PostgreSQL
//! has: `open` on a `postgres://` URL, a server that goes away and comes back, and concurrent
//! claims that never hand one unit to two claimants.
//!
//! The server is `SLOTD_TEST_DATABASE_URL`, else `postgres://root@127.0.0.1:5432/test` (or the
//! `postgres` user if `root` is refused).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use sqlx::postgres::PgConnectOptions;
use std::str::FromStr;
use std::sync::Arc;
use tokio::sync::OnceCell;

use super::PostgresStore;
use crate::prelude::*;
use crate::suite::TestDb;
use crate::{DynStore, StoreError, open};
use slotd_core::model::UnitStatus;

/// The server URL that answered, found once per test binary.
static BASE_URL: OnceCell<String> = OnceCell::const_new();

async fn base_url() -> String {
    BASE_URL
        .get_or_init(|| async {
            if let Ok(url) = std::env::var("SLOTD_TEST_DATABASE_URL") {
                return url;
            }
            let mut last = String::new();
            for user in ["root", "postgres"] {
                let url = format!("postgres://{user}@127.0.0.1:5432/test");
                match sqlx::PgPool::connect(&url).await {
                    Ok(pool) => {
                        pool.close().await;
                        return url;
                    }
                    Err(e) => last = format!("{url}: {e}"),
                }
            }
            panic!("no PostgreSQL for the tests (set SLOTD_TEST_DATABASE_URL): {last}")
        })
        .await
        .clone()
}

/// A fresh schema on the test server, dropped (with everything in it) when this is dropped.
pub(crate) struct Schema {
    pub name: String,
    pub base: String,
}

impl Schema {
    pub(crate) async fn create() -> Schema {
        let base = base_url().await;
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        let admin = sqlx::PgPool::connect(&base).await.unwrap();
        sqlx::query(&format!("CREATE SCHEMA {name}"))
            .execute(&admin)
            .await
            .unwrap();
        admin.close().await;
        Schema { name, base }
    }

    /// Connect options whose `search_path` is this schema. The application name is the
    /// schema's too, so that dropping the schema can end the sessions still using it.
    pub(crate) fn options(&self) -> PgConnectOptions {
        PgConnectOptions::from_str(&self.base)
            .unwrap()
            .application_name(&self.name)
            .options([("search_path", self.name.as_str())])
    }

    /// The same as a URL, for `store::open` and configs.
    pub(crate) fn url(&self) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!(
            "{}{sep}application_name={name}&options[search_path]={name}",
            self.base,
            name = self.name
        )
    }
}

impl Drop for Schema {
    /// Drop the schema from a thread of its own: `Drop` cannot await, and the test's runtime
    /// may be shutting down.
    fn drop(&mut self) {
        let (base, name) = (self.base.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let admin = sqlx::PgPool::connect(&base).await.unwrap();
                // A store the test did not close may still hold sessions (even one idle in a
                // transaction, whose locks would make the drop wait forever).
                sqlx::query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE application_name = $1 AND pid <> pg_backend_pid()",
                )
                .bind(&name)
                .execute(&admin)
                .await
                .unwrap();
                sqlx::query(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                    .execute(&admin)
                    .await
                    .unwrap();
                admin.close().await;
            });
        })
        .join();
        if dropped.is_err() && !std::thread::panicking() {
            panic!("dropping test schema {}", self.name);
        }
    }
}

pub(crate) async fn pg_db() -> TestDb {
    let schema = Schema::create().await;
    let store = PostgresStore::connect_with(schema.options(), PostgresStore::pool_options())
        .await
        .unwrap();
    store.migrate().await.unwrap();
    TestDb {
        store: Arc::new(store),
        guard: Box::new(schema),
    }
}

crate::store_suite!(pg_db);

#[tokio::test]
async fn open_connects_and_migrates() {
    let schema = Schema::create().await;
    let store: DynStore = open(&schema.url()).await.unwrap();
    store.ping().await.unwrap();
    store.migrate().await.unwrap();
    let again = open(&schema.url()).await.unwrap();
    assert!(again.pool_fence_advance("p", 1).await.unwrap());
    let err = match open("postgres://nobody@127.0.0.1:1/none").await {
        Ok(_) => panic!("a closed port must not connect"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("127.0.0.1:1"), "{err}");
}

/// While the server is unreachable every call fails fast with `Unavailable` (what the API maps
/// to 503 and the scheduler to a pause); when it is back, the same store works again without
/// being rebuilt.
#[tokio::test]
async fn server_gone_and_back_is_survived() {
    let schema = Schema::create().await;
    let direct = schema.options();
    let target = format!("{}:{}", direct.get_host(), direct.get_port());
    let proxy = slotd_testkit::stub::proxy::TcpProxy::start(target)
        .await
        .unwrap();
    let store = PostgresStore::connect_with(
        direct.host("127.0.0.1").port(proxy.port()),
        PostgresStore::pool_options()
            .max_connections(4)
            .acquire_timeout(std::time::Duration::from_millis(500)),
    )
    .await
    .unwrap();
    store.migrate().await.unwrap();
    let t = crate::NewTask {
        id: "t1".into(),
        tenant: "acme".into(),
        task_type: "video".into(),
        payload: "{}".into(),
        idempotency_key: None,
        priority: 0,
        completion_webhook_url: None,
        units: Vec::new(),
        now: 1,
        terms: Default::default(),
    };
    store.task_create(t).await.unwrap();

    proxy.set_up(false);
    for _ in 0..3 {
        match store.task_get("acme", "t1").await {
            Err(StoreError::Unavailable(_)) => {}
            other => panic!("expected Unavailable while the server is gone, got {other:?}"),
        }
        match store.unit_apply(&[Default::default()], 2, None).await {
            Err(StoreError::Unavailable(_)) => {}
            other => panic!("expected Unavailable for a write, got {other:?}"),
        }
    }

    proxy.set_up(true);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match store.task_get("acme", "t1").await {
            Ok(Some(task)) => {
                assert_eq!(task.id, "t1");
                break;
            }
            Ok(None) => panic!("the task was lost"),
            Err(e) if tokio::time::Instant::now() < deadline => {
                assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
                tokio::task::yield_now().await;
            }
            Err(e) => panic!("still failing after the server came back: {e:?}"),
        }
    }
    store.ping().await.unwrap();
    store.close().await;
}

/// The task writer keeps its connection between batches, untested: when the server has ended
/// that session meanwhile, the next create is written on a tested connection instead of
/// failing, and the store still closes.
#[tokio::test]
async fn a_kept_task_connection_the_server_ended_is_replaced() {
    let schema = Schema::create().await;
    let store = PostgresStore::connect_with(schema.options(), PostgresStore::pool_options())
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let task = |id: &str| crate::NewTask {
        id: id.into(),
        tenant: "acme".into(),
        task_type: "video".into(),
        payload: "{}".into(),
        idempotency_key: None,
        priority: 0,
        completion_webhook_url: None,
        units: Vec::new(),
        now: 1,
        terms: Default::default(),
    };
    store.task_create(task("t1")).await.unwrap();
    let admin = sqlx::PgPool::connect(&schema.base).await.unwrap();
    let ended: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE application_name = $1 AND pid <> pg_backend_pid()",
    )
    .bind(&schema.name)
    .fetch_all(&admin)
    .await
    .unwrap();
    admin.close().await;
    assert!(!ended.is_empty(), "the store's sessions were found");
    assert_eq!(
        store.task_create(task("t2")).await.unwrap(),
        crate::Created::New("t2".into())
    );
    assert!(store.task_get("acme", "t2").await.unwrap().is_some());
    store.close().await;
}

/// Any writer, even a hand-written UPDATE, is held to the state machine by the database: the
/// trigger's table equals the model, an illegal change is refused (and named as such by the
/// store's error mapping), a legal one passes.
#[tokio::test]
async fn the_database_refuses_illegal_moves_from_any_writer() {
    let schema = Schema::create().await;
    let store = PostgresStore::connect_with(schema.options(), PostgresStore::pool_options())
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let raw = sqlx::PgPool::connect_with(schema.options()).await.unwrap();
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT from_status, to_status FROM unit_moves")
            .fetch_all(&raw)
            .await
            .unwrap();
    crate::suite::assert_moves_match_the_model(&rows);
    let task = crate::suite::task("t1", "acme", "video", "p", 1, 0);
    store.task_create(task).await.unwrap();
    let err = sqlx::query("UPDATE units SET status = 'completed' WHERE id = 't1-u0'")
        .execute(&raw)
        .await
        .unwrap_err();
    match StoreError::from(err) {
        StoreError::IllegalTransition(msg) => {
            assert!(msg.contains("pending -> completed"), "{msg}")
        }
        other => panic!("expected IllegalTransition, got {other:?}"),
    }
    sqlx::query("UPDATE units SET status = 'cancelled' WHERE id = 't1-u0'")
        .execute(&raw)
        .await
        .unwrap();
    // Every other pair, each on a unit of its own: the trigger's inline list is the model's.
    let pairs = crate::suite::task("t2", "acme", "video", "p", crate::suite::PAIRS, 0);
    store.task_create(pairs).await.unwrap();
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
    raw.close().await;
    store.close().await;
}

/// The statements that take their rows as arrays are planned once per connection (the array
/// pool's `plan_cache_mode`): a provider callback's one-unit write, repeated, runs one generic
/// plan. In a custom plan the planner sees the array's length, finds a one-row plan cheaper
/// than the generic one's guess, and so planned every call afresh (docs/scale.md).
#[tokio::test]
async fn array_statements_are_planned_once_per_connection() {
    let schema = Schema::create().await;
    // Two connections, one of them the array statements': the session read below is theirs.
    let store = PostgresStore::connect_with(
        schema.options(),
        PostgresStore::pool_options().max_connections(2),
    )
    .await
    .unwrap();
    store.migrate().await.unwrap();
    let n = 8;
    let task = crate::suite::task("t1", "acme", "video", "p", n, 0);
    store.task_create(task).await.unwrap();
    let ids: Vec<String> = (0..n).map(|i| format!("t1-u{i}")).collect();
    let pg = store.clone();
    let store: DynStore = Arc::new(store);
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    crate::suite::submit(&store, &refs, 1).await;
    for id in &ids {
        let mut done = crate::suite::update(id, UnitStatus::Submitted, UnitStatus::Succeeded);
        done.result = Some(r#"{"url":"https://x/y.mp4"}"#.into());
        let report = store.unit_apply(&[done], 2, None).await.unwrap();
        assert_eq!(report.applied, std::slice::from_ref(id));
    }
    let plans: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements \
         WHERE statement LIKE '%FOR UPDATE OF units%' AND statement LIKE '%unnest%' \
           AND statement NOT LIKE '%pg_prepared_statements%'",
    )
    .fetch_all(pg.arrays_for_tests())
    .await
    .unwrap();
    // The batch write, whose every call above was one unit's.
    let write = plans.iter().find(|(generic, _)| *generic >= n as i64);
    assert!(
        write.is_some_and(|(_, custom)| *custom == 0),
        "the batch write should run its one generic plan: {plans:?}"
    );
}

/// How the server's errors map, read from real errors raised with each SQLSTATE: what means
/// "not serving right now" (the API's 503, the scheduler's pause) against a query that is
/// wrong, and the state machine's own refusal.
#[tokio::test]
async fn server_errors_map_by_sqlstate() {
    let pool = sqlx::PgPool::connect(&base_url().await).await.unwrap();
    let raise = async |code: &str, message: &str| -> StoreError {
        let sql =
            format!("DO $$ BEGIN RAISE EXCEPTION '{message}' USING ERRCODE = '{code}'; END $$");
        StoreError::from(sqlx::query(&sql).execute(&pool).await.unwrap_err())
    };
    for code in ["08000", "08006", "57P01", "57P02", "57P03", "53300"] {
        let e = raise(code, "going away").await;
        assert!(matches!(e, StoreError::Unavailable(_)), "{code}: {e:?}");
    }
    for code in ["42601", "23505", "40001", "57014", "P0001"] {
        let e = raise(code, "a wrong query").await;
        assert!(matches!(e, StoreError::Other(_)), "{code}: {e:?}");
    }
    let e = raise("P0001", "illegal unit transition completed to submitted").await;
    assert!(matches!(e, StoreError::IllegalTransition(_)), "{e:?}");
    pool.close().await;
}

/// A transaction that appended an event first but commits last: a stream that had read the
/// later event by id would move past the earlier one and never deliver it. The horizon holds
/// the stream back until the open transaction ends, then both come, in id order.
#[tokio::test]
async fn an_event_committed_late_is_not_skipped() {
    use crate::{EventCursor, EventScope};
    let schema = Schema::create().await;
    let store = PostgresStore::connect_with(schema.options(), PostgresStore::pool_options())
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let task = crate::suite::task("t1", "acme", "video", "p", 2, 0);
    store.task_create(task).await.unwrap();
    let raw = sqlx::PgPool::connect_with(schema.options()).await.unwrap();
    let event = "INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage, \
                 detail) VALUES ($1, 't1', 1, 'pending', 'pending', 'main', 'test') RETURNING id";
    let mut slow = raw.begin().await.unwrap();
    let early: i64 = sqlx::query_scalar(event)
        .bind("t1-u0")
        .fetch_one(&mut *slow)
        .await
        .unwrap();
    let late: i64 = sqlx::query_scalar(event)
        .bind("t1-u1")
        .fetch_one(&raw)
        .await
        .unwrap();
    assert!(early < late);
    let scope = EventScope {
        tenant: "acme",
        task_id: Some("t1"),
    };
    let read = |from: EventCursor| {
        let store = store.clone();
        async move { store.unit_events_after(scope, from, 100).await.unwrap() }
    };
    // While the first transaction is open, neither shows: the committed one is above it.
    let page = read(EventCursor::default()).await;
    assert!(
        page.events.iter().all(|(_, e)| e.id != late),
        "an event above an open transaction was read: {:?}",
        page.events
    );
    slow.commit().await.unwrap();
    let mut from = page.next;
    let mut seen: Vec<i64> = page.events.iter().map(|(_, e)| e.id).collect();
    // Both show once every older write transaction on the server has ended (other tests'
    // too): read on, with a deadline.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !(seen.contains(&early) && seen.contains(&late)) {
        assert!(std::time::Instant::now() < deadline, "seen only {seen:?}");
        let page = read(from).await;
        seen.extend(page.events.iter().map(|(_, e)| e.id));
        from = page.next;
        if page.events.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    assert!(seen.contains(&early) && seen.contains(&late), "{seen:?}");
    let at = |id: i64| seen.iter().position(|&s| s == id);
    assert!(at(early) < at(late), "{seen:?}");
    raw.close().await;
    store.close().await;
}

/// The first of the lean-write migrations (`migrations/postgres/0024_lean_unit_writes.sql`).
const LEAN_LAYOUT: i64 = 24;

/// A database filled by the schema before the lean layout upgrades without losing or changing
/// a row, and its changed indexes (provider job ids of submitted units only, due times of live
/// units only) serve the same reads.
#[tokio::test]
async fn a_database_filled_by_the_previous_schema_upgrades_without_loss() {
    let schema = Schema::create().await;
    let store = PostgresStore::connect_with(schema.options(), PostgresStore::pool_options())
        .await
        .unwrap();
    let previous = crate::suite::migrations_before(&super::MIGRATOR, LEAN_LAYOUT);
    previous.run(&store.pool).await.unwrap();
    let pool = store.pool.clone();
    let index = |name: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, String>(
                "SELECT indexdef FROM pg_indexes \
                 WHERE indexname = $1 AND schemaname = current_schema()",
            )
            .bind(name)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    assert!(!index("units_provider_job").await.contains("status"));
    let store: DynStore = Arc::new(store);
    let held = crate::suite::fill_before_upgrade(&store).await;
    store.migrate().await.unwrap();
    crate::suite::check_after_upgrade(&store, held).await;
    assert!(index("units_provider_job").await.contains("'submitted'"));
    assert!(
        index("units_pool_status_next")
            .await
            .contains("'finalizing'")
    );
    assert!(index("unit_events_id").await.contains("brin"));
    let keys: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_indexes WHERE tablename = 'unit_events' \
         AND schemaname = current_schema() AND indexname LIKE '%pkey'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(keys, 0, "no B-tree on the event ids");
}
