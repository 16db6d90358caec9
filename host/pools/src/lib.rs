//! slotd-pools: what slotd knows about its pools, above the coordination primitives and below
//! the services (docs/architecture.md).
//!
//! - [`pool_state`]: the pools' live state (limits, adapted capacity, drained accounts,
//!   quotas, observed durations), kept by the scheduler and read by the API, ETAs and
//!   `slotd check`.
//! - [`eta`]: the completion estimate of `GET /v1/tasks/{id}`.
//! - [`routing`]: which pools a route's units may wait in, and which to wake.

pub mod eta;
pub mod pool_state;
pub mod routing;
