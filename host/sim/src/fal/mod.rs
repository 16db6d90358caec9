//! The fal queue simulator (`slotd sim fal`, fal's queue API as Pika is served through it),
//! being built: so far the Pika input schemas it checks a request against when a runner picks it up
//! ([`schema`]) and the queue model: per-account concurrency, queue positions, dispatch order
//! and cancel ([`queue`]); webhook signing with its own Ed25519 key, the JWKS and the
//! published verification recipe ([`webhook`]). The HTTP endpoints follow.

pub mod queue;
pub mod schema;
pub mod webhook;
