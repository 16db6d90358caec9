//! Handler releases: a handler file published once and kept in the database, where every
//! process of a cluster can read it (migrations: 0016 on SQLite, 0017 on PostgreSQL).
//! Content-addressed: the store computes the sha256 of the bytes it is given, so a release's
//! key always names its content, and the same file published twice is stored once. A handler's version names one file: publishing a
//! different file under a version already published is refused, never a replacement.

use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::Row;

use crate::StoreResult;
use crate::shared::on_both_drivers;

/// A handler file to publish (`RecordWrite::release_put`), already checked by the runtime
/// (contract, names, size, compile).
#[derive(Clone, Debug)]
pub struct NewRelease {
    /// The handler name the file declares.
    pub name: String,
    /// The version the file declares.
    pub version: String,
    /// The handler contract version it was checked against.
    pub contract: String,
    /// The component.
    pub bytes: Vec<u8>,
    /// Who published it: an API key's tenant, or the plugins directory.
    pub published_by: String,
    /// See [`Release::takes_over`].
    pub takes_over: bool,
    /// It becomes its handler's current release at once; false for the candidate of a staged
    /// rollout, which becomes current only when promoted.
    pub current: bool,
    pub now: i64,
}

/// A release as listed: everything but its bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Release {
    /// Hex sha256 of the bytes: the release's key.
    pub sha256: String,
    pub name: String,
    pub version: String,
    pub contract: String,
    /// The file's size in bytes.
    pub size: i64,
    pub published_by: String,
    /// Unix ms.
    pub published_at: i64,
    /// When it last became its handler's current release (Unix ms): at publishing, or when
    /// the plugins directory saw its file change (see [`current_releases`]).
    pub promoted_at: i64,
    /// Published as able to take over the jobs of the releases before it: they move to it
    /// at once instead of finishing on the release that created them.
    pub takes_over: bool,
    /// When it was withdrawn (its file removed from the plugins directory), if it was: a
    /// withdrawn release is no handler's current one until promoted again.
    pub withdrawn_at: Option<i64>,
    pub withdrawn_reason: Option<String>,
}

/// Each handler's current release in `releases`: the most recently promoted one not withdrawn
/// (ties: the later published, then the greater sha256, so every process picks the same).
pub fn current_releases(releases: &[Release]) -> std::collections::BTreeMap<String, &Release> {
    let mut current: std::collections::BTreeMap<String, &Release> = Default::default();
    for r in releases.iter().filter(|r| r.withdrawn_at.is_none()) {
        let key = |r: &Release| (r.promoted_at, r.published_at, r.sha256.clone());
        match current.get(&r.name) {
            Some(c) if key(c) >= key(r) => {}
            _ => {
                current.insert(r.name.clone(), r);
            }
        }
    }
    current
}

/// What publishing did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Published {
    /// Stored as a new release with this sha256.
    New(String),
    /// This very file was published before (same sha256): nothing changed.
    Already(String),
    /// The handler's version is already published as another file (its sha256 given):
    /// nothing changed. A new build needs a new version.
    VersionTaken {
        name: String,
        version: String,
        sha256: String,
    },
}

