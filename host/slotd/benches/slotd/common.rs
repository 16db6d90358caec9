//! What the benchmarks share: a fixture configuration on either backend, a fresh PostgreSQL
//! schema per run, task submission through the real router, medians.

use std::path::Path;
use std::time::Duration;

use slotd_core::config::{Config, PoolConfig};
use tower::ServiceExt;

use crate::report::{Better, Report, Target};

pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The backends of a run: SQLite in `dir`, and PostgreSQL when it answers.
pub async fn backends(dir: &Path) -> Vec<(&'static str, String)> {
    let mut out = vec![(
        "sqlite",
        format!(
            "sqlite://{}",
            dir.join(format!("{}.db", uuid::Uuid::new_v4().simple()))
                .display()
        ),
    )];
    match pg_schema_url().await {
        Some(url) => out.push(("postgres", url)),
        None => eprintln!("PostgreSQL not reachable: its figures are skipped"),
    }
    out
}

/// The schemas [`pg_schema_url`] made in this process (server URL, schema), dropped at the end
/// of the run by [`drop_schemas`]: a run writes hundreds of megabytes into them.
static SCHEMAS: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

/// Drop the schemas this run made (best effort: one that will not go is named and left).
pub async fn drop_schemas() {
    let made = std::mem::take(&mut *SCHEMAS.lock().unwrap_or_else(|e| e.into_inner()));
    for (url, name) in made {
        let dropped = match sqlx::PgPool::connect(&url).await {
            Ok(pool) => {
                let r = sqlx::query(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                    .execute(&pool)
                    .await;
                pool.close().await;
                r.map(|_| ()).map_err(|e| e.to_string())
            }
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = dropped {
            eprintln!("left the bench schema {name} in place: {e}");
        }
    }
}

/// A fresh PostgreSQL schema for one run (`SLOTD_TEST_DATABASE_URL` or the local server).
pub async fn pg_schema_url() -> Option<String> {
    let base = std::env::var("SLOTD_TEST_DATABASE_URL").ok();
    let candidates: Vec<String> = match base {
        Some(b) => vec![b],
        None => ["root", "postgres"]
            .iter()
            .map(|u| format!("postgres://{u}@127.0.0.1:5432/test"))
            .collect(),
    };
    for url in candidates {
        let Ok(pool) = sqlx::PgPool::connect(&url).await else {
            continue;
        };
        let name = format!("bench_{}", uuid::Uuid::new_v4().simple());
        let ok = sqlx::query(&format!("CREATE SCHEMA {name}"))
            .execute(&pool)
            .await
            .is_ok();
        pool.close().await;
        if ok {
            SCHEMAS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((url.clone(), name.clone()));
            let sep = if url.contains('?') { '&' } else { '?' };
            return Some(format!("{url}{sep}options[search_path]={name}"));
        }
    }
    None
}

/// A `slotd serve` child of the real binary, killed when dropped.
pub struct Serve {
    pub child: std::process::Child,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Write `config` to `slotd.toml` in `dir` and start `slotd serve` on it (logs at `warn` to this
/// process's stderr).
pub fn serve(dir: &Path, config: &str) -> Serve {
    let file = dir.join("slotd.toml");
    std::fs::write(&file, config).expect("config");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_slotd"))
        .arg("--config")
        .arg(&file)
        .arg("serve")
        .env("SLOTD_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("start slotd");
    Serve { child }
}

/// The fixture handler (no HTTP with the `idle`/`quick` behaviors) on `database_url`, its pool
/// holding `slots`.
pub fn fixture_config(dir: &Path, slots: u32, database_url: &str) -> Config {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugins dir");
    let built = Path::new(slotd_testkit::BUILT_PLUGINS).join("fixture.wasm");
    std::fs::copy(built, plugins.join("fixture.wasm")).expect("copy fixture");
    let mut c = Config {
        database_url: database_url.to_string(),
        plugins_dir: plugins,
        ..Config::default()
    };
    c.max_units_per_task = 1000;
    c.pools.insert("fixture".into(), PoolConfig::slots(slots));
    c
}

/// `POST /v1/tasks/fixture` of `count` units with `behavior`, through the real router.
pub async fn submit(services: &slotd_server::services::Services, count: u32, behavior: &str) {
    post_fixture(
        services,
        serde_json::json!({"payload": {"count": count, "behavior": behavior}}),
    )
    .await;
}

/// `POST /v1/tasks/fixture` with `body` (the request envelope), through the real router.
pub async fn post_fixture(services: &slotd_server::services::Services, body: serde_json::Value) {
    let body = body.to_string();
    let req = axum::http::Request::builder()
        .method("POST")
        .uri("/v1/tasks/fixture")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body))
        .expect("request");
    let resp = slotd_server::api::router(services.clone())
        .oneshot(req)
        .await
        .expect("router");
    assert_eq!(resp.status().as_u16(), 202, "submit failed");
}

/// Submit `units` in tasks of at most 1,000.
pub async fn submit_many(services: &slotd_server::services::Services, units: u32, behavior: &str) {
    let mut left = units;
    while left > 0 {
        let n = left.min(1000);
        submit(services, n, behavior).await;
        left -= n;
    }
}

/// Put the database at `url` (migrated) back to the layout before the lean-write migrations
/// (`previous_schema/{postgres,sqlite}.sql`: the schema as migrations/postgres/0023 and
/// migrations/sqlite/0022 left it), so a benchmark measures before and after in one run with
/// the same binary.
pub async fn as_previous_schema(url: &str) {
    if url.starts_with("postgres") {
        let pool = sqlx::PgPool::connect(url).await.expect("pg");
        sqlx::raw_sql(include_str!("previous_schema/postgres.sql"))
            .execute(&pool)
            .await
            .expect("previous PostgreSQL schema");
        pool.close().await;
    } else {
        let pool = sqlx::SqlitePool::connect(url).await.expect("sqlite");
        sqlx::raw_sql(include_str!("previous_schema/sqlite.sql"))
            .execute(&pool)
            .await
            .expect("previous SQLite schema");
        pool.close().await;
    }
}

/// How many times the tick and submit groups measure each side of their comparisons
/// (`SLOTD_BENCH_ROUNDS`, else `default`), alternating the sides so that a slow moment of the
/// machine falls on both; their figures are the medians.
pub fn rounds(default: usize) -> usize {
    std::env::var("SLOTD_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n: &usize| *n > 0)
        .unwrap_or(default)
}

/// The median of `v` (the mean of the middle two of an even count; 0 when empty).
pub fn median_f64(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    match (v.len() % 2, v.get(mid.wrapping_sub(1)), v.get(mid)) {
        (0, Some(a), Some(b)) => (a + b) / 2.0,
        (_, _, Some(m)) => *m,
        _ => 0.0,
    }
}

/// The earlier build of this benchmark `SLOTD_BENCH_BASELINE` names (the executable `cargo
/// bench -p slotd --no-run` built from an older commit), if it is a file: the tick and submit
/// groups run its group beside their own, as the scale group runs `SLOTD_SCALE_BASELINE`.
pub fn baseline_bench() -> Option<std::path::PathBuf> {
    let path = std::path::PathBuf::from(std::env::var_os("SLOTD_BENCH_BASELINE")?);
    if path.is_file() {
        Some(path)
    } else {
        eprintln!(
            "SLOTD_BENCH_BASELINE={} is not a file; no baseline runs",
            path.display()
        );
        None
    }
}

/// One figure of a baseline run: (name, backend, value).
pub type BaselineFigure = (String, String, f64);

/// Run `group` of the earlier build at `exe` (on the same servers: it makes and drops a
/// PostgreSQL schema of its own) and read its figures from the JSON it writes into a
/// directory of its own. `None`, said on stderr, when it fails.
pub async fn run_baseline(exe: &Path, group: &str) -> Option<Vec<BaselineFigure>> {
    let (exe, group) = (exe.to_path_buf(), group.to_string());
    tokio::task::spawn_blocking(move || run_baseline_blocking(&exe, &group))
        .await
        .ok()
        .flatten()
}

fn run_baseline_blocking(exe: &Path, group: &str) -> Option<Vec<BaselineFigure>> {
    let dir = tempfile::TempDir::new().ok()?;
    let status = std::process::Command::new(exe)
        .arg(group)
        .env("CARGO_TARGET_DIR", dir.path())
        .env("SLOTD_BENCH_ROUNDS", "1")
        .env_remove("SLOTD_BENCH_BASELINE")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .status();
    match status {
        Ok(s) if s.success() => {}
        other => {
            eprintln!("the baseline's {group} group failed: {other:?}");
            return None;
        }
    }
    let text = std::fs::read_to_string(dir.path().join("slotd-bench.json")).ok()?;
    let records: Vec<serde_json::Value> = serde_json::from_str(&text).ok()?;
    Some(
        records
            .iter()
            .filter_map(|r| {
                Some((
                    r.get("name")?.as_str()?.to_string(),
                    r.get("backend")?.as_str()?.to_string(),
                    r.get("value")?.as_f64()?,
                ))
            })
            .collect(),
    )
}

/// The value of `name` on `backend` among a baseline's figures.
pub fn baseline_value(figures: &[BaselineFigure], name: &str, backend: &str) -> Option<f64> {
    figures
        .iter()
        .find(|(n, b, _)| n == name && b == backend)
        .map(|f| f.2)
}

/// A fresh database of `backend`'s kind (each measurement starts empty).
pub async fn fresh(dir: &Path, backend: &str) -> (&'static str, String) {
    backends(dir)
        .await
        .into_iter()
        .find(|(b, _)| *b == backend)
        .expect("the backend answered a moment ago")
}

/// One figure of one backend measured in rounds: on the current schema, on the previous one
/// (`previous_schema/`) and by the baseline build (`SLOTD_BENCH_BASELINE`).
#[derive(Default)]
pub struct Compared {
    pub current: Vec<f64>,
    pub previous: Vec<f64>,
    pub baseline: Vec<f64>,
}

impl Compared {
    /// Add this side's value of a round.
    pub fn push(&mut self, previous: bool, value: f64) {
        if previous {
            self.previous.push(value);
        } else {
            self.current.push(value);
        }
    }

    /// Report the medians: `name` (with `target`), `{name}_previous_schema`,
    /// `{name}_after_over_before` (current over previous), and with a baseline
    /// `{name}_baseline` and `{name}_over_baseline` (current over the baseline build's).
    pub fn report(
        &self,
        report: &mut Report,
        name: &str,
        backend: &str,
        unit: &str,
        target: Target,
    ) {
        let better = match target {
            Target::AtMost(_) => Better::Lower,
            Target::AtLeast(_) => Better::Higher,
            Target::None(b) => b,
        };
        let now = median_f64(self.current.clone());
        report.add(name, backend, now, unit, target);
        if !self.previous.is_empty() {
            let before = median_f64(self.previous.clone());
            report.add(
                &format!("{name}_previous_schema"),
                backend,
                before,
                unit,
                Target::None(better),
            );
            report.add(
                &format!("{name}_after_over_before"),
                backend,
                now / before.max(1e-9),
                "x",
                Target::None(better),
            );
        }
        if !self.baseline.is_empty() {
            let base = median_f64(self.baseline.clone());
            report.add(
                &format!("{name}_baseline"),
                backend,
                base,
                unit,
                Target::None(better),
            );
            report.add(
                &format!("{name}_over_baseline"),
                backend,
                now / base.max(1e-9),
                "x",
                Target::None(better),
            );
        }
    }
}
