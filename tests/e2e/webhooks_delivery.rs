//! Completion webhooks, held to their contract (`slotd-server`'s `completion_webhooks`):
//!
//! - With the real binary: tasks end while the receiver is down, slotd is killed (SIGKILL)
//!   before any delivery could succeed, the receiver comes up, slotd restarts, and every task's
//!   end arrives (at least once) under one `webhook-id`, signed, and is never sent again after
//!   its 2xx is recorded (not after a quiet spell, nor after another kill and restart).
//! - A kill between the receiver's 2xx and slotd's record of it is the one case of a second
//!   send after a 2xx: delivery is at least once, not exactly once. The second send carries the
//!   same `webhook-id`, comes once, and never after the record; a receiver that deduplicates on
//!   the id (as `docs/api.md` shows) acts on the task's end once.
//! - The SSRF rule at delivery time (`allow_private = false`): a name that resolves to a
//!   loopback address when the delivery is made is not delivered, and the attempt's error names
//!   the address; the request connects to the addresses checked (no second lookup, and no
//!   proxy whatever `HTTP_PROXY` says); a redirect is never followed. A `callback_url` on a
//!   private address is refused at the door.
//! - Two instances never send one delivery at once: an attempt (the lookup included) is
//!   bounded by `timeout` and starts only with time left on its lease for it and its record,
//!   so a slow batch never outlives its lease.
//!
//! The delivery-time tests resolve names through a resolver of their own
//! ([`slotd_core::address::Resolve`], given to `deliver_due_with`); slotd itself always uses
//! the system's. The check applied to the answer is the same.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use axum::response::IntoResponse;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use slotd_core::address::Resolve;
use slotd_core::clock::Clock;
use slotd_server::completion_webhooks::{deliver_due_with, sweep};

use crate::support::*;

/// `whsec_` + base64 of a 24-byte key.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn write_config(
    dir: &Path,
    stub: &slotd_testkit::stub::StubHandle,
    port: u16,
) -> std::path::PathBuf {
    let sections = format!(
        r#"
[scheduler]
tick_interval = "50ms"
min_rest = "1ms"

[webhooks]
secret = "{SECRET}"
allow_private = true
retry_base = "100ms"
retry_max = "300ms"
timeout = "1s"
"#
    );
    fixture_config_file(dir, stub, port, &sections)
}

/// `N` distinct free ports (held all at once while they are picked, so no two are the same:
/// a receiver that took slotd's port would keep a restarted slotd from listening).
fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<std::net::TcpListener> = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("free port"))
        .collect();
    std::array::from_fn(|i| held[i].local_addr().expect("port").port())
}

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Hit {
    /// Its `webhook-id`.
    id: String,
    headers: HeaderMap,
    body: String,
    /// When it arrived, in ms since the epoch (the clock slotd records with).
    at: i64,
    /// What the receiver answers it.
    answered: u16,
}

/// What the receiver got, in order of arrival.
type Received = Arc<Mutex<Vec<Hit>>>;

/// How the receiver answers a request.
struct Reply {
    status: u16,
    location: Option<String>,
    /// Waited for before answering (the request is in the log already).
    wait: Option<BoxFuture<'static, ()>>,
}

/// How the receiver answers, given how many earlier requests carried the same `webhook-id`.
type Answer = Arc<dyn Fn(usize) -> Reply + Send + Sync>;

fn reply(status: u16) -> Reply {
    Reply {
        status,
        location: None,
        wait: None,
    }
}

/// Always `status`.
fn answer(status: u16) -> Answer {
    Arc::new(move |_| reply(status))
}

/// A receiver on `127.0.0.1:port`, path `/hook`, logging each request as it arrives (before it
/// answers, so a request whose answer never reaches slotd is in the log too).
async fn receiver(port: u16, got: Received, answer: Answer) -> tokio::task::JoinHandle<()> {
    receiver_on("127.0.0.1", port, got, answer).await
}

