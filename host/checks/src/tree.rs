//! The repository as the checks see it: its root, its files, and the Rust crates with the
//! module each of their files is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The repository root (two levels above this crate).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Directories never walked: build output, dependencies, version control.
const SKIP: [&str; 5] = ["target", ".git", "node_modules", "venv", ".venv"];

/// Every file under `dir`, relative to `root`, with `/` separators.
pub fn files(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !SKIP.contains(&name.as_str()) {
                    stack.push(path);
                }
            } else if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out.sort();
    out
}

/// One Rust crate (or test binary) of the tree: its names and its modules.
#[derive(Debug, Default)]
pub struct Crate {
    /// How docs may name it: the package name with `_` (`slotd_store`) and its directory's
    /// name (`store`).
    pub names: Vec<String>,
    /// Module path (`["scheduler", "tick"]`) → the file that is that module.
    pub modules: BTreeMap<Vec<String>, String>,
}

impl Crate {
    /// The files of the module `path` and every module below it.
    pub fn files_under<'a>(&'a self, path: &'a [String]) -> impl Iterator<Item = &'a String> {
        self.modules
            .iter()
            .filter(move |(m, _)| m.starts_with(path))
            .map(|(_, f)| f)
    }
}

/// The crates of the tree: every `src/` of `host/*` and `plugins/*`, and the end-to-end
/// suite (`tests/e2e`), from the files `files` lists.
pub fn crates(files: &[String]) -> Vec<Crate> {
    let mut by_root: BTreeMap<String, Crate> = BTreeMap::new();
    for f in files.iter().filter(|f| f.ends_with(".rs")) {
        let Some((root, rest, names)) = crate_of(f) else {
            continue;
        };
        let c = by_root.entry(root).or_insert_with(|| Crate {
            names,
            ..Crate::default()
        });
        let Some(stem) = rest.strip_suffix(".rs") else {
            continue;
        };
        let mut path: Vec<String> = stem.split('/').map(str::to_string).collect();
        if matches!(
            path.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            path.pop();
        }
        c.modules.insert(path, f.clone());
    }
    let root = root();
    for c in by_root.values_mut() {
        let declared: Vec<(Vec<String>, String)> = c
            .modules
            .iter()
            .flat_map(|(module, file)| path_modules(&root, module, file))
            .collect();
        c.modules.extend(declared);
    }
    by_root.into_values().collect()
}

/// The modules `file` (the module `module`) declares with a `#[path = "…"]` attribute, with
/// the files they are: `#[path = "decide_tests.rs"] mod tests;` in `scheduler/src/decide.rs` is
/// the module `scheduler::decide::tests` in `scheduler/src/decide_tests.rs`.
fn path_modules(root: &Path, module: &[String], file: &str) -> Vec<(Vec<String>, String)> {
    let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
    let dir = file.rsplit_once('/').map_or("", |(d, _)| d);
    let mut out = Vec::new();
    let mut pending: Option<&str> = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("#[path = \"") {
            pending = rest.split('"').next();
            continue;
        }
        let Some(target) = pending else { continue };
        if line.starts_with("#[") {
            continue;
        }
        pending = None;
        let name = line
            .split_whitespace()
            .skip_while(|w| *w != "mod")
            .nth(1)
            .map(|n| n.trim_end_matches(';'));
        if let Some(name) = name {
            let mut path = module.to_vec();
            path.push(name.to_string());
            out.push((path, format!("{dir}/{target}")));
        }
    }
    out
}

/// The crate root a Rust file belongs to, the file's path inside it, and the crate's names.
fn crate_of(file: &str) -> Option<(String, String, Vec<String>)> {
    if let Some(rest) = file.strip_prefix("tests/e2e/") {
        return Some(("tests/e2e".into(), rest.into(), vec!["e2e".into()]));
    }
    let mut parts = file.splitn(4, '/');
    let (top, dir, src, rest) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if !matches!(top, "host" | "plugins") || !matches!(src, "src" | "benches" | "tests") {
        return None;
    }
    let names = vec![package_name(top, dir), dir.replace('-', "_")];
    Some((format!("{top}/{dir}/{src}"), rest.into(), names))
}

/// The package name of `top/dir`, with `_` for `-`, read from its manifest.
fn package_name(top: &str, dir: &str) -> String {
    let manifest = root().join(top).join(dir).join("Cargo.toml");
    let text = std::fs::read_to_string(manifest).unwrap_or_default();
    text.lines()
        .find_map(|l| {
            let v = l.trim().strip_prefix("name")?.trim().strip_prefix('=')?;
            Some(v.trim().trim_matches('"').replace('-', "_"))
        })
        .unwrap_or_else(|| dir.replace('-', "_"))
}
