//! The operator console in a real browser: Debian's chromium driven through chromedriver
//! (WebDriver, `fantoccini`) against a running slotd (real loops, the Kling handlers, the Kling
//! simulator slowed so that a run lasts seconds).
//!
//! What a person would check: the pools page shows the pools and a live slot timeline with
//! bars; a task opens from the task list; cancel works from the page (under the loopback
//! rules); the back button returns to the previous page; the routes page shows a configured
//! route (its policy, units waiting, each target's state and room) and a routed task's page
//! which target served each unit and its cost; a shared task URL opens in a fresh tab; and a
//! task whose type and error carry HTML renders it as text. Screenshots land in
//! `<target>/console/` (`pools.png`, `task.png`, `routes.png`, …).
//!
//! Without chromium and chromedriver the test fails, naming them (`.ci/test` installs them),
//! unless the tests were built with `SLOTD_SKIP_TOOL_TESTS=1` to skip it on purpose (then the
//! runner lists it as ignored, with the reason).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use slotd_core::model::UnitStatus;
use slotd_store::{Field, NewDelivery, NewTask, NewUnit, UnitUpdate};

use crate::kling::{Run, sim_options, video_payload};
use crate::support::{eventually, fail_for_missing_tool, free_port};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// How long any one thing may take to show in the browser.
const DEADLINE: Duration = Duration::from_secs(60);
/// What an injected element would set, were the page to create it.
const XSS: &str = "<img src=x onerror=\"window.__xss=1\">";

/// The route the console shows.
const ROUTE: &str = crate::routes::ROUTE;

/// `clip`, ordered: Kling (loaded in this run), then Runway (not loaded).
fn clip_route() -> slotd_core::config::RouteConfig {
    let mut route = crate::routes::route(slotd_core::config::RoutePolicy::Ordered, [0, 1, 2]);
    route.targets.truncate(2);
    route
}

/// chromedriver as a child process, killed when dropped.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Fails the test, naming them, when the browser tools are not installed
/// ([`fail_for_missing_tool`]); a run without them skips this test at build time instead.
fn require_browser() {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if !missing.is_empty() {
        fail_for_missing_tool(
            "console_browser",
            &format!("{missing:?}"),
            "apt-get install -y chromium chromium-driver",
        );
    }
}

/// Where screenshots go: `<target>/console/`.
fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("console");
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    dir
}

async fn start_browser(profile: &Path) -> (Driver, Client) {
    let port = free_port();
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let driver = Driver(child);
    let url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    eventually(
        Duration::from_secs(30),
        "chromedriver /status",
        async || {
            let r = http.get(format!("{url}/status")).send().await.ok()?;
            r.status().is_success().then_some(())
        },
    )
    .await;
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": CHROMIUM,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1440,1000",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&url)
        .await
        .expect("a chromium session");
    (driver, client)
}

/// Evaluate `script` (a function body returning a value) in the page.
async fn js(c: &Client, script: &str) -> Value {
    c.execute(script, vec![]).await.unwrap_or(Value::Null)
}

/// Wait until `script` returns something truthy in the page; returns it.
async fn until(c: &Client, what: &str, script: &str) -> Value {
    eventually(DEADLINE, what, async || {
        let v = js(c, script).await;
        let truthy = match &v {
            Value::Null | Value::Bool(false) => false,
            Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0),
            Value::String(s) => !s.is_empty(),
            _ => true,
        };
        truthy.then_some(v)
    })
    .await
}

async fn screenshot(c: &Client, name: &str) -> PathBuf {
    let png = c.screenshot().await.expect("screenshot");
    let path = screenshot_dir().join(name);
    std::fs::write(&path, png).expect("write screenshot");
    path
}

