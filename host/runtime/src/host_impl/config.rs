//! `config.get`: the handler's own plain settings (`[handlers.<name>]`). Secrets live in a
//! separate map that this import never reads, so no key can reach them.

use crate::bindings::config::Host;
use crate::engine::CallState;

impl Host for CallState {
    async fn get(&mut self, key: String) -> Option<String> {
        self.config.settings.get(&key).cloned()
    }
}
