//! Test harness: a real slotd (in-process or as a child process) with a temp SQLite database,
//! the real compiled fixture handler, and the stub provider over HTTP.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use slotd_core::clock::{DynClock, ManualClock, SystemClock};
use slotd_core::config::{Config, HandlerConfig, PoolConfig, Secret};
use slotd_server::scheduler::Scheduler;
use slotd_server::services::Services;
use slotd_testkit::stub::{StubHandle, StubOptions, StubProvider};
use tempfile::TempDir;

/// Where `host/testkit/build.rs` put the compiled handlers.
pub fn built_plugin(name: &str) -> PathBuf {
    slotd_testkit::built_handler(name).unwrap_or_else(|| panic!("handler {name} was not built"))
}

/// A temp dir with `plugins/fixture.wasm` in it.
pub fn plugins_dir_with_fixture(dir: &Path) -> PathBuf {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).expect("create plugins dir");
    std::fs::copy(built_plugin("fixture"), plugins.join("fixture.wasm"))
        .expect("copy fixture.wasm");
    plugins
}

/// A handler component a test's slotd loads: its name (the file is dropped into the plugins
/// directory as `<name>.wasm`) and the component file.
pub type Component = (&'static str, PathBuf);

/// `dir/plugins` holding `components`.
pub fn plugins_with(dir: &Path, components: &[Component]) -> PathBuf {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugins dir");
    for (name, file) in components {
        std::fs::copy(file, plugins.join(format!("{name}.wasm")))
            .unwrap_or_else(|e| panic!("copy {}: {e}", file.display()));
    }
    plugins
}

/// The fixture handler's configuration, pointing at the stub.
pub fn fixture_handler_config(stub: &StubHandle) -> HandlerConfig {
    let mut h = HandlerConfig::default();
    h.settings
        .insert("base_url".into(), stub.base_url().to_string());
    h.secrets
        .insert("secret_key".into(), Secret::new("fixture-secret"));
    h.allowed_hosts.push(stub.addr().to_string());
    h
}

/// A config for in-process tests: temp SQLite, fixture loaded, fast timings.
pub fn test_config(dir: &Path, stub: &StubHandle, slots: u32) -> Config {
    let mut c = Config {
        database_url: format!("sqlite://{}", dir.join("slotd.db").display()),
        plugins_dir: plugins_dir_with_fixture(dir),
        object_store: format!("file://{}", dir.join("objects").display()),
        scheduler: slotd_core::config::SchedulerConfig::scaled_to(Duration::from_millis(20)),
        ..Config::default()
    };
    c.scheduler.min_rest = Duration::from_millis(1);
    c.scheduler.retry_budget = 3;
    c.limits.call_deadline = Duration::from_secs(2);
    c.limits.memory_bytes = 32 * 1024 * 1024;
    c.pools.insert("fixture".into(), PoolConfig::slots(slots));
    c.pools.insert("fixture-b".into(), PoolConfig::slots(slots));
    c.handlers
        .insert("fixture".into(), fixture_handler_config(stub));
    c
}

/// An in-process slotd whose scheduler the test drives by hand with a manual clock.
pub struct Manual {
    pub _dir: TempDir,
    pub stub: StubHandle,
    pub services: Services,
    pub scheduler: Arc<Scheduler>,
    pub clock: Arc<ManualClock>,
    /// Set by [`Manual::check`]; a harness dropped without it fails the test (see `Drop`).
    checked: std::sync::atomic::AtomicBool,
}

/// Every test that drives a [`Manual`] ends with `slotd check` on its database: a harness
/// dropped at the end of a passing test without [`Manual::check`] having run fails that test.
impl Drop for Manual {
    fn drop(&mut self) {
        if !std::thread::panicking() && !self.checked.load(std::sync::atomic::Ordering::SeqCst) {
            panic!(
                "test ended without Manual::check(): every end-to-end test ends with slotd check"
            );
        }
    }
}

impl Manual {
    pub async fn start(slots: u32, stub_limit: u32) -> Manual {
        Self::start_with(slots, stub_limit, |_| {}).await
    }

    pub async fn start_with(
        slots: u32,
        stub_limit: u32,
        tweak: impl FnOnce(&mut Config),
    ) -> Manual {
        let dir = TempDir::new().expect("temp dir");
        let stub = StubProvider::start(StubOptions { limit: stub_limit })
            .await
            .expect("stub provider");
        let mut config = test_config(dir.path(), &stub, slots);
        tweak(&mut config);
        let clock = ManualClock::new(1_000_000);
        let dyn_clock: DynClock = clock.clone();
        let services = slotd_server::app::build_with_clock(config, dyn_clock)
            .await
            .expect("build slotd");
        assert!(
            services.registry.for_type("fixture").is_some(),
            "fixture handler must load"
        );
        let scheduler = Scheduler::new(services.clone());
        Manual {
            _dir: dir,
            stub,
            services,
            scheduler,
            clock,
            checked: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Submit a fixture task through the API router (the real HTTP handler code).
    pub async fn submit(&self, task_type: &str, payload: Value) -> String {
        let (status, body) = api_call(
            &self.services,
            "POST",
            &format!("/v1/tasks/{task_type}"),
            Some(serde_json::json!({ "payload": payload })),
        )
        .await;
        assert_eq!(status, 202, "submit answered {status}: {body}");
        body["task_id"].as_str().expect("task_id").to_string()
    }

    /// Submit a fixture task with a whole request body (`payload` and the optional fields).
    pub async fn submit_body(&self, body: Value) -> String {
        let (status, answer) =
            api_call(&self.services, "POST", "/v1/tasks/fixture", Some(body)).await;
        assert_eq!(status, 202, "submit answered {status}: {answer}");
        answer["task_id"].as_str().expect("task_id").to_string()
    }

    /// Submit as the tenant of API key `key`.
    pub async fn submit_as(&self, key: &str, task_type: &str, payload: Value) -> String {
        let (status, body) = api_call_as(
            &self.services,
            "POST",
            &format!("/v1/tasks/{task_type}"),
            Some(serde_json::json!({ "payload": payload })),
            Some(key),
        )
        .await;
        assert_eq!(status, 202, "submit answered {status}: {body}");
        body["task_id"].as_str().expect("task_id").to_string()
    }

    pub async fn task(&self, id: &str) -> Value {
        let (status, body) =
            api_call(&self.services, "GET", &format!("/v1/tasks/{id}"), None).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// One scheduler round for the given pools: tick, finalize, wait for finalizers.
    pub async fn round(
        &self,
        pools: &[&str],
        advance_ms: i64,
    ) -> Vec<slotd_server::scheduler::TickReport> {
        self.clock.advance(advance_ms);
        let now = self.clock.as_ref().now_ms();
        let mut reports = Vec::new();
        for p in pools {
            reports.push(self.scheduler.run_once(p, now).await.expect("run_once"));
        }
        self.scheduler
            .finalize_once(now)
            .await
            .expect("finalize_once");
        self.scheduler.finalize_idle().await;
        reports
    }

    /// `slotd check` on this harness's database and object store.
    pub async fn check(&self) {
        assert_services_check_clean(&self.services).await;
        self.checked
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Run rounds until `done` says so, at most `max_rounds`.
    pub async fn run_until(
        &self,
        pools: &[&str],
        max_rounds: usize,
        mut done: impl AsyncFnMut(&Self) -> bool,
    ) -> usize {
        for round in 0..max_rounds {
            if done(self).await {
                return round;
            }
            self.round(pools, 50).await;
        }
        panic!("not done after {max_rounds} scheduler rounds");
    }
}

use slotd_core::clock::Clock;

/// Call the API router in-process.
pub async fn api_call(
    services: &Services,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    api_call_as(services, method, path, body, None).await
}

/// [`api_call`] with a bearer API key.
pub async fn api_call_as(
    services: &Services,
    method: &str,
    path: &str,
    body: Option<Value>,
    key: Option<&str>,
) -> (u16, Value) {
    use tower::ServiceExt;
    let mut req = axum::http::Request::builder();
    if let Some(key) = key {
        req = req.header("authorization", format!("Bearer {key}"));
    }
    let req = req
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(
            body.map(|b| b.to_string()).unwrap_or_default(),
        ))
        .expect("request");
    let resp = slotd_server::api::router(services.clone())
        .oneshot(req)
        .await
        .expect("router");
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), 16 * 1024 * 1024)
        .await
        .expect("body");
    let v = serde_json::from_slice(&bytes)
        .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, v)
}

/// Poll `f` until it returns `Some`, or panic after `deadline`.
pub async fn eventually<T>(
    deadline: Duration,
    what: &str,
    mut f: impl AsyncFnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The real clock, for tests that run the real loops.
pub fn system_clock() -> DynClock {
    Arc::new(SystemClock)
}

/// `POST {base}/v1/tasks/{ty}` with `body`; asserts 202 and returns the task id.
pub async fn post_task(client: &reqwest::Client, base: &str, ty: &str, body: Value) -> String {
    let r = client
        .post(format!("{base}/v1/tasks/{ty}"))
        .json(&body)
        .send()
        .await
        .expect("submit");
    let status = r.status();
    let v: Value = r.json().await.expect("json");
    assert_eq!(status, 202, "{v}");
    v["task_id"].as_str().expect("task_id").to_string()
}

/// Wait until every task answers `completed` over HTTP; returns their views.
pub async fn wait_all_completed(
    client: &reqwest::Client,
    base: &str,
    ids: &[String],
    deadline: Duration,
) -> Vec<Value> {
    eventually(deadline, "every task completed", async || {
        let mut out = Vec::new();
        for id in ids {
            let v = get_json(client, &format!("{base}/v1/tasks/{id}")).await?;
            if v["status"] != "completed" {
                return None;
            }
            out.push(v);
        }
        Some(out)
    })
    .await
}

/// Start the real `slotd serve` binary with a config file, logging to `log`.
pub fn spawn_slotd(config: &Path, log: &Path, extra: &[&str]) -> std::process::Child {
    spawn_slotd_with_env(config, log, extra, &[])
}

/// [`spawn_slotd`] with environment variables set for the child (they beat the defaults, e.g.
/// `SLOTD_LOG`).
pub fn spawn_slotd_with_env(
    config: &Path,
    log: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> std::process::Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("log file");
    std::process::Command::new(env!("CARGO_BIN_EXE_slotd"))
        .arg("serve")
        .args(extra)
        .arg("--config")
        .arg(config)
        .env("SLOTD_LOG", "warn")
        .env_remove("SLOTD_DATABASE_URL")
        .env_remove("SLOTD_REDIS_URL")
        .env_remove("SLOTD_LISTEN")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn slotd")
}

/// `slotd check` (the library behind the command) on a test's database: panics with every
/// finding. `objects` also verifies the artifacts; `pools` are the configured maxima.
pub async fn assert_check_clean(database_url: &str, objects: Option<&str>, pools: &[(&str, u32)]) {
    use slotd_core::clock::Clock;
    check_clean_at(database_url, objects, pools, SystemClock.now_ms()).await;
}

/// [`assert_check_clean`] at `now_ms` (the harness's clock, which may be a manual one).
async fn check_clean_at(
    database_url: &str,
    objects: Option<&str>,
    pools: &[(&str, u32)],
    now_ms: i64,
) {
    let report = check_report_at(database_url, objects, pools, now_ms).await;
    assert!(report.units > 0, "slotd check saw no units");
}

/// Each configured pool's quotas, and each provider account's own, for `slotd check`.
pub fn quotas_of(config: &slotd_core::config::Config) -> (Quotas, Quotas) {
    let pools = config
        .pools
        .iter()
        .map(|(name, p)| (name.clone(), p.rate.into_iter().chain(p.daily).collect()))
        .collect();
    let accounts = config
        .handlers
        .values()
        .flat_map(|h| &h.accounts)
        .map(|a| {
            (
                a.name.clone(),
                a.rate.into_iter().chain(a.daily).collect::<Vec<_>>(),
            )
        })
        .filter(|(_, q)| !q.is_empty())
        .collect();
    (pools, accounts)
}

/// Pools' quotas as `slotd check` takes them.
pub type Quotas = std::collections::BTreeMap<String, Vec<slotd_core::config::Quota>>;

/// `slotd check` on a database: panics with every finding, returns the report (how many
/// tasks and units it read) when there are none.
pub async fn check_report_at(
    database_url: &str,
    objects: Option<&str>,
    pools: &[(&str, u32)],
    now_ms: i64,
) -> slotd_server::check::Report {
    check_report_with(
        database_url,
        objects,
        pools,
        (Quotas::new(), Quotas::new()),
        now_ms,
    )
    .await
}

/// [`check_report_at`] that also checks pools' quota windows.
pub async fn check_report_with(
    database_url: &str,
    objects: Option<&str>,
    pools: &[(&str, u32)],
    (pool_quotas, account_quotas): (Quotas, Quotas),
    now_ms: i64,
) -> slotd_server::check::Report {
    let opts = slotd_server::check::CheckOptions {
        pool_quotas,
        account_quotas,
        database_url: database_url.to_string(),
        objects: objects.map(String::from),
        redis_url: None,
        redis_prefix: String::new(),
        pool_limits: pools.iter().map(|(p, n)| (p.to_string(), *n)).collect(),
        account_limits: Default::default(),
        shared_accounts: Default::default(),
        finalize_grace: slotd_server::check::FINALIZE_GRACE_DEFAULT,
        now_ms,
    };
    let report = slotd_server::check::run(&opts)
        .await
        .expect("slotd check ran");
    let findings: Vec<String> = report.findings.iter().map(ToString::to_string).collect();
    assert!(
        findings.is_empty(),
        "slotd check found {} problem(s):\n{}",
        findings.len(),
        findings.join("\n")
    );
    report
}

/// [`assert_check_clean`] on what a running slotd's configuration names: its database, its
/// object store (artifacts verified) and its pools' limits.
pub async fn assert_services_check_clean(services: &Services) {
    let report = services_check(services).await;
    assert!(report.units > 0, "slotd check saw no units");
}

/// `slotd check` on what a running slotd's configuration names, for a test that may have
/// stored nothing: panics with every finding, returns what was read.
pub async fn services_check(services: &Services) -> slotd_server::check::Report {
    let opts =
        slotd_server::check::CheckOptions::for_config(&services.config, services.clock.now_ms());
    let report = slotd_server::check::run(&opts)
        .await
        .expect("slotd check ran");
    assert_no_findings(&report, "");
    report
}

/// Panic with every finding of `report` (`when` says at which point of the test).
fn assert_no_findings(report: &slotd_server::check::Report, when: &str) {
    let findings: Vec<String> = report.findings.iter().map(ToString::to_string).collect();
    assert!(
        findings.is_empty(),
        "slotd check{when} found {} problem(s):\n{}",
        findings.len(),
        findings.join("\n")
    );
}

/// Runs `slotd check` when dropped: a harness holds one (as its first field, so it runs
/// before anything the check reads is dropped) and every test that uses the harness ends
/// with a clean check, whether or not it asks for one. Nothing runs when the test is already
/// failing.
pub struct CheckOnDrop {
    opts: slotd_server::check::CheckOptions,
    clock: DynClock,
}

impl CheckOnDrop {
    /// The check of what `services`' configuration names, at its clock's time.
    pub fn for_services(services: &Services) -> CheckOnDrop {
        CheckOnDrop {
            opts: slotd_server::check::CheckOptions::for_config(&services.config, 0),
            clock: services.clock.clone(),
        }
    }

    /// A check built by hand (a cluster of processes: no in-process services).
    pub fn with(opts: slotd_server::check::CheckOptions) -> CheckOnDrop {
        CheckOnDrop {
            opts,
            clock: system_clock(),
        }
    }
}

impl Drop for CheckOnDrop {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let mut opts = self.opts.clone();
        opts.now_ms = self.clock.now_ms();
        // A thread and runtime of its own: `Drop` cannot await, and the test's runtime may be
        // a single thread busy dropping this.
        let ran = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| anyhow::anyhow!("runtime: {e}"))?;
            rt.block_on(slotd_server::check::run(&opts))
        })
        .join();
        match ran {
            Ok(Ok(report)) => assert_no_findings(&report, " (at the end of the test)"),
            Ok(Err(e)) => panic!("slotd check could not run at the end of the test: {e:#}"),
            Err(_) => panic!("slotd check panicked at the end of the test"),
        }
    }
}

