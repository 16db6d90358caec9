//! The simulator's knobs: one typed struct the CLI flattens (`slotd sim kling …`) and tests
//! build with `..SimOptions::default()`.

use std::net::SocketAddr;

use anyhow::{Context, bail};

use super::other_client::{self, OtherClientPlan};
pub use super::other_client::{OTHER_CLIENT_BURST_SECS_DEFAULT, OTHER_CLIENT_GAP_SECS_DEFAULT};
pub use crate::options::{SEED_DEFAULT, SLOW_MS_DEFAULT, TIME_SCALE_DEFAULT};

/// Default listen address of `slotd sim kling`.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:18090";
/// Default per-account concurrency: the seed system's account has 20.
pub const CONCURRENCY_DEFAULT: u32 = 20;
/// Default access key (`iss` of the JWT).
pub const ACCESS_KEY_DEFAULT: &str = "AK";
/// Default secret key (HMAC key of the JWT).
pub const SECRET_KEY_DEFAULT: &str = "SK";
/// Default share of video tasks that land in the long tail (10–15 simulated minutes).
pub const LONG_TAIL_RATE_DEFAULT: f64 = 0.01;

/// How the simulator behaves: account, speed, and which faults to inject.
///
/// Fault semantics (each drawn per `/v1/…` request from the seeded RNG):
/// - `fail_5xx_rate`: the request is answered 500/5000, 503/5001 or 504/5002 **before** it
///   takes effect (no task is created).
/// - `malformed_rate`: the request takes effect, then its answer body is cut in half (invalid
///   JSON, HTTP status unchanged). A create answered this way did create its task, which is
///   the ambiguous case a client must resolve by querying its `external_task_id`.
/// - `slow_rate`/`slow_ms`: the request takes effect, then the answer waits `slow_ms` real
///   milliseconds (a client timeout shorter than that sees a timeout after the effect).
/// - `slow_first`: the first N requests are slow that way whatever `slow_rate` draws, the
///   rest are not made slow by it: a provider that is slow for a while, then healthy.
/// - `failure_after_accept_rate`: an accepted task later ends `failed` with a
///   `task_status_msg` (content moderation and the like).
/// - `over_capacity_rate`: a create is refused 429/1303 though slotd's own jobs leave room
///   (other clients of the account hold it); nothing is created.
///
/// Not drawn but scheduled, another client of the same account (another of its API keys):
/// - `other_client_slots` N > 0 (below `concurrency`): in bursts of `other_client_burst_secs`
///   every `other_client_burst_secs + other_client_gap_secs`, the first beginning
///   `other_client_first_secs` (default: one gap) after the first accepted create, all in
///   simulated seconds (scaled by `time_scale`), the other client wants N slots and has
///   priority: whenever the account has a free slot and it holds fewer than N, it takes it. At
///   a burst's start it takes what slotd's jobs leave free, then its hold ramps up to N as they
///   end; slotd's creates meanwhile are refused 429/1303 (`running + held ≥ concurrency`).
///   At the burst's end it releases everything at once. Its jobs are no tasks (no query, list
///   or `/_sim/jobs` shows them); they only count against the quota. Counted in
///   [`SimStats`](super::SimStats) (`rate_limited_1303_other_client`, `other_client_held`,
///   `other_client_bursts`; see [`refill_delays`](super::refill_delays)); set or switched
///   off at run time by `POST /_sim/account {"other_client": …}`.
#[derive(Clone, Debug, clap::Args)]
pub struct SimOptions {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = LISTEN_DEFAULT)]
    pub listen: SocketAddr,
    /// Tasks the account may have submitted or processing at once (all kinds share it).
    #[arg(long, default_value_t = CONCURRENCY_DEFAULT)]
    pub concurrency: u32,
    /// Factor applied to every simulated duration: 1.0 = real durations, 0.01 = 100x faster.
    #[arg(long, default_value_t = TIME_SCALE_DEFAULT)]
    pub time_scale: f64,
    /// The account's access key (the JWT `iss`).
    #[arg(long, default_value = ACCESS_KEY_DEFAULT)]
    pub access_key: String,
    /// The account's secret key (the JWT HMAC key).
    #[arg(long, default_value = SECRET_KEY_DEFAULT)]
    pub secret_key: String,
    /// Seed of every random draw (durations, outcomes, faults): same seed, same draws.
    #[arg(long, default_value_t = SEED_DEFAULT)]
    pub seed: u64,
    /// Share of requests answered with a 5xx before taking effect (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub fail_5xx_rate: f64,
    /// Share of answers whose JSON body is cut in half after taking effect (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub malformed_rate: f64,
    /// Share of answers delayed by `slow_ms` after taking effect (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub slow_rate: f64,
    /// Delay of a slow answer, in real milliseconds (not scaled).
    #[arg(long, default_value_t = SLOW_MS_DEFAULT)]
    pub slow_ms: u64,
    /// The first N `/v1/…` requests are answered slowly (`slow_ms`), then healthily.
    #[arg(long, default_value_t = 0)]
    pub slow_first: u32,
    /// Share of accepted tasks that end `failed` with a `task_status_msg` (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub failure_after_accept_rate: f64,
    /// Share of video tasks drawn from the long tail (10–15 simulated minutes) (0..1).
    #[arg(long, default_value_t = LONG_TAIL_RATE_DEFAULT)]
    pub long_tail_rate: f64,
    /// Share of creates refused 429/1303 although slotd's jobs leave room, as when other
    /// clients of the same account hold its capacity (nothing is created) (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub over_capacity_rate: f64,
    /// `whsec_…` secret: when set, callbacks carry Standard Webhooks signature headers.
    #[arg(long)]
    pub webhook_secret: Option<String>,
    /// The account's balance in resource-pack units at start: each accepted create deducts its
    /// price, and a create it does not cover is refused 429/1102. Unset: unlimited. Changed at
    /// run time by `POST /_sim/account`.
    #[arg(long)]
    pub balance: Option<f64>,
    /// Slots another client of the account holds during each of its bursts (0: none; below
    /// `--concurrency`): it takes free slots first, and slotd's creates meet 429/1303.
    #[arg(long, default_value_t = 0)]
    pub other_client_slots: u32,
    /// How long each of the other client's bursts holds, in simulated seconds.
    #[arg(long, default_value_t = OTHER_CLIENT_BURST_SECS_DEFAULT)]
    pub other_client_burst_secs: f64,
    /// Quiet time between the other client's bursts, in simulated seconds.
    #[arg(long, default_value_t = OTHER_CLIENT_GAP_SECS_DEFAULT)]
    pub other_client_gap_secs: f64,
    /// When the other client's first burst begins, in simulated seconds after the first
    /// accepted create (unset: `--other-client-gap-secs`).
    #[arg(long)]
    pub other_client_first_secs: Option<f64>,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 18090)),
            concurrency: CONCURRENCY_DEFAULT,
            time_scale: TIME_SCALE_DEFAULT,
            access_key: ACCESS_KEY_DEFAULT.to_owned(),
            secret_key: SECRET_KEY_DEFAULT.to_owned(),
            seed: SEED_DEFAULT,
            fail_5xx_rate: 0.0,
            malformed_rate: 0.0,
            slow_rate: 0.0,
            slow_ms: SLOW_MS_DEFAULT,
            slow_first: 0,
            failure_after_accept_rate: 0.0,
            long_tail_rate: LONG_TAIL_RATE_DEFAULT,
            over_capacity_rate: 0.0,
            webhook_secret: None,
            balance: None,
            other_client_slots: 0,
            other_client_burst_secs: OTHER_CLIENT_BURST_SECS_DEFAULT,
            other_client_gap_secs: OTHER_CLIENT_GAP_SECS_DEFAULT,
            other_client_first_secs: None,
        }
    }
}