/// [`receiver`] on `ip`.
async fn receiver_on(
    ip: &str,
    port: u16,
    got: Received,
    answer: Answer,
) -> tokio::task::JoinHandle<()> {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: String| {
            let got = got.clone();
            let answer = answer.clone();
            async move {
                let id = headers
                    .get("webhook-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let reply = {
                    let mut log = got.lock().expect("lock");
                    let reply = answer(log.iter().filter(|h| h.id == id).count());
                    log.push(Hit {
                        id,
                        headers,
                        body,
                        at: slotd_core::clock::SystemClock.now_ms(),
                        answered: reply.status,
                    });
                    reply
                };
                if let Some(wait) = reply.wait {
                    wait.await;
                }
                let status = axum::http::StatusCode::from_u16(reply.status).expect("status");
                match reply.location {
                    Some(l) => (status, [("location", l)]).into_response(),
                    None => (status, "ok").into_response(),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind((ip, port))
        .await
        .expect("bind the receiver");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    })
}

/// The hits of `id`, in order.
fn hits_of(log: &[Hit], id: &str) -> Vec<Hit> {
    log.iter().filter(|h| h.id == id).cloned().collect()
}

/// Every hit's signature is valid and its body is `task`'s completion.
fn assert_signed_completions(hits: &[Hit], task: &str) {
    let now = slotd_core::clock::SystemClock.now_ms() / 1000;
    for hit in hits {
        let header = |n: &str| {
            hit.headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let ts: i64 = header("webhook-timestamp").parse().expect("timestamp");
        slotd_core::standard_webhooks::verify(
            SECRET,
            &header("webhook-id"),
            ts,
            hit.body.as_bytes(),
            &header("webhook-signature"),
            now,
        )
        .expect("a valid signature");
        let v: Value = serde_json::from_str(&hit.body).expect("json body");
        assert_eq!(v["type"], "task.completed");
        assert_eq!(v["data"]["task_id"], task);
        assert_eq!(v["data"]["status"], "completed");
    }
}

/// The task ends a receiver acts on, in order, when it does what `docs/api.md` asks of one: it
/// verifies the signature (every hit here is checked by [`assert_signed_completions`]), acts
/// only on a `webhook-id` it has not acted on before, and answers 2xx once it has. A request it
/// answered otherwise (503: not ready) was not acted on.
fn acted_on(hits: &[Hit]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut acted = Vec::new();
    for hit in hits {
        if (200..300).contains(&hit.answered) && seen.insert(hit.id.clone()) {
            let v: Value = serde_json::from_str(&hit.body).expect("json body");
            acted.push(
                v["data"]["task_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
    }
    acted
}

/// Let slotd run for a while after every delivery was recorded, then kill it, start it again
/// and let that one run too: a delivery recorded as delivered must not be sent again by either.
async fn quiet_spell_across_a_restart(
    client: &reqwest::Client,
    base: &str,
    config: &Path,
    log: &Path,
    mut child: std::process::Child,
) {
    // Many rounds of the webhook loop (50 ms ticks) and several retry delays (at most 300 ms).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    child.kill().expect("SIGKILL slotd");
    child.wait().expect("reap");
    let mut child = spawn_slotd(config, log, &[]);
    wait_healthy(client, base).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    child.kill().ok();
    child.wait().ok();
}

/// `slotd check` on a test's database (the binary's, in `dir`) once its process is gone.
async fn check_dir(dir: &Path) {
    let url = format!("sqlite://{}", dir.join("slotd.db").display());
    assert_check_clean(&url, None, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_between_the_end_and_the_delivery_loses_nothing() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stub =
        slotd_testkit::stub::StubProvider::start(slotd_testkit::stub::StubOptions { limit: 100 })
            .await
            .expect("stub");
    let [port, hook_port] = free_ports();
    let config = write_config(dir.path(), &stub, port);
    let log = dir.path().join("slotd.log");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();

    let mut child = spawn_slotd(&config, &log, &[]);
    wait_healthy(&client, &base).await;
    // The receiver is down: its port answers nothing.
    let mut ids = Vec::new();
    for count in 1..=3 {
        let body = json!({
            "payload": {"count": count, "polls": 1},
            "callback_url": format!("http://127.0.0.1:{hook_port}/hook"),
        });
        ids.push(post_task(&client, &base, "fixture", body).await);
    }
    wait_all_completed(&client, &base, &ids, Duration::from_secs(60)).await;
    // At least one attempt of each failed: every delivery is queued and retrying.
    for id in &ids {
        let hooks = format!("{base}/v1/tasks/{id}/webhooks");
        eventually(Duration::from_secs(30), "a failed attempt", async || {
            let v = get_json(&client, &hooks).await?;
            let d = v["deliveries"].as_array()?.first()?.clone();
            (d["attempts_made"].as_i64()? >= 1 && d["status"] == "pending").then_some(())
        })
        .await;
    }
    child.kill().expect("SIGKILL slotd");
    child.wait().expect("reap");

    // The receiver comes up, and answers 503 to the first request of each webhook-id (a
    // receiver that is up but not ready yet), 200 after.
    let got: Received = Arc::default();
    let fail_first: Answer = Arc::new(|earlier| reply(if earlier == 0 { 503 } else { 200 }));
    let server = receiver(hook_port, got.clone(), fail_first).await;
    let child = spawn_slotd(&config, &log, &[]);
    wait_healthy(&client, &base).await;
    let mut views = BTreeMap::new();
    for id in &ids {
        let hooks = format!("{base}/v1/tasks/{id}/webhooks");
        let view: Value = eventually(Duration::from_secs(30), "recorded delivered", async || {
            let v = get_json(&client, &hooks).await?;
            (v["deliveries"][0]["status"] == "delivered").then_some(v)
        })
        .await;
        views.insert(id.clone(), view);
    }
    let before_quiet = got.lock().expect("lock").len();
    quiet_spell_across_a_restart(&client, &base, &config, &log, child).await;
    server.abort();

    let received = got.lock().expect("lock").clone();
    assert_eq!(
        received.len(),
        before_quiet,
        "nothing is sent once every delivery is recorded delivered: {received:#?}"
    );
    // Every webhook-id the receiver saw belongs to one of the tasks.
    let mut seen: BTreeSet<String> = received.iter().map(|h| h.id.clone()).collect();
    for id in &ids {
        let view = &views[id];
        let deliveries = view["deliveries"].as_array().expect("deliveries");
        assert_eq!(deliveries.len(), 1, "one delivery per task's end: {view}");
        let d = &deliveries[0];
        let webhook_id = d["id"].as_str().expect("delivery id");
        let hits = hits_of(&received, webhook_id);
        // The end is delivered, under one webhook-id: every request for this task carried it.
        let task_hits: Vec<&Hit> = received
            .iter()
            .filter(|h| {
                serde_json::from_str::<Value>(&h.body)
                    .is_ok_and(|v| v["data"]["task_id"] == id.as_str())
            })
            .collect();
        assert!(!task_hits.is_empty(), "task {id}'s end was never delivered");
        assert!(
            task_hits.iter().all(|h| h.id == webhook_id),
            "one webhook-id per task: {task_hits:#?}"
        );
        assert_signed_completions(&hits, id);
        // Sent until a 2xx, and nothing after it: 503 (not ready), then 200.
        let answers: Vec<u16> = hits.iter().map(|h| h.answered).collect();
        assert_eq!(answers, [503, 200], "task {id}: {hits:#?}");
        assert_eq!(acted_on(&hits), [id.as_str()], "task {id}: {hits:#?}");
        // Each of those requests is a recorded attempt (the ones before were refused
        // connections: no answer, an error).
        let attempts = d["attempts"].as_array().expect("attempts");
        let answered: Vec<i64> = attempts
            .iter()
            .filter_map(|a| a["status"].as_i64())
            .collect();
        assert_eq!(answered, [503, 200], "{view}");
        assert!(attempts.len() >= 3, "{view}");
        assert!(attempts[0]["error"].is_string(), "{view}");
        assert!(attempts[0]["status"].is_null(), "{view}");
        let delivered_at = d["delivered_at"].as_i64().expect("delivered_at");
        assert!(
            hits.iter().all(|h| h.at <= delivered_at),
            "a request after the recorded 2xx: {hits:#?} (delivered_at {delivered_at})"
        );
        seen.remove(webhook_id);
    }
    assert!(seen.is_empty(), "webhook-ids of no task: {seen:?}");
    check_dir(dir.path()).await;
}

/// Delivery is at least once, and this is the one way it is more than once: slotd dies after
/// the receiver took the request (and answered 2xx, or would have) but before slotd recorded
/// the answer. The restarted slotd sends it again when the dead process's lease lapses, with
/// the same `webhook-id` (the receiver deduplicates on it), and never again once recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_before_the_2xx_is_recorded_redelivers_the_same_id_once() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stub =
        slotd_testkit::stub::StubProvider::start(slotd_testkit::stub::StubOptions { limit: 100 })
            .await
            .expect("stub");
    let [port, hook_port] = free_ports();
    let config = write_config(dir.path(), &stub, port);
    let log = dir.path().join("slotd.log");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();

    // The first request of each webhook-id is held (it will be answered 200) until the test
    // has killed slotd; the ones after are answered 200 at once.
    let arrived = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let hold_first: Answer = {
        let (arrived, release) = (arrived.clone(), release.clone());
        Arc::new(move |earlier| {
            let mut r = reply(200);
            if earlier == 0 {
                let (arrived, release) = (arrived.clone(), release.clone());
                r.wait = Some(Box::pin(async move {
                    arrived.notify_one();
                    release.acquire().await.expect("semaphore").forget();
                }));
            }
            r
        })
    };
    let got: Received = Arc::default();
    let server = receiver(hook_port, got.clone(), hold_first).await;

    let mut child = spawn_slotd(&config, &log, &[]);
    wait_healthy(&client, &base).await;
    let body = json!({
        "payload": {"count": 2, "polls": 1},
        "callback_url": format!("http://127.0.0.1:{hook_port}/hook"),
    });
    let id = post_task(&client, &base, "fixture", body).await;
    tokio::time::timeout(Duration::from_secs(60), arrived.notified())
        .await
        .expect("the first request of the delivery");
    child.kill().expect("SIGKILL slotd");
    child.wait().expect("reap");
    // The receiver answers 200 to a process that is gone.
    release.add_permits(1);

    let child = spawn_slotd(&config, &log, &[]);
    wait_healthy(&client, &base).await;
    let hooks = format!("{base}/v1/tasks/{id}/webhooks");
    let view: Value = eventually(Duration::from_secs(30), "recorded delivered", async || {
        let v = get_json(&client, &hooks).await?;
        (v["deliveries"][0]["status"] == "delivered").then_some(v)
    })
    .await;
    quiet_spell_across_a_restart(&client, &base, &config, &log, child).await;
    server.abort();

    let received = got.lock().expect("lock").clone();
    let d = &view["deliveries"][0];
    let webhook_id = d["id"].as_str().expect("delivery id");
    assert!(
        received.iter().all(|h| h.id == webhook_id),
        "one webhook-id: {received:#?}"
    );
    assert_signed_completions(&received, &id);
    // Sent twice: the request whose 200 slotd never heard, and the redelivery it recorded.
    // At least once, not exactly once: the receiver that deduplicates on the id acts once.
    let answers: Vec<u16> = received.iter().map(|h| h.answered).collect();
    assert_eq!(answers, [200, 200], "{received:#?}");
    assert_eq!(
        acted_on(&received),
        [id.as_str()],
        "a deduplicating receiver acts on the end once: {received:#?}"
    );
    let attempts = d["attempts"].as_array().expect("attempts");
    assert_eq!(
        attempts.len(),
        1,
        "the killed attempt left no record: {view}"
    );
    assert_eq!(attempts[0]["status"], 200, "{view}");
    let delivered_at = d["delivered_at"].as_i64().expect("delivered_at");
    assert!(
        received.iter().all(|h| h.at <= delivered_at),
        "a request after the recorded 2xx: {received:#?} (delivered_at {delivered_at})"
    );
    check_dir(dir.path()).await;
}

/// A resolver the test controls: every name resolves to `answer` (on the asked port), after
/// `delay`.
#[derive(Default)]
struct TestResolver {
    answer: Mutex<Vec<IpAddr>>,
    delay: Duration,
}

impl TestResolver {
    fn set(&self, ips: &[&str]) {
        *self.answer.lock().expect("lock") = ips.iter().map(|s| s.parse().expect("ip")).collect();
    }
}

impl Resolve for TestResolver {
    fn lookup<'a>(
        &'a self,
        _host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'a>> {
        let addrs: Vec<SocketAddr> = self
            .answer
            .lock()
            .expect("lock")
            .iter()
            .map(|ip| SocketAddr::new(*ip, port))
            .collect();
        let delay = self.delay;
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            Ok(addrs)
        })
    }
}

/// An in-process slotd with `[webhooks] allow_private` as given (fast retries).
async fn manual_with_webhooks(allow_private: bool) -> Manual {
    Manual::start_with(1, 10, |c| {
        c.webhooks.allow_private = allow_private;
        c.webhooks.retry_base = Duration::from_millis(100);
        c.webhooks.retry_max = Duration::from_millis(100);
        c.webhooks.timeout = Duration::from_secs(2);
    })
    .await
}

/// Submit a fixture task with `callback_url` and run it to its end.
async fn completed_task_with(m: &Manual, callback_url: &str) -> String {
    completed_tasks_with(m, 1, callback_url).await.remove(0)
}

/// Submit `n` fixture tasks with `callback_url` and run them to their end; their ids.
async fn completed_tasks_with(m: &Manual, n: usize, callback_url: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(
            m.submit_body(json!({"payload": {"count": 1}, "callback_url": callback_url}))
                .await,
        );
    }
    m.run_until(&["fixture"], 200, async |m| {
        for id in &ids {
            if m.task(id).await["status"] != "completed" {
                return false;
            }
        }
        true
    })
    .await;
    ids
}

/// Queue the ends and make one round of deliveries through `resolver`; how many were
/// attempted.
async fn delivery_round(m: &Manual, resolver: &TestResolver) -> usize {
    m.clock.advance(1000);
    let now = m.clock.as_ref().now_ms();
    sweep(&m.services, now).await.expect("sweep");
    deliver_due_with(&m.services, resolver, "test-owner", now)
        .await
        .expect("deliver")
}

/// The task's deliveries, as `GET /v1/tasks/{id}/webhooks` shows them.
async fn deliveries_of(m: &Manual, id: &str) -> Vec<Value> {
    let (status, view) = api_call(
        &m.services,
        "GET",
        &format!("/v1/tasks/{id}/webhooks"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{view}");
    view["deliveries"].as_array().cloned().expect("deliveries")
}

/// The task's one delivery, as `GET /v1/tasks/{id}/webhooks` shows it.
async fn delivery_of(m: &Manual, id: &str) -> Value {
    let deliveries = deliveries_of(m, id).await;
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    deliveries[0].clone()
}

/// DNS rebinding: the name was public when the task was created (and it passes the door, which
/// judges names on their face), but at delivery time it resolves to a loopback address, where
/// a receiver listens. Nothing reaches it, and the attempt says why, naming the address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_to_a_private_address_at_delivery_is_not_delivered() {
    let m = manual_with_webhooks(false).await;
    let hook_port = free_port();
    let got: Received = Arc::default();
    let server = receiver(hook_port, got.clone(), answer(200)).await;
    let url = format!("http://hooks.example.test:{hook_port}/hook");
    let resolver = TestResolver::default();
    resolver.set(&["93.184.215.14"]);
    slotd_core::address::check_target_with(&url::Url::parse(&url).expect("url"), false, &resolver)
        .await
        .expect("public when the task is created");
    let id = completed_task_with(&m, &url).await;

    // Now the name resolves to the receiver's address; then to a public and a loopback one.
    for (round, answer) in [&["127.0.0.1"][..], &["93.184.215.14", "127.0.0.1"]]
        .into_iter()
        .enumerate()
    {
        resolver.set(answer);
        assert_eq!(delivery_round(&m, &resolver).await, 1, "round {round}");
        let d = delivery_of(&m, &id).await;
        assert_eq!(d["status"], "pending", "{d}");
        let attempts = d["attempts"].as_array().expect("attempts");
        assert_eq!(attempts.len(), round + 1, "{d}");
        let last = &attempts[round];
        assert!(last["status"].is_null(), "no request was made: {d}");
        let error = last["error"].as_str().expect("an error");
        assert!(
            error.contains("hooks.example.test resolves to 127.0.0.1")
                && error.contains("allow_private"),
            "the error names the host and the address: {error}"
        );
    }
    server.abort();
    let received = got.lock().expect("lock").clone();
    assert!(
        received.is_empty(),
        "reached a loopback receiver: {received:#?}"
    );
    m.check().await;
}

/// The request goes to the addresses that were checked, not to a second lookup: with
/// `allow_private = true`, a name only the test's resolver knows reaches the receiver it
/// names (the system resolver knows nothing of `.test` names), with the URL's `Host`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_connects_to_the_addresses_checked() {
    let m = manual_with_webhooks(true).await;
    let hook_port = free_port();
    let got: Received = Arc::default();
    let server = receiver(hook_port, got.clone(), answer(204)).await;
    let id = completed_task_with(&m, &format!("http://hooks.example.test:{hook_port}/hook")).await;
    let resolver = TestResolver::default();
    resolver.set(&["127.0.0.1"]);
    assert_eq!(delivery_round(&m, &resolver).await, 1);
    let d = delivery_of(&m, &id).await;
    assert_eq!(d["status"], "delivered", "{d}");
    server.abort();
    let received = got.lock().expect("lock").clone();
    assert_eq!(received.len(), 1, "{received:#?}");
    assert_eq!(
        received[0]
            .headers
            .get("host")
            .and_then(|v| v.to_str().ok()),
        Some(format!("hooks.example.test:{hook_port}").as_str())
    );
    assert_eq!(received[0].id, d["id"].as_str().expect("id"));
    m.check().await;
}

/// A retried task ends again, and that end is delivered too, under an id of its own: the
/// first end as `msg_<task>_failed`, the end after the retry as `msg_<task>_failed_2`, each
/// queued once however many sweeps find it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_of_a_retried_task_is_delivered_again() {
    let m = manual_with_webhooks(true).await;
    let hook_port = free_port();
    let got: Received = Arc::default();
    let server = receiver(hook_port, got.clone(), answer(204)).await;
    let resolver = TestResolver::default();
    resolver.set(&["127.0.0.1"]);
    let id = m
        .submit_body(json!({
            "payload": {"count": 1, "behavior": "fail", "code": "1301", "message": "moderation"},
            "callback_url": format!("http://hooks.example.test:{hook_port}/hook"),
        }))
        .await;
    m.run_until(&["fixture"], 50, async |m| {
        m.task(&id).await["status"] == "failed"
    })
    .await;
    assert_eq!(delivery_round(&m, &resolver).await, 1);
    let (status, body) =
        api_call(&m.services, "POST", &format!("/v1/tasks/{id}/retry"), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["retried"], 1, "{body}");
    m.run_until(&["fixture"], 50, async |m| {
        m.task(&id).await["status"] == "failed"
    })
    .await;
    assert_eq!(delivery_round(&m, &resolver).await, 1);
    let now = m.clock.as_ref().now_ms();
    assert_eq!(
        sweep(&m.services, now).await.expect("sweep"),
        0,
        "each end queued once"
    );
    server.abort();

    let first = format!("msg_{id}_failed");
    let second = format!("msg_{id}_failed_2");
    let view = deliveries_of(&m, &id).await;
    let deliveries: Vec<(&str, &str)> = view
        .iter()
        .map(|d| {
            (
                d["id"].as_str().unwrap_or_default(),
                d["status"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        deliveries,
        [
            (first.as_str(), "delivered"),
            (second.as_str(), "delivered")
        ],
        "{view:?}"
    );
    let received = got.lock().expect("lock").clone();
    let ids: Vec<&str> = received.iter().map(|h| h.id.as_str()).collect();
    assert_eq!(ids, [first.as_str(), second.as_str()], "{received:#?}");
    for hit in &received {
        let body: Value = serde_json::from_str(&hit.body).expect("a JSON body");
        assert_eq!(body["type"], "task.failed", "{body}");
        assert_eq!(body["data"]["task_id"], id.as_str(), "{body}");
        assert_eq!(body["data"]["status"], "failed", "{body}");
    }
    m.check().await;
}

/// A receiver answering with a redirect is not followed: the 3xx is a failed attempt (retried
/// later, to the same URL), and the target of the `Location` gets nothing. Redirects are
/// never followed at all, so a redirect to an internal address never gets a request either
/// (that cannot be shown with `allow_private = false`: the first hop is on 127.0.0.1 too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_never_followed() {
    let m = manual_with_webhooks(true).await;
    let [hook_port, target_port] = free_ports();
    let target_got: Received = Arc::default();
    let target = receiver(target_port, target_got.clone(), answer(200)).await;
    let got: Received = Arc::default();
    let location = format!("http://127.0.0.1:{target_port}/hook");
    let redirects = [307u16, 308, 302];
    let redirect: Answer = Arc::new(move |earlier| Reply {
        location: Some(location.clone()),
        ..reply(redirects[earlier % redirects.len()])
    });
    let server = receiver(hook_port, got.clone(), redirect).await;
    let id = completed_task_with(&m, &format!("http://127.0.0.1:{hook_port}/hook")).await;
    let resolver = TestResolver::default();
    for (round, code) in redirects.into_iter().enumerate() {
        assert_eq!(delivery_round(&m, &resolver).await, 1, "round {round}");
        let d = delivery_of(&m, &id).await;
        assert_eq!(d["status"], "pending", "{d}");
        let last = &d["attempts"][round];
        assert_eq!(last["status"], code, "{d}");
        assert_eq!(
            last["error"],
            format!("the receiver answered {code}").as_str(),
            "{d}"
        );
    }
    server.abort();
    target.abort();
    assert_eq!(got.lock().expect("lock").len(), redirects.len());
    let followed = target_got.lock().expect("lock").clone();
    assert!(
        followed.is_empty(),
        "a redirect was followed: {followed:#?}"
    );
    m.check().await;
}

/// Two instances share the outbox (two lease owners on one database). The first claims a
/// full batch for a receiver that never answers in time, behind a name that takes a while to
/// resolve; the second keeps trying to claim. An attempt starts only with time left on its
/// lease for it and its record (and the lookup counts against the attempt's timeout), so the
/// second never finds a lapsed lease under a request still being made: every request the
/// receiver gets is a recorded attempt, never one of two at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_batch_never_outlives_its_lease() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stub =
        slotd_testkit::stub::StubProvider::start(slotd_testkit::stub::StubOptions { limit: 10 })
            .await
            .expect("stub");
    let mut config = test_config(dir.path(), &stub, 1);
    config.webhooks.allow_private = true;
    config.webhooks.timeout = Duration::from_millis(500);
    // No retry within the test: a second recorded attempt would be a lapsed lease.
    config.webhooks.retry_base = Duration::from_secs(60);
    config.webhooks.retry_max = Duration::from_secs(60);
    let services = slotd_server::app::build_with_clock(config, system_clock())
        .await
        .expect("build slotd");
    let hook_port = free_port();
    let got: Received = Arc::default();
    let hang: Answer = Arc::new(|_| Reply {
        wait: Some(Box::pin(tokio::time::sleep(Duration::from_secs(5)))),
        ..reply(200)
    });
    let server = receiver(hook_port, got.clone(), hang).await;
    let resolver = TestResolver {
        delay: Duration::from_millis(400),
        ..Default::default()
    };
    resolver.set(&["127.0.0.1"]);
    // A full batch (32 a round), all due.
    let now = services.clock.now_ms();
    let tasks: Vec<String> = (0..32).map(|i| format!("task-{i:02}")).collect();
    enqueue(
        &services,
        tasks.len(),
        &format!("http://slow.example.test:{hook_port}/hook"),
        now,
    )
    .await;
    let done = AtomicBool::new(false);
    let first = async {
        let n = deliver_due_with(&services, &resolver, "instance-a", services.clock.now_ms())
            .await
            .expect("deliver");
        done.store(true, Ordering::SeqCst);
        n
    };
    let second = async {
        let mut claimed = 0;
        while !done.load(Ordering::SeqCst) {
            claimed +=
                deliver_due_with(&services, &resolver, "instance-b", services.clock.now_ms())
                    .await
                    .expect("deliver");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        claimed
    };
    let (first, second) = tokio::join!(first, second);
    server.abort();
    assert_eq!(first, 32, "the first instance claims the batch");
    let received = got.lock().expect("lock").clone();
    assert!(!received.is_empty(), "no request reached the receiver");
    let mut unrecorded = Vec::new();
    for task in &tasks {
        let list = services.store.webhook_list(task).await.expect("list");
        let (d, attempts) = &list[0];
        let hits = hits_of(&received, &d.id).len();
        if hits > attempts.len() {
            unrecorded.push(format!(
                "{}: {hits} requests, {} recorded",
                d.id,
                attempts.len()
            ));
        }
    }
    assert!(
        unrecorded.is_empty(),
        "requests made under a lapsed lease (the second instance claimed {second}): {unrecorded:#?}"
    );
}

/// Queue `n` deliveries to `url` straight into the outbox, due at `now`; their ids.
async fn enqueue(
    services: &slotd_server::services::Services,
    n: usize,
    url: &str,
    now: i64,
) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let task = format!("task-{i:02}");
        let id = format!("msg_{task}");
        services
            .store
            .webhook_enqueue(&slotd_store::NewDelivery {
                id: id.clone(),
                task_id: task,
                tenant: "default".into(),
                url: url.into(),
                event: "task.completed".into(),
                payload: "{}".into(),
                now,
            })
            .await
            .expect("enqueue");
        ids.push(id);
    }
    ids
}

