//! Live streams through the real router over SQLite: idle streams cost the store one read of
//! the log per feed round however many are open, an event wakes exactly the streams of its
//! tenant and task, every stream still delivers every event of its scope once and in order,
//! and the feed stops with the last stream (and never leaves a stream waiting on a store that
//! is gone).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tower::ServiceExt;

use crate::test_harness::{Harness, harness_with};
use slotd_core::config::{ApiKey, Config, Secret};
use slotd_core::model::UnitStatus;
use slotd_store::prelude::*;
use slotd_store::{NewTask, NewUnit, UnitUpdate};
use slotd_units::event_feed::{FeedStats, POLL};

const KEY_A: &str = "key-of-tenant-a";
const KEY_B: &str = "key-of-tenant-b";

async fn harness() -> Harness {
    let key = |key: &str, tenant: &str| ApiKey {
        key: Secret::new(key),
        tenant: tenant.into(),
        admin: false,
        publish: Vec::new(),
    };
    harness_with(Config {
        api_keys: vec![key(KEY_A, "a"), key(KEY_B, "b")],
        ..Config::default()
    })
    .await
}

/// One SSE frame: `event:`, `id:`, `data:`.
#[derive(Debug, Clone)]
struct Frame {
    event: String,
    id: Option<String>,
    data: String,
}

impl Frame {
    /// The unit event's log id.
    fn event_id(&self) -> i64 {
        let v: Value = serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("event data {:?}: {e}", self.data));
        v["id"]
            .as_i64()
            .unwrap_or_else(|| panic!("no id in {}", self.data))
    }
}

/// An open stream, read by its own task (as a client would) into a channel.
struct Stream {
    frames: mpsc::UnboundedReceiver<Frame>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Stream {
    async fn open(h: &Harness, path: &str, key: &str, last_id: Option<&str>) -> Stream {
        let mut req = Request::builder()
            .uri(path)
            .header(header::AUTHORIZATION, format!("Bearer {key}"))
            .header(header::ACCEPT, "text/event-stream");
        if let Some(id) = last_id {
            req = req.header("last-event-id", id);
        }
        let req = req
            .body(Body::empty())
            .unwrap_or_else(|e| panic!("building GET {path}: {e}"));
        let response = match h.app.clone().oneshot(req).await {
            Ok(r) => r,
            Err(e) => match e {},
        };
        assert_eq!(response.status(), StatusCode::OK, "GET {path}");
        let (tx, frames) = mpsc::unbounded_channel();
        let mut body = response.into_body().into_data_stream();
        let reader = tokio::spawn(async move {
            let mut text = String::new();
            while let Some(Ok(chunk)) = body.next().await {
                text.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = text.find("\n\n") {
                    let block: String = text.drain(..end + 2).collect();
                    let mut frame = Frame {
                        event: String::new(),
                        id: None,
                        data: String::new(),
                    };
                    for line in block.lines() {
                        if let Some(v) = line.strip_prefix("event:") {
                            frame.event = v.trim().to_string();
                        } else if let Some(v) = line.strip_prefix("id:") {
                            frame.id = Some(v.trim().to_string());
                        } else if let Some(v) = line.strip_prefix("data:") {
                            frame.data.push_str(v.trim_start());
                        }
                    }
                    // Comments (keep-alives) have no event.
                    if !frame.event.is_empty() && tx.send(frame).is_err() {
                        return;
                    }
                }
            }
        });
        Stream { frames, reader }
    }

    /// The next frame, within `wait`.
    async fn next_within(&mut self, wait: Duration) -> Option<Frame> {
        tokio::time::timeout(wait, self.frames.recv())
            .await
            .ok()
            .flatten()
    }

    /// The next `n` frames (each within a deadline).
    async fn take(&mut self, n: usize) -> Vec<Frame> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            match self.next_within(Duration::from_secs(10)).await {
                Some(f) => out.push(f),
                None => panic!("only {} of {n} frames came: {out:?}", out.len()),
            }
        }
        out
    }

    /// Whatever frames have come, without waiting.
    fn drain(&mut self) -> Vec<Frame> {
        let mut out = Vec::new();
        while let Ok(f) = self.frames.try_recv() {
            out.push(f);
        }
        out
    }
}