/// The hex sha256 of `bytes`: a release's key.
pub fn release_key(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

const RELEASE_COLS: &str = "sha256, name, version, contract, size, published_by, published_at, \
     COALESCE(promoted_at, published_at) AS promoted_at, withdrawn_at, withdrawn_reason, \
     takes_over";

on_both_drivers! {
    fn release_from_row(row: &DbRow) -> StoreResult<Release> {
        Ok(Release {
            sha256: row.try_get("sha256")?,
            name: row.try_get("name")?,
            version: row.try_get("version")?,
            contract: row.try_get("contract")?,
            size: row.try_get("size")?,
            published_by: row.try_get("published_by")?,
            published_at: row.try_get("published_at")?,
            promoted_at: row.try_get("promoted_at")?,
            takes_over: row.try_get("takes_over")?,
            withdrawn_at: row.try_get("withdrawn_at")?,
            withdrawn_reason: row.try_get("withdrawn_reason")?,
        })
    }

    /// See [`crate::RecordWrite::release_put`].
    pub(crate) async fn release_put(pool: &Pool, r: &NewRelease) -> StoreResult<Published> {
        let sha256 = release_key(&r.bytes);
        let size = i64::try_from(r.bytes.len()).unwrap_or(i64::MAX);
        let inserted = sqlx::query(
            "INSERT INTO handler_releases \
             (sha256, name, version, contract, size, bytes, published_by, published_at, \
              promoted_at, takes_over) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $10 THEN $8 ELSE 0 END, $9) \
             ON CONFLICT DO NOTHING",
        )
        .bind(&sha256)
        .bind(&r.name)
        .bind(&r.version)
        .bind(&r.contract)
        .bind(size)
        .bind(&r.bytes)
        .bind(&r.published_by)
        .bind(r.now)
        .bind(r.takes_over)
        .bind(r.current)
        .execute(pool)
        .await?
        .rows_affected();
        if inserted == 1 {
            return Ok(Published::New(sha256));
        }
        // Not inserted: either this file is there, or the version names another one.
        let same: Option<String> =
            sqlx::query_scalar("SELECT sha256 FROM handler_releases WHERE sha256 = $1")
                .bind(&sha256)
                .fetch_optional(pool)
                .await?;
        if same.is_some() {
            return Ok(Published::Already(sha256));
        }
        let taken: Option<String> = sqlx::query_scalar(
            "SELECT sha256 FROM handler_releases WHERE name = $1 AND version = $2",
        )
        .bind(&r.name)
        .bind(&r.version)
        .fetch_optional(pool)
        .await?;
        match taken {
            Some(other) => Ok(Published::VersionTaken {
                name: r.name.clone(),
                version: r.version.clone(),
                sha256: other,
            }),
            None => Err(crate::StoreError::Corrupt(format!(
                "release {sha256} of {} {} was neither stored nor found",
                r.name, r.version
            ))),
        }
    }

    /// See [`crate::RecordWrite::release_promote`].
    pub(crate) async fn release_promote(pool: &Pool, sha256: &str, now: i64) -> StoreResult<bool> {
        Ok(sqlx::query(
            "UPDATE handler_releases SET promoted_at = $2, withdrawn_at = NULL, \
             withdrawn_reason = NULL WHERE sha256 = $1",
        )
        .bind(sha256)
        .bind(now)
        .execute(pool)
        .await?
        .rows_affected()
            == 1)
    }

    /// See [`crate::RecordWrite::release_withdraw`].
    pub(crate) async fn release_withdraw(
        pool: &Pool,
        name: &str,
        published_by: &str,
        reason: &str,
        now: i64,
    ) -> StoreResult<Vec<String>> {
        let rows = sqlx::query(
            "UPDATE handler_releases SET withdrawn_at = $4, withdrawn_reason = $3 \
             WHERE name = $1 AND published_by = $2 AND withdrawn_at IS NULL RETURNING sha256",
        )
        .bind(name)
        .bind(published_by)
        .bind(reason)
        .bind(now)
        .fetch_all(pool)
        .await?;
        rows.iter().map(|r| Ok(r.try_get("sha256")?)).collect()
    }

    /// See [`crate::StoreRead::release_get`].
    pub(crate) async fn release_get(
        pool: &Pool,
        sha256: &str,
    ) -> StoreResult<Option<(Release, Vec<u8>)>> {
        let row = sqlx::query(&format!(
            "SELECT {RELEASE_COLS}, bytes FROM handler_releases WHERE sha256 = $1"
        ))
        .bind(sha256)
        .fetch_optional(pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let release = release_from_row(&row)?;
        let bytes: Vec<u8> = row.try_get("bytes")?;
        // The key names the content: bytes that no longer hash to it are damaged.
        if release_key(&bytes) != release.sha256 {
            return Err(crate::StoreError::Corrupt(format!(
                "release {} of {} {}: its stored bytes no longer hash to its key",
                release.sha256, release.name, release.version
            )));
        }
        Ok(Some((release, bytes)))
    }

    /// See [`crate::StoreRead::release_list`].
    pub(crate) async fn release_list(
        pool: &Pool,
        name: Option<&str>,
    ) -> StoreResult<Vec<Release>> {
        let rows = sqlx::query(&format!(
            "SELECT {RELEASE_COLS} FROM handler_releases \
             WHERE CAST($1 AS TEXT) IS NULL OR name = $1 \
             ORDER BY published_at DESC, sha256"
        ))
        .bind(name)
        .fetch_all(pool)
        .await?;
        rows.iter().map(release_from_row).collect()
    }
    fn load_from_row(row: &DbRow) -> StoreResult<HandlerLoad> {
        Ok(HandlerLoad {
            process: row.try_get("process")?,
            role: row.try_get("role")?,
            sha256: row.try_get("sha256")?,
            name: row.try_get("name")?,
            version: row.try_get("version")?,
            state: row.try_get("state")?,
            reason: row.try_get("reason")?,
            at: row.try_get("at")?,
        })
    }

    /// See [`crate::RecordWrite::handler_load_put`].
    pub(crate) async fn handler_load_put(
        pool: &Pool,
        follower: &ReleaseFollower,
        loads: &[HandlerLoad],
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO handler_processes (process, role, at) VALUES ($1, $2, $3) \
             ON CONFLICT (process) DO UPDATE SET role = excluded.role, at = excluded.at",
        )
        .bind(&follower.process)
        .bind(&follower.role)
        .bind(follower.last_seen)
        .execute(pool)
        .await?;
        for l in loads {
            sqlx::query(&format!(
                "INSERT INTO handler_loads ({LOAD_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                 ON CONFLICT (process, sha256) DO UPDATE SET role = excluded.role, \
                 name = excluded.name, version = excluded.version, state = excluded.state, \
                 reason = excluded.reason, at = excluded.at"
            ))
            .bind(&l.process)
            .bind(&l.role)
            .bind(&l.sha256)
            .bind(&l.name)
            .bind(&l.version)
            .bind(&l.state)
            .bind(&l.reason)
            .bind(l.at)
            .execute(pool)
            .await?;
        }
        Ok(())
    }

    /// See [`crate::StoreRead::handler_load_list`].
    pub(crate) async fn handler_load_list(pool: &Pool, since: i64) -> StoreResult<Vec<HandlerLoad>> {
        let rows = sqlx::query(&format!(
            "SELECT {LOAD_COLS} FROM handler_loads WHERE at >= $1 ORDER BY process, name, at DESC"
        ))
        .bind(since)
        .fetch_all(pool)
        .await?;
        rows.iter().map(load_from_row).collect()
    }

    /// See [`crate::StoreRead::unit_job_releases`].
    pub(crate) async fn unit_job_releases(pool: &Pool) -> StoreResult<Vec<(String, i64)>> {
        let rows = sqlx::query(
            "SELECT job_release, COUNT(*) AS jobs FROM units \
             WHERE status IN ('submitted', 'succeeded', 'finalizing') \
               AND job_release IS NOT NULL \
             GROUP BY job_release ORDER BY job_release",
        )
        .fetch_all(pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("job_release")?, r.try_get("jobs")?)))
            .collect()
    }

    /// See [`crate::StoreRead::handler_process_list`].
    pub(crate) async fn handler_process_list(
        pool: &Pool,
        since: i64,
    ) -> StoreResult<Vec<ReleaseFollower>> {
        let rows = sqlx::query(
            "SELECT process, role, at FROM handler_processes WHERE at >= $1 ORDER BY process",
        )
        .bind(since)
        .fetch_all(pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ReleaseFollower {
                    process: row.try_get("process")?,
                    role: row.try_get("role")?,
                    last_seen: row.try_get("at")?,
                })
            })
            .collect()
    }

    /// See [`crate::RecordWrite::handler_load_prune`].
    pub(crate) async fn handler_load_prune(pool: &Pool, before: i64) -> StoreResult<u64> {
        let loads = sqlx::query("DELETE FROM handler_loads WHERE at < $1")
            .bind(before)
            .execute(pool)
            .await?
            .rows_affected();
        let processes = sqlx::query("DELETE FROM handler_processes WHERE at < $1")
            .bind(before)
            .execute(pool)
            .await?
            .rows_affected();
        Ok(loads + processes)
    }
}

/// One process's word on one release (`RecordWrite::handler_load_put`): `GET /v1/handlers`
/// shows, per process, what it runs and what it could not load.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct HandlerLoad {
    /// The process: host, pid and a random suffix (new at each start).
    pub process: String,
    /// `api`, `scheduler` or `all`.
    pub role: String,
    pub sha256: String,
    pub name: String,
    pub version: String,
    /// `loaded` (serving), `draining` (replaced, kept for the provider jobs it created),
    /// `unloaded` or `failed` (see `reason`).
    pub state: String,
    pub reason: Option<String>,
    /// Unix ms of the process's last word on it: it rewrites its rows at every look at the
    /// releases, so an old `at` means the process has gone.
    pub at: i64,
}

/// A process following the releases, and when it last looked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ReleaseFollower {
    pub process: String,
    /// `api`, `scheduler` or `all`.
    pub role: String,
    /// Unix ms of its last look at the releases.
    pub last_seen: i64,
}

const LOAD_COLS: &str = "process, role, sha256, name, version, state, reason, at";
