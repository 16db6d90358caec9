//! The domain: unit statuses and their legal transitions, task status derivation, the outcome
//! vocabulary handlers speak, and the records the store keeps. Pure: no I/O, no clock.

mod change;
mod routing;
mod status;
mod task;
mod unit;

pub use change::{
    Change, IllegalChange, MAX_RESULT_BYTES, MAX_STATE_BYTES, Outcome, ProviderError,
    ProviderQueue, UnitView, validate,
};
pub use routing::{
    ROUTE_POOL_PREFIX, ROUTE_STAGE, Refusal, RouteOption, SHOT_FIELDS, ShotError, TargetUnit,
    UnitRouting, canonical_shots, route_of_pool, route_pool,
};
pub use status::{UnitStatus, UnknownStatus};
pub use task::{TaskStatus, TaskTerms, UnitCounts};
pub use unit::{FINALIZE_PARKED_AT, NO_DEADLINE, Unit, UnitReleases, UnitTerms, idempotency_key};
