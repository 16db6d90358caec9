//! [`GuestOutput`]: a guest's stdout or stderr, captured per call (up to a cap) and logged by the
//! host under the handler's name once the call ends.
//!
//! Unlike wasmtime's `MemoryOutputPipe`, output past the cap is dropped rather than failing the
//! write: a chatty guest must not trap because of its logging (Rust's `println!` panics when a
//! write fails).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use parking_lot::Mutex;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Largest write permit handed to the guest at once.
const PERMIT: usize = 64 * 1024;

#[derive(Clone)]
pub(crate) struct GuestOutput {
    inner: Arc<Mutex<Captured>>,
}

struct Captured {
    bytes: Vec<u8>,
    cap: usize,
    dropped: usize,
}

impl GuestOutput {
    pub fn new(cap: usize) -> GuestOutput {
        GuestOutput {
            inner: Arc::new(Mutex::new(Captured {
                bytes: Vec::new(),
                cap,
                dropped: 0,
            })),
        }
    }

    fn append(&self, data: &[u8]) {
        let mut c = self.inner.lock();
        let room = c.cap.saturating_sub(c.bytes.len());
        let kept = data.len().min(room);
        c.bytes.extend_from_slice(&data[..kept]);
        c.dropped += data.len() - kept;
    }

    /// The captured text as lines (lossy UTF-8), plus how many bytes were dropped.
    pub fn lines(&self) -> (Vec<String>, usize) {
        let c = self.inner.lock();
        let text = String::from_utf8_lossy(&c.bytes);
        let lines = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(String::from)
            .collect();
        (lines, c.dropped)
    }

    /// The last `max` bytes of captured text, for fault messages (a panic message lands here).
    pub fn tail(&self, max: usize) -> String {
        let c = self.inner.lock();
        let start = c.bytes.len().saturating_sub(max);
        String::from_utf8_lossy(&c.bytes[start..])
            .trim()
            .to_string()
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(PERMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