/// A failed task whose type and error message are HTML, stored directly (a unit no handler
/// serves, so the scheduler leaves it alone); returns its id.
async fn hostile_task(run: &Run) -> String {
    // The service holds no unit write: stored as another process would, through a store of
    // its own on the same database.
    let store = &slotd_store::open(&run.services.config.database_url)
        .await
        .expect("the store, with its unit writes");
    let id = uuid::Uuid::now_v7().to_string();
    let unit = uuid::Uuid::now_v7().to_string();
    let now = slotd_core::clock::Clock::now_ms(&slotd_core::clock::SystemClock);
    let task = NewTask {
        id: id.clone(),
        tenant: slotd_server::api::LOCAL_TENANT.into(),
        task_type: XSS.into(),
        payload: "{}".into(),
        idempotency_key: None,
        priority: 0,
        completion_webhook_url: None,
        units: vec![NewUnit {
            id: unit.clone(),
            pool: "console:hostile".into(),
            stage: "main".into(),
            spec: "{}".into(),
            state: "{}".into(),
            routes: None,
            routing: None,
            cost_estimate: None,
            planned_release: None,
        }],
        now,
        terms: Default::default(),
    };
    store
        .task_create(task)
        .await
        .expect("store the hostile task");
    store
        .unit_mark_submitted(std::slice::from_ref(&unit), now, now, None)
        .await
        .expect("mark submitted");
    let failed = UnitUpdate {
        unit_id: unit,
        from: Some(UnitStatus::Submitted),
        to: Some(UnitStatus::Failed),
        error: Field::Set(json!({ "code": "1201", "message": XSS }).to_string()),
        detail: Some(XSS.into()),
        ..UnitUpdate::default()
    };
    let report = store
        .unit_apply(&[failed], now + 1, None)
        .await
        .expect("fail it");
    assert_eq!(report.applied.len(), 1, "{report:?}");
    id
}

/// What the scheduler records when Kling refuses a routed unit before accepting its job.
const REFUSAL: &str = "route clip: kling-video/kling-v1-6 refused it (account_exhausted: kling 1102: \
     resource pack exhausted: 0 units left, the task needs 1); back to the route";

/// A unit whose event log holds a route refusal as the scheduler writes it (stored directly,
/// in a pool no handler serves, so the scheduler leaves it alone): the routes page counts it.
async fn route_refusal(run: &Run) {
    // The service holds no unit write: stored as another process would, through a store of
    // its own on the same database.
    let store = &slotd_store::open(&run.services.config.database_url)
        .await
        .expect("the store, with its unit writes");
    let id = uuid::Uuid::now_v7().to_string();
    let unit = uuid::Uuid::now_v7().to_string();
    let now = slotd_core::clock::Clock::now_ms(&slotd_core::clock::SystemClock);
    let task = NewTask {
        id,
        tenant: slotd_server::api::LOCAL_TENANT.into(),
        task_type: ROUTE.into(),
        payload: "{}".into(),
        idempotency_key: None,
        priority: 0,
        completion_webhook_url: None,
        units: vec![NewUnit {
            id: unit.clone(),
            pool: "console:refused".into(),
            stage: "main".into(),
            spec: "{}".into(),
            state: "{}".into(),
            routes: None,
            routing: None,
            cost_estimate: None,
            planned_release: None,
        }],
        now,
        terms: Default::default(),
    };
    store.task_create(task).await.expect("store the task");
    store
        .unit_mark_submitted(std::slice::from_ref(&unit), now, now, None)
        .await
        .expect("mark submitted");
    let refused = UnitUpdate {
        unit_id: unit,
        from: Some(UnitStatus::Submitted),
        to: Some(UnitStatus::Failed),
        detail: Some(REFUSAL.into()),
        ..UnitUpdate::default()
    };
    let report = store
        .unit_apply(&[refused], now + 1, None)
        .await
        .expect("record the refusal");
    assert_eq!(report.applied.len(), 1, "{report:?}");
}

/// Publish `plugin`'s build to the run's API with `query`; returns the HTTP status.
async fn publish(run: &Run, plugin: &str, query: &str) -> u16 {
    let bytes = std::fs::read(crate::support::built_plugin(plugin)).expect("the built handler");
    let r = run
        .client
        .post(format!("{}/v1/handlers{query}", run.base))
        .header("content-type", "application/wasm")
        .body(bytes)
        .send()
        .await
        .expect("publish");
    r.status().as_u16()
}

