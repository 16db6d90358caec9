//! Reading the rows `slotd check` needs, read-only, from either backend. The SQL is the same
//! for both dialects (no parameters, casts to BIGINT so both decode as `i64`); only the
//! connection differs: SQLite opens the file with `mode=ro`, PostgreSQL runs the reads in a
//! read-only transaction, so a check can never change what it inspects.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context;
use sha2::{Digest, Sha256};
use sqlx::Row;

use super::rows::{EventRow, ReleaseRow, Snapshot, UnitRow};

const TASKS_SQL: &str = "SELECT id FROM tasks ORDER BY seq";
const UNITS_SQL: &str = "SELECT id, task_id, CAST(idx AS BIGINT) AS idx, pool, stage, status, \
     provider_job_id, lease_owner, CAST(lease_until AS BIGINT) AS lease_until, result, account, \
     CAST(submit_attempt AS BIGINT) AS submit_attempt, \
     CAST(submitted_at AS BIGINT) AS submitted_at FROM units ORDER BY task_id, idx";
const EVENTS_SQL: &str = "SELECT CAST(id AS BIGINT) AS id, unit_id, CAST(at AS BIGINT) AS at, \
     from_status, to_status, detail FROM unit_events ORDER BY unit_id, id";
const SUBMITTED_SQL: &str = "SELECT id, pool, account, \
     CAST(COALESCE(submitted_at, 0) AS BIGINT) AS submitted_at FROM units WHERE status = 'submitted'";
const RESERVATIONS_SQL: &str = "SELECT unit_id, submission FROM budget_ledger \
     WHERE settled_at IS NULL ORDER BY unit_id, submission";
const CREATES_SQL: &str =
    "SELECT pool, account, CAST(at AS BIGINT) AS at FROM pool_creates ORDER BY at";
const FENCES_SQL: &str = "SELECT pool, CAST(token AS BIGINT) AS token FROM pool_fences";
const RELEASES_SQL: &str =
    "SELECT sha256, name, version, bytes FROM handler_releases ORDER BY sha256";

/// Rows of both backends decode the same way; this macro runs one closure body per backend
/// instead of writing it twice.
macro_rules! rows {
    ($conn:expr, $sql:expr, |$row:ident| $body:expr) => {{
        match $conn {
            Conn::Sqlite(c) => sqlx::query($sql)
                .fetch_all(&mut **c)
                .await?
                .iter()
                .map(|$row| $body)
                .collect::<Result<Vec<_>, sqlx::Error>>()?,
            Conn::Postgres(c) => sqlx::query($sql)
                .fetch_all(&mut **c)
                .await?
                .iter()
                .map(|$row| $body)
                .collect::<Result<Vec<_>, sqlx::Error>>()?,
        }
    }};
}

/// A read transaction: every query of one check sees the same snapshot, so a unit that moves
/// while the check reads cannot look like a unit whose log disagrees with its status.
enum Conn {
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
}

/// Read tasks, units, events and fences of the database `url` names.
pub async fn snapshot(url: &str) -> anyhow::Result<Snapshot> {
    let shown = slotd_core::redact::redact_url(url);
    let mut conn = connect(url)
        .await
        .with_context(|| format!("connecting to {shown}"))?;
    read_all(&mut conn)
        .await
        .with_context(|| format!("reading {shown}"))
}

/// The slot names ([`slotd_coord::slots::holder`]) of the submissions of slot set `slot_key`'s
/// `submitted` units now (a second look after a difference).
pub async fn submitted_holders(url: &str, slot_key: &str) -> anyhow::Result<BTreeSet<String>> {
    let mut conn = connect(url)
        .await
        .with_context(|| format!("connecting to {}", slotd_core::redact::redact_url(url)))?;
    let rows: Vec<(String, String, Option<String>, i64)> =
        rows!(&mut conn, SUBMITTED_SQL, |r| Ok::<_, sqlx::Error>((
            r.try_get::<String, _>("id")?,
            r.try_get::<String, _>("pool")?,
            r.try_get::<Option<String>, _>("account")?,
            r.try_get::<i64, _>("submitted_at")?
        )));
    Ok(rows
        .into_iter()
        .filter(|(_, p, a, _)| slotd_pools::pool_state::slot_key(p, a.as_deref()) == slot_key)
        .map(|(id, _, _, at)| slotd_coord::slots::holder(&id, at))
        .collect())
}

