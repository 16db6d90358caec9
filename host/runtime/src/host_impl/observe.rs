//! `observe.queued` (contract 1.4): the guest says, during `tick`, that the provider holds a
//! unit's job in its own queue. Only collected here; `Handler::tick` attaches it to the unit's
//! `running` change (and drops it for any other outcome or unit), so a guest can neither name
//! units outside its batch nor change anything by saying it.

use crate::bindings::observe::Host;
use crate::engine::CallState;

/// More distinct units than any batch holds: a guest repeating the call cannot grow the map
/// without bound.
const MAX_QUEUED: usize = 100_000;

impl Host for CallState {
    async fn queued(&mut self, unit_id: String, position: Option<u32>) {
        if self.queued.len() >= MAX_QUEUED && !self.queued.contains_key(&unit_id) {
            return;
        }
        self.queued.insert(unit_id, position);
    }
}
