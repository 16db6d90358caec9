//! The object store where finalized artifacts live (docs/unit-journey.md): a local directory by
//! default (`file://./objects`), any S3-compatible store by URL (`s3://bucket/prefix`, with the
//! usual `AWS_*` environment for credentials, region and endpoint: AWS, MinIO, Qiniu Kodo).
//!
//! Artifacts are streamed from the provider into the store in parts: a whole video is never
//! held in memory. Size and sha256 are computed on the way through. Keys are deterministic, so a
//! repeated finalization overwrites rather than duplicates.

use std::sync::Arc;

use anyhow::{Context, bail};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, WriteMultipart};
use sha2::{Digest, Sha256};

/// Parts are uploaded in chunks of this size (S3's minimum part size is 5 MiB).
const PART_BYTES: usize = 8 * 1024 * 1024;

/// What was stored.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct StoredObject {
    pub object_key: String,
    pub bytes: u64,
    pub sha256: String,
}

/// Why storing failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreObjectError {
    #[error("artifact is larger than the {0}-byte limit")]
    TooLarge(u64),
    #[error("download failed: {0}")]
    Source(String),
    #[error("object store: {0}")]
    Sink(String),
}

/// A configured object store.
#[derive(Clone)]
pub struct Objects {
    store: Arc<dyn ObjectStore>,
    /// Key prefix within the store (the `prefix` of `s3://bucket/prefix`).
    prefix: String,
    /// The URL it was opened from, for display.
    pub url: String,
    /// For `file://` stores, the local directory (so the demo can say where files are).
    pub local_root: Option<std::path::PathBuf>,
}

impl Objects {
    /// Open the store a URL names.
    pub fn open(url: &str) -> anyhow::Result<Objects> {
        if let Some(rest) = url.strip_prefix("file://") {
            let dir = std::path::PathBuf::from(if rest.is_empty() { "." } else { rest });
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("object_store: creating {}", dir.display()))?;
            let abs = dir
                .canonicalize()
                .with_context(|| format!("object_store: {}", dir.display()))?;
            let fs = object_store::local::LocalFileSystem::new_with_prefix(&abs)
                .with_context(|| format!("object_store: opening {}", abs.display()))?;
            Ok(Objects {
                store: Arc::new(fs),
                prefix: String::new(),
                url: url.into(),
                local_root: Some(abs),
            })
        } else if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                bail!("object_store: {url:?} names no bucket (expected s3://bucket/prefix)");
            }
            let s3 = object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .build()
                .with_context(|| format!("object_store: configuring S3 for {url:?}"))?;
            Ok(Objects {
                store: Arc::new(s3),
                prefix: prefix.trim_matches('/').to_string(),
                url: url.into(),
                local_root: None,
            })
        } else {
            bail!("object_store: {url:?} is neither file://DIR nor s3://bucket/prefix")
        }
    }

    fn full_key(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}/{key}", self.prefix)
        }
    }

    /// Stream `body` into `key`, at most `max_bytes`, computing size and sha256.
    pub async fn put_stream<S, E>(
        &self,
        key: &str,
        body: S,
        max_bytes: u64,
    ) -> Result<StoredObject, StoreObjectError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let full = self.full_key(key);
        let path = ObjectPath::parse(&full).map_err(|e| StoreObjectError::Sink(e.to_string()))?;
        let upload = self
            .store
            .put_multipart(&path)
            .await
            .map_err(|e| StoreObjectError::Sink(e.to_string()))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        let mut hasher = Sha256::new();
        let mut total: u64 = 0;
        let mut body = body;
        let result: Result<(), StoreObjectError> = async {
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| StoreObjectError::Source(e.to_string()))?;
                total += chunk.len() as u64;
                if total > max_bytes {
                    return Err(StoreObjectError::TooLarge(max_bytes));
                }
                hasher.update(&chunk);
                // Back-pressure: wait while too many parts are in flight.
                writer
                    .wait_for_capacity(2)
                    .await
                    .map_err(|e| StoreObjectError::Sink(e.to_string()))?;
                // The chunk itself joins the part (`write` would copy it into the part's
                // own buffer, a copy and a few allocations per chunk).
                writer.put(chunk);
            }
            Ok(())
        }
        .await;
        match result {
            Ok(()) => {
                writer
                    .finish()
                    .await
                    .map_err(|e| StoreObjectError::Sink(e.to_string()))?;
                Ok(StoredObject {
                    object_key: full,
                    bytes: total,
                    sha256: hex::encode(hasher.finalize()),
                })
            }
            Err(e) => {
                writer.abort().await.ok();
                Err(e)
            }
        }
    }

    /// A stored object as a stream of chunks (large files: never whole in memory).
    pub async fn get_stream(
        &self,
        object_key: &str,
    ) -> anyhow::Result<futures::stream::BoxStream<'static, object_store::Result<Bytes>>> {
        let path =
            ObjectPath::parse(object_key).with_context(|| format!("object key {object_key:?}"))?;
        let got = self
            .store
            .get(&path)
            .await
            .with_context(|| format!("reading {object_key}"))?;
        Ok(got.into_stream())
    }

    /// Read a whole stored object (tests and small files only).
    pub async fn get_bytes(&self, object_key: &str) -> anyhow::Result<Bytes> {
        let path =
            ObjectPath::parse(object_key).with_context(|| format!("object key {object_key:?}"))?;
        let got = self
            .store
            .get(&path)
            .await
            .with_context(|| format!("reading {object_key}"))?;
        Ok(got.bytes().await?)
    }
}

