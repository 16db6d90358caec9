//! fal's cancel and the lost submit answer end to end. fal cancels only requests still
//! `IN_QUEUE`; a running one goes on (and is billed) until fal reports its end, so its slot
//! stays held until then. fal has no idempotency key: a submit whose answer was lost is never
//! sent again while its outcome is unknown; `fal-video` finds the request it made in fal's
//! request history and carries on with it. The fal key stays out of the guest, the logs, the
//! recording and the task views.

use std::time::Duration;

use slotd_sim::fal::{ACCOUNT_DEFAULT, FalOptions, KeySpec};

use crate::fal::*;
use crate::support::*;

/// The account runs one request at once; the pool holds three slots, so fal runs one shot and
/// queues two. Cancelling the task removes the two queued requests at fal (confirmed, no
/// webhook) and frees their slots at once; the running one cannot be cancelled at fal, so its
/// slot stays held while fal runs it and is freed when fal reports the end. The task ends
/// `cancelled`; fal ran exactly one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fal_cancel_frees_queued_requests_at_once_and_running_ones_at_their_end() {
    let opts = FalOptions {
        concurrency: 1,
        // Slower: the running shot lasts seconds, long enough to look at it.
        time_scale: 0.1,
        ..sim_options()
    };
    let run = Run::start(opts, |c, _| {
        if let Some(p) = c.pools.get_mut(POOL) {
            p.max_slots = Some(3);
        }
    })
    .await;
    let id = run.submit(payload("cancel", 3)).await;
    eventually(
        Duration::from_secs(60),
        "one running and two queued at fal",
        async || {
            let jobs = run.sim.jobs();
            let running = jobs.iter().filter(|j| j.status == "IN_PROGRESS").count();
            let queued = jobs.iter().filter(|j| j.status == "IN_QUEUE").count();
            (running == 1 && queued == 2).then_some(())
        },
    )
    .await;
    let running = run
        .sim
        .jobs()
        .into_iter()
        .find(|j| j.status == "IN_PROGRESS")
        .expect("running job");
    run.cancel(&id).await;

    // The queued two are cancelled at fal and their slots freed while the third still runs.
    eventually(
        Duration::from_secs(30),
        "queued requests cancelled at fal",
        async || {
            let pool = run.pool().await;
            let stats = run.sim.stats();
            let still_running = run
                .sim
                .jobs()
                .iter()
                .any(|j| j.request_id == running.request_id && j.status == "IN_PROGRESS");
            (stats.cancelled == 2 && pool["used"] == 1 && still_running).then_some(())
        },
    )
    .await;
    let view = run.task(&id).await;
    let statuses: Vec<&str> = results(&view)
        .iter()
        .filter_map(|r| r["status"].as_str())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == "cancelled").count(),
        2,
        "{view}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == "submitted").count(),
        1,
        "the running one keeps its slot: {view}"
    );

    let views = run.wait_terminal(&[id], Duration::from_secs(120)).await;
    assert_eq!(views[0]["status"], "cancelled", "{}", views[0]);
    let pool = run.pool().await;
    assert_eq!(pool["used"], 0, "{pool}");
    let stats = run.sim.stats();
    assert_eq!(stats.accounts[ACCOUNT_DEFAULT].submits, 3);
    assert_eq!(stats.accounts[ACCOUNT_DEFAULT].completed, 3, "{stats:?}");
    let ran: Vec<_> = run
        .sim
        .jobs()
        .into_iter()
        .filter(|j| j.started.is_some())
        .collect();
    assert_eq!(
        ran.len(),
        1,
        "fal ran only the one that had started: {ran:?}"
    );
    run.stop().await.shutdown().await.expect("sim stop");
}

