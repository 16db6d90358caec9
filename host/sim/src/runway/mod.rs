//! A Runway-compatible provider simulator (`slotd sim runway`): the contract is
//! `RUNWAY_API.md` — bearer key and `X-Runway-Version`, `POST /v1/image_to_video` and
//! `/v1/text_to_video` with strict per-model validation, tasks that wait `THROTTLED` beyond
//! each model's concurrency and run `PENDING → RUNNING → SUCCEEDED | FAILED`, cancel/delete,
//! signed expiring output links, a daily limit answered with 429, `GET /v1/organization`,
//! injectable faults (including the lost answer of a create that did take effect), and a time
//! scale. It sits outside the scheduling path: tests, demos and benchmarks point a Runway
//! handler's `base_url` at it. Runway has no webhooks, so neither does this.
//!
//! # Layout
//! - `options`: [`RunwayOptions`] (also the CLI flags), [`API_KEY_DEFAULT`].
//! - `model`: the models and endpoints in scope, each model's schema and price.
//! - `validate`: create bodies checked against the schemas, every issue listed.
//! - `auth`: the key (401) and version-header (400) checks; `faults`: the fault layer;
//!   `error`: Runway's `{"error"}` answers; `routes`: the axum router.
//! - `state`: the organization (tasks, per-model slots and queues, daily windows, counters);
//!   `lifecycle`: how tasks take, hold and free slots, and their timers; `task`: one task, its
//!   drawn timing and its JSON.
//! - `links`: signed, expiring output links. The file bytes are the Kling simulator's
//!   deterministic content keyed by task id ([`file_content`], [`file_sha256`]).
//! - `stats`: [`RunwayStats`] at `GET /_sim/stats`, [`RunwayJob`] at `GET /_sim/jobs`, the
//!   request log of task reads ([`RunwayRead`]) at `GET /_sim/reads`.

mod auth;
mod error;
mod faults;
mod lifecycle;
mod links;
mod model;
mod options;
mod routes;
mod state;
mod stats;
mod task;
mod validate;

#[cfg(test)]
mod tests;

use std::future::Future;

pub use crate::files::{FILE_MAX_BYTES, FILE_MIN_BYTES, file_content, file_len, file_sha256};
pub use auth::VERSION_HEADER;
pub use error::DOC_URL;
pub use model::Model;
pub use options::{
    API_KEY_DEFAULT, CONCURRENCY_DEFAULT, DAILY_LIMIT_DEFAULT, LISTEN_DEFAULT, ModelLimit,
    OUTPUT_TTL_MS_DEFAULT, RUNWAY_VERSION, RunwayOptions, TIME_SCALE_DEFAULT,
};
pub use state::MAX_MONTHLY_CREDIT_SPEND;
pub use stats::{FaultStats, ModelStats, RunwayJob, RunwayRead, RunwayStats};
pub use validate::{Issue, PROMPT_TEXT_MAX_UTF16};

use state::Sim;

/// A running Runway simulator ([`crate::Handle`]: its address, base URL and shutdown, and
/// below what is Runway's own). Dropping it stops the background work too.
pub type RunwaySimHandle = crate::Handle<Sim>;

impl RunwaySimHandle {
    /// The counters, as `GET /_sim/stats` would answer now.
    pub fn stats(&self) -> RunwayStats {
        self.sim.stats()
    }

    /// Every task so far, as `GET /_sim/jobs` would answer now.
    pub fn jobs(&self) -> Vec<RunwayJob> {
        self.sim.jobs()
    }

    /// Every task read so far, as `GET /_sim/reads` would answer now: the request log, faulted
    /// reads included.
    pub fn reads(&self) -> Vec<RunwayRead> {
        self.sim.reads()
    }

    /// Sets `lost_answer_rate` for the requests from now on, e.g. to lose the answer of one
    /// create and of nothing after it. The draws stay those of the seed: request n's faults
    /// still depend on n only.
    pub fn set_lost_answer_rate(&self, rate: f64) {
        self.sim.inner.lock().lost_answer_rate = rate.clamp(0.0, 1.0);
    }
}

/// Binds `opts.listen` (port 0 allowed) and serves in the background.
pub async fn spawn(opts: RunwayOptions) -> anyhow::Result<RunwaySimHandle> {
    opts.validate()?;
    crate::handle::start(opts.listen, |base_url| Ok(Sim::new(opts, base_url))).await
}

/// For the CLI: serves until `shutdown` resolves, then drains.
pub async fn serve(opts: RunwayOptions, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    spawn(opts).await?.serve_until(shutdown).await
}
