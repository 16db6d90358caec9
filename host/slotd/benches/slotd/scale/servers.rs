//! The servers of a scale run, each the run's own so their statistics count the run alone:
//! a PostgreSQL database (`pg_stat_statements`, `pg_stat_database`), a `redis-server`
//! (`INFO commandstats`), and the CPU time of processes (`/proc`).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster;

/// The counters read before and after a run.
#[derive(Clone, Debug, Default)]
pub(super) struct Counters {
    pub pg_statements: Option<f64>,
    pub pg_wal_bytes: f64,
    pub pg_rows: f64,
    pub redis_commands: f64,
    /// Calls by Redis command (the breakdown of `redis_commands`).
    pub redis_by_command: BTreeMap<String, f64>,
    /// CPU seconds by process: `api`, `scheduler-0`…, `postgres`, `redis`, `bench`.
    pub cpu: BTreeMap<String, f64>,
    /// Host CPU: busy and total seconds (all cores).
    pub host_busy: f64,
    pub host_total: f64,
    /// `pg_stat_statements` by statement (the breakdown of `pg_statements`), when loaded.
    pub by_statement: BTreeMap<i64, Statement>,
    /// The server's WAL position (`pg_current_wal_lsn`), for the record-type breakdown.
    pub wal_lsn: Option<String>,
    /// In a difference ([`Counters::minus`]): where the window ends (`wal_lsn` is its start).
    pub wal_lsn_end: Option<String>,
}

/// One statement's counters in `pg_stat_statements`.
#[derive(Clone, Debug, Default)]
pub(super) struct Statement {
    pub query: String,
    pub calls: f64,
    pub wal_bytes: f64,
    pub exec_ms: f64,
    /// Time spent planning it (`pg_stat_statements.track_planning`; 0 where that is off).
    pub plan_ms: f64,
}

impl Counters {
    pub(super) fn minus(&self, before: &Counters) -> Counters {
        Counters {
            pg_statements: self
                .pg_statements
                .zip(before.pg_statements)
                .map(|(a, b)| a - b),
            pg_wal_bytes: self.pg_wal_bytes - before.pg_wal_bytes,
            pg_rows: self.pg_rows - before.pg_rows,
            redis_commands: self.redis_commands - before.redis_commands,
            redis_by_command: self
                .redis_by_command
                .iter()
                .map(|(k, v)| {
                    let d = v - before.redis_by_command.get(k).copied().unwrap_or(0.0);
                    (k.clone(), d)
                })
                .filter(|(_, d)| *d > 0.0)
                .collect(),
            cpu: self
                .cpu
                .iter()
                .map(|(k, v)| (k.clone(), v - before.cpu.get(k).copied().unwrap_or(0.0)))
                .collect(),
            host_busy: self.host_busy - before.host_busy,
            host_total: self.host_total - before.host_total,
            by_statement: self
                .by_statement
                .iter()
                .map(|(id, s)| {
                    let b = before.by_statement.get(id).cloned().unwrap_or_default();
                    let d = Statement {
                        query: s.query.clone(),
                        calls: s.calls - b.calls,
                        wal_bytes: s.wal_bytes - b.wal_bytes,
                        exec_ms: s.exec_ms - b.exec_ms,
                        plan_ms: s.plan_ms - b.plan_ms,
                    };
                    (*id, d)
                })
                .filter(|(_, d)| d.calls > 0.0)
                .collect(),
            wal_lsn: before.wal_lsn.clone(),
            wal_lsn_end: self.wal_lsn.clone(),
        }
    }
}

/// A database of the run's own, so `pg_stat_statements` and `pg_stat_database` count this run.
pub(super) struct PrivateDb {
    admin: String,
    name: String,
    pub url: String,
    /// `pg_stat_statements` is loaded (`shared_preload_libraries`) and installed here.
    statements: bool,
    pool: sqlx::PgPool,
}