/// A task of `tenant` with `units` pending units, stored directly; its id and units' ids.
async fn seed(h: &Harness, tenant: &str, units: usize) -> (String, Vec<String>) {
    let id = uuid::Uuid::now_v7().to_string();
    let unit_ids: Vec<String> = (0..units)
        .map(|_| uuid::Uuid::now_v7().to_string())
        .collect();
    let task = NewTask {
        id: id.clone(),
        tenant: tenant.into(),
        task_type: "fixture".into(),
        payload: json!({ "count": units }).to_string(),
        idempotency_key: None,
        priority: 0,
        completion_webhook_url: None,
        units: unit_ids
            .iter()
            .map(|u| NewUnit {
                id: u.clone(),
                pool: "fixture".into(),
                stage: "main".into(),
                spec: "{}".into(),
                state: "{}".into(),
                routes: None,
                routing: None,
                cost_estimate: None,
                planned_release: None,
            })
            .collect(),
        now: 1_000_000,
        terms: Default::default(),
    };
    if let Err(e) = h.store.task_create(task).await {
        panic!("seeding a task: {e}");
    }
    (id, unit_ids)
}

/// Move `unit` from `from` to `to` (one event).
async fn step(h: &Harness, unit: &str, from: UnitStatus, to: UnitStatus) {
    let u = UnitUpdate {
        unit_id: unit.to_string(),
        from: Some(from),
        to: Some(to),
        ..UnitUpdate::default()
    };
    match h.store.unit_apply(&[u], 1_000_001, None).await {
        Ok(r) if r.applied.len() == 1 => {}
        Ok(r) => panic!("{unit} {from} -> {to}: {r:?}"),
        Err(e) => panic!("{unit} {from} -> {to}: {e}"),
    }
}

/// The log ids of `task`'s events.
async fn log_ids(h: &Harness, task: &str) -> Vec<i64> {
    match h.store.unit_events(task).await {
        Ok(events) => events.iter().map(|e| e.id).collect(),
        Err(e) => panic!("reading {task}'s events: {e}"),
    }
}