/// Every submit answer is lost (the request is created at fal, slotd sees a 502 or a cut
/// connection). slotd never submits again while the outcome is unknown: fal sees exactly one
/// request per shot, `fal-video` finds each in fal's request history once it has finished,
/// and the shots complete with fal's files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fal_a_lost_submit_answer_is_resolved_without_a_second_paid_request() {
    let opts = FalOptions {
        lost_answer_rate: 1.0,
        ..sim_options()
    };
    let run = Run::start(opts, |_, _| {}).await;
    let id = run.submit(payload("lost", 3)).await;
    eventually(Duration::from_secs(60), "three lost answers", async || {
        (run.sim.stats().faults.lost_answers == 3).then_some(())
    })
    .await;
    run.sim.set_lost_answer_rate(0.0);
    let views = run.wait_terminal(&[id], Duration::from_secs(120)).await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    let stats = run.sim.stats();
    assert_eq!(
        stats.accounts[ACCOUNT_DEFAULT].submits, 3,
        "one paid request per shot: {stats:?}"
    );
    assert!(
        stats.history_reads > 0,
        "found through the history: {stats:?}"
    );
    let jobs = run.sim.jobs();
    for r in results(&views[0]) {
        let job = r["provider_task_id"].as_str().expect("request id");
        assert!(
            jobs.iter().any(|j| j.request_id == job && j.lost_answer),
            "unit ran as the request whose answer was lost: {r}"
        );
    }
    assert_eq!(check_stored_files(&run.services, &views).await, 3);
    run.stop().await.shutdown().await.expect("sim stop");
}

/// A fal key of the real form (`<key id>:<secret>`), found nowhere else.
const KEY: &str = "5b0c2a34-9f0e-4c52-9d5e-7d3e8c1a2b4f:f3d9c0a8e7b6a5f4e3d2c1b0a9f8e7d6";

/// Every log line at `trace`, except wasmtime's compiler (its trace is the generated code).
const LOG_EVERYTHING: &str = "trace,wasmtime=info,wasmtime_internal_cranelift=info,\
                              cranelift_codegen=info,cranelift_frontend=info,regalloc2=info";