/// An attempt's `timeout` covers the lookup of the host too: a name that takes longer to
/// resolve than the timeout is a failed attempt after the timeout, and nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeout_covers_the_lookup() {
    let m = Manual::start_with(1, 10, |c| {
        c.webhooks.allow_private = true;
        c.webhooks.timeout = Duration::from_millis(300);
    })
    .await;
    let hook_port = free_port();
    let got: Received = Arc::default();
    let server = receiver(hook_port, got.clone(), answer(200)).await;
    let resolver = TestResolver {
        delay: Duration::from_secs(3),
        ..Default::default()
    };
    resolver.set(&["127.0.0.1"]);
    let ids =
        completed_tasks_with(&m, 1, &format!("http://slow.example.test:{hook_port}/hook")).await;
    let now = m.clock.as_ref().now_ms();
    sweep(&m.services, now).await.expect("sweep");
    let started = std::time::Instant::now();
    assert_eq!(
        deliver_due_with(&m.services, &resolver, "test-owner", now)
            .await
            .expect("deliver"),
        1
    );
    let took = started.elapsed();
    let list = m.services.store.webhook_list(&ids[0]).await.expect("list");
    let (d, attempts) = &list[0];
    assert_eq!(d.status, "pending", "{d:?}");
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(
        attempts[0].error.as_deref(),
        Some("no answer within 300ms (resolving the host included)"),
        "{attempts:?}"
    );
    assert!(took < Duration::from_secs(2), "the attempt took {took:?}");
    server.abort();
    let received = got.lock().expect("lock").clone();
    assert!(received.is_empty(), "{received:#?}");
    m.check().await;
}

