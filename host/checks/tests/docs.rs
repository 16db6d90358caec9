//! The docs of the repository name only paths and modules that exist (see `slotd_checks::docs`).

use slotd_checks::docs::Index;

#[test]
fn every_path_and_module_the_docs_name_exists() {
    let root = slotd_checks::tree::root();
    let index = Index::new(&root);
    let docs: Vec<String> = slotd_checks::tree::files(&root)
        .into_iter()
        .filter(|f| f.ends_with(".md"))
        .collect();
    assert!(
        docs.iter().any(|d| d == "docs/architecture.md"),
        "the docs were not found under {}",
        root.display()
    );
    let mut problems = Vec::new();
    for doc in &docs {
        match std::fs::read_to_string(root.join(doc)) {
            Ok(text) => problems.extend(index.check(&root, doc, &text)),
            Err(e) => problems.push(format!("{doc}: cannot be read: {e}")),
        }
    }
    assert!(
        problems.is_empty(),
        "{} names in the docs point at nothing:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The comments of the host's and the handlers' sources too: a `//` or `//!` line that names a
/// module or a path in a code span names one that exists.
#[test]
fn every_path_and_module_the_code_comments_name_exists() {
    let root = slotd_checks::tree::root();
    let index = Index::new(&root);
    let mut problems = Vec::new();
    let sources = slotd_checks::tree::files(&root)
        .into_iter()
        .filter(|f| f.ends_with(".rs") && (f.starts_with("host/") || f.starts_with("plugins/")));
    for file in sources {
        let Ok(text) = std::fs::read_to_string(root.join(&file)) else {
            problems.push(format!("{file}: cannot be read"));
            continue;
        };
        // Only the comments, each on the line it is on (code lines become empty lines).
        let comments: String = text
            .lines()
            .map(|l| {
                let t = l.trim_start();
                if t.starts_with("//") { t } else { "" }
            })
            .collect::<Vec<_>>()
            .join("\n");
        problems.extend(index.check(&root, &file, &comments));
    }
    assert!(
        problems.is_empty(),
        "{} names in code comments point at nothing:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
