//! The listener's own defences, over a real socket as `slotd serve` runs them: the
//! header-read timeout (slowloris) and the bound on requests in flight.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{CREATE, DEADLINE, Harness, harness_with};
use slotd_core::config::Config;

/// The harness's router served by [`crate::serve::serve`] on 127.0.0.1:0, as `slotd serve`
/// serves it.
struct Served {
    addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn serve(h: &Harness) -> Served {
    let listener = match TcpListener::bind("127.0.0.1:0").await {
        Ok(l) => l,
        Err(e) => panic!("bind: {e}"),
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => panic!("local_addr: {e}"),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let token = tokio_util::sync::CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        stopped.await.ok();
        trigger.cancel();
    });
    let app = crate::router(h.services.clone());
    let header_read_timeout = h.services.config.api.header_read_timeout;
    let task = tokio::spawn(async move {
        crate::serve::serve(listener, app, header_read_timeout, token).await;
        anyhow::Ok(())
    });
    Served {
        addr,
        stop: Some(stop),
        task,
    }
}

impl Served {
    async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            stop.send(()).ok();
        }
        match tokio::time::timeout(DEADLINE, self.task).await {
            Ok(Ok(Ok(()))) => {}
            other => panic!("server did not stop cleanly: {other:?}"),
        }
    }

    /// One request on a fresh connection; the status code.
    async fn status_of(&self, request: &str) -> u16 {
        let mut conn = connect(self.addr).await;
        if let Err(e) = conn.write_all(request.as_bytes()).await {
            panic!("write: {e}");
        }
        let text = read_to_close(&mut conn).await;
        status_code(&text)
    }
}

async fn connect(addr: std::net::SocketAddr) -> TcpStream {
    match TcpStream::connect(addr).await {
        Ok(s) => s,
        Err(e) => panic!("connect {addr}: {e}"),
    }
}

/// Everything the server sends until it closes the connection, within [`DEADLINE`].
async fn read_to_close(conn: &mut TcpStream) -> String {
    let mut out = Vec::new();
    match tokio::time::timeout(DEADLINE, conn.read_to_end(&mut out)).await {
        Ok(Ok(_)) => String::from_utf8_lossy(&out).into_owned(),
        // A reset after the server gave up is a close too.
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => {
            String::from_utf8_lossy(&out).into_owned()
        }
        Ok(Err(e)) => panic!("read: {e}"),
        Err(_) => panic!(
            "the server kept the connection open for {DEADLINE:?}; got so far: {:?}",
            String::from_utf8_lossy(&out)
        ),
    }
}

fn status_code(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn slow_headers_are_cut_off() {
    let mut config = Config::default();
    config.api.header_read_timeout = Duration::from_millis(200);
    let h = harness_with(config).await;
    let served = serve(&h).await;

    // Half a request line, then nothing: the server must close within the deadline.
    let mut slow = connect(served.addr).await;
    if let Err(e) = slow.write_all(b"GET /v1/tas").await {
        panic!("write: {e}");
    }
    let started = tokio::time::Instant::now();
    let answer = read_to_close(&mut slow).await;
    assert!(
        answer.is_empty() || status_code(&answer) == 408,
        "unexpected answer: {answer:?}"
    );
    assert!(started.elapsed() < DEADLINE);

    // A connection that sends nothing at all is closed too.
    let mut silent = connect(served.addr).await;
    let answer = read_to_close(&mut silent).await;
    assert!(
        answer.is_empty() || status_code(&answer) == 408,
        "{answer:?}"
    );

    // A client that sends its request promptly is served.
    let status = served
        .status_of("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await;
    assert_eq!(status, 200);
    served.shutdown().await;
}

#[tokio::test]
async fn requests_in_flight_are_bounded() {
    let mut config = Config::default();
    config.api.max_concurrent_requests = 2;
    let h = harness_with(config).await;
    let served = serve(&h).await;

    // Two creates whose bodies are still on their way hold the two places.
    let half = &CREATE[..10];
    let head = format!(
        "POST /v1/tasks/fixture HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{half}",
        CREATE.len()
    );
    let mut holders = Vec::new();
    for _ in 0..2 {
        let mut conn = connect(served.addr).await;
        if let Err(e) = conn.write_all(head.as_bytes()).await {
            panic!("write: {e}");
        }
        holders.push(conn);
    }
    // Once both are admitted, a third request is refused at once, not queued. Poll: the
    // holders' requests reach the server asynchronously.
    let list = "GET /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let refused = loop {
        let mut conn = connect(served.addr).await;
        if let Err(e) = conn.write_all(list.as_bytes()).await {
            panic!("write: {e}");
        }
        let answer = read_to_close(&mut conn).await;
        match status_code(&answer) {
            503 => break answer,
            200 if tokio::time::Instant::now() < deadline => tokio::task::yield_now().await,
            _ => panic!("expected 503 once two requests are in flight, got {answer:?}"),
        }
    };
    let lower = refused.to_ascii_lowercase();
    assert!(lower.contains("retry-after: 1"), "{refused}");
    assert!(lower.contains("application/problem+json"), "{refused}");
    // Probes are not counted: a busy instance is not a dead one.
    let probe = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    assert_eq!(served.status_of(probe).await, 200);

    // The held requests finish; their places are free again.
    for mut conn in holders {
        if let Err(e) = conn.write_all(&CREATE.as_bytes()[10..]).await {
            panic!("write: {e}");
        }
        assert_eq!(status_code(&read_to_close(&mut conn).await), 202);
    }
    assert_eq!(served.status_of(list).await, 200);
    served.shutdown().await;
}
