//! The Runway bearer key end to end: configured as a secret, inserted by the host
//! (`send-authorized`), never in the guest, slotd's logs or a recording; a wrong one drains
//! the account on Runway's 401.

use std::time::Duration;

use serde_json::{Value, json};
use sha2::Digest;
use slotd_core::config::Secret;
use slotd_sim::runway::RunwayOptions;

use crate::runway::*;
use crate::support::*;

/// A key of the real form (`key_` + 128 hex digits) that appears nowhere else.
fn distinctive_key(seed: &str) -> String {
    let a = hex::encode(sha2::Sha256::digest(format!("{seed} 1")));
    let b = hex::encode(sha2::Sha256::digest(format!("{seed} 2")));
    format!("key_{a}{b}")
}

/// The needles a leak of `key` would show: the whole key, and its first 24 hex digits (a
/// truncated or reformatted copy).
fn key_needles(key: &str) -> [&str; 2] {
    [key, &key[4..28]]
}

/// Every log line at `trace`, except wasmtime's compiler (its trace is the generated code:
/// 30 MB for one handler, and nothing of slotd's).
const LOG_EVERYTHING: &str = "trace,wasmtime=info,wasmtime_internal_cranelift=info,\
                              cranelift_codegen=info,cranelift_frontend=info,regalloc2=info";

/// The bearer key, as the handler's README shows it configured (here in plain text in the
/// config file: a setting named `api_key` is a secret whatever its form), in a whole run of
/// the real `slotd` binary logging at `trace`: three shots to completion and one cancelled
/// while it runs (tick, finalize and cancel calls, creates, polls, downloads, a DELETE).
///
/// What it proves:
/// - (a) the key (or its first 24 digits) is nowhere in slotd's log;
/// - (b) nor in the `[handlers.runway-video] record` recording of every call;
/// - the host, not the guest, sent it: Runway accepted every request (no 401) although no
///   request the guest made carries an `Authorization` header (the recording holds each
///   request as the guest handed it to the host, before credentials are inserted; the
///   redactor would show a guest-set one as `***`, and there is none);
/// - the guest was never given it: everything that enters a guest call is in the recording
///   (the call's inputs, every HTTP answer, and `settings`, the whole map `config.get` reads:
///   it has no `api_key`), and the redactor, which replaces the key's value wherever it
///   appears, replaced nothing but signed-link parameters (`_jwt=***`). A guest has no other
///   way in (no environment, files or sockets), so the key is not in its memory.
///
/// The recording also replays offline exactly as recorded. A wrong key draining the account
/// is [`runway_a_wrong_key_drains_the_account_and_fails_nothing`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_the_bearer_key_stays_out_of_the_guest_the_logs_and_the_recording() {
    let key = distinctive_key("runway e2e: the key stays out");
    let sim = slotd_sim::runway::spawn(RunwayOptions {
        api_key: key.clone(),
        ..sim_options(4)
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
max_slots = 3

[handlers.{HANDLER}]
base_url = "{base}"
allowed_hosts = ["{host}"]
tier = 3
expected_duration_scale = {TIME_SCALE}
api_key = "{key}"
record = "{recordings}"
"#,
        plugins = runway_plugins(dir.path()).display(),
        base = sim.base_url(),
        host = sim.addr(),
        recordings = recordings.display(),
    );
    std::fs::write(&config, text).expect("write config");
    let log = dir.path().join("slotd.log");
    let mut child = spawn_slotd_with_env(&config, &log, &[], &[("SLOTD_LOG", LOG_EVERYTHING)]);
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    wait_healthy(&client, &base).await;

    let done = post_task(
        &client,
        &base,
        TASK_TYPE,
        json!({"payload": payload("key", 3)}),
    )
    .await;
    let cancelled = post_task(
        &client,
        &base,
        TASK_TYPE,
        json!({"payload": payload("cancelled", 1)}),
    )
    .await;
    let task = async |id: &str| -> Value {
        client
            .get(format!("{base}/v1/tasks/{id}"))
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json")
    };
    eventually(
        Duration::from_secs(30),
        "the second task at Runway",
        async || {
            results(&task(&cancelled).await)[0]["provider_task_id"]
                .is_string()
                .then_some(())
        },
    )
    .await;
    let r = client
        .post(format!("{base}/v1/tasks/{cancelled}/cancel"))
        .send()
        .await
        .expect("cancel");
    assert_eq!(r.status(), 200);
    wait_all_completed(
        &client,
        &base,
        std::slice::from_ref(&done),
        Duration::from_secs(30),
    )
    .await;
    eventually(Duration::from_secs(30), "the cancel", async || {
        (task(&cancelled).await["status"] == "cancelled").then_some(())
    })
    .await;
    assert_check_clean(&db_url, Some(&objects), &[(POOL, 3)]).await;
    child.kill().expect("stop slotd");
    child.wait().expect("reap slotd");

    // The host sent the key: every request was accepted.
    let stats = sim.stats();
    assert_eq!(stats.auth_refusals, 0);
    assert_eq!(stats.creates, 4);
    assert_eq!(stats.cancelled, 1);

    // (a) Not in the log.
    let logged = std::fs::read_to_string(&log).expect("slotd's log");
    assert!(
        logged.contains(HANDLER) && logged.contains("TRACE"),
        "the log holds the run at trace level: {} bytes",
        logged.len()
    );
    for needle in key_needles(&key) {
        assert!(!logged.contains(needle), "the key is in slotd's log");
    }

    // (b) Not in the recording, and nothing the guest saw needed hiding.
    let recording = recordings.join(format!("{HANDLER}.jsonl"));
    let raw = std::fs::read_to_string(&recording).expect("the recording");
    for needle in key_needles(&key) {
        assert!(!raw.contains(needle), "the key is in the recording");
    }
    assert_eq!(
        raw.matches("***").count(),
        raw.matches("_jwt=***").count(),
        "something other than a signed link's signature was redacted"
    );
    let records = slotd_runtime::tape::read(&recording).expect("the recording parses");
    for function in ["tick", "finalize", "cancel"] {
        assert!(
            records.iter().any(|r| r.function == function),
            "no {function} call recorded"
        );
    }
    let mut requests = 0;
    for r in &records {
        assert!(
            !r.settings.contains_key("api_key"),
            "config.get can read the key: {:?}",
            r.settings.keys()
        );
        for x in &r.exchanges {
            requests += 1;
            for (name, _) in &x.request.headers {
                assert!(
                    !name.eq_ignore_ascii_case("authorization"),
                    "the guest set {name} itself: {:?}",
                    x.request
                );
            }
        }
    }
    assert!(
        requests >= 8,
        "creates, polls, reads and a DELETE: {requests}"
    );
    let report = slotd_runtime::replay::replay(&built_plugin("runway_video"), &recording)
        .await
        .expect("the replay runs");
    assert_eq!(report.differing(), 0, "{report:?}");
}

