//! `slotd plugin new NAME`: a new handler project, ready to build, test and drop in.
//!
//! The project is a standalone crate (its own `[workspace]`, `.cargo/config.toml` building for
//! `wasm32-wasip2`) with a working handler on `slotd-sdk` for the stub provider
//! ([`slotd_testkit::stub`]), its unit tests on the SDK's scripted host, and a README. The SDK is
//! vendored into `vendor/slotd-sdk/` from the copy compiled into this binary (listed by
//! `host/slotd/build.rs`, so it is the SDK this slotd was built with), together with the
//! `Cargo.lock` it is tested with: the project builds wherever it is written, with no path back
//! into the slotd repository.
//!
//! Nothing is ever overwritten: the project directory is claimed with one `create_dir`, and a
//! failure while writing removes only that directory.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

include!(concat!(env!("OUT_DIR"), "/sdk_files.rs"));

/// Longest handler name accepted (it is also a crate, pool and task type name).
pub const NAME_MAX: usize = 64;

/// Names that match the pattern but would clash as the crate's name: the standard library's
/// crates and the project's own dependencies.
const RESERVED: &[&str] = &["alloc", "core", "serde-json", "slotd-sdk", "std"];

/// Where the vendored SDK goes, relative to the project.
pub const SDK_DIR: &str = "vendor/slotd-sdk";

/// The project's own files as `(path, template)`; see [`Project::render`] for the placeholders.
const TEMPLATES: &[(&str, &str)] = &[
    ("Cargo.toml", include_str!("template/Cargo.toml.tmpl")),
    (
        ".cargo/config.toml",
        include_str!("template/cargo-config.toml.tmpl"),
    ),
    (".gitignore", include_str!("template/gitignore.tmpl")),
    ("README.md", include_str!("template/README.md.tmpl")),
    ("src/lib.rs", include_str!("template/lib.rs.tmpl")),
    ("src/tests.rs", include_str!("template/tests.rs.tmpl")),
];

/// Why no project was written.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// The name cannot be a handler and crate name.
    #[error("invalid handler name {name:?}: {reason}")]
    InvalidName { name: String, reason: String },
    /// The project directory exists (as anything); it was left untouched.
    #[error("{} already exists; nothing was written (choose another name or --dir)", .0.display())]
    Exists(PathBuf),
    /// Creating a directory or writing a file failed; the project directory was removed.
    #[error("writing {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A written project.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Project {
    /// The handler name (also the package, task type and pool name).
    pub name: String,
    /// The project directory, `DIR/NAME`.
    pub dir: PathBuf,
}

/// Write a new handler project `name` into `parent/name` (creating `parent` if needed).
pub fn create(name: &str, parent: &Path) -> Result<Project, ScaffoldError> {
    check_name(name)?;
    let project = Project {
        name: name.to_string(),
        dir: parent.join(name),
    };
    fs::create_dir_all(parent).map_err(io_error(parent))?;
    match fs::create_dir(&project.dir) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            return Err(ScaffoldError::Exists(project.dir));
        }
        Err(e) => return Err(io_error(&project.dir)(e)),
    }
    if let Err(e) = project.write_files() {
        // The directory is the one `create_dir` made for us a moment ago: only our files.
        let _ = fs::remove_dir_all(&project.dir);
        return Err(e);
    }
    Ok(project)
}

/// A handler name: `[a-z][a-z0-9-]*`, at most [`NAME_MAX`] characters, not [`RESERVED`].
pub fn check_name(name: &str) -> Result<(), ScaffoldError> {
    let invalid = |reason: String| ScaffoldError::InvalidName {
        name: name.to_string(),
        reason,
    };
    let Some(first) = name.chars().next() else {
        return Err(invalid("the name is empty".into()));
    };
    if !first.is_ascii_lowercase() {
        return Err(invalid(format!(
            "it must start with a lowercase letter (a-z), not {first:?}"
        )));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(invalid(format!(
            "{c:?} is not allowed; use lowercase letters, digits and '-'"
        )));
    }
    if name.len() > NAME_MAX {
        return Err(invalid(format!(
            "it is {} characters long; at most {NAME_MAX} are allowed",
            name.len()
        )));
    }
    if RESERVED.contains(&name) {
        return Err(invalid(format!(
            "it is the name of a crate the project builds with ({})",
            RESERVED.join(", ")
        )));
    }
    Ok(())
}

impl Project {
    /// The library crate's name (`my-handler` → `my_handler`), which names the built file.
    pub fn crate_name(&self) -> String {
        self.name.replace('-', "_")
    }

    /// The handler type's name: the name in CamelCase, ending in `Handler`
    /// (`echo` → `EchoHandler`, `my-handler` → `MyHandler`).
    pub fn type_name(&self) -> String {
        let mut camel: String = self
            .name
            .split('-')
            .flat_map(|part| {
                let mut chars = part.chars();
                chars
                    .next()
                    .map(|c| c.to_ascii_uppercase())
                    .into_iter()
                    .chain(chars)
            })
            .collect();
        if !camel.ends_with("Handler") {
            camel.push_str("Handler");
        }
        camel
    }

    /// The component `cargo build --release` writes, relative to the project.
    pub fn wasm_path(&self) -> PathBuf {
        Path::new("target/wasm32-wasip2/release").join(format!("{}.wasm", self.crate_name()))
    }

    /// A template with `{{name}}`, `{{crate}}` and `{{type}}` replaced.
    pub fn render(&self, template: &str) -> String {
        template
            .replace("{{name}}", &self.name)
            .replace("{{crate}}", &self.crate_name())
            .replace("{{type}}", &self.type_name())
    }

    /// Every file of the project as `(path relative to the project, contents)`.
    pub fn files(&self) -> Vec<(PathBuf, String)> {
        let own = TEMPLATES
            .iter()
            .map(|(path, template)| (PathBuf::from(path), self.render(template)));
        let sdk = SDK_FILES
            .iter()
            .map(|(path, text)| (Path::new(SDK_DIR).join(path), text.to_string()));
        let lock = (PathBuf::from("Cargo.lock"), SDK_LOCK.to_string());
        own.chain(sdk).chain([lock]).collect()
    }

    fn write_files(&self) -> Result<(), ScaffoldError> {
        for (rel, text) in self.files() {
            let path = self.dir.join(rel);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent).map_err(io_error(parent))?;
            }
            fs::write(&path, text).map_err(io_error(&path))?;
        }
        Ok(())
    }

    /// What to run next, for the terminal.
    pub fn next_steps(&self) -> String {
        let wasm = self.wasm_path();
        let wasm = wasm.display();
        let name = &self.name;
        format!(
            "created handler project {name} in {dir}\n\
             \n\
             next:\n  \
             cd {dir}\n  \
             cargo test --target host-tuple    # unit tests, on the SDK's scripted host\n  \
             cargo build --release             # builds {wasm}\n  \
             slotd plugin check {wasm}\n  \
             cp {wasm} PLUGINS_DIR/{name}.wasm\n\
             \n\
             then set [handlers.{name}] base_url and allowed_hosts in slotd.toml \
             (see {dir}/README.md)\n",
            dir = self.dir.display(),
        )
    }
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ScaffoldError + '_ {
    move |source| ScaffoldError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests;