/// A port nothing listens on right now (for a `listen` address in a config file).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Wait until a slotd answers `/healthz`.
pub async fn wait_healthy(client: &reqwest::Client, base: &str) {
    eventually(Duration::from_secs(60), "slotd /healthz", async || {
        let r = client.get(format!("{base}/healthz")).send().await.ok()?;
        r.status().is_success().then_some(())
    })
    .await;
}

/// The sum of every series of metric `name` in a process's `/metrics`; `None` when it does
/// not answer (within 2 s: a paused process accepts the connection but never answers).
pub async fn metric_sum(client: &reqwest::Client, base: &str, name: &str) -> Option<f64> {
    let text = client
        .get(format!("{base}/metrics"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    Some(
        text.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

/// A `slotd.toml` in `dir` for the real binary: SQLite in `dir`, the fixture handler against
/// `stub` on a pool of 5, listening on `port`, with `sections` (TOML, e.g. `[scheduler]` and
/// `[webhooks]` tables) after the top-level keys.
pub fn fixture_config_file(
    dir: &Path,
    stub: &StubHandle,
    port: u16,
    sections: &str,
) -> std::path::PathBuf {
    let plugins = plugins_dir_with_fixture(dir);
    let text = format!(
        r#"
listen = "127.0.0.1:{port}"
database_url = "sqlite://{db}"
plugins_dir = "{plugins}"
object_store = "file://{objects}"

{sections}

[pools.fixture]
max_slots = 5

[handlers.fixture]
base_url = "{base}"
allowed_hosts = ["{host}"]
"#,
        db = dir.join("slotd.db").display(),
        plugins = plugins.display(),
        objects = dir.join("objects").display(),
        base = stub.base_url(),
        host = stub.addr(),
    );
    let path = dir.join("slotd.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

/// GET `url` as JSON; `None` if it did not answer with JSON (for polling with [`eventually`]).
pub async fn get_json(client: &reqwest::Client, url: &str) -> Option<Value> {
    client.get(url).send().await.ok()?.json().await.ok()
}

/// Held by the tests that measure latency (the cluster's wake-ups) and by the ones that load
/// the machine most (a browser, schemathesis), so that none of them runs beside another: on
/// two cores a browser starting next to a cluster turns milliseconds into a tick.
pub static QUIET: std::sync::LazyLock<tokio::sync::Mutex<()>> =
    std::sync::LazyLock::new(|| tokio::sync::Mutex::new(()));

/// `GET {base}/v1/tasks/{id}` for each id until every task is terminal (completed, failed or
/// cancelled); their views, in order. The harnesses' `wait_terminal`.
pub async fn tasks_terminal(
    client: &reqwest::Client,
    base: &str,
    ids: &[String],
    deadline: Duration,
) -> Vec<Value> {
    eventually(deadline, "tasks terminal", async || {
        let mut out = Vec::new();
        for id in ids {
            let v: Value = client
                .get(format!("{base}/v1/tasks/{id}"))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            if !matches!(
                v["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            ) {
                return None;
            }
            out.push(v);
        }
        Some(out)
    })
    .await
}

/// Every completed unit's stored file: its bytes hash to `provider_sha256(provider job id)`
/// (the simulator's file of that job) and to the sha256 slotd recorded. Returns how many were
/// checked.
pub async fn check_provider_files(
    services: &slotd_server::services::Services,
    views: &[Value],
    provider_sha256: impl Fn(&str) -> String,
) -> usize {
    use sha2::Digest;
    let mut checked = 0;
    for v in views {
        for r in v["results"].as_array().into_iter().flatten() {
            if r["status"] != "completed" {
                continue;
            }
            let job = r["provider_task_id"].as_str().expect("provider_task_id");
            let key = r["object_key"].as_str().expect("object_key");
            let bytes = services
                .objects
                .get_bytes(key)
                .await
                .expect("stored object");
            let sha = hex::encode(sha2::Sha256::digest(&bytes));
            assert_eq!(
                sha,
                provider_sha256(job),
                "stored file differs from the provider's output of {job}"
            );
            assert_eq!(r["sha256"], sha, "recorded sha256 differs from the file");
            checked += 1;
        }
    }
    checked
}

/// The variable that lets a run skip, on purpose, the tests that drive a tool from outside
/// Rust (chromium, schemathesis). It is read when the test binary is built
/// (`host/slotd/build.rs` turns it into the `slotd_skip_tool_tests` cfg, which marks those
/// tests `#[ignore]`), so a requested skip shows in the runner's own output as `ignored`.
pub const SKIP_TOOL_TESTS: &str = "SLOTD_SKIP_TOOL_TESTS";

/// A test that needs `what` found it missing: it fails, naming the tool and how to get it. A
/// missing tool never passes a test: a run that means to go without it builds the tests with
/// `SLOTD_SKIP_TOOL_TESTS=1`, and then the test does not run at all.
pub fn fail_for_missing_tool(test: &str, what: &str, how: &str) -> ! {
    let asked = std::env::var(SKIP_TOOL_TESTS).is_ok_and(|v| v == "1");
    let note = if asked {
        " (this binary was built without it: the variable is read at build time, so run \
         `cargo test` with it set)"
    } else {
        ""
    };
    panic!(
        "{test} needs {what}: {how} (`bash .ci/test` installs it), or build and run the tests \
         with {SKIP_TOOL_TESTS}=1 to skip this test on purpose{note}"
    );
}

/// From a slotd database's unit log, for the units of `pool`: how many units, explicit
/// retries (`retry requested` events), and units that failed with no provider job ever
/// accepted. For single-stage work a provider's own count of creates must be
/// `units + retries - never_accepted`: anything above is a second job for one submission.
pub async fn unit_log_counts(database_url: &str, pool: &str) -> (i64, i64, i64) {
    const UNITS: &str = "SELECT count(*) FROM units WHERE pool = $1";
    const RETRIES: &str = "SELECT count(*) FROM unit_events e JOIN units u ON u.id = e.unit_id \
         WHERE u.pool = $1 AND e.detail LIKE 'retry requested:%'";
    const NEVER: &str = "SELECT count(*) FROM units u WHERE u.pool = $1 \
         AND u.status = 'failed' AND NOT EXISTS (SELECT 1 FROM unit_events e \
         WHERE e.unit_id = u.id AND e.detail LIKE 'accepted as provider job %')";
    let mut out = [0i64; 3];
    if database_url.starts_with("sqlite:") {
        let db = sqlx::SqlitePool::connect(database_url)
            .await
            .expect("connect");
        for (n, sql) in out.iter_mut().zip([UNITS, RETRIES, NEVER]) {
            *n = sqlx::query_scalar(sql)
                .bind(pool)
                .fetch_one(&db)
                .await
                .expect(sql);
        }
        db.close().await;
    } else {
        let db = sqlx::PgPool::connect(database_url).await.expect("connect");
        for (n, sql) in out.iter_mut().zip([UNITS, RETRIES, NEVER]) {
            *n = sqlx::query_scalar(sql)
                .bind(pool)
                .fetch_one(&db)
                .await
                .expect(sql);
        }
        db.close().await;
    }
    (out[0], out[1], out[2])
}
