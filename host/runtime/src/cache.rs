//! The compiled-component cache on disk: `<cache dir>/<sha256>-<engine>.cwasm`, where `sha256`
//! is the component file's content hash and `engine` a digest of the engine's compatibility
//! hash (wasmtime version, compiler settings, target). A restart, or a reload of a file seen
//! before, maps native code instead of compiling it again.
//!
//! Entries are written to a temporary name and renamed into place, so a crash never leaves a
//! half-written entry under a real name. An entry that fails to deserialize (other engine, a
//! damaged file) is deleted and the component compiled again: the cache can only make loading
//! faster, never make it fail.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use anyhow::Context;
use wasmtime::Engine;
use wasmtime::component::Component;

/// A directory of precompiled components for one engine configuration.
#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: PathBuf,
    /// Hex digest of `Engine::precompile_compatibility_hash`: part of every entry's name, so
    /// entries of another wasmtime build or configuration are never even opened.
    engine_tag: String,
}

impl DiskCache {
    /// A cache in `dir` (created if missing) for code compiled by `engine`.
    pub fn open(dir: &Path, engine: &Engine) -> anyhow::Result<DiskCache> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the compiled-handler cache {}", dir.display()))?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(DiskCache {
            dir: dir.to_path_buf(),
            engine_tag: format!("{:016x}", hasher.finish()),
        })
    }

    /// The directory entries live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the entry for a component with this content hash lives.
    pub fn entry(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}-{}.cwasm", self.engine_tag))
    }

    /// The cached component, if there is a usable entry (blocking: call off the async runtime).
    pub fn load(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        let path = self.entry(sha256);
        if !path.is_file() {
            return None;
        }
        match deserialize(engine, &path) {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %format!("{e:#}"), "unusable compiled-handler cache entry; recompiling");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Store a compiled component (blocking). Failures are logged, never fatal.
    pub fn store(&self, sha256: &str, component: &Component) {
        if let Err(e) = self.store_inner(sha256, component) {
            tracing::warn!(dir = %self.dir.display(), error = %format!("{e:#}"), "could not write the compiled-handler cache");
        }
    }

    fn store_inner(&self, sha256: &str, component: &Component) -> anyhow::Result<()> {
        let bytes = component
            .serialize()
            .map_err(|e| anyhow::anyhow!("{e:#}"))
            .context("serializing the compiled component")?;
        let path = self.entry(sha256);
        let tmp = self.dir.join(format!(
            ".{sha256}-{}.{}.tmp",
            self.engine_tag,
            std::process::id()
        ));
        std::fs::write(&tmp, &bytes).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path)
            .with_context(|| format!("renaming {} into place", tmp.display()))?;
        Ok(())
    }
}

/// Map a cache entry as a component.
#[allow(unsafe_code)]
fn deserialize(engine: &Engine, path: &Path) -> anyhow::Result<Component> {
    // SAFETY: `deserialize_file` trusts the file to be native code wasmtime produced. Entries
    // are written only by `DiskCache::store` (from `Component::serialize` of this engine
    // configuration, renamed into place whole) in a directory as trusted as the database;
    // wasmtime itself checks the header and the engine's compatibility before mapping it.
    unsafe { Component::deserialize_file(engine, path) }.map_err(|e| anyhow::anyhow!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_damaged_ones_are_dropped() {
        let dir = tempfile::TempDir::new().expect("tmp");
        let engine = Engine::default();
        let cache = DiskCache::open(dir.path(), &engine).expect("cache opens");
        let component = Component::new(&engine, "(component)").expect("empty component");
        assert!(cache.load(&engine, "abc").is_none());
        cache.store("abc", &component);
        assert!(cache.entry("abc").is_file());
        assert!(cache.load(&engine, "abc").is_some());
        std::fs::write(cache.entry("abc"), b"not native code").expect("damage the entry");
        assert!(cache.load(&engine, "abc").is_none());
        assert!(!cache.entry("abc").exists(), "a damaged entry is deleted");
    }
}
