//! No circle between the files of a crate: a file that uses another that uses it back. Each
//! file's references to its own crate (`use crate::…`, `use super::…`, a child module's path,
//! and paths written in code: `crate::engine::CallState`, `super::route_back::route_back`) are
//! resolved to the file that *defines* the item named, through every `use` on the way, so a
//! re-export (`pub use keys::KeyCache;` in a `mod.rs`, the crate root's `pub use`) hides no
//! dependency and cannot break a circle. The file graph of each crate is then searched for
//! strongly connected components; each one is a circle, reported with the references that
//! close it.
//!
//! A module declaring its children (`mod keys;`) is not a use of them, and the crate root's
//! (`lib.rs`, `main.rs`) own uses are left out: it declares every module and re-exports the
//! crate's face, so everything below it would otherwise sit in one circle with it. A use of an
//! item the root defines is an edge to it (it closes no circle), and a use of a name it
//! re-exports is followed to the file that defines that name.
//!
//! The reading is lexical (comments and literals dropped, tokens scanned), not a compiler's:
//! a name brought in by a glob import or a macro is resolved to the module it is looked up in.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::tree::Crate;

/// One reference from a file to another of its crate: where it is written and what it names.
#[derive(Clone, Debug)]
pub struct Reference {
    pub line: usize,
    pub path: String,
}

/// The file graph of one crate: file → the files it uses, each with its first reference.
#[derive(Debug, Default)]
pub struct Graph {
    pub edges: BTreeMap<String, BTreeMap<String, Reference>>,
}

/// One circle: files in order, each using the next (the last uses the first), with the
/// reference that makes each step.
#[derive(Debug)]
pub struct Circle {
    pub steps: Vec<(String, String, Reference)>,
}

impl std::fmt::Display for Circle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let files: Vec<&str> = self.steps.iter().map(|(a, _, _)| a.as_str()).collect();
        writeln!(f, "{} → {}", files.join(" → "), files[0])?;
        for (from, to, r) in &self.steps {
            writeln!(f, "    {from}:{} uses {to} (`{}`)", r.line, r.path)?;
        }
        Ok(())
    }
}

/// What the scan knows of one module (a file, or an inline `mod x { … }` in one).
#[derive(Debug, Default)]
struct Module {
    file: String,
    /// Names the module defines (`fn`, `struct`, `enum`, `trait`, `type`, `const`, `static`,
    /// `union`, `macro_rules!`).
    items: BTreeSet<String>,
    /// Names its `use` declarations bring in → the path they name (relative to the crate root
    /// when it is ours; `None` when it is another crate's).
    imports: BTreeMap<String, Option<Vec<String>>>,
    /// Its glob imports (`use super::*;`), as crate paths.
    globs: Vec<Vec<String>>,
}

/// What one path names, once resolved.
#[derive(Clone, Debug, PartialEq)]
enum Target {
    /// A module of the crate (a `use` of a module is no edge by itself).
    Module(Vec<String>),
    /// An item, in this file.
    File(String),
    /// Another crate's, or nothing the scan can place.
    Outside,
}

/// A token of the lexical scan.
#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Colons,
    Punct(char),
}

