//! The fal queue simulator (`slotd sim fal`, ../shared/FAL_API.md), being built for issue 25:
//! so far the Pika input schemas it checks a request against when a runner picks it up
//! ([`schema`]) and the queue model: per-account concurrency, queue positions, dispatch order
//! and cancel ([`queue`]). The HTTP endpoints, signed webhooks and the JWKS follow.

pub mod queue;
pub mod schema;
