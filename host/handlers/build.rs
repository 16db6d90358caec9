//! Builds the handler components in `plugins/` (their own cargo workspace, target
//! `wasm32-wasip2`): the handler build step of its own, `cargo build -p slotd-handlers`, which
//! the demo, the test kit (for the test fixtures) and the Dockerfile use.
//!
//! Exports `SLOTD_BUILT_PLUGINS`, the directory holding the built `*.wasm`, to this crate
//! (`slotd_handlers::BUILT_PLUGINS`). Handlers listed in [`INSTALL`] are also copied into
//! `<repo>/plugins/` where a default `slotd serve` loads them from.
//!
//! Only the crates that need built handlers depend on this one (the demo, and the test kit that
//! tests and benches take as a dev-dependency), so a plugin edit re-runs this script and
//! relinks those, never the service libraries nor a `slotd` built without its `demo` feature.
//!
//! The nested build runs the same cargo with a scrubbed environment: the outer build's target,
//! rustflags, wrappers (clippy, sccache, coverage) and per-package variables must not leak into
//! a wasm build.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Built components copied into `<repo>/plugins/` as `(built file stem, installed file name)`.
/// Adding a production handler is one line, e.g. `("kling_video", "kling-video.wasm")`.
/// The fixture is test-only and deliberately not installed.
const INSTALL: &[(&str, &str)] = &[
    ("kling_video", "kling-video.wasm"),
    ("kling_avatar", "kling-avatar.wasm"),
    ("runway_video", "runway-video.wasm"),
    ("fal_video", "fal-video.wasm"),
];

/// Variables the outer cargo sets (or the user set for the outer build) that would change what
/// the nested build compiles or how. `CARGO_*` is scrubbed wholesale except these prefixes,
/// which only say where and how to download.
const SCRUBBED: &[&str] = &[
    "RUSTFLAGS",
    "RUSTDOCFLAGS",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTC_LINKER",
    "RUSTDOC",
    "TARGET",
    "HOST",
    "OUT_DIR",
    "OPT_LEVEL",
    "PROFILE",
    "DEBUG",
    "NUM_JOBS",
];
const CARGO_KEPT_PREFIXES: &[&str] = &[
    "CARGO_HOME",
    "CARGO_NET_",
    "CARGO_HTTP_",
    "CARGO_REGISTRIES_",
    "CARGO_REGISTRY_",
    "CARGO_MAKEFLAGS",
];

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: building the handler components failed: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?);
    // host/handlers -> the repository root.
    let repo = manifest_dir
        .ancestors()
        .nth(2)
        .ok_or("host/handlers has no grandparent directory")?
        .to_path_buf();
    let plugins = repo.join("plugins");
    watch_inputs(&repo, &plugins)?;

    let target_dir = match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if Path::new(&dir).is_absolute() => PathBuf::from(dir),
        Some(dir) => repo.join(dir),
        None => repo.join("target"),
    }
    .join("wasm-plugins");

    ensure_wasm_target()?;

    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--release")
        .args(["--target", "wasm32-wasip2"])
        .arg("--manifest-path")
        .arg(plugins.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .current_dir(&plugins);
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let cargo_var =
            key.starts_with("CARGO_") && !CARGO_KEPT_PREFIXES.iter().any(|p| key.starts_with(p));
        if cargo_var || SCRUBBED.contains(&key) {
            cmd.env_remove(key);
        }
    }
    // Output is inherited: cargo shows it when this script fails.
    let status = cmd
        .status()
        .map_err(|e| format!("could not start cargo for {}: {e}", plugins.display()))?;
    if !status.success() {
        return Err(format!(
            "`cargo build --release --target wasm32-wasip2 --manifest-path {}` exited with {status} \
             (its output is above)",
            plugins.join("Cargo.toml").display()
        ));
    }

    let built = target_dir.join("wasm32-wasip2").join("release");
    for (stem, installed) in INSTALL {
        let from = built.join(format!("{stem}.wasm"));
        let to = plugins.join(installed);
        fs::copy(&from, &to)
            .map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))?;
    }
    println!("cargo:rustc-env=SLOTD_BUILT_PLUGINS={}", built.display());
    Ok(())
}

