//! The signing keys providers publish, kept between calls by handler and URL (what
//! `signing.verify-ed25519` in `keys.rs` reads and fills). Below the engine: its `Shared`
//! holds one, and nothing here knows a call.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ed25519_dalek::{Signature, VerifyingKey};
use parking_lot::Mutex;

/// Key sets fetched so far, by handler and URL.
#[derive(Default)]
pub(crate) struct KeyCache {
    sets: Mutex<HashMap<(Arc<str>, String), KeySet>>,
}

impl KeyCache {
    /// The set kept for `id` (handler, URL), if any.
    pub(crate) fn get(&self, id: &(Arc<str>, String)) -> Option<KeySet> {
        self.sets.lock().get(id).cloned()
    }

    /// Keep `set` for `id`, in place of the one kept before.
    pub(crate) fn insert(&self, id: (Arc<str>, String), set: KeySet) {
        self.sets.lock().insert(id, set);
    }
}

/// One fetched key set: its keys, when they were read, and how long they may be kept.
#[derive(Clone)]
pub(crate) struct KeySet {
    pub(crate) keys: Vec<VerifyingKey>,
    pub(crate) fetched: Instant,
    pub(crate) max_age: Duration,
}

impl KeySet {
    /// Whether any key of the set verifies `signature` over `message`.
    pub(crate) fn any_verifies(&self, message: &[u8], signature: &Signature) -> bool {
        self.keys
            .iter()
            .any(|k| k.verify_strict(message, signature).is_ok())
    }
}
