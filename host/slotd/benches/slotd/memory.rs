//! Resident memory of a real `slotd serve` process (docs/testing.md): idle with the Kling handlers
//! (and the fixture) loaded, and with 10,000 units in flight being polled. Read from
//! `/proc/PID/status` (`VmRSS` now, `VmHWM` the peak), so Linux only.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::report::{Better, Report, Target};

/// A `slotd serve` child (killed when dropped) and where it listens.
struct Server {
    serve: crate::common::Serve,
    base: String,
}

/// `VmRSS` and `VmHWM` of `pid`, in MB.
fn rss_mb(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / 1024.0)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

fn start(dir: &Path) -> Server {
    let built = Path::new(slotd_testkit::BUILT_PLUGINS);
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugins dir");
    for (from, to) in [
        ("kling_video.wasm", "kling-video.wasm"),
        ("kling_avatar.wasm", "kling-avatar.wasm"),
        ("fixture.wasm", "fixture.wasm"),
    ] {
        std::fs::copy(built.join(from), plugins.join(to)).expect("copy handler");
    }
    let port = crate::cluster::free_port().expect("free port");
    let config = format!(
        r#"listen = "127.0.0.1:{port}"
database_url = "sqlite://{db}"
plugins_dir = "{plugins}"
cache_dir = "{cache}"
object_store = "file://{objects}"
max_units_per_task = 1000

[pools.fixture]
max_slots = 10000

[scheduler]
tick_interval = "500ms"
poll_initial = "1s"
poll_max = "2s"

[handlers.kling-video]
base_url = "http://127.0.0.1:9"
access_key = "AK"
secret_key = "SK"

[handlers.kling-avatar]
base_url = "http://127.0.0.1:9"
access_key = "AK"
secret_key = "SK"
"#,
        db = dir.join("mem.db").display(),
        plugins = plugins.display(),
        cache = dir.join("cache").display(),
        objects = dir.join("objects").display(),
    );
    Server {
        serve: crate::common::serve(dir, &config),
        base: format!("http://127.0.0.1:{port}"),
    }
}

async fn until<F: Fn(&Value) -> bool>(client: &reqwest::Client, url: &str, done: F) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(resp) = client.get(url).send().await
            && let Ok(v) = resp.json::<Value>().await
            && done(&v)
        {
            return v;
        }
        assert!(Instant::now() < deadline, "{url} never got there");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn run(report: &mut Report) {
    let dir = tempfile::TempDir::new().expect("tmp");
    let server = start(dir.path());
    let pid = server.serve.child.id();
    let client = reqwest::Client::new();
    let handlers = until(&client, &format!("{}/v1/handlers", server.base), |v| {
        v.as_array().is_some_and(|a| a.len() >= 3)
    })
    .await;
    eprintln!(
        "memory: slotd serve (pid {pid}) up with {} handlers",
        handlers.as_array().map_or(0, Vec::len)
    );
    // Idle: the steady figure after start-up settles (the largest of a second of samples).
    let mut idle: f64 = 0.0;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        idle = idle.max(rss_mb(pid).expect("rss").0);
    }
    report.add("rss_idle_mb", "sqlite", idle, "MB", Target::AtMost(64.0));

    for _ in 0..10 {
        let resp = client
            .post(format!("{}/v1/tasks/fixture", server.base))
            .json(&serde_json::json!({"payload": {"count": 1000, "behavior": "idle"}}))
            .send()
            .await
            .expect("submit");
        assert_eq!(resp.status().as_u16(), 202, "submit refused");
    }
    until(&client, &format!("{}/v1/pools", server.base), |v| {
        v.as_array().is_some_and(|a| {
            a.iter()
                .any(|p| p["name"] == "fixture" && p["used"].as_u64() == Some(10_000))
        })
    })
    .await;
    // Several poll rounds of all 10,000 (polls every 1-2 s).
    let mut now: f64 = 0.0;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        now = now.max(rss_mb(pid).expect("rss").0);
    }
    let (_, peak) = rss_mb(pid).expect("rss");
    report.add("rss_10k_mb", "sqlite", now, "MB", Target::AtMost(256.0));
    report.add(
        "rss_10k_peak_mb",
        "sqlite",
        peak,
        "MB",
        Target::None(Better::Lower),
    );
}
