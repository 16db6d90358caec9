//! Every path and module the docs name exists. A doc names a file or directory in a code span
//! (`` `host/scheduler/src/tick.rs` ``, `` `scheduler/src/tick.rs` ``, `` `migrations/` ``)
//! or a module or item by its Rust path (`` `scheduler::tick` ``,
//! `` `lifecycle::follow_up::FollowUps` ``, `` `slotd_store::open` ``); when the code moves
//! and the doc does not, the doc is wrong, and this says where.
//!
//! Paths resolve from the repository root, from the doc's own directory, or as the end of
//! some path in the tree (a doc about the scheduler may say `scheduler/src/tick.rs`). A Rust path
//! is checked when its first segment is one of ours (a crate, by package or directory name,
//! or a top-level module of one): its longest prefix that is a module must be followed only by
//! names declared (`fn`, `mod`, `struct`, `enum`, `trait`, `type`, `const`, `static`, a
//! macro, a `use`) in that module or below it. Paths of other crates (`tokio::time::pause`)
//! and of types' members (`Services::units`) are not checked.

use std::collections::BTreeSet;
use std::path::Path;

use crate::tree::Crate;

/// What the checks know of the tree.
pub struct Index {
    files: Vec<String>,
    dirs: BTreeSet<String>,
    crates: Vec<Crate>,
    /// First segments that are ours: crate names and top-level modules.
    ours: BTreeSet<String>,
}

impl Index {
    /// Index the tree at `root`.
    pub fn new(root: &Path) -> Index {
        let files = crate::tree::files(root);
        let mut dirs = BTreeSet::new();
        for f in &files {
            let mut d = f.as_str();
            while let Some((parent, _)) = d.rsplit_once('/') {
                dirs.insert(parent.to_string());
                d = parent;
            }
        }
        let crates = crate::tree::crates(&files);
        let mut ours = BTreeSet::new();
        for c in &crates {
            ours.extend(c.names.iter().cloned());
            ours.extend(
                c.modules
                    .keys()
                    .filter(|m| m.len() == 1)
                    .map(|m| m[0].clone()),
            );
        }
        Index {
            files,
            dirs,
            crates,
            ours,
        }
    }

    /// The problems of the markdown `text` of the doc at `doc` (relative to the root).
    pub fn check(&self, root: &Path, doc: &str, text: &str) -> Vec<String> {
        let doc_dir = doc.rsplit_once('/').map_or("", |(d, _)| d);
        let mut out = Vec::new();
        for (line, span) in code_spans(text) {
            let problem = if looks_like_path(&span) {
                (!self.path_exists(root, doc_dir, &span)).then_some("no such file or directory")
            } else if let Some(segments) = rust_path(&span) {
                (self.ours.contains(&segments[0]) && !self.rust_path_exists(root, &segments))
                    .then_some("no such module or item")
            } else {
                None
            };
            if let Some(p) = problem {
                out.push(format!("{doc}:{line}: `{span}`: {p}"));
            }
        }
        out
    }

    fn path_exists(&self, root: &Path, doc_dir: &str, path: &str) -> bool {
        let trimmed = path.trim_end_matches('/');
        if !path.contains('/') {
            let tail = format!("/{trimmed}");
            return self.files.iter().any(|f| f.ends_with(&tail));
        }
        if root.join(trimmed).exists() || root.join(doc_dir).join(trimmed).exists() {
            return true;
        }
        // A crate's file named from its directory: `store/shared.rs` is
        // `host/store/src/shared.rs`.
        if let Some((krate, rest)) = trimmed.split_once('/')
            && root
                .join("host")
                .join(krate)
                .join("src")
                .join(rest)
                .exists()
        {
            return true;
        }
        let tail = format!("/{trimmed}");
        self.files.iter().any(|f| f.ends_with(&tail))
            || self.dirs.iter().any(|d| d.ends_with(&tail))
    }

    fn rust_path_exists(&self, root: &Path, segments: &[String]) -> bool {
        self.crates.iter().any(|c| {
            let starts: Vec<(Vec<String>, &[String])> = {
                let mut s = Vec::new();
                if c.names.contains(&segments[0]) {
                    s.push((Vec::new(), &segments[1..]));
                }
                if c.modules.contains_key(&segments[..1]) {
                    s.push((segments[..1].to_vec(), &segments[1..]));
                }
                s
            };
            starts.into_iter().any(|(mut module, mut rest)| {
                while let Some((next, tail)) = rest.split_first() {
                    let mut deeper = module.clone();
                    deeper.push(next.clone());
                    if !c.modules.contains_key(&deeper) {
                        break;
                    }
                    module = deeper;
                    rest = tail;
                }
                rest.iter().all(|name| {
                    c.files_under(&module).any(|f| {
                        declares(
                            &std::fs::read_to_string(root.join(f)).unwrap_or_default(),
                            name,
                        )
                    })
                })
            })
        })
    }
}

