//! Handler names belong to files: who may serve `[handlers.X]` (its allowlist, its secrets).
//!
//! The rule, checked by the registry before a loaded file is swapped in:
//! - **Pinned**: `[handlers.X] file = "x.wasm"` (and optionally `sha256 = "…"`): only that file
//!   in the plugins directory (with that content) may serve X; anything else declaring X is
//!   refused with a reason naming the pin.
//! - **First come**: otherwise X belongs to the file that first served it. Reloading that same
//!   file (hot reload, a new version) keeps working; another file declaring X is refused with a
//!   reason naming both files, and the owner keeps serving.
//! - **Released**: when the owning file is removed, X is free again and the next file that
//!   declares it takes it. Files refused earlier for declaring X are tried again at their next
//!   change or the watcher's next rescan (`RESCAN_DEFAULT`, 30 s), in file-name order. A
//!   quarantined version does not release the name: the file still owns it.
//! - **Across restarts**: owners are restored from the `handler_versions` history before the
//!   plugins directory is loaded, so a file sorting first at start-up cannot take a name it did
//!   not own. An owner whose file is gone by then is released. With no history yet (a first
//!   start with two files declaring one name), the first in file-name order wins: pin the
//!   handler where that matters. Paths are compared as written, so instances sharing a database
//!   should share the plugins directory's path too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use slotd_core::config::HandlerConfig;
use slotd_store::HandlerVersionRow;

/// Rows of history read to restore owners at start-up (newest first).
pub(crate) const HISTORY_ROWS_READ: u32 = 10_000;

/// The reason recorded when a handler's file is removed; restoring owners reads it back.
pub(crate) fn removed_reason(path: &Path) -> String {
    format!("file {} removed", path.display())
}

/// Whether `path` (content `sha256`) may serve handler `name`; the error is the refusal reason.
pub(crate) fn check_claim(
    owners: &BTreeMap<String, PathBuf>,
    config: Option<&HandlerConfig>,
    name: &str,
    path: &Path,
    sha256: &str,
) -> Result<(), String> {
    if let Some(pinned) = config.and_then(|c| c.file.as_deref()) {
        let file = path.file_name().map(|f| f.to_string_lossy());
        if file.as_deref() != Some(pinned) {
            return Err(format!(
                "handler {name:?} is pinned to file {pinned} by handlers.{name}.file; {} may not \
                 serve it",
                path.display()
            ));
        }
        if let Some(want) = config.and_then(|c| c.sha256.as_deref())
            && !want.eq_ignore_ascii_case(sha256)
        {
            return Err(format!(
                "handler {name:?} is pinned by handlers.{name}.sha256 to content {want}; {} has \
                 sha256 {sha256}",
                path.display()
            ));
        }
        return Ok(());
    }
    match owners.get(name) {
        Some(owner) if owner != path => Err(format!(
            "handler {name:?} belongs to {}, the file that first served it; {} declares the same \
             name and may not take over its configuration (remove one of the files, or pin the \
             handler with [handlers.{name}] file = \"…\")",
            owner.display(),
            path.display()
        )),
        _ => Ok(()),
    }
}

/// The owners recorded by a history (rows newest first): for each name, the newest row that
/// decides it wins: `active` makes its file the owner; `unloaded` because the file was removed
/// frees the name; other rows (refusals, quarantines, replacements) decide nothing. Owners
/// whose file no longer exists are left out.
pub(crate) fn owners_from_history(rows: &[HandlerVersionRow]) -> BTreeMap<String, PathBuf> {
    let mut decided: BTreeMap<String, Option<PathBuf>> = BTreeMap::new();
    for row in rows {
        let Some(name) = &row.name else { continue };
        if decided.contains_key(name) {
            continue;
        }
        let path = PathBuf::from(&row.path);
        match row.state.as_str() {
            "active" => {
                decided.insert(name.clone(), Some(path));
            }
            "unloaded" if row.reason.as_deref() == Some(removed_reason(&path).as_str()) => {
                decided.insert(name.clone(), None);
            }
            _ => {}
        }
    }
    decided
        .into_iter()
        .filter_map(|(name, owner)| owner.filter(|p| p.is_file()).map(|p| (name, p)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, path: &Path, state: &str, reason: Option<String>) -> HandlerVersionRow {
        HandlerVersionRow {
            id: 0,
            at: 0,
            path: path.display().to_string(),
            name: Some(name.into()),
            version: Some("1".into()),
            sha256: "00".into(),
            state: state.into(),
            reason,
        }
    }

    #[test]
    fn the_first_file_owns_the_name_unless_pinned() {
        let owners = BTreeMap::from([("kv".to_string(), PathBuf::from("/p/kv.wasm"))]);
        assert!(check_claim(&owners, None, "kv", Path::new("/p/kv.wasm"), "aa").is_ok());
        let err =
            check_claim(&owners, None, "kv", Path::new("/p/copy.wasm"), "aa").expect_err("refused");
        assert!(
            err.contains("/p/kv.wasm") && err.contains("/p/copy.wasm"),
            "{err}"
        );
        assert!(check_claim(&owners, None, "other", Path::new("/p/copy.wasm"), "aa").is_ok());

        let pin = HandlerConfig {
            file: Some("copy.wasm".into()),
            sha256: Some("ab".repeat(32)),
            ..HandlerConfig::default()
        };
        let good = "AB".repeat(32);
        assert!(check_claim(&owners, Some(&pin), "kv", Path::new("/p/copy.wasm"), &good).is_ok());
        let err = check_claim(&owners, Some(&pin), "kv", Path::new("/p/kv.wasm"), &good)
            .expect_err("not the pinned file");
        assert!(err.contains("handlers.kv.file"), "{err}");
        let err = check_claim(&owners, Some(&pin), "kv", Path::new("/p/copy.wasm"), "cd")
            .expect_err("not the pinned content");
        assert!(err.contains("handlers.kv.sha256"), "{err}");
    }

    #[test]
    fn owners_are_restored_from_the_newest_deciding_row() {
        let dir = tempfile::TempDir::new().expect("tmp");
        let a = dir.path().join("a.wasm");
        let b = dir.path().join("b.wasm");
        let gone = dir.path().join("gone.wasm");
        std::fs::write(&a, b"x").expect("a");
        std::fs::write(&b, b"x").expect("b");
        let rows = vec![
            // Newest first: a refused impostor decides nothing; a was active before it.
            row("kv", &b, "refused", Some("belongs to a".into())),
            row("kv", &a, "active", None),
            row("kv", &b, "active", None),
            // Removed, then nothing: free.
            row("ka", &a, "unloaded", Some(removed_reason(&a))),
            row("ka", &a, "active", None),
            // The owner's file vanished while slotd was down: free.
            row("kg", &gone, "active", None),
        ];
        let owners = owners_from_history(&rows);
        assert_eq!(owners.get("kv"), Some(&a));
        assert_eq!(owners.get("ka"), None);
        assert_eq!(owners.get("kg"), None);
    }
}
