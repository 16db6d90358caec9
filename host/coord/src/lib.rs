//! slotd-coord: what slotd instances share to coordinate, in process or through Redis, below
//! everything that schedules (docs/architecture.md).
//!
//! - [`keyspace`]: the shared Redis connection and key prefix.
//! - [`slots`]: the `SlotStore` (in-process; Redis) that counts the units holding a pool's
//!   slots, with its create log.
//! - [`lease`]: per-pool scheduler leases with fencing tokens, and their placement.
//! - [`hot`]: the hot task status cache (Redis, database fallback).
//! - [`wake`]: early wake-ups of a pool's loop (in process; across instances by Redis).

pub mod hot;
pub mod keyspace;
pub mod lease;
pub mod slots;
pub mod wake;
