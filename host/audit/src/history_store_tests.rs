//! The replayed rules over what the stores really write, on both drivers: the replay parses
//! the submit marker's and the retry's event text (`submit marked: key …`, `retry requested:
//! submit attempt N`), which each store's SQL writes on its own. A drift in either text on one
//! driver would hide peaks and resubmits there, so the units below go through the stores' own
//! calls (`unit_mark_granted`, `unit_apply`, `task_retry_failed`) and the check reads them back
//! with its own reader (`read::snapshot`).

use std::collections::BTreeMap;
use std::str::FromStr;

use slotd_core::model::UnitStatus;
use slotd_store::{Created, DynStore, Field, Grant, NewTask, NewUnit, UnitUpdate};

use super::super::read::snapshot;
use super::{Marker, marker, resubmits, slot_peaks};

const T0: i64 = 1_700_000_000_000;
const TENANT: &str = "acme";
/// Two accounts.
const VIDEO: &str = "kling:video";
/// The implicit account.
const IMAGE: &str = "runway:gen4_turbo";

fn task(id: &str, pool: &str, n: usize) -> NewTask {
    NewTask {
        id: id.into(),
        tenant: TENANT.into(),
        task_type: "video".into(),
        payload: r#"{"shots":[]}"#.into(),
        idempotency_key: None,
        priority: 0,
        completion_webhook_url: None,
        units: (0..n)
            .map(|i| NewUnit {
                id: format!("{id}-u{i}"),
                pool: pool.into(),
                stage: "main".into(),
                spec: format!(r#"{{"shot":{i}}}"#),
                state: "{}".into(),
                routes: None,
                routing: None,
                cost_estimate: None,
                planned_release: None,
            })
            .collect(),
        now: T0,
        terms: Default::default(),
    }
}

/// The submit marker, as the scheduler writes it: `ids` granted on `account`, all marked.
async fn mark(store: &DynStore, ids: &[&str], account: Option<&str>, attempt: u32, at: i64) {
    let grants: Vec<Grant> = ids
        .iter()
        .map(|id| Grant {
            unit_id: (*id).to_string(),
            tenant: TENANT.into(),
            account: account.map(String::from),
            estimate: 0.0,
            submission: format!("main-{attempt}"),
            budget_retry_at: at,
            quota_pool: None,
            spend: None,
            bind: None,
        })
        .collect();
    let marked = store
        .unit_mark_granted(&grants, at, at + 60_000, None)
        .await
        .expect("mark");
    let got: Vec<&str> = marked.units.iter().map(|u| u.id.as_str()).collect();
    assert_eq!(got, ids, "every grant marked");
}

/// `submitted -> to` for `id`, applied.
async fn leave(store: &DynStore, id: &str, to: UnitStatus, at: i64) {
    let mut u = UnitUpdate {
        unit_id: id.into(),
        from: Some(UnitStatus::Submitted),
        to: Some(to),
        submitted_at: Field::Clear,
        ..UnitUpdate::default()
    };
    match to {
        UnitStatus::Succeeded => {
            u.result = Some(r#"{"url":"https://x/y.mp4"}"#.into());
            u.next_at = Some(at + 10);
        }
        UnitStatus::Failed => {
            u.error = Field::Set(r#"{"code":"provider_failed","message":"boom"}"#.into());
        }
        _ => {}
    }
    let report = store.unit_apply(&[u], at, None).await.expect("apply");
    assert_eq!(report.applied, vec![id.to_string()], "{id} -> {to:?}");
}

/// The history written through `store` (whose database `url` names):
///
/// | at | video (acct-1, acct-2)            | image (implicit)    |
/// |----|-----------------------------------|---------------------|
/// | 1  | v-u0, v-u1 on acct-1 (2, 2/0)     |                     |
/// | 2  | r-u0, v-u2 on acct-2 (4, 2/2)     | i-u0, i-u1 (2)      |
/// | 3  | v-u0, v-u1 succeed (2, 0/2)       | i-u0 succeeds (1)   |
/// | 4  | r-u0 fails (1, 0/1)               | x-u0 (2)            |
/// | 5  | retry of r; r-u0 attempt 1 on acct-1 (2, 1/1)           |
/// | 6  | v-u3 on acct-1 (3, 2/1)           | x-u0 back to pending with attempt 1, no retry; marked again (2) |
///
/// Peaks: video 4, video@acct-1 2, video@acct-2 2, image 2. The retried unit's two markers
/// name different accounts, so a marker the replay could not read (it would fall back to the
/// unit's last account, acct-1) would move its first slot to acct-1 and change both peaks.
async fn write_history(store: &DynStore) {
    for t in [
        task("v", VIDEO, 4),
        task("r", VIDEO, 1),
        task("i", IMAGE, 2),
        task("x", IMAGE, 1),
    ] {
        let id = t.id.clone();
        assert_eq!(
            store.task_create(t).await.expect("create"),
            Created::New(id)
        );
    }
    let ok = UnitStatus::Succeeded;
    mark(store, &["v-u0", "v-u1"], Some("acct-1"), 0, T0 + 1).await;
    mark(store, &["r-u0", "v-u2"], Some("acct-2"), 0, T0 + 2).await;
    mark(store, &["i-u0", "i-u1"], None, 0, T0 + 2).await;
    leave(store, "v-u0", ok, T0 + 3).await;
    leave(store, "v-u1", ok, T0 + 3).await;
    leave(store, "i-u0", ok, T0 + 3).await;
    leave(store, "r-u0", UnitStatus::Failed, T0 + 4).await;
    mark(store, &["x-u0"], None, 0, T0 + 4).await;
    let moved = store
        .task_retry_failed(TENANT, "r", T0 + 5)
        .await
        .expect("retry");
    assert_eq!(moved, Some(1));
    mark(store, &["r-u0"], Some("acct-1"), 1, T0 + 5).await;
    mark(store, &["v-u3"], Some("acct-1"), 0, T0 + 6).await;
    // A resubmit under a new attempt with no retry recorded (what the check must report).
    let back = UnitUpdate {
        unit_id: "x-u0".into(),
        from: Some(UnitStatus::Submitted),
        to: Some(UnitStatus::Pending),
        submit_attempt: Some(1),
        submitted_at: Field::Clear,
        next_at: Some(T0 + 6),
        ..UnitUpdate::default()
    };
    let report = store.unit_apply(&[back], T0 + 6, None).await.expect("back");
    assert_eq!(report.applied, vec!["x-u0".to_string()]);
    mark(store, &["x-u0"], None, 1, T0 + 6).await;
}

/// Each finding's subject (pool or `pool@account`) and the peak its message gives.
fn peaks(findings: &[super::Finding]) -> BTreeMap<String, u32> {
    findings
        .iter()
        .map(|f| {
            let (subject, rest) = f
                .message
                .split_once(" held ")
                .unwrap_or_else(|| panic!("a peak finding: {f}"));
            let n = rest
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("a peak: {f}"));
            let subject = subject.strip_prefix("pool ").unwrap_or(subject);
            (subject.to_string(), n)
        })
        .collect()
}

/// Write the history through `store`, read it back from `url` as `slotd check` does, and
/// replay it.
async fn replay_what_the_store_wrote(store: DynStore, url: &str) {
    write_history(&store).await;
    let snap = snapshot(url).await.expect("snapshot");

    // Every entry into `submitted` carries a marker the replay reads back exactly.
    let expected: BTreeMap<(&str, &str), Marker<'_>> = [
        ("v-u0", "v-u0-main-0", VIDEO, Some("acct-1")),
        ("v-u1", "v-u1-main-0", VIDEO, Some("acct-1")),
        ("r-u0", "r-u0-main-0", VIDEO, Some("acct-2")),
        ("v-u2", "v-u2-main-0", VIDEO, Some("acct-2")),
        ("i-u0", "i-u0-main-0", IMAGE, None),
        ("i-u1", "i-u1-main-0", IMAGE, None),
        ("x-u0", "x-u0-main-0", IMAGE, None),
        ("r-u0", "r-u0-main-1", VIDEO, Some("acct-1")),
        ("v-u3", "v-u3-main-0", VIDEO, Some("acct-1")),
        ("x-u0", "x-u0-main-1", IMAGE, None),
    ]
    .into_iter()
    .map(|(unit, key, pool, account)| {
        (
            (unit, key),
            Marker {
                key,
                pool: Some(pool),
                account,
            },
        )
    })
    .collect();
    let mut seen = BTreeMap::new();
    for (unit, events) in &snap.events {
        for e in events.iter().filter(|e| e.to_status == "submitted") {
            let detail = e.detail.as_deref().unwrap_or_default();
            let m = marker(detail).unwrap_or_else(|| panic!("{unit}: not a marker: {detail:?}"));
            seen.insert((unit.as_str(), m.key), m);
        }
    }
    assert_eq!(seen, expected, "the markers as written and read back");

    // The exact peaks: with every maximum 0 each count is reported with its peak ...
    let zero = |names: &[&str]| -> BTreeMap<String, u32> {
        names.iter().map(|n| (n.to_string(), 0)).collect()
    };
    let all = slot_peaks(&snap, &zero(&[VIDEO, IMAGE]), &zero(&["acct-1", "acct-2"]));
    let want: BTreeMap<String, u32> = [
        (VIDEO.to_string(), 4),
        (IMAGE.to_string(), 2),
        (format!("{VIDEO}@acct-1"), 2),
        (format!("{VIDEO}@acct-2"), 2),
    ]
    .into();
    assert_eq!(peaks(&all), want, "{all:#?}");
    // ... and at those maxima nothing is over, one below each is.
    let at = |pool: &str| want[pool];
    let pools = BTreeMap::from([
        (VIDEO.to_string(), at(VIDEO)),
        (IMAGE.to_string(), at(IMAGE)),
    ]);
    let accounts = BTreeMap::from([("acct-1".to_string(), 2), ("acct-2".to_string(), 2)]);
    let none = slot_peaks(&snap, &pools, &accounts);
    assert!(none.is_empty(), "{none:#?}");
    let below = slot_peaks(
        &snap,
        &pools.iter().map(|(p, n)| (p.clone(), n - 1)).collect(),
        &accounts.iter().map(|(a, n)| (a.clone(), n - 1)).collect(),
    );
    assert_eq!(below.len(), 4, "{below:#?}");

    // The retried unit's second attempt is legal; the unrecorded one is the only finding.
    let found = resubmits(&snap);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].unit_id.as_deref(), Some("x-u0"), "{found:#?}");
    assert!(
        found[0]
            .message
            .contains("x-u0-main-1 (attempt 1) with no retry"),
        "{found:#?}"
    );
}