async fn connect(url: &str) -> anyhow::Result<Conn> {
    if url.starts_with("sqlite:") {
        let opts: sqlx::sqlite::SqliteConnectOptions = url.parse()?;
        // Read-only and never created: checking a database that is not there is an error.
        let opts = opts.read_only(true).create_if_missing(false);
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts)
            .await?;
        // WAL: a deferred transaction's reads share the snapshot its first read takes.
        Ok(Conn::Sqlite(pool.begin().await?))
    } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(url)
            .await?;
        let mut tx = pool.begin().await?;
        // One snapshot for every query, and no write can slip in.
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        Ok(Conn::Postgres(tx))
    } else {
        anyhow::bail!("expected a sqlite:// or postgres:// URL")
    }
}

async fn read_all(conn: &mut Conn) -> anyhow::Result<Snapshot> {
    let tasks: Vec<String> = rows!(conn, TASKS_SQL, |r| r.try_get::<String, _>("id"));
    let units: Vec<UnitRow> = rows!(conn, UNITS_SQL, |r| Ok::<_, sqlx::Error>(UnitRow {
        id: r.try_get("id")?,
        task_id: r.try_get("task_id")?,
        idx: r.try_get("idx")?,
        pool: r.try_get("pool")?,
        stage: r.try_get("stage")?,
        status: r.try_get("status")?,
        provider_job_id: r.try_get("provider_job_id")?,
        lease_owner: r.try_get("lease_owner")?,
        lease_until: r.try_get("lease_until")?,
        result: r.try_get("result")?,
        account: r.try_get("account")?,
        submit_attempt: r.try_get("submit_attempt")?,
        submitted_at: r.try_get("submitted_at")?,
    }));
    let events: Vec<(String, EventRow)> = rows!(conn, EVENTS_SQL, |r| Ok::<_, sqlx::Error>((
        r.try_get::<String, _>("unit_id")?,
        EventRow {
            id: r.try_get("id")?,
            at: r.try_get("at")?,
            from_status: r.try_get("from_status")?,
            to_status: r.try_get("to_status")?,
            detail: r.try_get("detail")?,
        }
    )));
    let fences: Vec<(String, i64)> = rows!(conn, FENCES_SQL, |r| Ok::<_, sqlx::Error>((
        r.try_get::<String, _>("pool")?,
        r.try_get::<i64, _>("token")?
    )));
    let open_reservations: Vec<(String, String)> =
        rows!(conn, RESERVATIONS_SQL, |r| Ok::<_, sqlx::Error>((
            r.try_get::<String, _>("unit_id")?,
            r.try_get::<String, _>("submission")?
        )));
    let creates: Vec<(String, Option<String>, i64)> =
        rows!(conn, CREATES_SQL, |r| Ok::<_, sqlx::Error>((
            r.try_get::<String, _>("pool")?,
            r.try_get::<Option<String>, _>("account")?,
            r.try_get::<i64, _>("at")?
        )));
    // Each release's bytes are hashed as they are read and not kept: a check holds one file
    // at a time.
    let releases: Vec<ReleaseRow> =
        rows!(conn, RELEASES_SQL, |r| Ok::<_, sqlx::Error>(ReleaseRow {
            sha256: r.try_get("sha256")?,
            name: r.try_get("name")?,
            version: r.try_get("version")?,
            content_sha256: hex::encode(Sha256::digest(r.try_get::<Vec<u8>, _>("bytes")?)),
        }));
    let mut by_unit: BTreeMap<String, Vec<EventRow>> = BTreeMap::new();
    for (unit, e) in events {
        by_unit.entry(unit).or_default().push(e);
    }
    Ok(Snapshot {
        tasks,
        units,
        events: by_unit,
        fences: fences.into_iter().collect(),
        open_reservations,
        creates,
        releases,
    })
}