/// Tokens of `text` with their line numbers: comments, string, char and byte literals dropped.
fn tokens(text: &str) -> Vec<(usize, Tok)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let n = chars.len();
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < n {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < n && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < n {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if c == '"' {
            i += 1;
            while i < n && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if at(i) == '\n' {
                    line += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c == 'r'
            && (at(i + 1) == '"' || (at(i + 1) == '#' && matches!(at(i + 2), '"' | '#')))
        {
            // A raw string: r"…", r#"…"#, …
            let mut hashes = 0;
            i += 1;
            while at(i) == '#' {
                hashes += 1;
                i += 1;
            }
            i += 1;
            while i < n {
                if chars[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#') {
                    i += 1 + hashes;
                    break;
                }
                if chars[i] == '\n' {
                    line += 1;
                }
                i += 1;
            }
        } else if c == '\'' {
            // A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a).
            if at(i + 1) == '\\' {
                i += 2;
                while i < n && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
                while i < n && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < n && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            // b"…", br"…": the prefix is no identifier.
            if !(matches!(word.as_str(), "b" | "br") && matches!(at(i), '"' | '#' | '\'')) {
                out.push((line, Tok::Ident(word)));
            }
        } else if c.is_ascii_digit() {
            while i < n && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '.') {
                if chars[i] == '.' && at(i + 1) == '.' {
                    break;
                }
                i += 1;
            }
        } else if c == ':' && at(i + 1) == ':' {
            out.push((line, Tok::Colons));
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push((line, Tok::Punct(c)));
            }
            i += 1;
        }
    }
    out
}

/// One leaf of a `use` tree: its path, and the name it is bound to (`None`: a glob).
type Leaf = (Vec<String>, Option<String>);

/// A `use` tree flattened into its leaves, and the index of the token after its `;`.
fn use_leaves(toks: &[(usize, Tok)], mut i: usize) -> Option<(Vec<Leaf>, usize)> {
    fn tree(
        toks: &[(usize, Tok)],
        i: &mut usize,
        prefix: Vec<String>,
        out: &mut Vec<Leaf>,
    ) -> Option<()> {
        let mut path = prefix;
        if toks.get(*i).map(|t| &t.1) == Some(&Tok::Colons) {
            *i += 1;
        }
        loop {
            match toks.get(*i).map(|t| &t.1)? {
                Tok::Ident(w) => {
                    path.push(w.clone());
                    *i += 1;
                    match toks.get(*i).map(|t| &t.1) {
                        Some(Tok::Colons) => *i += 1,
                        Some(Tok::Ident(a)) if a == "as" => {
                            let Tok::Ident(alias) = &toks.get(*i + 1)?.1 else {
                                return None;
                            };
                            *i += 2;
                            out.push((path, Some(alias.clone())));
                            return Some(());
                        }
                        _ => {
                            let name = path.last().cloned();
                            if name.as_deref() == Some("self") {
                                path.pop();
                                let name = path.last().cloned();
                                out.push((path, name));
                            } else {
                                out.push((path, name));
                            }
                            return Some(());
                        }
                    }
                }
                Tok::Punct('*') => {
                    *i += 1;
                    out.push((path, None));
                    return Some(());
                }
                Tok::Punct('{') => {
                    *i += 1;
                    loop {
                        if toks.get(*i).map(|t| &t.1) == Some(&Tok::Punct('}')) {
                            *i += 1;
                            return Some(());
                        }
                        tree(toks, i, path.clone(), out)?;
                        match toks.get(*i).map(|t| &t.1)? {
                            Tok::Punct(',') => *i += 1,
                            Tok::Punct('}') => {}
                            _ => return None,
                        }
                    }
                }
                _ => return None,
            }
        }
    }
    let mut out = Vec::new();
    tree(toks, &mut i, Vec::new(), &mut out)?;
    (toks.get(i).map(|t| &t.1) == Some(&Tok::Punct(';'))).then_some((out, i + 1))
}

const ITEM_KEYWORDS: [&str; 8] = [
    "fn", "struct", "enum", "trait", "type", "const", "static", "union",
];

/// One reference found in a file: the module it is written in, its line, and the path.
struct Written {
    module: Vec<String>,
    line: usize,
    path: Vec<String>,
    /// A `use` leaf (`false`: a path in code).
    in_use: bool,
}

/// Scan one file (the module `module`): what it defines and imports, into `modules`, and the
/// paths it writes.
fn scan(
    file: &str,
    module: &[String],
    text: &str,
    modules: &mut BTreeMap<Vec<String>, Module>,
    written: &mut Vec<Written>,
) {
    let toks = tokens(text);
    // (module, brace depth its body is at)
    let mut stack: Vec<(Vec<String>, usize)> = vec![(module.to_vec(), 0)];
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let (line, tok) = &toks[i];
        let (current, body) = stack.last().cloned().unwrap_or_default();
        let entry = modules.entry(current.clone()).or_insert_with(|| Module {
            file: file.to_string(),
            ..Module::default()
        });
        match tok {
            Tok::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                if stack.len() > 1 && depth < body {
                    stack.pop();
                }
                i += 1;
            }
            Tok::Ident(w) if w == "mod" => {
                if let (Some((_, Tok::Ident(name))), Some((_, Tok::Punct('{')))) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    let mut inner = current.clone();
                    inner.push(name.clone());
                    modules.entry(inner.clone()).or_insert_with(|| Module {
                        file: file.to_string(),
                        ..Module::default()
                    });
                    depth += 1;
                    stack.push((inner, depth));
                    i += 3;
                } else {
                    i += 1;
                }
            }
            Tok::Ident(w) if w == "macro_rules" => {
                if let Some((_, Tok::Ident(name))) = toks.get(i + 2) {
                    entry.items.insert(name.clone());
                }
                i += 3;
            }
            Tok::Ident(w) if ITEM_KEYWORDS.contains(&w.as_str()) => {
                if depth == body
                    && let Some((_, Tok::Ident(name))) = toks.get(i + 1)
                {
                    entry.items.insert(name.clone());
                }
                i += 1;
            }
            Tok::Ident(w) if w == "use" => match use_leaves(&toks, i + 1) {
                Some((leaves, next)) => {
                    for (path, name) in leaves {
                        let Some(abs) = absolute(modules, &current, &path) else {
                            if let Some(name) = name {
                                modules
                                    .entry(current.clone())
                                    .or_default()
                                    .imports
                                    .insert(name, None);
                            }
                            continue;
                        };
                        let entry = modules.entry(current.clone()).or_default();
                        match name {
                            Some(name) => {
                                entry.imports.insert(name, Some(abs.clone()));
                            }
                            None => entry.globs.push(abs.clone()),
                        }
                        written.push(Written {
                            module: current.clone(),
                            line: *line,
                            path: abs,
                            in_use: true,
                        });
                    }
                    i = next;
                }
                None => i += 1,
            },
            Tok::Ident(first) => {
                // A path in code: ident (:: ident)+, not itself the tail of a path.
                let after_colons = i > 0 && toks[i - 1].1 == Tok::Colons;
                let mut path = vec![first.clone()];
                let mut j = i + 1;
                while let (Some((_, Tok::Colons)), Some((_, Tok::Ident(w)))) =
                    (toks.get(j), toks.get(j + 1))
                {
                    path.push(w.clone());
                    j += 2;
                }
                if !after_colons && path.len() > 1 {
                    written.push(Written {
                        module: current.clone(),
                        line: *line,
                        path,
                        in_use: false,
                    });
                }
                i = j;
            }
            _ => i += 1,
        }
    }
}