/// The key as the handler's README shows it configured (a secret named `api_key`), in a whole
/// run of the real `slotd` binary logging at `trace`, with webhooks on: fal accepted every
/// request (the host inserted `Authorization: Key …`), yet neither the key nor its secret half
/// (plain, base64 or percent-encoded) is in slotd's log, in the recording of every call (its
/// inputs, settings and each request as the guest handed it to the host: none carries an
/// `Authorization` header) or in any view a tenant or an operator can read
/// ([`readable_views`]: the task and its units, the task list, pools and their timeline,
/// routes, handlers, the event log as JSON and as live streams, the console's API, `/metrics`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fal_the_key_stays_out_of_the_guest_the_logs_the_recording_and_the_views() {
    let sim = slotd_sim::fal::spawn(FalOptions {
        keys: vec![KeySpec::new(ACCOUNT_DEFAULT, KEY)],
        ..sim_options()
    })
    .await
    .expect("simulator");
    let dir = tempfile::TempDir::new().expect("tmp");
    let port = free_port();
    let db_url = format!("sqlite://{}", dir.path().join("slotd.db").display());
    let objects = format!("file://{}", dir.path().join("objects").display());
    let recordings = dir.path().join("recordings");
    let config = dir.path().join("slotd.toml");
    let text = format!(
        r#"
listen = "127.0.0.1:{port}"
public_url = "http://127.0.0.1:{port}"
database_url = "{db_url}"
plugins_dir = "{plugins}"
object_store = "{objects}"

[limits]
call_deadline = "2s"

[scheduler]
tick_interval = "100ms"
min_rest = "2ms"
poll_initial = "50ms"
poll_max = "300ms"

[pools."{POOL}"]
max_slots = 2

[handlers.{HANDLER}]
base_url = "{base}"
history_url = "{base}"
jwks_url = "{jwks}"
allowed_hosts = ["{host}"]
expected_duration_scale = {TIME_SCALE}
api_key = "{KEY}"
record = "{recordings}"
"#,
        plugins = fal_plugins(dir.path()).display(),
        base = sim.base_url(),
        jwks = sim.jwks_url(),
        host = sim.addr(),
        recordings = recordings.display(),
    );
    std::fs::write(&config, text).expect("write config");
    let log = dir.path().join("slotd.log");
    let mut child = spawn_slotd_with_env(&config, &log, &[], &[("SLOTD_LOG", LOG_EVERYTHING)]);
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    wait_healthy(&client, &base).await;
    let id = post_task(
        &client,
        &base,
        TASK_TYPE,
        serde_json::json!({"payload": payload("key", 3)}),
    )
    .await;
    wait_all_completed(
        &client,
        &base,
        std::slice::from_ref(&id),
        Duration::from_secs(60),
    )
    .await;
    let views = readable_views(&client, &base, &id).await;
    assert_check_clean(&db_url, Some(&objects), &[(POOL, 2)]).await;
    child.kill().expect("stop slotd");
    child.wait().expect("reap slotd");

    let stats = sim.stats();
    assert_eq!(
        stats.auth_refusals, 0,
        "fal accepted the host's key: {stats:?}"
    );
    assert_eq!(stats.accounts[ACCOUNT_DEFAULT].submits, 3);
    assert!(
        stats.webhooks_sent > 0,
        "webhooks verified on the way: {stats:?}"
    );
    let logged = std::fs::read_to_string(&log).expect("slotd's log");
    assert!(
        logged.contains(HANDLER) && logged.contains("TRACE"),
        "the log holds the run at trace level: {} bytes",
        logged.len()
    );
    let recording = recordings.join(format!("{HANDLER}.jsonl"));
    let raw = std::fs::read_to_string(&recording).expect("the recording");
    let mut texts = vec![
        ("slotd's log".to_string(), logged),
        ("the recording".to_string(), raw),
    ];
    texts.extend(views);
    for (what, text) in &texts {
        for (form, needle) in key_forms() {
            assert!(!text.contains(&needle), "{form} leaked into {what}");
        }
    }
    let records = slotd_runtime::tape::read(&recording).expect("the recording parses");
    let mut requests = 0;
    for r in &records {
        assert!(
            !r.settings.contains_key("api_key"),
            "config.get can read the key"
        );
        for x in &r.exchanges {
            requests += 1;
            assert!(
                !x.request
                    .headers
                    .iter()
                    .any(|(k, _)| k.eq_ignore_ascii_case("authorization")),
                "the guest set Authorization itself: {:?}",
                x.request
            );
        }
    }
    assert!(
        requests >= 9,
        "submits, status and result reads: {requests}"
    );
    sim.shutdown().await.expect("sim stop");
}

/// The key and its secret half as they could show in a text: plain, base64 (standard and
/// URL-safe, with and without padding) and percent-encoded; each with what it is.
fn key_forms() -> Vec<(String, String)> {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let secret = KEY.split(':').nth(1).expect("secret");
    let mut forms = Vec::new();
    for (what, plain) in [("the key", KEY), ("the key's secret", secret)] {
        forms.push((what.to_string(), plain.to_string()));
        for (name, engine) in [
            ("base64", &STANDARD),
            ("base64 (no padding)", &STANDARD_NO_PAD),
            ("base64url", &URL_SAFE),
            ("base64url (no padding)", &URL_SAFE_NO_PAD),
        ] {
            forms.push((format!("{what} as {name}"), engine.encode(plain)));
        }
        let escaped: String = url::form_urlencoded::byte_serialize(plain.as_bytes()).collect();
        if escaped != plain {
            forms.push((format!("{what} percent-encoded"), escaped));
        }
    }
    forms
}

