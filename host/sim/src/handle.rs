//! One running simulator, whichever provider it plays: [`Handle`] is what a test or the demo
//! starts and keeps (address, base URL, shutdown), and [`Base`] what every simulator's state
//! shares (its base URL, its shutdown token, the tasks to drain, its clock). Each simulator
//! adds its own inspection methods (`stats`, `jobs`, …) on its own `Handle<…>`, named
//! [`kling::SimHandle`](crate::kling::SimHandle),
//! [`runway::RunwaySimHandle`](crate::runway::RunwaySimHandle) and
//! [`fal::FalSimHandle`](crate::fal::FalSimHandle).

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};

use anyhow::Context;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;

/// What every simulator's shared state holds besides its own.
pub struct Base {
    /// Base of every URL the simulator hands out, e.g. `http://127.0.0.1:18090`.
    pub base_url: String,
    /// Cancelled at shutdown: timers, callbacks, webhooks and slow answers stop waiting.
    pub cancel: CancellationToken,
    /// Timers, callbacks and webhooks in flight, drained at shutdown.
    pub tracker: TaskTracker,
    pub clock: Clock,
}

impl Base {
    pub(crate) fn new(base_url: String, time_scale: f64) -> Base {
        Base {
            base_url,
            cancel: CancellationToken::new(),
            tracker: TaskTracker::new(),
            clock: Clock::new(time_scale),
        }
    }
}

/// A simulator's shared state (the axum state), as its [`Handle`] drives it.
pub trait Simulator: Clone + Send + Sync + 'static {
    /// How logs and errors call it, e.g. "Kling simulator".
    const NAME: &'static str;
    fn base(&self) -> &Base;
    /// Its routes.
    fn router(&self) -> axum::Router;
    /// The concurrency it was started with (for the log line).
    fn concurrency(&self) -> u32;
}

/// A running simulator. Dropping it stops the background work too; [`Handle::shutdown`] also
/// waits for it.
pub struct Handle<S: Simulator> {
    pub(crate) sim: S,
    addr: SocketAddr,
    server: Option<JoinHandle<std::io::Result<()>>>,
}

impl<S: Simulator> Handle<S> {
    /// `http://ip:port`: what the provider's handler should use as its `base_url`.
    pub fn base_url(&self) -> &str {
        &self.sim.base().base_url
    }

    /// The bound address (useful after binding port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, cancels timers, callbacks and webhooks, waits for the server to drain.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        let base = self.sim.base();
        base.cancel.cancel();
        base.tracker.close();
        if let Some(server) = self.server.take() {
            server
                .await
                .with_context(|| format!("the {}'s server task panicked", S::NAME))?
                .with_context(|| format!("the {}'s server failed", S::NAME))?;
        }
        self.sim.base().tracker.wait().await;
        Ok(())
    }

    /// For the CLI: serves until `shutdown` resolves, then drains.
    pub async fn serve_until(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        shutdown.await;
        self.shutdown().await
    }
}

impl<S: Simulator> Drop for Handle<S> {
    fn drop(&mut self) {
        self.sim.base().cancel.cancel();
    }
}

/// Binds `listen` (port 0 allowed), builds the simulator with its base URL and serves it in
/// the background.
pub(crate) async fn start<S: Simulator>(
    listen: SocketAddr,
    build: impl FnOnce(String) -> anyhow::Result<S>,
) -> anyhow::Result<Handle<S>> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("{}: binding {listen}", S::NAME))?;
    let addr = listener
        .local_addr()
        .with_context(|| format!("{}: reading the bound address", S::NAME))?;
    // URLs handed out must be fetchable: an unspecified bind address is reached via loopback.
    let url_ip = if addr.ip().is_unspecified() {
        Ipv4Addr::LOCALHOST.into()
    } else {
        addr.ip()
    };
    let sim = build(format!("http://{}", SocketAddr::new(url_ip, addr.port())))?;
    let app = sim.router();
    let stop = sim.base().cancel.clone();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
    });
    tracing::info!(
        addr = %addr,
        concurrency = sim.concurrency(),
        time_scale = sim.base().clock.time_scale(),
        "sim: {} listening",
        S::NAME
    );
    Ok(Handle {
        sim,
        addr,
        server: Some(server),
    })
}
