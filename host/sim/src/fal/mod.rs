//! A fal-compatible queue simulator (`slotd sim fal`), serving Pika's models through fal's
//! generic queue: the contract is `FAL_API.md`, its section "Choices for the simulator where
//! the API is silent" in particular. One host serves the queue API (`Authorization: Key`,
//! `POST /{model id}`, status / result / cancel under `/{owner}/{app}/requests/{id}`), a CDN
//! for the result files (`/_cdn/files/…`), the JWKS of its webhook key
//! (`/.well-known/jwks.json`, `/_sim/jwks`) and the request history
//! (`/v1/models/requests/by-endpoint`). Over an account's concurrency nothing is refused:
//! requests wait `IN_QUEUE`. Webhooks are signed as fal publishes; faults include the lost
//! answer of a submit that did create its request. It sits outside the scheduling path: tests
//! and demos point a fal handler's base URL (queue, history and JWKS alike) at it.
//!
//! # Layout
//! - `options`: [`FalOptions`] (also the CLI flags): keys and accounts, speed, flags, faults.
//! - [`schema`]: Pika's input schemas, checked when a runner picks a request up.
//! - [`queue`]: the pure queue model (per-account concurrency, dispatch order, positions),
//!   driven by the caller's clock; `drive` brings it to now event by event and runs the
//!   driver task; the simulators' clock ([`crate`]'s `clock`) maps its milliseconds to
//!   wall-clock and simulated time.
//! - `fate`: each request's drawn timing, failure and price; `job`: one request and how it
//!   looks on the wire.
//! - `auth`, `submit` (the submit checks in the contract's order), `routes`, `history`,
//!   `error` (fal's error shapes and ingress pages).
//! - [`webhook`]: signatures, JWKS and the verification recipe; `deliver`: sending them.
//! - `state`: the simulator behind one mutex; `reads`: status, result, cancel and file
//!   lookups as one account sees its requests; `stats`: [`FalStats`] at `GET /_sim/stats`,
//!   [`FalJob`] at `GET /_sim/jobs`.
//! - result files: the deterministic bytes shared with the other simulators, keyed by request
//!   id ([`file_content`], [`file_sha256`]).

mod auth;
mod deliver;
mod drive;
mod error;
mod fate;
mod history;
mod job;
mod options;
pub mod queue;
mod reads;
mod routes;
pub mod schema;
mod state;
mod stats;
mod submit;
pub mod webhook;

#[cfg(test)]
mod tests;

use std::future::Future;

use serde_json::Value;

pub use crate::files::{FILE_MAX_BYTES, FILE_MIN_BYTES, file_content, file_len, file_sha256};
pub use fate::FailureKind;
pub use options::{
    ACCOUNT_DEFAULT, CONCURRENCY_DEFAULT, FalOptions, KEY_DEFAULT, KeySpec, LISTEN_DEFAULT, LostAs,
    NamedLimit, TIME_SCALE_DEFAULT,
};
pub use stats::{FalAccountStats, FalFaultStats, FalJob, FalStats};

use state::Sim;

/// A running fal simulator ([`crate::Handle`]: its address, base URL (the queue, history and
/// JWKS host at once) and shutdown, and below what is fal's own). Dropping it stops the
/// background work too.
pub type FalSimHandle = crate::Handle<Sim>;

impl FalSimHandle {
    /// `{base_url}/.well-known/jwks.json`.
    pub fn jwks_url(&self) -> String {
        format!("{}/.well-known/jwks.json", self.base_url())
    }

    /// The published keys, as the JWKS URL answers.
    pub fn jwks(&self) -> Value {
        self.sim.signer.jwks()
    }

    /// The counters, as `GET /_sim/stats` would answer now.
    pub fn stats(&self) -> FalStats {
        self.sim.stats()
    }

    /// Every request so far, as `GET /_sim/jobs` would answer now.
    pub fn jobs(&self) -> Vec<FalJob> {
        self.sim.jobs()
    }

    /// Locks (`true`) or unlocks an account's submits (403 "User is locked"); false for an
    /// unknown account.
    pub fn set_exhausted(&self, account: &str, exhausted: bool) -> bool {
        self.sim.set_exhausted(account, exhausted).is_some()
    }

    /// Sets `lost_answer_rate` for the submits from now on (the draws stay the seed's).
    pub fn set_lost_answer_rate(&self, rate: f64) {
        self.sim.inner.lock().lost_answer_rate = rate.clamp(0.0, 1.0);
    }
}

/// Binds `opts.listen` (port 0 allowed) and serves in the background.
pub async fn spawn(opts: FalOptions) -> anyhow::Result<FalSimHandle> {
    opts.validate()?;
    crate::handle::start(opts.listen, |base_url| {
        let sim = Sim::new(opts, base_url)?;
        sim.spawn_driver();
        Ok(sim)
    })
    .await
}

/// For the CLI: serves until `shutdown` resolves, then drains.
pub async fn serve(opts: FalOptions, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    spawn(opts).await?.serve_until(shutdown).await
}