/// The inline code spans of markdown `text` outside fenced blocks, with their line numbers.
pub fn code_spans(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(span), Some(_)) = (parts.next(), parts.next()) {
            out.push((i + 1, span.to_string()));
        }
        // A last span without its closing backtick is not a span.
    }
    out
}

/// The top directories of the tree a path may start with.
const TOP: [&str; 9] = [
    "host/",
    "plugins/",
    "tests/",
    "docs/",
    "deploy/",
    "migrations/",
    "wit/",
    ".ci/",
    "benches/",
];
/// Extensions of the files a doc names.
const EXTENSIONS: [&str; 16] = [
    ".rs", ".md", ".toml", ".sql", ".wit", ".json", ".yml", ".yaml", ".py", ".js", ".html", ".css",
    ".lua", ".tmpl", ".wasm", ".sh",
];

/// A span that names a file or directory of the tree.
fn looks_like_path(span: &str) -> bool {
    // A Rust file named alone (`tick.rs`) is a file of the tree too.
    let rust_file = span.ends_with(".rs") && !span.starts_with('.');
    if span.is_empty()
        || !(span.contains('/') || rust_file)
        || span.starts_with('/')
        || span.starts_with("..")
        || span.contains("://")
        || span.chars().any(|c| {
            c.is_whitespace()
                || matches!(
                    c,
                    '*' | '<'
                        | '>'
                        | '{'
                        | '}'
                        | '$'
                        | '…'
                        | '|'
                        | '='
                        | ':'
                        | '?'
                        | '&'
                        | ','
                        | '('
                        | '['
                )
        })
    {
        return false;
    }
    // A built handler lands in plugins/ only after a build, build output in target/, and a
    // project `slotd plugin new` makes has its own `.cargo/`.
    if span.ends_with(".wasm") || span.starts_with("target/") || span.starts_with(".cargo/") {
        return false;
    }
    TOP.iter().any(|t| span.starts_with(t)) || EXTENSIONS.iter().any(|e| span.ends_with(e))
}

/// A span that is a Rust path of two or more segments (`a::b`, `a::b::C`, `a::b()`), split.
fn rust_path(span: &str) -> Option<Vec<String>> {
    let span = span.strip_suffix("()").unwrap_or(span);
    let segments: Vec<String> = span.split("::").map(str::to_string).collect();
    let ident = |s: &String| {
        !s.is_empty()
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && s.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
    };
    let lower = segments[0]
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase());
    (segments.len() >= 2 && lower && segments.iter().all(ident)).then_some(segments)
}

/// Whether Rust source `text` declares `name` (or brings it in with a `use`).
fn declares(text: &str, name: &str) -> bool {
    const KEYWORDS: [&str; 9] = [
        "fn", "mod", "struct", "enum", "trait", "type", "const", "static", "union",
    ];
    text.lines().any(|line| {
        let code = line.split("//").next().unwrap_or("");
        let words: Vec<&str> = code
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '!'))
            .filter(|w| !w.is_empty())
            .collect();
        words
            .windows(2)
            .any(|w| (KEYWORDS.contains(&w[0]) || w[0] == "macro_rules!") && w[1] == name)
            || (code.trim_start().starts_with("use ")
                || code.trim_start().starts_with("pub use ")
                || code.trim_start().starts_with("pub(crate) use "))
                && words.contains(&name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<String> {
        let root = crate::tree::root();
        Index::new(&root).check(&root, "docs/example.md", text)
    }

    #[test]
    fn a_module_that_exists_passes_and_one_that_is_gone_fails() {
        assert!(problems("see `scheduler::tick` and `lifecycle::follow_up::FollowUps`").is_empty());
        let gone = problems("see `scheduler::commit`, line one\nand `scheduler::pools`");
        assert_eq!(
            gone,
            [
                "docs/example.md:1: `scheduler::commit`: no such module or item",
                "docs/example.md:2: `scheduler::pools`: no such module or item",
            ]
        );
    }

    #[test]
    fn a_path_that_exists_passes_and_one_that_is_gone_fails() {
        assert!(
            problems("`host/scheduler/src/tick.rs`, `scheduler/src/tick.rs`, `migrations/`")
                .is_empty()
        );
        assert_eq!(
            problems("`host/scheduler/src/commit.rs`"),
            ["docs/example.md:1: `host/scheduler/src/commit.rs`: no such file or directory"]
        );
    }

    #[test]
    fn other_crates_paths_fenced_code_and_prose_are_not_checked() {
        assert!(problems("`tokio::time::pause`, `application/json`, `/v1/tasks`").is_empty());
        assert!(problems("```\nscheduler::commit host/nope.rs\n```\n").is_empty());
    }
}
