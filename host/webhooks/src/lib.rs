//! slotd-webhooks: completion webhooks and the task's client-facing shape they carry
//! (docs/architecture.md).
//!
//! - [`completion_webhooks`]: the durable outbox of completion webhooks: queued when a task
//!   ends, signed, SSRF-checked, retried.
//! - [`task_view`]: how a task looks to a client, shared by the API and the outbox.

pub mod completion_webhooks;
pub mod task_view;
