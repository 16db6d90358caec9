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
    pub now: i64,
}

/// A release as listed: everything but its bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
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

const RELEASE_COLS: &str = "sha256, name, version, contract, size, published_by, published_at";

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
        })
    }

    /// See [`crate::RecordWrite::release_put`].
    pub(crate) async fn release_put(pool: &Pool, r: &NewRelease) -> StoreResult<Published> {
        let sha256 = release_key(&r.bytes);
        let size = i64::try_from(r.bytes.len()).unwrap_or(i64::MAX);
        let inserted = sqlx::query(
            "INSERT INTO handler_releases \
             (sha256, name, version, contract, size, bytes, published_by, published_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
        )
        .bind(&sha256)
        .bind(&r.name)
        .bind(&r.version)
        .bind(&r.contract)
        .bind(size)
        .bind(&r.bytes)
        .bind(&r.published_by)
        .bind(r.now)
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
}
