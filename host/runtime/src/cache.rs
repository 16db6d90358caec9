//! The compiled-component cache on disk: `<cache dir>/<sha256>-<engine>.cwasm`, where `sha256`
//! is the component file's content hash and `engine` a digest of the engine's compatibility
//! hash (wasmtime version, compiler settings, target). A restart, or a reload of a file seen
//! before, maps native code instead of compiling it again.
//!
//! Entries are written to a temporary name and renamed into place, so a crash never leaves a
//! half-written entry under a real name. An entry that fails to deserialize (other engine, a
//! damaged file) is deleted and the component compiled again: the cache can only make loading
//! faster, never make it fail.
//!
//! The runtime's two engines (the pooling one and the on-demand fallback, `engine.rs`) share
//! one compile configuration: the instance allocator is not part of compiled code nor of the
//! compatibility hash, so one entry serves both, and which engine a component runs on is
//! decided each time it is placed (`Shared::place`), never stored.

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
        self.load_with(sha256, |artifact| artifact.deserialize(engine))
    }

    /// The cached compiled code for this content hash, as `place` makes it (blocking). An entry
    /// `place` refuses (a damaged file, another engine's code) is deleted: compile again.
    pub(crate) fn load_with<T>(
        &self,
        sha256: &str,
        place: impl FnOnce(Artifact<'_>) -> anyhow::Result<T>,
    ) -> Option<T> {
        let path = self.entry(sha256);
        if !path.is_file() {
            return None;
        }
        match place(Artifact::File(&path)) {
            Ok(placed) => Some(placed),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %format!("{e:#}"), "unusable compiled-handler cache entry; recompiling");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Store a compiled component (blocking). Failures are logged, never fatal.
    pub fn store(&self, sha256: &str, component: &Component) {
        match component.serialize() {
            Ok(bytes) => self.store_bytes(sha256, &bytes),
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "could not serialize a compiled handler for the cache");
            }
        }
    }

    /// Store compiled code as `Engine::precompile_component` made it (blocking). Failures are
    /// logged, never fatal.
    pub(crate) fn store_bytes(&self, sha256: &str, bytes: &[u8]) {
        if let Err(e) = self.store_inner(sha256, bytes) {
            tracing::warn!(dir = %self.dir.display(), error = %format!("{e:#}"), "could not write the compiled-handler cache");
        }
    }

    fn store_inner(&self, sha256: &str, bytes: &[u8]) -> anyhow::Result<()> {
        let path = self.entry(sha256);
        let tmp = self.dir.join(format!(
            ".{sha256}-{}.{}.tmp",
            self.engine_tag,
            std::process::id()
        ));
        std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path)
            .with_context(|| format!("renaming {} into place", tmp.display()))?;
        Ok(())
    }
}

/// Compiled code of one component, ready to become a [`Component`] of an engine with the compile
/// configuration it was made with. Only this crate makes them, from code it compiled itself.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Artifact<'a> {
    /// In memory, straight from `Engine::precompile_component` or `Component::serialize`.
    Bytes(&'a [u8]),
    /// A cache entry ([`DiskCache::entry`]).
    File(&'a Path),
}

impl Artifact<'_> {
    /// This code as a component of `engine`. Fails when the code does not fit the engine: a
    /// damaged entry, another compile configuration, or (the pooling engine) a component
    /// larger than a pool slot.
    #[allow(unsafe_code)]
    pub(crate) fn deserialize(self, engine: &Engine) -> anyhow::Result<Component> {
        let component = match self {
            // SAFETY: `deserialize` trusts the bytes to be native code wasmtime produced. These
            // come from `Engine::precompile_component` or `Component::serialize` in this
            // process (see `Artifact::Bytes`), never from outside it; wasmtime itself checks
            // the header and the engine's compatibility.
            Artifact::Bytes(bytes) => unsafe { Component::deserialize(engine, bytes) },
            // SAFETY: `deserialize_file` trusts the file to be native code wasmtime produced.
            // Entries are written only by `DiskCache::store_inner` (compiled code of this
            // compile configuration, renamed into place whole) in a directory as trusted as
            // the database; wasmtime itself checks the header and the engine's compatibility
            // before mapping it.
            Artifact::File(path) => unsafe { Component::deserialize_file(engine, path) },
        };
        component.map_err(|e| anyhow::anyhow!("{e:#}"))
    }
}

/// `component` as a component of `engine`, which has the same compile configuration (the
/// on-demand twin of the pooling engine): its code serialized and mapped again (blocking).
pub(crate) fn rehome(component: &Component, engine: &Engine) -> anyhow::Result<Component> {
    let bytes = component
        .serialize()
        .map_err(|e| anyhow::anyhow!("{e:#}"))
        .context("serializing the compiled component")?;
    Artifact::Bytes(&bytes).deserialize(engine)
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
