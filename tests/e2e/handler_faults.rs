//! A misbehaving handler is cut off and contained: its units unchanged, the host alive, other
//! pools unaffected; illegal changes refused and counted.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;

fn unit_statuses(task: &Value) -> Vec<String> {
    task["results"]
        .as_array()
        .map(|r| {
            r.iter()
                .map(|u| u["status"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Rounds needed for 10 units in pool `fixture-b`, with or without a faulting unit in `fixture`
/// (whose task id is returned too).
async fn rounds_for_b(with_fault: Option<&str>) -> (usize, Manual, Option<String>) {
    let m = Manual::start(5, 100).await;
    let mut faulting = None;
    if let Some(behavior) = with_fault {
        faulting = Some(
            m.submit("fixture", json!({"count": 1, "behavior": behavior}))
                .await,
        );
    }
    let b = m
        .submit("fixture-b", json!({"count": 10, "polls": 1}))
        .await;
    let rounds = m
        .run_until(&["fixture", "fixture-b"], 200, async |m| {
            m.task(&b).await["status"] == "completed"
        })
        .await;
    (rounds, m, faulting)
}

/// `behavior` makes the fixture fault; `code` is the fault the host must have recorded on the
/// unit for it (so a memory bomb is cut off by the memory cap, not by some other trap).
async fn fault_is_contained(behavior: &str, code: &[&str]) {
    let (baseline, base, _) = rounds_for_b(None).await;
    base.check().await;
    let started = Instant::now();
    let (rounds, m, faulting) = rounds_for_b(Some(behavior)).await;
    assert_eq!(
        rounds, baseline,
        "the faulting pool slowed the other pool down"
    );
    // Every faulting call was cut off: generous bound, the deadline is 2 s per call and the
    // retry budget 3, so at most 4 faulting calls happened.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
    // The host is alive and still answers.
    let (status, _) = api_call(&m.services, "GET", "/healthz", None).await;
    assert_eq!(status, 200);
    let task = m.task(&faulting.expect("faulting task")).await;
    let recorded = task["results"][0]["error"]["code"].as_str().unwrap_or("");
    assert!(
        code.contains(&recorded),
        "the {behavior} unit should record one of {code:?}: {task}"
    );
    m.check().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trap_is_cut_off_and_contained() {
    fault_is_contained("trap", &["handler_trap"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_loop_is_cut_off_and_contained() {
    fault_is_contained("loop", &["handler_deadline", "handler_cpu"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_bomb_is_cut_off_and_contained() {
    fault_is_contained("alloc", &["handler_memory"]).await;
}

/// A faulting call leaves its units unchanged; once the retry budget is spent the unit fails
/// with the fault recorded, and a good unit in the same batch still completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trap_leaves_units_unchanged_then_fails_alone() {
    let m = Manual::start(5, 100).await;
    let bad = m
        .submit("fixture", json!({"count": 1, "behavior": "trap"}))
        .await;
    let good = m.submit("fixture", json!({"count": 3, "polls": 1})).await;
    let reports = m.round(&["fixture"], 10).await;
    assert!(reports[0].faults >= 1, "{:?}", reports[0]);
    // The write-ahead marker was written before the call; the trap changed nothing after it.
    assert_eq!(unit_statuses(&m.task(&bad).await), vec!["submitted"]);
    m.run_until(&["fixture"], 200, async |m| {
        m.task(&bad).await["status"] == "failed" && m.task(&good).await["status"] == "completed"
    })
    .await;
    let t = m.task(&bad).await;
    let err = t["results"][0]["error"].to_string();
    assert!(err.contains("handler_trap"), "{t}");
    assert_eq!(m.services.slots.used("fixture").await.ok(), Some(0));
    m.check().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn illegal_change_is_refused_and_counted() {
    let m = Manual::start(5, 100).await;
    let id = m
        .submit("fixture", json!({"count": 1, "behavior": "illegal"}))
        .await;
    let reports = m.round(&["fixture"], 10).await;
    assert_eq!(reports[0].refused, 1, "{:?}", reports[0]);
    assert_eq!(reports[0].applied, 0);
    assert_eq!(
        unit_statuses(&m.task(&id).await),
        vec!["submitted"],
        "never applied"
    );
    // This server's own registry: exactly the one change it refused, whatever other tests in
    // this process refuse at the same time.
    let (_, metrics) = api_call(&m.services, "GET", "/metrics", None).await;
    let text = metrics.as_str().unwrap_or_default().to_string();
    let counted: f64 = text
        .lines()
        .filter(|l| l.starts_with("slotd_handler_illegal_changes_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(counted, 1.0, "{text}");
    m.check().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_outside_allowlist_is_denied() {
    let m = Manual::start(5, 100).await;
    let id = m
        .submit("fixture", json!({"count": 1, "behavior": "forbidden"}))
        .await;
    m.run_until(&["fixture"], 20, async |m| {
        m.task(&id).await["status"] == "failed"
    })
    .await;
    let t = m.task(&id).await;
    let err = t["results"][0]["error"].to_string();
    assert!(
        err.contains("denied") || err.contains("allowed_hosts"),
        "{t}"
    );
    m.check().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_signable_but_not_readable() {
    let m = Manual::start(5, 100).await;
    let id = m
        .submit("fixture", json!({"count": 1, "behavior": "peek"}))
        .await;
    m.run_until(&["fixture"], 20, async |m| {
        m.task(&id).await["status"] == "failed"
    })
    .await;
    let t = m.task(&id).await;
    let msg = t["results"][0]["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        !msg.contains("fixture-secret"),
        "the raw secret reached the guest: {msg}"
    );
    // HMAC-SHA256("fixture-secret", "x"), computed here independently.
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"fixture-secret").expect("key");
    mac.update(b"x");
    let expected = hex::encode(mac.finalize().into_bytes());
    assert!(
        msg.contains(&expected),
        "signing through the host did not work: {msg}"
    );
    m.check().await;
}

/// A provider failure fails only that unit; retry resubmits it with a new idempotency key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_units_are_recorded_and_retried_with_a_new_key() {
    let m = Manual::start(5, 100).await;
    let id = m
        .submit(
            "fixture",
            json!({"count": 1, "behavior": "fail", "code": "1301", "message": "moderation"}),
        )
        .await;
    m.run_until(&["fixture"], 50, async |m| {
        m.task(&id).await["status"] == "failed"
    })
    .await;
    let t = m.task(&id).await;
    assert_eq!(t["results"][0]["error"]["code"], "1301", "{t}");
    assert_eq!(t["results"][0]["error"]["message"], "moderation", "{t}");
    let (status, body) =
        api_call(&m.services, "POST", &format!("/v1/tasks/{id}/retry"), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["retried"], 1);
    m.run_until(&["fixture"], 50, async |m| {
        m.task(&id).await["status"] == "failed"
    })
    .await;
    let stats = m.stub.stats();
    assert_eq!(stats.creates, 2, "the retry must resubmit");
    assert_eq!(
        stats.creates_by_key.len(),
        2,
        "with a fresh idempotency key"
    );
    m.check().await;
}
