//! A Kling-compatible provider simulator (`slotd sim kling`): the contract is
//! `KLING_API.md` — JWT auth, the legacy `/v1/videos/…` and avatar paths, Kling's envelope and
//! status names, a per-account concurrency quota answered with 429/1303, list and single
//! queries, `external_task_id`, callbacks, downloadable results, injectable faults, and a time
//! scale so a 5-minute job takes 3 s (or 3 ms) in a test. It sits outside the scheduling path:
//! tests, the demo and the benchmarks point the Kling handlers' `base_url` at it.
//!
//! # Layout
//! - `options`: [`SimOptions`] (also the CLI flags).
//! - `auth`: the JWT check (401/1000–1004) and [`issue_token`] for clients.
//! - `routes`: the axum router; `faults`: the fault layer; `error`: Kling's error envelope.
//! - `validate`: strict create-body validation (400/1201 naming the field).
//! - `state`: the account (tasks, quota, timers, counters); `task`: one task and its timing.
//! - `callback`: status-change callbacks, signed with [`slotd_core::standard_webhooks`].
//! - result files: deterministic content shared with the Runway simulator ([`crate::files`]).
//! - `stats`: [`SimStats`], served at `GET /_sim/stats`.
//! - `account`: revoked credentials and the balance, controlled at `POST /_sim/account`.
//! - `other_client`: another client of the account holding a share of its concurrency in
//!   bursts; [`refill_delays`] (`refill`): how soon a client's jobs filled what each burst
//!   freed.

mod account;
mod auth;
mod callback;
mod error;
mod faults;
mod options;
mod other_client;
mod refill;
mod routes;
mod state;
mod stats;
mod task;
mod validate;

#[cfg(test)]
mod tests;

use std::future::Future;

/// Shared with the Runway simulator, which serves the same deterministic content.
pub use crate::files::{FILE_MAX_BYTES, FILE_MIN_BYTES, file_content, file_len, file_sha256};
pub use auth::{Claims, issue_token, issue_token_with};
pub use options::{
    ACCESS_KEY_DEFAULT, CONCURRENCY_DEFAULT, LISTEN_DEFAULT, OTHER_CLIENT_BURST_SECS_DEFAULT,
    OTHER_CLIENT_GAP_SECS_DEFAULT, SECRET_KEY_DEFAULT, SimOptions, TIME_SCALE_DEFAULT,
};
pub use refill::refill_delays;
pub use stats::{FaultStats, OtherClientBurst, SINGLE_READ_PACE_S, SimJob, SimStats};

use state::Sim;

/// A running Kling simulator ([`crate::Handle`]: its address, base URL and shutdown, and
/// below what is Kling's own). Dropping it stops the background work too.
pub type SimHandle = crate::Handle<Sim>;

impl SimHandle {
    /// The counters, as `GET /_sim/stats` would answer now.
    pub fn stats(&self) -> SimStats {
        self.sim.stats()
    }

    /// Every task so far, as `GET /_sim/jobs` would answer now.
    pub fn jobs(&self) -> Vec<SimJob> {
        self.sim.jobs()
    }

    /// When the first task was created: [`SimHandle::jobs`] counts its times from there, in
    /// simulated seconds (`wall = first_create + started × time_scale`).
    pub fn first_create(&self) -> Option<std::time::Instant> {
        self.sim.first_create().map(tokio::time::Instant::into_std)
    }
}

/// Binds `opts.listen` (port 0 allowed) and serves in the background.
pub async fn start(opts: SimOptions) -> anyhow::Result<SimHandle> {
    opts.validate()?;
    crate::handle::start(opts.listen, |base_url| Sim::new(opts, base_url)).await
}

/// For the CLI: serves until `shutdown` resolves, then drains.
pub async fn serve(opts: SimOptions, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    start(opts).await?.serve_until(shutdown).await
}
