//! `log.log`: guest log lines into the host's `tracing`, tagged with the handler name.

use crate::bindings::log::{Host, Level};
use crate::engine::CallState;

/// A guest cannot flood the host log with one giant line.
const MAX_LINE: usize = 4 * 1024;

impl Host for CallState {
    async fn log(&mut self, level: Level, message: String) {
        let handler = &*self.handler;
        let mut message = message;
        if message.len() > MAX_LINE {
            let mut end = MAX_LINE;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
            message.push_str(" …(truncated)");
        }
        match level {
            Level::Trace => tracing::trace!(target: "slotd::guest", handler, "{message}"),
            Level::Debug => tracing::debug!(target: "slotd::guest", handler, "{message}"),
            Level::Info => tracing::info!(target: "slotd::guest", handler, "{message}"),
            Level::Warn => tracing::warn!(target: "slotd::guest", handler, "{message}"),
            Level::Error => tracing::error!(target: "slotd::guest", handler, "{message}"),
        }
    }
}