/// Poll `check` on the feed's counters until it holds (a deadline, never a bare sleep).
async fn until(h: &Harness, what: &str, check: impl Fn(&FeedStats) -> bool) -> FeedStats {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = h.services.events.stats();
        if check(&stats) {
            return stats;
        }
        assert!(Instant::now() < deadline, "{what}: {stats:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `count` more feed rounds from `from` (each round is one read of the log).
async fn rounds(h: &Harness, from: FeedStats, count: u64) -> FeedStats {
    until(h, "the feed goes round", |s| s.reads >= from.reads + count).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_streams_share_one_log_reader_and_events_wake_only_their_own() {
    let h = harness().await;
    let (a1, a1_units) = seed(&h, "a", 2).await;
    let (a2, a2_units) = seed(&h, "a", 1).await;
    let (b1, b1_units) = seed(&h, "b", 1).await;
    // No stream, no feed: an idle API reads nothing.
    assert_eq!(h.services.events.stats(), FeedStats::default());

    // 50 streams: a's tenant stream ×20, b's ×10, a1's and a2's task streams ×10 each.
    let mut tenant_a = Vec::new();
    let mut tenant_b = Vec::new();
    let mut task_a1 = Vec::new();
    let mut task_a2 = Vec::new();
    for _ in 0..20 {
        tenant_a.push(Stream::open(&h, "/v1/events", KEY_A, None).await);
    }
    for _ in 0..10 {
        tenant_b.push(Stream::open(&h, "/v1/events", KEY_B, None).await);
    }
    for _ in 0..10 {
        task_a1.push(Stream::open(&h, &format!("/v1/tasks/{a1}/events"), KEY_A, None).await);
        task_a2.push(Stream::open(&h, &format!("/v1/tasks/{a2}/events"), KEY_A, None).await);
    }
    // Task streams start with their task's log (its creation); tenant streams at the log's
    // end, with nothing yet.
    let mut seen: BTreeMap<(&str, usize), Vec<Frame>> = BTreeMap::new();
    for (i, s) in task_a1.iter_mut().enumerate() {
        seen.insert(("a1", i), s.take(2).await);
    }
    for (i, s) in task_a2.iter_mut().enumerate() {
        seen.insert(("a2", i), s.take(1).await);
    }
    let stats = until(&h, "every stream subscribed", |s| {
        s.streams == 50 && s.running
    })
    .await;

    // Idle: once the first reads are done (the feed's start wakes everyone once), the streams
    // read nothing more; the feed reads the log once a round, for all 50.
    let mut settled = rounds(&h, stats, 2).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let next = rounds(&h, settled, 2).await;
        if next.stream_reads == settled.stream_reads {
            settled = next;
            break;
        }
        assert!(
            Instant::now() < deadline,
            "idle streams keep reading: {settled:?} then {next:?}"
        );
        settled = next;
    }
    let started = Instant::now();
    let idle = rounds(&h, settled, 10).await;
    let elapsed = started.elapsed();
    assert_eq!(
        idle.stream_reads, settled.stream_reads,
        "idle streams do not read"
    );
    assert_eq!(idle.wakes, settled.wakes, "nothing woke an idle stream");
    let reads = idle.reads - settled.reads;
    let schedule = elapsed.as_millis() / POLL.as_millis() + 2;
    assert!(
        u128::from(reads) <= schedule,
        "{reads} log reads in {elapsed:?}: more than one a {POLL:?} round"
    );
    for s in tenant_a.iter_mut().chain(&mut tenant_b).chain(&mut task_a2) {
        assert!(s.drain().is_empty());
    }

    // One event of a1: it wakes a's tenant streams and a1's task streams, and no other.
    step(&h, &a1_units[0], UnitStatus::Pending, UnitStatus::Submitted).await;
    let event_id = *log_ids(&h, &a1).await.last().expect("an event");
    for s in tenant_a.iter_mut().chain(&mut task_a1) {
        let f = s.take(1).await;
        assert_eq!(f[0].event, "unit");
        assert_eq!(f[0].event_id(), event_id);
    }
    let woken = h.services.events.stats();
    assert_eq!(woken.wakes - idle.wakes, 30, "exactly a's 20 and a1's 10");
    // A few more rounds: nothing reached the others.
    rounds(&h, woken, 3).await;
    for s in tenant_b.iter_mut().chain(&mut task_a2) {
        assert!(
            s.drain().is_empty(),
            "a stream of another scope got a1's event"
        );
    }
    for (i, s) in task_a1.iter_mut().enumerate() {
        seen.entry(("a1", i)).or_default().push(Frame {
            event: "unit".into(),
            id: None,
            data: json!({ "id": event_id }).to_string(),
        });
        assert!(s.drain().is_empty());
    }

    // Every task runs to its end: every stream delivers every event of its scope, once and in
    // order; the task streams end with their task.
    step(&h, &a1_units[0], UnitStatus::Submitted, UnitStatus::Failed).await;
    h.drive(&a2_units[0], UnitStatus::Completed, UnitUpdate::default())
        .await;
    h.drive(&b1_units[0], UnitStatus::Completed, UnitUpdate::default())
        .await;
    h.drive(&a1_units[1], UnitStatus::Completed, UnitUpdate::default())
        .await;
    let (a1_log, a2_log, b1_log) = (
        log_ids(&h, &a1).await,
        log_ids(&h, &a2).await,
        log_ids(&h, &b1).await,
    );
    // Tenant streams opened at the log's end: everything from a1's submit on.
    let mut a_expected: Vec<i64> = a1_log.iter().chain(&a2_log).copied().collect();
    a_expected.sort();
    a_expected.retain(|id| *id >= event_id);
    let b_expected: Vec<i64> = b1_log[1..].to_vec();
    let ids_of = |frames: &[Frame]| -> Vec<i64> {
        frames
            .iter()
            .filter(|f| f.event == "unit")
            .map(Frame::event_id)
            .collect()
    };
    let mut last_a = None;
    for s in tenant_a.iter_mut() {
        let mut got = vec![event_id];
        while got.len() < a_expected.len() {
            match s.next_within(Duration::from_secs(10)).await {
                Some(f) => {
                    assert_eq!(f.event, "unit");
                    last_a = f.id.clone();
                    got.push(f.event_id());
                }
                None => panic!("a tenant stream stopped at {got:?}, expected {a_expected:?}"),
            }
        }
        assert_eq!(got, a_expected);
    }
    for s in tenant_b.iter_mut() {
        let got = ids_of(&s.take(b_expected.len()).await);
        assert_eq!(got, b_expected);
    }
    for (name, log, streams) in [("a1", &a1_log, &mut task_a1), ("a2", &a2_log, &mut task_a2)] {
        for (i, s) in streams.iter_mut().enumerate() {
            let before = seen.remove(&(name, i)).unwrap_or_default();
            let rest = log.len() - before.len();
            let mut frames = before;
            frames.extend(s.take(rest + 1).await);
            let end = frames.pop().expect("frames");
            assert_eq!(end.event, "end", "{end:?}");
            let end: Value = serde_json::from_str(&end.data).expect("end data");
            let status = if name == "a1" { "failed" } else { "completed" };
            assert_eq!(end["status"], status, "{end}");
            assert_eq!(&ids_of(&frames), log, "{name} stream {i}");
            // Then the stream is over.
            assert!(s.next_within(Duration::from_secs(5)).await.is_none());
        }
    }
    // The ended task streams left the feed.
    until(&h, "the ended task streams unsubscribed", |s| {
        s.streams == 30
    })
    .await;

    // Resumed after the last event a tenant stream sent: nothing more, and the next event.
    let mut resumed = Stream::open(&h, "/v1/events", KEY_A, last_a.as_deref()).await;
    let (a3, a3_units) = seed(&h, "a", 1).await;
    let f = resumed.take(1).await;
    assert_eq!(f[0].event_id(), log_ids(&h, &a3).await[0]);
    step(&h, &a3_units[0], UnitStatus::Pending, UnitStatus::Submitted).await;
    let f = resumed.take(1).await;
    assert_eq!(f[0].event_id(), log_ids(&h, &a3).await[1]);
    drop(resumed);

    // The last stream gone, the feed stops: an idle API reads nothing again.
    drop((tenant_a, tenant_b, task_a1, task_a2));
    let stopped = until(&h, "the feed stops", |s| s.streams == 0 && !s.running).await;
    let later = rounds_or_none(&h, stopped).await;
    assert_eq!(later.reads, stopped.reads, "a stopped feed reads nothing");
}

/// With no stream open, wait as long as a few rounds would take (the feed is stopped, so
/// there is nothing to observe but the absence of reads).
async fn rounds_or_none(h: &Harness, from: FeedStats) -> FeedStats {
    let deadline = Instant::now() + POLL * 5;
    loop {
        let stats = h.services.events.stats();
        if stats.reads != from.reads || Instant::now() >= deadline {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A task stream on a task that has already ended sends its whole log and its end; one
/// resumed from an event sends exactly the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_an_ended_task_sends_the_rest_and_ends() {
    let h = harness().await;
    let (id, units) = seed(&h, "a", 2).await;
    for u in &units {
        h.drive(u, UnitStatus::Completed, UnitUpdate::default())
            .await;
    }
    let log = log_ids(&h, &id).await;
    let path = format!("/v1/tasks/{id}/events");
    let mut s = Stream::open(&h, &path, KEY_A, None).await;
    let frames = s.take(log.len() + 1).await;
    assert_eq!(frames[log.len()].event, "end");
    let got: Vec<i64> = frames[..log.len()].iter().map(Frame::event_id).collect();
    assert_eq!(got, log);
    let cut = frames[2].id.clone();
    let mut s = Stream::open(&h, &path, KEY_A, cut.as_deref()).await;
    let rest = s.take(log.len() - 3 + 1).await;
    let got: Vec<i64> = rest[..log.len() - 3].iter().map(Frame::event_id).collect();
    assert_eq!(got, log[3..]);
    assert_eq!(rest[log.len() - 3].event, "end");
}

/// When the store goes away, the feed cannot read the log: it wakes every stream, each reads
/// on its own, fails, and says so (the client resumes from its last id). No stream waits
/// forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_end_with_an_error_when_the_store_is_gone() {
    let h = harness().await;
    let (id, _) = seed(&h, "a", 1).await;
    let mut task = Stream::open(&h, &format!("/v1/tasks/{id}/events"), KEY_A, None).await;
    let mut tenant = Stream::open(&h, "/v1/events", KEY_A, None).await;
    assert_eq!(task.take(1).await[0].event, "unit");
    until(&h, "both streams subscribed", |s| {
        s.streams == 2 && s.running
    })
    .await;
    h.store.close().await;
    for s in [&mut task, &mut tenant] {
        let f = s.take(1).await;
        assert_eq!(f[0].event, "error", "{f:?}");
        assert!(f[0].data.contains("reading events"), "{f:?}");
    }
}