/// The handlers page lists the releases; kling-video's page shows a rollout of the next build
/// held at its first stage (it needs 1,000 of its units to be judged) with its stage, the live
/// checks and its steps; it is paused, then rolled back, from the page.
async fn handler_rollout(run: &Run, c: &Client) {
    let incumbent = publish(run, "kling-video", "").await;
    assert!(incumbent == 200 || incumbent == 201, "{incumbent}");
    let started = publish(run, "kling-video-next", "?rollout=10,50,100&min_units=1000").await;
    assert_eq!(started, 201);
    until(
        c,
        "the releases, one rolling out",
        r#"const rows = [...document.querySelectorAll('section.releases tbody tr')];
           return rows.some((r) => /kling-video/.test(r.textContent) && /rolling out/.test(r.textContent));"#,
    )
    .await;
    screenshot(c, "handlers.png").await;
    c.find(Locator::Css(
        r##"section.releases a[href="#/handlers/kling-video"]"##,
    ))
    .await
    .expect("the handler's link")
    .click()
    .await
    .expect("open the handler");
    let shown = until(
        c,
        "the rollout with its stage, its checks and its first step",
        r#"const card = document.querySelector('section.rollout[data-state="running"]');
           if (!card) return null;
           const stage = card.querySelector('.stages .stage.running')?.textContent;
           const checks = [...card.querySelectorAll('table.checks tr[data-check]')].map((r) => r.dataset.check);
           const steps = card.querySelectorAll('ol.steps li').length;
           return checks.length >= 5 && steps === 1 ? [stage, checks.slice(0, 1), steps] : null;"#,
    )
    .await;
    assert_eq!(shown, json!(["10 %", ["units failed"], 1]));
    let words = js(
        c,
        r#"return [...document.querySelectorAll('table.releases tr[data-release] [data-word]')].map((w) => w.dataset.word);"#,
    )
    .await;
    assert!(
        words
            .as_array()
            .is_some_and(|w| w.contains(&json!("canary"))),
        "the process's word on the candidate: {words}"
    );
    screenshot(c, "handler.png").await;
    for (action, state, steps) in [("pause", "paused", 2), ("rollback", "rolled_back", 3)] {
        c.find(Locator::Css(&format!(r#"button[data-action="{action}"]"#)))
            .await
            .expect("the action's button")
            .click()
            .await
            .expect("click");
        until(
            c,
            &format!("the rollout {state}, a step more"),
            &format!(
                r#"const card = document.querySelector('section.rollout[data-state="{state}"]');
                   return card && card.querySelectorAll('ol.steps li').length === {steps};"#
            ),
        )
        .await;
    }
    screenshot(c, "handler-rolled-back.png").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    slotd_skip_tool_tests,
    ignore = "SLOTD_SKIP_TOOL_TESTS=1: the chromium test is skipped on purpose"
)]
async fn console_in_a_browser() {
    require_browser();
    let _quiet = crate::support::QUIET.lock().await;
    // Clips of 30 s – 2 min simulated take 1.5 – 6 s: 80 shots on 4 slots would run for over a
    // minute, long enough for a loaded machine to reach the cancel while the task runs; the
    // cancel ends it early (only the jobs in flight finish).
    let mut opts = sim_options(7);
    opts.time_scale = 0.05;
    // A rate far above what the run needs: the pool card shows the quota beside the slots.
    let run = Run::start_with(opts, 4, false, |c| {
        if let Some(p) = c.pools.get_mut("kling:video") {
            p.rate = slotd_core::config::parse_rate("1000/min").ok();
            p.spend = Some(slotd_core::config::BudgetConfig {
                limit: 100_000.0,
                period: std::time::Duration::from_secs(30 * 86_400),
            });
        }
        // A route over Kling and a Runway handler this run does not load: the routes page
        // shows one target ready, the other not.
        c.routes.insert(ROUTE.into(), clip_route());
        // Video and avatars on one provider account of 6: the pool card shows the share.
        let share = |min, max| slotd_core::config::ShareConfig {
            min,
            max: Some(max),
            account: None,
        };
        c.provider_accounts.insert(
            "kling".into(),
            slotd_core::config::ProviderAccountConfig {
                max_slots: 6,
                pools: [
                    ("kling:video".to_string(), share(3, 4)),
                    ("kling:avatar".to_string(), share(1, 2)),
                ]
                .into(),
            },
        );
    })
    .await;
    // Two routed shots first (the oldest work: Kling, the first target with room, takes
    // them), three short tasks (the pool serves a tenant's tasks in order), then the long one
    // the test opens and cancels: the timeline shows several tasks' colors.
    let routed = run.submit(ROUTE, crate::routes::shots("console", 2)).await;
    for _ in 0..3 {
        run.submit("video", video_payload(3)).await;
    }
    let task = run.submit("video", video_payload(80)).await;
    let t0 = std::time::Instant::now();
    let profile = tempfile::TempDir::new().expect("profile dir");
    let (_driver, c) = start_browser(profile.path()).await;
    let base = run.base.clone();

    // Pools: the pool cards, then the live slot timeline with bars.
    c.goto(&format!("{base}/")).await.expect("load /");
    until(
        &c,
        "the kling:video pool card",
        r#"return !!document.querySelector('section.pool[data-pool="kling:video"]');"#,
    )
    .await;
    c.goto(&format!("{base}/#/pools?minutes=1"))
        .await
        .expect("one-minute window");
    let bars = until(
        &c,
        "the slot timeline with several bars, some ended",
        r#"const bars = document.querySelectorAll('section.pool[data-pool="kling:video"] svg.timeline rect.bar');
           const ended = [...bars].filter((b) => !b.classList.contains('open')).length;
           return bars.length >= 12 && ended >= 8 ? bars.length : 0;"#,
    )
    .await;
    eprintln!("{:?}: timeline shows {bars} bars", t0.elapsed());
    let lanes = js(&c, r#"return document.querySelectorAll('section.pool[data-pool="kling:video"] svg.timeline rect.lane').length;"#).await;
    assert_eq!(lanes, json!(4), "one row per slot of the pool");
    let quota = js(&c, r#"const q = document.querySelector('section.pool[data-pool="kling:video"] [data-quota="rate"]');
        return q ? q.textContent : null;"#).await;
    let quota = quota.as_str().unwrap_or_default().to_string();
    assert!(
        quota.contains("/ 1000") && quota.contains("rate (rolling 1m)"),
        "the pool card shows its rate quota: {quota:?}"
    );
    let spend = js(&c, r#"const q = document.querySelector('section.pool[data-pool="kling:video"] [data-spend="pool"]');
        return q ? q.textContent : null;"#).await;
    let spend = spend.as_str().unwrap_or_default().to_string();
    assert!(
        spend.contains("/ 100000") && spend.contains("spend per 30days"),
        "the pool card shows its spend limit: {spend:?}"
    );
    let shared = js(&c, r#"const q = document.querySelector('section.pool[data-pool="kling:video"] [data-shared="kling"]');
        return q ? q.textContent : null;"#).await;
    let shared = shared.as_str().unwrap_or_default().to_string();
    assert!(
        shared.contains("/ 4")
            && shared.contains("share of provider account kling (min 3")
            && shared.contains("/ 6"),
        "the pool card shows its share of the provider account: {shared:?}"
    );
    let pools_png = screenshot(&c, "pools.png").await;

    // Tasks: the list, then the task page by clicking its link.
    c.find(Locator::Css("header nav a[data-page=tasks]"))
        .await
        .expect("tasks nav")
        .click()
        .await
        .expect("click tasks");
    until(
        &c,
        "the task in the list",
        &format!(r#"return !!document.querySelector('tr[data-task="{task}"] a');"#),
    )
    .await;
    c.find(Locator::Css(&format!(r#"tr[data-task="{task}"] a"#)))
        .await
        .expect("task link")
        .click()
        .await
        .expect("open task");
    until(
        &c,
        "the task page with its units and their events",
        &format!(r#"return document.querySelector('section.task[data-task="{task}"]') && document.querySelectorAll('table.units tr[data-unit]').length === 80;"#),
    )
    .await;
    let url = c.current_url().await.expect("url");
    assert!(url.as_str().ends_with(&format!("#/tasks/{task}")), "{url}");
    let task_png = screenshot(&c, "task.png").await;

    // Cancel from the page (a JSON POST the loopback rules accept).
    c.find(Locator::Css("#cancel"))
        .await
        .expect("cancel button")
        .click()
        .await
        .expect("click cancel");
    let status = until(
        &c,
        "the status to show the cancel",
        r#"const s = document.querySelector('#task-status');
           return s && /cancel requested|cancelled/.test(s.textContent) ? s.textContent : '';"#,
    )
    .await;
    eprintln!("{:?}: after cancel: {status}", t0.elapsed());
    let view = run.task(&task).await;
    assert_eq!(view["cancel_requested"], true, "{view}");

    // Back: the task list again.
    c.back().await.expect("back");
    until(&c, "the task list after back", r#"return location.hash.startsWith('#/tasks') && !location.hash.startsWith('#/tasks/') && document.querySelector('main h1')?.textContent === 'Tasks' && !!document.querySelector('table.tasks');"#).await;
    screenshot(&c, "tasks.png").await;

    // Handlers: the two Kling handlers serving, and their durable history.
    c.goto(&format!("{base}/#/handlers"))
        .await
        .expect("handlers page");
    until(&c, "the handlers serving", r#"return /kling-video/.test(document.querySelector('main section.card table')?.textContent || '');"#).await;
    handler_rollout(&run, &c).await;

    // Routes: the route with its policy, its units waiting, each target's state and room, and
    // its refusals by reason.
    route_refusal(&run).await;
    c.goto(&format!("{base}/#/routes"))
        .await
        .expect("routes page");
    let route_card = format!(r#"section.route[data-route="{ROUTE}"]"#);
    let states = until(
        &c,
        "the route's targets and their states",
        &format!(
            r#"const card = document.querySelector('{route_card}');
               if (!card) return null;
               const state = (t) => card.querySelector(`tr[data-target="${{t}}"] td.state`)?.textContent;
               const kling = state('kling-video/kling-v1-6'), runway = state('runway-video/gen4_turbo');
               return kling && runway ? [kling, runway] : null;"#
        ),
    )
    .await;
    assert_eq!(
        states,
        json!(["ready", "handler not loaded"]),
        "Kling serves the route; the Runway handler is not loaded here"
    );
    let facts = js(
        &c,
        &format!(
            r#"const card = document.querySelector('{route_card}');
               const stat = (k) => card.querySelector(`[data-stat="${{k}}"] b`)?.textContent;
               return [stat('policy'), stat('pending'),
                       card.querySelector('tr[data-target="kling-video/kling-v1-6"] [data-pool="kling:video"]')?.textContent];"#
        ),
    )
    .await;
    assert_eq!(facts[0], json!("ordered"), "{facts}");
    assert!(
        facts[1].as_str().is_some_and(|n| n.parse::<u64>().is_ok()),
        "the units waiting on the route: {facts}"
    );
    assert!(
        facts[2]
            .as_str()
            .is_some_and(|p| p.starts_with("kling:video ") && p.contains(" / ")),
        "Kling's pool with its room: {facts}"
    );
    let refusals = until(
        &c,
        "Kling's refusal counted by reason",
        &format!(
            r#"const row = document.querySelector('{route_card} tr[data-target="kling-video/kling-v1-6"]');
               const chip = row?.querySelector('[data-reason="account_exhausted"] b')?.textContent;
               return chip ? [chip, row.querySelector('td.last-refusal').textContent,
                              document.querySelector('{route_card} [data-stat="refusals"] b').textContent] : null;"#
        ),
    )
    .await;
    assert_eq!(refusals, json!(["1", REFUSAL, "1"]));
    screenshot(&c, "routes.png").await;
    // No card for the pseudo-pool routed units wait in.
    c.goto(&format!("{base}/#/pools"))
        .await
        .expect("pools page");
    until(
        &c,
        "the pools again",
        r#"return !!document.querySelector('section.pool[data-pool="kling:video"]');"#,
    )
    .await;
    let route_pools = js(
        &c,
        r#"return document.querySelectorAll('section.pool[data-pool^="route:"]').length;"#,
    )
    .await;
    assert_eq!(route_pools, json!(0), "a route is not a pool card");

    // The routed task: each unit names the target that served it, and its cost.
    c.goto(&format!("{base}/#/tasks/{routed}"))
        .await
        .expect("routed task");
    let served = until(
        &c,
        "the routed units with their target and cost",
        r#"const rows = [...document.querySelectorAll('table.units tr[data-unit]')];
           const done = rows.length === 2 && rows.every((r) => /completed/.test(r.textContent) &&
             (r.querySelector('td.served-by')?.textContent || '').includes('kling-video / kling-v1-6') &&
             /^[0-9.]+$/.test(r.querySelector('td.cost')?.textContent || ''));
           return done ? rows.map((r) => r.querySelector('td.served-by').textContent + ' | ' + r.querySelector('td.cost').textContent) : null;"#,
    )
    .await;
    eprintln!("{:?}: routed units: {served}", t0.elapsed());
    let served_by = js(
        &c,
        "return [...document.querySelectorAll('.kv dt')].find((d) => d.textContent === 'served by')?.nextElementSibling?.textContent;",
    )
    .await;
    assert_eq!(served_by, json!("kling-video/kling-v1-6: 2"));
    screenshot(&c, "routed-task.png").await;

    // A shared link to the task, opened in a fresh tab.
    let tab = c.new_window(true).await.expect("new tab");
    c.switch_to_window(tab.handle).await.expect("switch tab");
    c.goto(&format!("{base}/#/tasks/{task}"))
        .await
        .expect("shared url");
    until(
        &c,
        "the task page from a shared URL",
        &format!(
            r#"return !!document.querySelector('section.task[data-task="{task}"] #task-status');"#
        ),
    )
    .await;

    // Hostile text renders as text: in the list and on the task page, no element made of it.
    let hostile = hostile_task(&run).await;
    c.goto(&format!("{base}/#/tasks/{hostile}"))
        .await
        .expect("hostile task");
    let shown = until(
        &c,
        "the hostile error shown",
        r#"const e = document.querySelector('td.unit-error'); return e ? e.textContent : '';"#,
    )
    .await;
    assert!(shown.as_str().is_some_and(|s| s.contains(XSS)), "{shown}");
    screenshot(&c, "hostile.png").await;
    let type_shown = js(&c, "return document.querySelector('.kv dd').textContent;").await;
    assert_eq!(type_shown, json!(XSS));
    c.goto(&format!("{base}/#/tasks")).await.expect("list");
    until(&c, "the hostile task in the list", &format!(r#"return document.querySelector('tr[data-task="{hostile}"] td:nth-child(2)')?.textContent;"#)).await;

    // A webhook delivery whose URL carries HTML: listed as text (its delivery to loopback is
    // refused by the SSRF rule and recorded as the last error).
    let delivery = NewDelivery {
        id: format!("msg_{hostile}"),
        task_id: hostile.clone(),
        tenant: slotd_server::api::LOCAL_TENANT.into(),
        url: format!("http://127.0.0.1:9/{XSS}"),
        event: "task.failed".into(),
        payload: "{}".into(),
        now: slotd_core::clock::Clock::now_ms(&slotd_core::clock::SystemClock),
    };
    run.services
        .store
        .webhook_enqueue(&delivery)
        .await
        .expect("queue a delivery");
    c.goto(&format!("{base}/#/webhooks"))
        .await
        .expect("webhooks page");
    let url_shown = until(
        &c,
        "the delivery listed",
        "return document.querySelector('table.deliveries tbody td.mono')?.textContent;",
    )
    .await;
    assert_eq!(url_shown, json!(delivery.url));
    screenshot(&c, "webhooks.png").await;

    let injected = js(
        &c,
        "return [document.querySelectorAll('main img').length, window.__xss === undefined];",
    )
    .await;
    assert_eq!(
        injected,
        json!([0, true]),
        "the page made an element out of API text"
    );

    c.close().await.expect("close the browser");
    eprintln!("{:?}: browser checks done", t0.elapsed());
    // Leave the run to end before the database audit.
    run.wait_terminal(std::slice::from_ref(&task), Duration::from_secs(120))
        .await;
    eprintln!(
        "screenshots: {} {}",
        pools_png.display(),
        task_png.display()
    );
    run.stop().await;
}