impl PrivateDb {
    /// In `own` (a server of the run's own, [`super::own_pg`]) when there is one, else in the
    /// running server.
    pub(super) async fn create(own: Option<&str>) -> anyhow::Result<Option<PrivateDb>> {
        let candidates: Vec<String> = match (own, std::env::var("SLOTD_TEST_DATABASE_URL")) {
            (Some(own), _) => vec![own.to_string()],
            (None, Ok(b)) => vec![b],
            (None, Err(_)) => ["root", "postgres"]
                .iter()
                .map(|u| format!("postgres://{u}@127.0.0.1:5432/test"))
                .collect(),
        };
        for admin in candidates {
            let Ok(pool) = sqlx::PgPool::connect(&admin).await else {
                continue;
            };
            let name = format!("slotd_scale_{}", uuid::Uuid::new_v4().simple());
            let created = sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&pool)
                .await;
            pool.close().await;
            if let Err(e) = created {
                eprintln!("scale: CREATE DATABASE as {admin}: {e}");
                continue;
            }
            let mut url = url::Url::parse(&admin)?;
            url.set_path(&format!("/{name}"));
            let url = url.to_string();
            let pool = sqlx::PgPool::connect(&url).await?;
            let statements = match sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                .execute(&pool)
                .await
            {
                Ok(_) => sqlx::query("SELECT 1 FROM pg_stat_statements LIMIT 1")
                    .execute(&pool)
                    .await
                    .map_err(|e| {
                        eprintln!(
                            "scale: pg_stat_statements is not loaded ({e}); statements per unit \
                             are not measured and WAL is read server-wide. To measure them: \
                             ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'; \
                             then restart PostgreSQL (docs/scale.md)."
                        )
                    })
                    .is_ok(),
                Err(e) => {
                    eprintln!("scale: pg_stat_statements unavailable: {e}");
                    false
                }
            };
            return Ok(Some(PrivateDb {
                admin,
                name,
                url,
                statements,
                pool,
            }));
        }
        Ok(None)
    }

    /// Migrate, then undo the lean-write migrations (`previous_schema/postgres.sql`), so a run on
    /// this database measures the schema as it was before them. The slotd processes started
    /// afterwards find every migration applied and change nothing.
    pub(super) async fn as_previous_schema(&self) -> anyhow::Result<()> {
        slotd_store::open(&self.url).await?.migrate().await?;
        sqlx::raw_sql(include_str!("../previous_schema/postgres.sql"))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Gather the planner's statistics of this database, as a database in service has them
    /// (autovacuum analyzes a table once a tenth of it has changed, about a minute apart). A
    /// run's database starts empty and lives about a minute, so without them the planner
    /// takes every status for rare (PostgreSQL's default selectivity): it read the callbacks'
    /// lookups through every submitted unit and ranked the fill's candidates the long way,
    /// 1.5 ms of PostgreSQL's CPU per unit in the steady run at 100 accounts.
    pub(super) async fn analyze(&self) -> anyhow::Result<()> {
        sqlx::query("ANALYZE").execute(&self.pool).await?;
        Ok(())
    }

    pub(super) async fn counters(
        &self,
        redis: &PrivateRedis,
        pids: &BTreeMap<String, u32>,
    ) -> anyhow::Result<Counters> {
        let (pg_statements, pg_wal_bytes) = if self.statements {
            let (calls, wal): (f64, f64) = sqlx::query_as(
                "SELECT COALESCE(SUM(calls), 0)::float8, COALESCE(SUM(wal_bytes), 0)::float8 \
                 FROM pg_stat_statements WHERE dbid = \
                 (SELECT oid FROM pg_database WHERE datname = current_database())",
            )
            .fetch_one(&self.pool)
            .await?;
            (Some(calls), wal)
        } else {
            let wal: f64 =
                sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8")
                    .fetch_one(&self.pool)
                    .await?;
            (None, wal)
        };
        let by_statement = if self.statements {
            self.statements().await?
        } else {
            BTreeMap::new()
        };
        let wal_lsn = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
            .fetch_one(&self.pool)
            .await
            .ok();
        let pg_rows = self.rows().await?;
        let redis_by_command = redis.commands().await?;
        let mut cpu = BTreeMap::new();
        for (name, pid) in pids {
            cpu.insert(name.clone(), proc_cpu_seconds(*pid).unwrap_or(0.0));
        }
        cpu.insert("postgres".into(), self.backends_cpu().await?);
        let (host_busy, host_total) = host_cpu_seconds().unwrap_or((0.0, 0.0));
        Ok(Counters {
            pg_statements,
            pg_wal_bytes,
            pg_rows,
            redis_commands: redis_by_command.values().sum(),
            redis_by_command,
            cpu,
            host_busy,
            host_total,
            by_statement,
            wal_lsn,
            wal_lsn_end: None,
        })
    }

    /// This database's statements in `pg_stat_statements`, by query id.
    async fn statements(&self) -> anyhow::Result<BTreeMap<i64, Statement>> {
        let rows: Vec<(i64, String, f64, f64, f64, f64)> = sqlx::query_as(
            "SELECT queryid, query, calls::float8, wal_bytes::float8, total_exec_time, \
             total_plan_time \
             FROM pg_stat_statements WHERE queryid IS NOT NULL AND dbid = \
             (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, query, calls, wal_bytes, exec_ms, plan_ms)| {
                let s = Statement {
                    query,
                    calls,
                    wal_bytes,
                    exec_ms,
                    plan_ms,
                };
                (id, s)
            })
            .collect())
    }

    /// WAL written since `from` (an LSN) by record type, largest first, as
    /// `(resource manager/record type, bytes with full-page images)`: `pg_walinspect`, on a
    /// server of the run's own (server-wide figures); empty where the extension is missing.
    pub(super) async fn wal_by_record(&self, from: &str, to: &str) -> Vec<(String, f64)> {
        if sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            .execute(&self.pool)
            .await
            .is_err()
        {
            return Vec::new();
        }
        sqlx::query_as(
            "SELECT \"resource_manager/record_type\", combined_size::float8 \
             FROM pg_get_wal_stats($1::pg_lsn, pg_current_wal_lsn(), true) \
             WHERE count > 0 ORDER BY combined_size DESC",
        )
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await
        .unwrap_or_default()
    }

    async fn rows(&self) -> anyhow::Result<f64> {
        Ok(sqlx::query_scalar(
            "SELECT (tup_inserted + tup_updated + tup_deleted)::float8 FROM pg_stat_database \
             WHERE datname = current_database()",
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// Rows written, once every other backend of the database has gone (a backend flushes its
    /// counts on exit).
    pub(super) async fn rows_settled(&self) -> anyhow::Result<f64> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let others: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND pid <> pg_backend_pid()",
            )
            .fetch_one(&self.pool)
            .await?;
            if others == 0 || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // This connection's own counts reach the view at its next report.
        self.rows().await
    }

    /// CPU seconds of the server processes serving this database now (the backends of the
    /// run's processes: they live as long as their pools).
    async fn backends_cpu(&self) -> anyhow::Result<f64> {
        let pids: Vec<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
             AND pid <> pg_backend_pid()",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(pids
            .into_iter()
            .filter_map(|p| u32::try_from(p).ok())
            .filter_map(proc_cpu_seconds)
            .sum())
    }

    pub(super) async fn drop_database(self) {
        self.pool.close().await;
        if let Ok(pool) = sqlx::PgPool::connect(&self.admin).await {
            let _ = sqlx::query(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .execute(&pool)
            .await;
            pool.close().await;
        }
    }
}

