//! `slotd plugin new` as a handler author uses it: the real binary writes a project into a
//! directory outside the repository, cargo builds it there (the SDK is vendored: no path back
//! into the repository), `slotd plugin check` accepts the component, and a real `slotd serve`
//! with it in its plugins directory runs a task against the stub provider to completion, files
//! stored; the recording it made replays offline; `slotd check` clean.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

use serde_json::json;
use slotd_testkit::stub::{StubHandle, StubOptions, StubProvider};

use crate::support::*;

/// The handler the test generates: its name, task type and pool.
const NAME: &str = "e2e-handler";

/// Outer-build variables a nested cargo must not see (as in host/testkit/build.rs): they would change
/// what it compiles (flags, wrappers, target) or where.
const SCRUBBED: &[&str] = &[
    "RUSTFLAGS",
    "RUSTDOCFLAGS",
    "RUSTC",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTDOC",
];
/// `CARGO_*` variables kept: where and how to download.
const CARGO_KEPT_PREFIXES: &[&str] = &[
    "CARGO_HOME",
    "CARGO_NET_",
    "CARGO_HTTP_",
    "CARGO_REGISTRIES_",
    "CARGO_REGISTRY_",
];

/// Where generated projects build: under the repository's target directory (the slotd
/// binary's `target/debug/..`), so repeated runs reuse the compiled dependencies.
fn cargo_target_dir() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_slotd"));
    let target = bin.parent().and_then(Path::parent).expect("target dir");
    target.join("plugin-new")
}

/// Panics with the command's output unless it succeeded; returns stdout.
fn succeeded(what: &str, out: Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what} exited with {}:\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

/// `cargo ARGS` in `dir`, as the handler author would run it.
fn cargo(dir: &Path, args: &[&str]) -> String {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(args)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", cargo_target_dir());
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let cargo_var =
            key.starts_with("CARGO_") && !CARGO_KEPT_PREFIXES.iter().any(|p| key.starts_with(p));
        if (cargo_var && key != "CARGO_TARGET_DIR") || SCRUBBED.contains(&key) {
            cmd.env_remove(key);
        }
    }
    succeeded(
        &format!("cargo {}", args.join(" ")),
        cmd.output().expect("run cargo"),
    )
}

fn path_arg(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// `slotd ARGS` (the binary under test).
fn slotd(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_slotd"))
        .args(args)
        .env_remove("SLOTD_CONFIG")
        .output()
        .expect("run slotd");
    succeeded(&format!("slotd {}", args.join(" ")), out)
}

/// `slotd plugin new`, its unit tests, `cargo build --release`, `slotd plugin check`: the
/// built component.
fn generate_and_build(parent: &Path) -> PathBuf {
    let printed = slotd(&["plugin", "new", NAME, "--dir", path_arg(parent)]);
    assert!(printed.contains("cargo build --release"), "{printed}");
    let project = parent.join(NAME);
    assert!(project.join("vendor/slotd-sdk/wit/handler.wit").is_file());

    cargo(&project, &["fmt", "--check"]);
    let tests = cargo(&project, &["test", "--target", "host-tuple"]);
    assert!(tests.contains("test result: ok. 4 passed"), "{tests}");
    cargo(&project, &["build", "--release"]);

    let wasm = cargo_target_dir().join("wasm32-wasip2/release/e2e_handler.wasm");
    let checked = slotd(&["plugin", "check", path_arg(&wasm)]);
    assert!(
        checked.contains(&format!("handler {NAME} 0.1.0")),
        "{checked}"
    );
    assert!(
        checked.contains(&format!("task type {NAME}: main on pool {NAME}")),
        "{checked}"
    );
    assert!(
        checked.contains("ok: slotd would load this handler"),
        "{checked}"
    );
    wasm
}

/// A `slotd.toml` like the README's: the handler's `base_url` and `allowed_hosts`, its pool.
fn write_config(dir: &Path, plugins: &Path, stub: &StubHandle, port: u16) -> PathBuf {
    let text = format!(
        r#"
listen = "127.0.0.1:{port}"
database_url = "sqlite://{db}"
plugins_dir = "{plugins}"
object_store = "file://{objects}"

[scheduler]
tick_interval = "20ms"
min_rest = "1ms"

[pools.{NAME}]
max_slots = 2

[handlers.{NAME}]
base_url = "{base}"
allowed_hosts = ["{host}"]
record = "{recordings}"
"#,
        db = dir.join("slotd.db").display(),
        plugins = plugins.display(),
        objects = dir.join("objects").display(),
        recordings = dir.join("recordings").display(),
        base = stub.base_url(),
        host = stub.addr(),
    );
    let path = dir.join("slotd.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

/// The `slotd serve` child, killed when the test ends however it ends.
struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_handler_builds_outside_the_repo_and_serves_the_stub_provider() {
    let outside = tempfile::TempDir::new().expect("tmp");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("repo");
    assert!(
        !outside.path().starts_with(repo),
        "the project must be generated outside the repository"
    );
    let wasm = generate_and_build(outside.path());

    let dir = tempfile::TempDir::new().expect("tmp");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugins dir");
    std::fs::copy(&wasm, plugins.join(format!("{NAME}.wasm"))).expect("drop the handler in");
    let stub = StubProvider::start(StubOptions { limit: 2 })
        .await
        .expect("stub provider");
    let port = free_port();
    let config = write_config(dir.path(), &plugins, &stub, port);
    let log = dir.path().join("slotd.log");
    let _serving = Serving(spawn_slotd(&config, &log, &[]));
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    wait_healthy(&client, &base).await;

    let items = json!([{"polls": 0}, {"polls": 1}, {"polls": 2}, {}]);
    let id = post_task(&client, &base, NAME, json!({"payload": {"items": items}})).await;
    let views = wait_all_completed(&client, &base, &[id], Duration::from_secs(60)).await;
    let results = views[0]["results"].as_array().expect("results");
    assert_eq!(results.len(), 4, "{}", views[0]);
    for r in results {
        assert_eq!(r["status"], "completed", "{r}");
        let artifacts = r["artifacts"].as_array().map(Vec::len);
        assert_eq!(artifacts, Some(1), "one stored file per unit: {r}");
    }
    let stats = stub.stats();
    assert_eq!(stats.creates, 4, "one job per item");
    assert!(stats.creates_by_key.values().all(|&n| n == 1), "{stats:?}");
    assert_eq!(stats.downloads, 4, "every file downloaded once");
    assert!(stats.max_in_flight <= 2, "the pool's 2 slots: {stats:?}");
    assert_eq!(stats.capacity_refusals, 0, "{stats:?}");
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !log_text.contains("panicked"),
        "slotd panicked:\n{log_text}"
    );

    // The README's offline path: the recording slotd made replays as recorded.
    let recording = dir.path().join(format!("recordings/{NAME}.jsonl"));
    let replayed = slotd(&["plugin", "replay", path_arg(&wasm), path_arg(&recording)]);
    assert!(
        replayed.contains("call(s) replayed as recorded"),
        "{replayed}"
    );

    let db_url = format!("sqlite://{}", dir.path().join("slotd.db").display());
    let objects_url = format!("file://{}", dir.path().join("objects").display());
    assert_check_clean(&db_url, Some(&objects_url), &[(NAME, 2)]).await;
}