/// The deterministic key of a unit's artifact: a repeat overwrites the same object.
pub fn artifact_key(tenant: &str, task_id: &str, index: u32, name: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let name = clean(name);
    let name = if name.trim_matches('.').is_empty() {
        "artifact".to_string()
    } else {
        name
    };
    format!("{}/{}/{:04}/{}", clean(tenant), clean(task_id), index, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn streams_into_a_local_dir_with_size_and_hash() {
        let dir = tempfile::TempDir::new().expect("tmp");
        let objects = Objects::open(&format!("file://{}", dir.path().display())).expect("open");
        let parts: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"hello ")),
            Ok(Bytes::from_static(b"world")),
        ];
        let stored = objects
            .put_stream("t/a/0000/x.bin", futures::stream::iter(parts), 1024)
            .await
            .expect("stored");
        assert_eq!(stored.bytes, 11);
        assert_eq!(stored.sha256, hex::encode(Sha256::digest(b"hello world")));
        assert_eq!(
            std::fs::read(dir.path().join("t/a/0000/x.bin")).expect("file"),
            b"hello world"
        );
        // A repeat overwrites.
        let again: Vec<Result<Bytes, std::io::Error>> = vec![Ok(Bytes::from_static(b"v2"))];
        objects
            .put_stream("t/a/0000/x.bin", futures::stream::iter(again), 1024)
            .await
            .expect("stored");
        assert_eq!(
            objects
                .get_bytes("t/a/0000/x.bin")
                .await
                .expect("read")
                .as_ref(),
            b"v2"
        );
    }

    #[tokio::test]
    async fn size_cap_aborts_without_leaving_a_file() {
        let dir = tempfile::TempDir::new().expect("tmp");
        let objects = Objects::open(&format!("file://{}", dir.path().display())).expect("open");
        let parts: Vec<Result<Bytes, std::io::Error>> = vec![Ok(Bytes::from(vec![0u8; 2048]))];
        let err = objects
            .put_stream("k/big.bin", futures::stream::iter(parts), 1024)
            .await
            .expect_err("too large");
        assert!(matches!(err, StoreObjectError::TooLarge(1024)));
        assert!(!dir.path().join("k/big.bin").exists());
    }

    #[test]
    fn keys_are_deterministic_and_safe() {
        assert_eq!(
            artifact_key("team a", "t1", 7, "video.mp4"),
            "team_a/t1/0007/video.mp4"
        );
        assert_eq!(artifact_key("a", "t", 0, "../../etc"), "a/t/0000/.._.._etc");
        assert_eq!(artifact_key("a", "t", 0, ".."), "a/t/0000/artifact");
    }

    #[test]
    fn bad_urls_are_named() {
        let e = Objects::open("ftp://x")
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        assert!(e.contains("ftp://x"), "{e}");
    }
}