#[tokio::test]
async fn the_replay_reads_what_sqlite_writes() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let url = format!("sqlite://{}", dir.path().join("history.db").display());
    let store = slotd_store::open(&url).await.expect("open");
    replay_what_the_store_wrote(store, &url).await;
}

#[tokio::test]
async fn the_replay_reads_what_postgres_writes() {
    let schema = Schema::create().await;
    let store = slotd_store::open(&schema.url()).await.expect("open");
    replay_what_the_store_wrote(store, &schema.url()).await;
}

/// A fresh schema on the test server: `SLOTD_TEST_DATABASE_URL`, else the local server as
/// `root` or `postgres` (as the store's own PostgreSQL suite finds it).
struct Schema {
    base: String,
    name: String,
}

impl Schema {
    async fn create() -> Schema {
        let mut candidates: Vec<String> = ["root", "postgres"]
            .iter()
            .map(|u| format!("postgres://{u}@127.0.0.1:5432/test"))
            .collect();
        if let Ok(url) = std::env::var("SLOTD_TEST_DATABASE_URL") {
            candidates = vec![url];
        }
        let mut last = String::new();
        for base in candidates {
            match sqlx::PgPool::connect(&base).await {
                Ok(admin) => {
                    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
                    sqlx::query(&format!("CREATE SCHEMA {name}"))
                        .execute(&admin)
                        .await
                        .expect("create schema");
                    admin.close().await;
                    return Schema { base, name };
                }
                Err(e) => last = format!("{base}: {e}"),
            }
        }
        panic!("no PostgreSQL for the tests (set SLOTD_TEST_DATABASE_URL): {last}")
    }

    /// The schema's URL: its `search_path`, and its name as the application name.
    fn url(&self) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!(
            "{}{sep}application_name={name}&options[search_path]={name}",
            self.base,
            name = self.name
        )
    }
}

impl Drop for Schema {
    /// Drop the schema and the sessions still on it, from a thread of its own (`Drop` cannot
    /// await, and the test's runtime may be shutting down), also after a failed assertion.
    fn drop(&mut self) {
        let (base, name) = (self.base.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let opts = sqlx::postgres::PgConnectOptions::from_str(&base).expect("base url");
                let admin = sqlx::PgPool::connect_with(opts).await.expect("admin");
                sqlx::query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE application_name = $1 AND pid <> pg_backend_pid()",
                )
                .bind(&name)
                .execute(&admin)
                .await
                .expect("end sessions");
                sqlx::query(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                    .execute(&admin)
                    .await
                    .expect("drop schema");
                admin.close().await;
            });
        })
        .join();
        if dropped.is_err() && !std::thread::panicking() {
            panic!("dropping test schema {}", self.name);
        }
    }
}