/// Tells cargo what the built components depend on: `wit/`, the manifests and lock file of
/// `plugins/` and each member's sources. Only paths that exist are named: a path that does not
/// exist would make cargo rerun this script, and rebuild everything that depends on this crate,
/// on every build.
fn watch_inputs(repo: &Path, plugins: &Path) -> Result<(), String> {
    let watch = |path: PathBuf| {
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    };
    watch(repo.join("wit"));
    watch(plugins.join("Cargo.toml"));
    watch(plugins.join("Cargo.lock"));
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");
    for member in members(plugins)? {
        // Directories are scanned recursively; `plugins/` itself is not watched because built
        // components are copied into it. A member without its own `src/` builds another
        // member's sources (kling-video-next builds kling-video's, watched there); a member
        // with its own contract copy (the SDK) builds from its `wit/`.
        watch(member.join("Cargo.toml"));
        watch(member.join("src"));
        watch(member.join("wit"));
    }
    Ok(())
}

/// The target the handlers are built for.
const WASM_TARGET: &str = "wasm32-wasip2";

/// Makes sure the compiler that builds the host can also build `wasm32-wasip2`.
///
/// `rust-toolchain.toml` lists the target, but rustup only honours that list when it installs
/// the toolchain: a machine that already has the pinned toolchain without the target would get
/// "can't find crate for `std`" from deep inside the nested build after minutes of compiling.
/// So the target's standard library is looked for in the sysroot first; when it is missing and
/// rustup runs this toolchain, rustup adds it (saying so), otherwise the build stops at once
/// with the command to run.
fn ensure_wasm_target() -> Result<(), String> {
    println!("cargo:rerun-if-env-changed=RUSTUP_TOOLCHAIN");
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| {
            format!(
                "could not run {} --print sysroot: {e}",
                rustc.to_string_lossy()
            )
        })?;
    if !sysroot.status.success() {
        return Err(format!(
            "`{} --print sysroot` exited with {}",
            rustc.to_string_lossy(),
            sysroot.status
        ));
    }
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    let target_lib = sysroot
        .join("lib")
        .join("rustlib")
        .join(WASM_TARGET)
        .join("lib");
    if target_lib.is_dir() {
        return Ok(());
    }

    // Under rustup, RUSTUP_TOOLCHAIN names the toolchain cargo was started with.
    let toolchain = env::var("RUSTUP_TOOLCHAIN").ok();
    let mut add = Command::new("rustup");
    add.args(["target", "add", WASM_TARGET]);
    if let Some(toolchain) = &toolchain {
        add.args(["--toolchain", toolchain]);
    }
    let manual = match &toolchain {
        Some(t) => format!("rustup target add {WASM_TARGET} --toolchain {t}"),
        None => format!("rustup target add {WASM_TARGET}"),
    };
    let have_rustup = Command::new("rustup")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_rustup {
        return Err(format!(
            "the handlers need the `{WASM_TARGET}` target, which {} does not have and no rustup \
             was found to add it; install the target's standard library (with rustup: `{manual}`) \
             and build again",
            sysroot.display()
        ));
    }
    // cargo shows warnings of workspace members' build scripts, so the user sees why the first
    // build pauses for a download.
    println!(
        "cargo:warning=the `{WASM_TARGET}` target is missing from {}; installing it: {manual}",
        sysroot.display()
    );
    eprintln!("installing the {WASM_TARGET} target: {manual}");
    let status = add
        .status()
        .map_err(|e| format!("could not run `{manual}`: {e}"))?;
    if !status.success() || !target_lib.is_dir() {
        return Err(format!(
            "`{manual}` exited with {status} and the target is still missing from {}; run it by \
             hand (it needs to reach rustup's distribution server) and build again",
            sysroot.display()
        ));
    }
    Ok(())
}

/// Member crates of the plugins workspace: each subdirectory with a `Cargo.toml`.
fn members(plugins: &Path) -> Result<Vec<PathBuf>, String> {
    let entries =
        fs::read_dir(plugins).map_err(|e| format!("reading {}: {e}", plugins.display()))?;
    let mut out = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("reading {}: {e}", plugins.display()))?
            .path();
        if path.join("Cargo.toml").is_file() {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}
