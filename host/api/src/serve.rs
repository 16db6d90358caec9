//! Serving a router on a TCP listener until shutdown: `axum::serve`'s shape on hyper's own
//! HTTP/1.1 connection builder, because `axum::serve` sets no header-read timeout and a client
//! sending its headers a byte a minute (slowloris) would hold a connection forever.
//!
//! The timeout covers the request line and headers of every request, and the wait for the next
//! request on a kept-alive connection; a client that misses it gets 408 and the connection is
//! closed. HTTP/1.1 only: hyper's auto (HTTP/1 + HTTP/2) builder sniffs the protocol before
//! the HTTP/1 timer starts, so a client that sends nothing would escape the timeout; slotd's
//! clients (curl, reqwest, browsers over plain http) speak HTTP/1.1.

use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Pause after a failed `accept` (out of file descriptors, say) before trying again, so the
/// loop does not spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How long shutdown waits for responses in progress before closing their connections.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serve `app` on `listener` until `stop` is cancelled; then stop accepting, let requests in
/// progress finish (each connection closes after its current response) for up to
/// [`SHUTDOWN_GRACE`], and return.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    header_read_timeout: Duration,
    stop: CancellationToken,
) {
    let connections = TaskTracker::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = stop.cancelled() => break,
        };
        // Small JSON answers: do not wait for Nagle to batch them.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY");
        }
        let conn =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let stop = stop.clone();
        connections.spawn(async move {
            let mut conn = std::pin::pin!(conn);
            let mut closing = false;
            loop {
                tokio::select! {
                    result = conn.as_mut() => {
                        // A client going away or timing out is routine, not an operator matter.
                        if let Err(e) = result {
                            tracing::debug!(error = %e, "connection ended");
                        }
                        break;
                    }
                    () = stop.cancelled(), if !closing => {
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                }
            }
        });
    }
    drop(listener);
    connections.close();
    // Responses in progress finish; a live event stream never does, so it is cut after a
    // grace period (its client resumes from its last event id elsewhere).
    if tokio::time::timeout(SHUTDOWN_GRACE, connections.wait())
        .await
        .is_err()
    {
        tracing::info!(grace = ?SHUTDOWN_GRACE, "closing connections still open at shutdown (event streams)");
    }
}