/// A resolver (every name is 127.0.0.1) whose first lookup, after a moment, moves a manual
/// clock on by `jump`: the round it belongs to has taken that long.
struct JumpingResolver {
    clock: Arc<slotd_core::clock::ManualClock>,
    jump: Duration,
    jumped: AtomicBool,
}

impl Resolve for JumpingResolver {
    fn lookup<'a>(
        &'a self,
        _host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'a>> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if !self.jumped.swap(true, Ordering::SeqCst) {
                self.clock.advance(self.jump.as_millis() as i64);
            }
            Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))])
        })
    }
}

/// An attempt starts only with room left on its lease for it and its record: a delivery of a
/// round whose first attempts used most of the lease is left (claimed, unattempted) for the
/// next claim once the lease lapses, not sent late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_starts_only_with_time_left_on_its_lease() {
    let m = Manual::start_with(4, 20, |c| {
        c.webhooks.allow_private = true;
        c.webhooks.timeout = Duration::from_secs(1);
    })
    .await;
    let hook_port = free_port();
    let got: Received = Arc::default();
    let server = receiver(hook_port, got.clone(), answer(200)).await;
    // The lease is 6 timeouts (4 rounds of 8 attempts, one for the last, one for the
    // records); 5 have passed once the first attempts are under way.
    let resolver = JumpingResolver {
        clock: m.clock.clone(),
        jump: Duration::from_secs(5),
        jumped: AtomicBool::new(false),
    };
    // One more than are attempted at once: the ninth starts after the clock moved.
    let ids = completed_tasks_with(
        &m,
        9,
        &format!("http://hooks.example.test:{hook_port}/hook"),
    )
    .await;
    let now = m.clock.as_ref().now_ms();
    sweep(&m.services, now).await.expect("sweep");
    assert_eq!(
        deliver_due_with(&m.services, &resolver, "test-owner", now)
            .await
            .expect("deliver"),
        9
    );
    let mut attempted = 0;
    for id in &ids {
        let list = m.services.store.webhook_list(id).await.expect("list");
        let (d, attempts) = &list[0];
        match d.status.as_str() {
            "delivered" => {
                assert_eq!(attempts.len(), 1, "{d:?}");
                attempted += 1;
            }
            _ => assert!(
                attempts.is_empty() && d.status == "pending",
                "{d:?} {attempts:?}"
            ),
        }
    }
    assert_eq!(attempted, 8, "only the first eight started in time");
    // The ninth is still under the lease: not claimable until it lapses, then delivered.
    let later = m.clock.as_ref().now_ms();
    assert_eq!(
        deliver_due_with(&m.services, &resolver, "other-owner", later)
            .await
            .expect("deliver"),
        0
    );
    m.clock.advance(1001);
    let lapsed = m.clock.as_ref().now_ms();
    assert_eq!(
        deliver_due_with(&m.services, &resolver, "other-owner", lapsed)
            .await
            .expect("deliver"),
        1
    );
    server.abort();
    let received = got.lock().expect("lock").clone();
    assert_eq!(received.len(), 9, "{received:#?}");
    let distinct: BTreeSet<&str> = received.iter().map(|h| h.id.as_str()).collect();
    assert_eq!(distinct.len(), 9, "each sent once: {received:#?}");
    m.check().await;
}

