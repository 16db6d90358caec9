//! Asks gathered into passes: the first ask after a quiet spell is served at once; the asks
//! that arrive while a pass runs, and during a short pause after it, wait and are served
//! together by the next. A busy process answers a burst with a few statements, a quiet one adds
//! no wait. The provider callbacks' job lookups ([`crate::job_lookups`]) and their writes
//! (`lifecycle::callback_writes`) are served this way.
//!
//! The passes run on a task of their own, so an asker that goes away (its connection dropped)
//! does not stop the others' passes; should that task end anyway (its runtime shutting down),
//! the next ask starts another.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

/// What a pass does with the asks waiting.
pub(crate) trait Pass: Send + Sync + 'static {
    type Ask: Send + 'static;
    /// Serve `asks` (each carries its own reply). The asks returned wait for the next pass,
    /// ahead of those that came meanwhile.
    fn run(&self, asks: Vec<Self::Ask>) -> impl Future<Output = Vec<Self::Ask>> + Send;
}

struct Queue<A> {
    asks: Vec<A>,
    /// A pass is running (or pausing after one): new asks wait for it.
    running: bool,
}

/// The asks waiting for a pass (cheap to clone).
pub(crate) struct Together<A> {
    queue: Arc<Mutex<Queue<A>>>,
}

impl<A> Clone for Together<A> {
    fn clone(&self) -> Self {
        Together {
            queue: self.queue.clone(),
        }
    }
}

impl<A> Default for Together<A> {
    fn default() -> Self {
        Together {
            queue: Arc::new(Mutex::new(Queue {
                asks: Vec::new(),
                running: false,
            })),
        }
    }
}

impl<A: Send + 'static> Together<A> {
    /// Queue `ask`. If no pass runs, start them: `pass` serves what is queued, then again
    /// every `pause` while asks keep coming.
    pub(crate) fn push<P: Pass<Ask = A>>(&self, ask: A, pause: Duration, pass: P) {
        let lead = {
            let mut q = self.queue.lock();
            q.asks.push(ask);
            !std::mem::replace(&mut q.running, true)
        };
        if lead {
            tokio::spawn(passes(self.queue.clone(), pause, pass));
        }
    }
}

impl<A> Together<A> {
    /// Whether a pass runs (or pauses after one).
    #[cfg(test)]
    pub(crate) fn running(&self) -> bool {
        self.queue.lock().running
    }
}

/// Clears `running` if the passes end early (their task dropped), so the asks after it never
/// wait for a pass that will not come.
struct Running<A> {
    queue: Arc<Mutex<Queue<A>>>,
    done: bool,
}

impl<A> Drop for Running<A> {
    fn drop(&mut self) {
        if !self.done {
            self.queue.lock().running = false;
        }
    }
}

/// The passes one task makes, until one finds nothing waiting.
async fn passes<P: Pass>(queue: Arc<Mutex<Queue<P::Ask>>>, pause: Duration, pass: P) {
    let mut running = Running {
        queue: queue.clone(),
        done: false,
    };
    loop {
        let asks = {
            let mut q = queue.lock();
            if q.asks.is_empty() {
                // Under the lock: an ask that comes next sees no pass and starts one.
                q.running = false;
                running.done = true;
                return;
            }
            std::mem::take(&mut q.asks)
        };
        let left = pass.run(asks).await;
        if !left.is_empty() {
            let mut q = queue.lock();
            let came = std::mem::replace(&mut q.asks, left);
            q.asks.extend(came);
        }
        tokio::time::sleep(pause).await;
    }
}
