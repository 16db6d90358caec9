//! Early wake-ups of the per-pool tick loops: a new task, a freed slot or a provider callback
//! starts the next tick now instead of at the interval (SPEC section 3).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

/// One `Notify` per pool, created on first use.
#[derive(Default)]
pub struct Wake {
    pools: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Wake {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The notifier a pool's loop waits on.
    pub fn listener(&self, pool: &str) -> Arc<Notify> {
        self.pools
            .lock()
            .entry(pool.to_string())
            .or_default()
            .clone()
    }

    /// Wake one pool's loop (a permit is stored if it is busy, so the wake is not lost).
    pub fn pool(&self, pool: &str) {
        self.listener(pool).notify_one();
    }

    /// Wake every pool's loop.
    pub fn all(&self) {
        for n in self.pools.lock().values() {
            n.notify_one();
        }
    }
}