/// `path` as written in `module`, made relative to the crate root, when it starts at one of
/// ours (`crate`, `super`, `self`; a child module is resolved later).
fn absolute(
    _modules: &BTreeMap<Vec<String>, Module>,
    module: &[String],
    path: &[String],
) -> Option<Vec<String>> {
    let mut base = module.to_vec();
    let mut rest = path;
    match rest.first().map(String::as_str)? {
        "crate" => {
            base.clear();
            rest = &rest[1..];
        }
        "self" => rest = &rest[1..],
        "super" => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        "Self" => return None,
        _ => {
            // A child module or a name in scope: marked for resolution in `module`.
            let mut out = vec!["\0rel".to_string()];
            out.extend(module.iter().cloned());
            out.push("\0".to_string());
            out.extend(rest.iter().cloned());
            return Some(out);
        }
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// Where `path` (from [`absolute`]) leads.
fn resolve(modules: &BTreeMap<Vec<String>, Module>, path: &[String], hops: usize) -> Target {
    if hops > 16 {
        return Target::Outside;
    }
    // A path relative to a module's scope: its imports, then its children, then its items.
    if path.first().map(String::as_str) == Some("\0rel") {
        let sep = path.iter().position(|s| s == "\0").unwrap_or(path.len());
        let scope = &path[1..sep];
        let rest = &path[(sep + 1).min(path.len())..];
        let Some(first) = rest.first() else {
            return Target::Outside;
        };
        let Some(m) = modules.get(scope) else {
            return Target::Outside;
        };
        if let Some(target) = m.imports.get(first) {
            return match target {
                Some(t) => {
                    let mut p = t.clone();
                    p.extend(rest[1..].iter().cloned());
                    resolve(modules, &p, hops + 1)
                }
                None => Target::Outside,
            };
        }
        let mut child = scope.to_vec();
        child.push(first.clone());
        if modules.contains_key(&child) {
            child.extend(rest[1..].iter().cloned());
            return resolve(modules, &child, hops + 1);
        }
        if m.items.contains(first) {
            return Target::File(m.file.clone());
        }
        return Target::Outside;
    }
    let mut m: Vec<String> = Vec::new();
    for (k, seg) in path.iter().enumerate() {
        let mut child = m.clone();
        child.push(seg.clone());
        if modules.contains_key(&child) {
            m = child;
            continue;
        }
        let Some(info) = modules.get(&m) else {
            return Target::Outside;
        };
        if info.items.contains(seg) {
            return Target::File(info.file.clone());
        }
        if let Some(target) = info.imports.get(seg) {
            return match target {
                Some(t) => {
                    let mut p = t.clone();
                    p.extend(path[k + 1..].iter().cloned());
                    resolve(modules, &p, hops + 1)
                }
                None => Target::Outside,
            };
        }
        for g in &info.globs {
            let mut p = g.clone();
            p.extend(path[k..].iter().cloned());
            if let t @ Target::File(_) = resolve(modules, &p, hops + 1) {
                return t;
            }
        }
        return Target::File(info.file.clone());
    }
    Target::Module(m)
}

/// The file graph of `krate`, its files read under `root`.
pub fn graph(root: &Path, krate: &Crate) -> Graph {
    let mut modules: BTreeMap<Vec<String>, Module> = BTreeMap::new();
    for (module, file) in &krate.modules {
        modules.entry(module.clone()).or_default().file = file.clone();
    }
    let mut written = Vec::new();
    for (module, file) in &krate.modules {
        let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        scan(file, module, &text, &mut modules, &mut written);
    }
    let roots: BTreeSet<&String> = krate
        .modules
        .iter()
        .filter(|(m, _)| m.is_empty())
        .map(|(_, f)| f)
        .collect();
    let mut out = Graph::default();
    for w in written {
        let Some(from) = modules.get(&w.module).map(|m| m.file.clone()) else {
            continue;
        };
        // A path in code starting with a name of another crate or a local binding is not ours.
        let path = if w.in_use {
            w.path.clone()
        } else {
            match absolute(&modules, &w.module, &w.path) {
                Some(p) => p,
                None => continue,
            }
        };
        let Target::File(to) = resolve(&modules, &path, 0) else {
            continue;
        };
        if to == from || roots.contains(&from) {
            continue;
        }
        let shown = w
            .path
            .iter()
            .filter(|s| !s.starts_with('\0'))
            .cloned()
            .collect::<Vec<_>>()
            .join("::");
        out.edges
            .entry(from)
            .or_default()
            .entry(to)
            .or_insert(Reference {
                line: w.line,
                path: shown,
            });
    }
    out
}

impl Graph {
    /// The circles of the graph: one per strongly connected component of more than one file,
    /// shown as a shortest circle through its first file.
    pub fn circles(&self) -> Vec<Circle> {
        let nodes: BTreeSet<&String> = self
            .edges
            .iter()
            .flat_map(|(a, to)| std::iter::once(a).chain(to.keys()))
            .collect();
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for &start in &nodes {
            if seen.contains(start) {
                continue;
            }
            let ahead = self.reach(start, false);
            let behind = self.reach(start, true);
            let component: BTreeSet<&String> = ahead.intersection(&behind).copied().collect();
            seen.extend(component.iter().copied());
            if component.len() < 2 {
                continue;
            }
            if let Some(circle) = self.shortest_circle(start, &component) {
                out.push(circle);
            }
        }
        out
    }

    fn reach<'a>(&'a self, start: &'a String, backwards: bool) -> BTreeSet<&'a String> {
        let mut seen = BTreeSet::from([start]);
        let mut todo = vec![start];
        while let Some(n) = todo.pop() {
            let next: Vec<&String> = if backwards {
                self.edges
                    .iter()
                    .filter(|(_, to)| to.contains_key(n))
                    .map(|(a, _)| a)
                    .collect()
            } else {
                self.edges
                    .get(n)
                    .map(|to| to.keys().collect())
                    .unwrap_or_default()
            };
            for m in next {
                if seen.insert(m) {
                    todo.push(m);
                }
            }
        }
        seen
    }

    fn shortest_circle(&self, start: &String, within: &BTreeSet<&String>) -> Option<Circle> {
        let mut came_from: BTreeMap<&String, &String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        while let Some(n) = queue.pop_front() {
            for m in self.edges.get(n).map(|to| to.keys()).into_iter().flatten() {
                if !within.contains(m) {
                    continue;
                }
                if m == start {
                    let mut files = vec![n];
                    while let Some(&p) = came_from.get(files.last()?) {
                        files.push(p);
                    }
                    files.reverse();
                    let steps = (0..files.len())
                        .map(|k| {
                            let (a, b) = (files[k], files[(k + 1) % files.len()]);
                            (a.clone(), b.clone(), self.edges[a][b].clone())
                        })
                        .collect();
                    return Some(Circle { steps });
                }
                if m != start && !came_from.contains_key(m) {
                    came_from.insert(m, n);
                    queue.push_back(m);
                }
            }
        }
        None
    }
}