/// The proxy variables do not apply to deliveries: through a proxy, the request would go to
/// whatever the proxy's own lookup of the name gives, not to the addresses checked. slotd runs
/// with every `*_PROXY` variable naming a proxy that logs its connections (`NO_PROXY` keeps the
/// handler's calls to the stub direct); the delivery reaches the receiver, the proxy nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_ignores_the_proxy_variables() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stub =
        slotd_testkit::stub::StubProvider::start(slotd_testkit::stub::StubOptions { limit: 100 })
            .await
            .expect("stub");
    let port = free_port();
    let config = write_config(dir.path(), &stub, port);
    let log = dir.path().join("slotd.log");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();

    let proxy = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bind the proxy");
    let proxy_url = format!("http://{}", proxy.local_addr().expect("proxy address"));
    let proxied = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let proxy_task = tokio::spawn({
        let proxied = proxied.clone();
        async move {
            while let Ok((conn, _)) = proxy.accept().await {
                proxied.fetch_add(1, Ordering::SeqCst);
                drop(conn);
            }
        }
    });
    // The receiver on another loopback address than the stub's, so that NO_PROXY can name
    // the stub's alone.
    let hook_port = free_port();
    let got: Received = Arc::default();
    let server = receiver_on("127.0.0.2", hook_port, got.clone(), answer(200)).await;

    let mut env = vec![("NO_PROXY", "127.0.0.1"), ("no_proxy", "127.0.0.1")];
    for var in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        env.push((var, proxy_url.as_str()));
    }
    let mut child = spawn_slotd_with_env(&config, &log, &[], &env);
    wait_healthy(&client, &base).await;
    let body = json!({
        "payload": {"count": 1, "polls": 1},
        "callback_url": format!("http://127.0.0.2:{hook_port}/hook"),
    });
    let id = post_task(&client, &base, "fixture", body).await;
    let hooks = format!("{base}/v1/tasks/{id}/webhooks");
    let view: Value = eventually(Duration::from_secs(30), "recorded delivered", async || {
        let v = get_json(&client, &hooks).await?;
        (v["deliveries"][0]["status"] == "delivered").then_some(v)
    })
    .await;
    child.kill().ok();
    child.wait().ok();
    server.abort();
    proxy_task.abort();
    let received = got.lock().expect("lock").clone();
    assert_eq!(received.len(), 1, "{received:#?}");
    assert_signed_completions(&received, &id);
    assert_eq!(
        proxied.load(Ordering::SeqCst),
        0,
        "a delivery went through the proxy: {view}"
    );
    check_dir(dir.path()).await;
}

#[tokio::test]
async fn a_private_callback_url_is_refused_at_the_door() {
    let m = Manual::start(1, 10).await;
    for url in [
        "http://127.0.0.1:9/hook",
        "http://10.0.0.5/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hook",
        "http://localhost/hook",
    ] {
        let (status, body) = api_call(
            &m.services,
            "POST",
            "/v1/tasks/fixture",
            Some(json!({"payload": {"count": 1}, "callback_url": url})),
        )
        .await;
        assert_eq!(status, 422, "{url}: {body}");
        assert!(
            body["detail"]
                .as_str()
                .is_some_and(|d| d.contains("allow_private")),
            "{body}"
        );
    }
    // Nothing was stored for them.
    let (_, list) = api_call(&m.services, "GET", "/v1/tasks", None).await;
    assert_eq!(list["tasks"].as_array().map(Vec::len), Some(0), "{list}");
    // A public target is taken (its delivery comes when the task ends).
    let id = m
        .submit_body(json!({"payload": {"count": 1}, "callback_url": "https://example.com/hook"}))
        .await;
    m.run_until(&["fixture"], 100, async |m| {
        m.task(&id).await["status"] == "completed"
    })
    .await;
    m.check().await;
}