/// Every view a tenant or an operator can read of a run whose one task `id` has ended (an
/// unauthenticated loopback caller is an admin: it sees what both see), each named, as text:
/// the task with and without its units, the task list, `/v1/pools` and each pool's timeline,
/// `/v1/routes`, `/v1/handlers` (and `?all=true`) and their history, the task's event log as
/// JSON and as its live stream (which ends with the task), the tenant's event log as JSON and
/// as a live stream replayed from the start up to the log's last event, the console's other
/// calls (`/v1/me`, webhooks, the tenant's usage), `/metrics`, `/readyz` and `/openapi.json`.
async fn readable_views(client: &reqwest::Client, base: &str, id: &str) -> Vec<(String, String)> {
    let get = async |path: &str, accept: &str| -> String {
        let r = client
            .get(format!("{base}{path}"))
            .header("accept", accept)
            .timeout(Duration::from_secs(20))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        assert!(r.status().is_success(), "GET {path}: {}", r.status());
        r.text()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: body: {e}"))
    };
    let json = "application/json";
    let me: serde_json::Value =
        serde_json::from_str(&get("/v1/me", json).await).expect("/v1/me is JSON");
    let tenant = me["tenant"].as_str().expect("tenant").to_string();
    let pools: serde_json::Value =
        serde_json::from_str(&get("/v1/pools", json).await).expect("/v1/pools is JSON");
    let pool_names: Vec<String> = pools
        .as_array()
        .expect("pools")
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_string))
        .collect();
    assert!(pool_names.iter().any(|p| p == POOL), "{pools}");
    let mut paths = vec![
        format!("/v1/tasks/{id}"),
        format!("/v1/tasks/{id}?units=true"),
        "/v1/tasks".to_string(),
        format!("/v1/tasks?type={TASK_TYPE}"),
        "/v1/pools".to_string(),
        "/v1/routes".to_string(),
        "/v1/handlers".to_string(),
        "/v1/handlers?all=true".to_string(),
        "/v1/handlers/history?limit=100".to_string(),
        format!("/v1/tasks/{id}/events"),
        "/v1/events".to_string(),
        format!("/v1/tasks/{id}/webhooks"),
        "/v1/webhooks".to_string(),
        "/v1/me".to_string(),
        format!("/v1/tenants/{tenant}/usage"),
        "/metrics".to_string(),
        "/readyz".to_string(),
        "/openapi.json".to_string(),
    ];
    paths.extend(
        pool_names
            .iter()
            .map(|p| format!("/v1/pools/{}/timeline?minutes=60", url_path(p))),
    );
    let mut views = Vec::new();
    for path in paths {
        let text = get(&path, json).await;
        views.push((format!("GET {path}"), text));
    }
    // The task's live stream replays its events from the first and ends with the task.
    let path = format!("/v1/tasks/{id}/events");
    let stream = get(&path, "text/event-stream").await;
    assert!(
        stream.contains("event: end"),
        "the task stream ended: {stream}"
    );
    views.push((format!("GET {path} (event stream)"), stream));
    // The tenant's stream never ends: replayed from the log's start until it has sent the
    // last event the JSON log holds.
    let page: serde_json::Value =
        serde_json::from_str(&get("/v1/events", json).await).expect("/v1/events is JSON");
    assert!(
        page["events"].as_array().is_some_and(|e| !e.is_empty()),
        "the event log holds the run: {page}"
    );
    let last = page["next"].as_str().expect("next").to_string();
    let mut r = client
        .get(format!("{base}/v1/events?after=0.0.0"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("/v1/events stream");
    assert!(r.status().is_success(), "/v1/events stream: {}", r.status());
    let mut stream = String::new();
    let want = format!("id: {last}");
    tokio::time::timeout(Duration::from_secs(20), async {
        while !stream.contains(&want) {
            match r.chunk().await.expect("/v1/events stream chunk") {
                Some(bytes) => stream.push_str(&String::from_utf8_lossy(&bytes)),
                None => break,
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the tenant stream never sent {want}: {stream}"));
    assert!(
        stream.contains(&want),
        "the tenant stream ended early: {stream}"
    );
    views.push(("GET /v1/events (event stream)".to_string(), stream));
    views
}

/// `s` as one percent-encoded path segment.
fn url_path(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}