/// A redis-server of the run's own (its `INFO commandstats` counts this run only).
pub(super) struct PrivateRedis {
    pub child: Child,
    pub url: String,
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PrivateRedis {
    pub(super) async fn start(dir: &Path) -> anyhow::Result<Option<PrivateRedis>> {
        let port = cluster::free_port()?;
        let Ok(child) = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        else {
            return Ok(None);
        };
        let redis = PrivateRedis {
            child,
            url: format!("redis://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if redis.commands().await.is_ok() {
                return Ok(Some(redis));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(None)
    }

    /// Commands served so far by command, `INFO` itself left out.
    async fn commands(&self) -> anyhow::Result<BTreeMap<String, f64>> {
        let client = redis::Client::open(self.url.as_str())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await?;
        Ok(info
            .lines()
            .filter_map(|l| l.strip_prefix("cmdstat_"))
            .filter_map(|l| {
                let (name, rest) = l.split_once(':')?;
                let calls = rest
                    .split_once("calls=")?
                    .1
                    .split(',')
                    .next()?
                    .parse()
                    .ok()?;
                Some((name.to_string(), calls))
            })
            .filter(|(name, _)| name != "info" && name != "hello")
            .collect())
    }
}

/// Clock ticks per second of `/proc` times.
fn clk_tck() -> f64 {
    static TCK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TCK.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// User + system CPU seconds of a process (its threads included).
pub(crate) fn proc_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields count from after its closing parenthesis.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clk_tck())
}

/// The host's busy and total CPU seconds, all cores (`/proc/stat`).
fn host_cpu_seconds() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<f64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: f64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0.0) + v.get(4).copied().unwrap_or(0.0);
    Some(((total - idle) / clk_tck(), total / clk_tck()))
}
