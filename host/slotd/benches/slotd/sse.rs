//! What 1,000 idle live event streams (SSE) cost a real `slotd serve` process: its CPU over a
//! window with none open, then with 1,000 open and idle (tenant streams and task streams
//! mixed, on tasks that stay pending: the process runs the API role only, nothing schedules
//! them), on SQLite and, when it answers, PostgreSQL. CPU is `utime + stime` from
//! `/proc/PID/stat`, so Linux only; the figure is the added share of one core.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::report::{Better, Report, Target};

/// Streams opened: half on the tenant, half on tasks.
const STREAMS: usize = 1000;
/// Tasks the task streams follow (several streams each, as several watchers would).
const TASKS: usize = 100;
/// Each CPU figure is measured over this long.
const WINDOW: Duration = Duration::from_secs(10);

/// A `slotd serve` child (killed when dropped) and where it listens.
struct Server {
    serve: crate::common::Serve,
    addr: String,
}

fn start(dir: &Path, database_url: &str) -> Server {
    let built = Path::new(slotd_testkit::BUILT_PLUGINS);
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugins dir");
    std::fs::copy(built.join("fixture.wasm"), plugins.join("fixture.wasm")).expect("copy handler");
    let port = crate::cluster::free_port().expect("free port");
    let config = format!(
        r#"listen = "127.0.0.1:{port}"
role = "api"
database_url = "{database_url}"
plugins_dir = "{plugins}"
cache_dir = "{cache}"
object_store = "file://{objects}"
"#,
        plugins = plugins.display(),
        cache = dir.join("cache").display(),
        objects = dir.join("objects").display(),
    );
    Server {
        serve: crate::common::serve(dir, &config),
        addr: format!("127.0.0.1:{port}"),
    }
}

/// Clock ticks per second of `/proc/PID/stat`'s times (`getconf CLK_TCK`; 100, Linux's usual
/// value, if that cannot be run).
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// CPU time `pid` has used so far (user and system), in seconds.
fn cpu_seconds(pid: u32, ticks: f64) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // After the command name (which may hold spaces, inside parentheses): state is field 3,
    // utime 14 and stime 15.
    let rest = stat.rsplit_once(')').expect("stat format").1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| -> f64 { fields[i - 3].parse().expect("stat number") };
    (field(14) + field(15)) / ticks
}

/// `pid`'s CPU over [`WINDOW`], as a percentage of one core.
async fn cpu_pct(pid: u32, ticks: f64) -> f64 {
    let (cpu0, t0) = (cpu_seconds(pid, ticks), Instant::now());
    tokio::time::sleep(WINDOW).await;
    let (cpu1, t1) = (cpu_seconds(pid, ticks), Instant::now());
    (cpu1 - cpu0) / (t1 - t0).as_secs_f64() * 100.0
}

/// The soft limit on open files (`/proc/self/limits`), inherited by the server.
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// A plain HTTP/1.1 request on a fresh connection; the status and the connection, the
/// response head read (a stream's body is left to come).
async fn request(addr: &str, head: &str, body: &str) -> (u16, String, TcpStream) {
    let mut conn = TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "{head} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n{}\r\n{body}",
        body.len(),
        if head.starts_with("GET") {
            "accept: text/event-stream\r\n"
        } else {
            "connection: close\r\n"
        }
    );
    conn.write_all(req.as_bytes()).await.expect("send");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        let n = conn.read(&mut buf).await.expect("read");
        assert!(n > 0, "{head}: closed before a response");
        got.extend_from_slice(&buf[..n]);
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text[end..].to_string(), conn)
}

/// Submit a fixture task that stays pending (nothing schedules in the API role); its id.
async fn submit(addr: &str) -> String {
    let (status, mut body, mut conn) = request(
        addr,
        "POST /v1/tasks/fixture",
        r#"{"payload": {"count": 1}}"#,
    )
    .await;
    assert_eq!(status, 202, "submit refused: {body}");
    // `connection: close`: the body runs to the end of the connection.
    let mut rest = String::new();
    let _ = conn.read_to_string(&mut rest).await;
    body.push_str(&rest);
    let json = body
        .find('{')
        .and_then(|i| serde_json::from_str::<serde_json::Value>(&body[i..]).ok())
        .expect("submit answer");
    json["task_id"].as_str().expect("task id").to_string()
}

async fn run_one(report: &mut Report, backend: &str, database_url: &str, ticks: f64) {
    let dir = tempfile::TempDir::new().expect("tmp");
    let server = start(dir.path(), database_url);
    let pid = server.serve.child.id();
    let deadline = Instant::now() + Duration::from_secs(120);
    while TcpStream::connect(&server.addr).await.is_err() {
        assert!(Instant::now() < deadline, "slotd serve never listened");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tasks: Vec<String> = {
        let mut out = Vec::with_capacity(TASKS);
        for _ in 0..TASKS {
            out.push(submit(&server.addr).await);
        }
        out
    };
    // Start-up and the submissions settle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = cpu_pct(pid, ticks).await;
    let mut streams = Vec::with_capacity(STREAMS);
    for i in 0..STREAMS {
        let path = if i % 2 == 0 {
            "/v1/events".to_string()
        } else {
            format!("/v1/tasks/{}/events", tasks[(i / 2) % TASKS])
        };
        let (status, body, conn) = request(&server.addr, &format!("GET {path}"), "").await;
        assert_eq!(status, 200, "stream {path} refused: {body}");
        streams.push(conn);
    }
    // The streams' first reads settle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let open = cpu_pct(pid, ticks).await;
    let added = open - idle;
    eprintln!(
        "sse ({backend}): slotd serve (pid {pid}) idle {idle:.2}% of a core, with {STREAMS} idle \
         streams {open:.2}% (added {added:.2}%)"
    );
    // Every stream is still open: none ended or failed (task streams sent their task's
    // creation first, tenant streams nothing but keep-alives).
    for conn in &mut streams {
        let mut seen = String::new();
        let mut buf = [0u8; 8192];
        while let Ok(read) =
            tokio::time::timeout(Duration::from_millis(1), conn.read(&mut buf)).await
        {
            let n = read.expect("an idle stream failed");
            assert!(n > 0, "an idle stream was closed");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        assert!(
            !seen.contains("event: end") && !seen.contains("event: error"),
            "an idle stream ended: {seen:?}"
        );
    }
    report.add(
        "sse_idle_cpu_pct_baseline",
        backend,
        idle,
        "%",
        Target::None(Better::Lower),
    );
    report.add(
        "sse_idle_cpu_pct_1000",
        backend,
        added,
        "%",
        Target::AtMost(5.0),
    );
    drop(streams);
}

pub async fn run(report: &mut Report) {
    // Each stream is a socket at both ends (this process and the server, which inherits the
    // limit).
    let need = STREAMS as u64 + 200;
    match open_files_limit() {
        Some(limit) if limit < need => {
            eprintln!(
                "sse: skipped: {STREAMS} streams need {need} open files, the limit is {limit} \
                 (raise it with `ulimit -n {need}`)"
            );
            return;
        }
        _ => {}
    }
    let ticks = clock_ticks();
    let dir = tempfile::TempDir::new().expect("tmp");
    let sqlite = format!("sqlite://{}", dir.path().join("sse.db").display());
    run_one(report, "sqlite", &sqlite, ticks).await;
    match crate::common::pg_schema_url().await {
        Some(url) => run_one(report, "postgres", &url, ticks).await,
        None => eprintln!("PostgreSQL not reachable: its sse figures are skipped"),
    }
}
