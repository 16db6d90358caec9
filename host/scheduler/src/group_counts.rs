//! What the deadline sweep remembers per pool between ticks (`deadlines.rs`), held by the
//! scheduler itself.

use slotd_store::PendingGroup;

/// A pool's pending counts per (priority, tenant), as the deadline sweep last counted them.
#[derive(Debug)]
pub(crate) struct GroupCounts {
    /// When (scheduler clock, ms).
    pub(crate) at: i64,
    /// The lowest priority counted.
    pub(crate) min_priority: i32,
    pub(crate) groups: Vec<PendingGroup>,
}
