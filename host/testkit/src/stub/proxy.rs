//! A TCP proxy that a test can cut and restore: the way to make a real database (or any
//! server) "go away and come back" without touching the server itself. Cut: every open
//! connection is dropped and new ones are closed at once. Restored: connections go through
//! again.

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running proxy on `127.0.0.1:port()` in front of `target`.
pub struct TcpProxy {
    port: u16,
    up: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl TcpProxy {
    /// Listen on a free loopback port and forward to `target` (`host:port`).
    pub async fn start(target: String) -> std::io::Result<TcpProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let (up, state) = watch::channel(true);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                if !*state.borrow() {
                    continue; // cut: the client sees the connection closed
                }
                let target = target.clone();
                let mut state = state.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = state.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Ok(TcpProxy { port, up, task })
    }

    /// The local port to connect to instead of the target's.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Cut (`false`) or restore (`true`) the connection to the target.
    pub fn set_up(&self, up: bool) {
        self.up.send_replace(up);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
