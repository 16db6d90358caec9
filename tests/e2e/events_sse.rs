//! Live events over real HTTP: the SSE stream of a 100-unit task delivers every
//! event of its log, once and in order, across a dropped connection resumed with
//! `Last-Event-ID`, and ends when the task has; the tenant stream sees a new task's events;
//! a resume token that is not one slotd wrote is a 400 that names it.

use serde_json::{Value, json};

use crate::support::*;

/// An open event stream, read with the parser `slotd task watch` uses.
struct Stream {
    frames: slotd::watch::Frames,
}

impl Stream {
    async fn open(base: &str, path: &str, last_id: Option<&str>) -> Stream {
        let mut req = reqwest::Client::new()
            .get(format!("{base}{path}"))
            .header("accept", "text/event-stream");
        if let Some(id) = last_id {
            req = req.header("last-event-id", id);
        }
        let resp = req.send().await.expect("stream");
        assert_eq!(resp.status(), 200);
        let kind = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        assert!(kind.starts_with("text/event-stream"), "{kind}");
        Stream {
            frames: slotd::watch::Frames::new(resp),
        }
    }

    /// The next frame with an event (comments are keep-alives), or `None` at the end.
    async fn next(&mut self) -> Option<slotd::watch::Frame> {
        self.frames.next().await.expect("reading the stream")
    }
}

/// Serve the API of `m` on a loopback port.
async fn serve(m: &Manual) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = slotd_server::api::router(m.services.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_stream_delivers_every_event_in_order_across_a_resume() {
    task_stream_across_a_resume(None).await;
}

/// The same on PostgreSQL, where events are read by settled transaction (see
/// `store/events.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_stream_delivers_every_event_in_order_across_a_resume_postgres() {
    let schema = crate::pg::PgSchema::create().await;
    task_stream_across_a_resume(Some(schema.url())).await;
}

async fn task_stream_across_a_resume(database_url: Option<String>) {
    let m = Manual::start_with(20, 100, |c| {
        if let Some(url) = database_url {
            c.database_url = url;
        }
    })
    .await;
    let base = serve(&m).await;
    let id = m.submit("fixture", json!({"count": 100, "polls": 1})).await;
    let path = format!("/v1/tasks/{id}/events");
    let reader = async {
        let mut seen: Vec<Value> = Vec::new();
        let mut stream = Stream::open(&base, &path, None).await;
        let mut dropped = false;
        let end = loop {
            let Some(f) = stream.next().await else {
                panic!("the stream closed without an end event");
            };
            match f.event.as_str() {
                "unit" => {
                    seen.push(serde_json::from_str(&f.data).expect("event json"));
                    if seen.len() == 150 && !dropped {
                        // The connection drops; the client resumes after the last event it got.
                        dropped = true;
                        drop(stream);
                        stream = Stream::open(&base, &path, f.id.as_deref()).await;
                    }
                }
                "end" => break serde_json::from_str::<Value>(&f.data).expect("end json"),
                other => panic!("unexpected event {other:?}: {}", f.data),
            }
        };
        (seen, end, dropped)
    };
    let driver = m.run_until(&["fixture"], 2000, async |m| {
        m.task(&id).await["status"] == "completed"
    });
    let ((seen, end, dropped), _) = tokio::join!(reader, driver);
    assert!(dropped, "the task had fewer than 150 events");
    assert_eq!(end["status"], "completed");
    let (status, log) = api_call(&m.services, "GET", &path, None).await;
    assert_eq!(status, 200);
    let log_ids: Vec<i64> = log["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["id"].as_i64())
        .collect();
    let seen_ids: Vec<i64> = seen.iter().filter_map(|e| e["id"].as_i64()).collect();
    assert_eq!(
        seen_ids, log_ids,
        "the stream is the log: every event once, in order"
    );
    let units: std::collections::HashSet<&str> =
        seen.iter().filter_map(|e| e["unit_id"].as_str()).collect();
    assert_eq!(units.len(), 100);
    m.check().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenant_stream_sees_new_tasks_and_bad_tokens_are_named() {
    let m = Manual::start(5, 100).await;
    let base = serve(&m).await;
    // Before anything: a stream from the log's end.
    let mut stream = Stream::open(&base, "/v1/events", None).await;
    let id = m.submit("fixture", json!({"count": 2, "polls": 1})).await;
    // A scheduler round claims the units: their first events.
    m.round(&["fixture"], 50).await;
    let f = stream.next().await.expect("an event");
    assert_eq!(f.event, "unit");
    let e: Value = serde_json::from_str(&f.data).expect("json");
    assert_eq!(e["task_id"], id.as_str());
    // A token slotd did not write.
    let r = reqwest::Client::new()
        .get(format!("{base}/v1/events"))
        .header("accept", "text/event-stream")
        .header("last-event-id", "not-a-cursor")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.expect("problem");
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("not-a-cursor")),
        "{body}"
    );
    // Without the stream header: one JSON page from the start.
    let (status, page) = api_call(&m.services, "GET", "/v1/events", None).await;
    assert_eq!(status, 200);
    assert!(
        page["events"].as_array().is_some_and(|a| !a.is_empty()),
        "{page}"
    );
    assert!(page["next"].is_string());
    m.run_until(&["fixture"], 200, async |m| {
        m.task(&id).await["status"] == "completed"
    })
    .await;
    m.check().await;
}

/// `slotd task watch ID` (the real binary) follows a task to its end over the stream and
/// exits 0 once it completed, the last progress line counting every unit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_watch_follows_a_task_to_its_end() {
    let m = Manual::start(5, 100).await;
    let base = serve(&m).await;
    let id = m.submit("fixture", json!({"count": 12, "polls": 1})).await;
    let watcher = tokio::process::Command::new(env!("CARGO_BIN_EXE_slotd"))
        .args(["task", "--url", &base, "watch", &id])
        .env_remove("SLOTD_API_KEY")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("slotd task watch");
    let driver = m.run_until(&["fixture"], 500, async |m| {
        m.task(&id).await["status"] == "completed"
    });
    let (out, _) = tokio::join!(watcher.wait_with_output(), driver);
    let out = out.expect("watch output");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("12/12 completed"), "{text}");
    assert!(text.contains(&format!("task {id} completed")), "{text}");
    // Progress was shown as it went, not only at the end.
    assert!(text.lines().count() > 3, "{text}");
    m.check().await;
}