/// A wrong key is Runway's 401 on every create: the handler reports it as the account's
/// (`account_refused`), so nothing fails and nothing hammers Runway. The pool's implicit
/// account is drained (shown in `GET /v1/pools` with Runway's words), the units wait `pending`
/// without a retry spent, nothing is created, and the task can still be cancelled. With the
/// previous test, where the guest sets no `Authorization` header yet Runway accepts the
/// requests, this shows the host is the one that inserts the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_a_wrong_key_drains_the_account_and_fails_nothing() {
    let run = Run::start(sim_options(5), |c, _| {
        let h = c.handlers.get_mut(HANDLER).expect("handler config");
        h.secrets.insert(
            "api_key".into(),
            Secret::new(distinctive_key("a key Runway never issued")),
        );
    })
    .await;
    let id = run.submit(payload("wrong-key", 2)).await;
    let drained = eventually(Duration::from_secs(20), "account drained", async || {
        let pools = get_json(&run.client, &format!("{}/v1/pools", run.base)).await?;
        let pool = pools
            .as_array()?
            .iter()
            .find(|p| p["name"] == POOL)?
            .clone();
        let account = pool["accounts"].as_array()?.first()?.clone();
        (account["state"] == "drained").then_some(account)
    })
    .await;
    assert_eq!(drained["name"], "default", "{drained}");
    assert_eq!(drained["drained"]["code"], "account_refused", "{drained}");
    let reason = drained["drained"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("401") && reason.contains("api_key"),
        "{reason}"
    );
    let view = run.task(&id).await;
    for r in results(&view) {
        assert_eq!(
            r["status"], "pending",
            "nothing fails for the account's fault: {r}"
        );
        assert!(r["provider_task_id"].is_null(), "{r}");
    }
    let stats = run.sim.stats();
    assert!(stats.auth_refusals >= 1, "Runway refused the key");
    assert_eq!(stats.creates, 0);
    // The work is not stuck for good: the client can still cancel it.
    run.cancel(&id).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(20))
        .await;
    assert_eq!(views[0]["status"], "cancelled", "{}", views[0]);
    run.stop(&[]).await;
}
