//! [`Job`]: one unit of a tick's batch with what the flow (`flow`) and list polling (`list`)
//! need to know about its provider job; the handlers build one per unit.

use serde_json::Value;
use slotd_sdk::Unit;

/// One unit of the batch with what the flow needs to know about its provider job.
pub struct Job<'u> {
    pub unit: &'u Unit,
    /// The collection path, e.g. `/v1/videos/text2video`.
    pub collection: &'static str,
    /// The create body without `external_task_id` and `callback_url`.
    pub body: Value,
    /// Shortest and longest expected duration in seconds (for poll hints).
    pub expected_secs: (u64, u64),
    /// The handler states this job's duration to the host (contract 1.3), which then times
    /// the reads from it and from what it observes: the poll hint is the pace alone, not a
    /// countdown to the shortest expected duration (a prior the host could not correct).
    pub stated: bool,
    /// Largest `pageSize` the collection's list accepts.
    pub page_size_max: u32,
}
