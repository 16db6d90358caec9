//! No circle between the files of a crate outside the simulators (see `slotd_checks::circles`):
//! a circle is fixed at its cause (a type moved down, a dependency turned around), and a
//! re-export does not hide one.

use slotd_checks::circles;

/// The crates scanned: every `src/` under `host/` but the simulators' (`host/sim`).
fn scanned(c: &slotd_checks::tree::Crate) -> bool {
    c.modules.values().next().is_some_and(|f| {
        f.starts_with("host/") && f.split('/').nth(2) == Some("src") && !f.starts_with("host/sim/")
    })
}

#[test]
fn no_file_uses_a_file_that_uses_it_back() {
    let root = slotd_checks::tree::root();
    let files = slotd_checks::tree::files(&root);
    let crates = slotd_checks::tree::crates(&files);
    let mut scanned_files = 0;
    let mut found = Vec::new();
    for c in crates.iter().filter(|c| scanned(c)) {
        scanned_files += c.modules.len();
        found.extend(circles::graph(&root, c).circles());
    }
    assert!(
        scanned_files > 100,
        "only {scanned_files} files scanned under {}",
        root.display()
    );
    let found: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert!(
        found.is_empty(),
        "{} circles between files (each file uses the next, the last the first):\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The check sees through re-exports and finds a circle closed by a path in code.
#[test]
fn a_circle_through_a_re_export_is_found() {
    let dir = std::env::temp_dir().join(format!("slotd-circles-{}", std::process::id()));
    let src = dir.join("host/demo/src");
    std::fs::create_dir_all(src.join("outer")).expect("temp dir");
    let write = |p: &str, t: &str| std::fs::write(src.join(p), t).expect("write");
    write(
        "lib.rs",
        "mod engine;\nmod outer;\npub use engine::State;\n",
    );
    write(
        "engine.rs",
        "pub struct State { keys: crate::outer::Cache }\n",
    );
    write("outer/mod.rs", "mod cache;\npub use cache::Cache;\n");
    write(
        "outer/cache.rs",
        "use std::sync::Arc;\npub struct Cache;\nimpl Cache { fn f(s: &crate::State) {} }\n",
    );
    let files: Vec<String> = ["lib.rs", "engine.rs", "outer/mod.rs", "outer/cache.rs"]
        .iter()
        .map(|f| format!("host/demo/src/{f}"))
        .collect();
    let crates = slotd_checks::tree::crates(&files);
    let found = circles::graph(&dir, &crates[0]).circles();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found.len(), 1, "{found:?}");
    let text = found[0].to_string();
    assert!(
        text.starts_with(
            "host/demo/src/engine.rs → host/demo/src/outer/cache.rs → host/demo/src/engine.rs"
        ),
        "{text}"
    );
}