impl SimOptions {
    /// Refuses nonsense at start-up, naming the flag, instead of misbehaving later.
    pub fn validate(&self) -> anyhow::Result<()> {
        crate::options::check(
            "--concurrency",
            self.concurrency > 0,
            self.time_scale,
            &[
                ("--fail-5xx-rate", self.fail_5xx_rate),
                ("--malformed-rate", self.malformed_rate),
                ("--slow-rate", self.slow_rate),
                (
                    "--failure-after-accept-rate",
                    self.failure_after_accept_rate,
                ),
                ("--long-tail-rate", self.long_tail_rate),
                ("--over-capacity-rate", self.over_capacity_rate),
            ],
        )?;
        if self.access_key.is_empty() || self.secret_key.is_empty() {
            bail!("--access-key and --secret-key must not be empty");
        }
        if let Some(balance) = self.balance
            && !(balance.is_finite() && balance >= 0.0)
        {
            bail!("--balance must be a number of units ≥ 0 (got {balance})");
        }
        if let Some(secret) = &self.webhook_secret {
            slotd_core::standard_webhooks::webhook_key(secret).context("--webhook-secret")?;
        }
        let plan = self.other_client_schedule();
        if let Err(why) = plan.check(self.concurrency, &other_client::FLAGS) {
            bail!(why);
        }
        Ok(())
    }

    /// The other client's schedule, when `other_client_slots` is above 0.
    pub(crate) fn other_client(&self) -> Option<OtherClientPlan> {
        Some(self.other_client_schedule()).filter(|p| p.slots > 0)
    }

    /// The schedule the flags give, on or off.
    fn other_client_schedule(&self) -> OtherClientPlan {
        OtherClientPlan {
            slots: self.other_client_slots,
            burst_secs: self.other_client_burst_secs,
            gap_secs: self.other_client_gap_secs,
            first_secs: self
                .other_client_first_secs
                .unwrap_or(self.other_client_gap_secs),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        sim: SimOptions,
    }

    #[test]
    fn the_other_client_flags_parse_and_default_to_off() -> anyhow::Result<()> {
        let off = Cli::try_parse_from(["sim"])?.sim;
        assert_eq!(off.other_client(), None);
        let on = Cli::try_parse_from([
            "sim",
            "--concurrency",
            "10",
            "--other-client-slots",
            "6",
            "--other-client-burst-secs",
            "120",
            "--other-client-gap-secs",
            "240",
        ])?
        .sim;
        on.validate()?;
        let plan = on.other_client();
        assert_eq!(plan.map(|p| (p.slots, p.first_secs)), Some((6, 240.0)));
        let early = Cli::try_parse_from(["sim", "--other-client-first-secs", "0"])?.sim;
        assert_eq!(early.other_client_first_secs, Some(0.0));
        Ok(())
    }
}
