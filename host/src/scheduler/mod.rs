//! The scheduler: per-pool loops around `run_once` (load → grant → call → apply → release),
//! finalization workers, slot reconciliation. (Being built.)

mod pools;

pub use pools::{PoolLimit, pool_limits};
