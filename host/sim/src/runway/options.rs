//! The simulator's knobs: one typed struct the CLI flattens (`slotd sim runway …`) and tests
//! build with `..RunwayOptions::default()`.

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use anyhow::bail;

use super::model::Model;
use crate::clock::scaled;
pub use crate::options::{SEED_DEFAULT, SLOW_MS_DEFAULT, TIME_SCALE_DEFAULT};

/// Default listen address of `slotd sim runway` (the Kling simulator uses 18090).
pub const LISTEN_DEFAULT: &str = "127.0.0.1:18091";
/// Default API key: `key_` + 128 lowercase hex digits, the form of a real key.
pub const API_KEY_DEFAULT: &str = "key_20b4437799e6ba18cf741f708560fc5d6b149c5ca381dc573a90e833dac650c9dcc4ce36089c3e59e86837139f198c3e77bddae674540da74ecf22e462c0ceda";
/// The only `X-Runway-Version` the simulator accepts.
pub const RUNWAY_VERSION: &str = "2024-11-06";
/// Default concurrency per model: tier 3.
pub const CONCURRENCY_DEFAULT: u32 = 5;
/// Default generations per model per rolling 24 h: large enough never to matter.
pub const DAILY_LIMIT_DEFAULT: u32 = 1_000_000;
/// Default share of tasks that land in the long tail (5–10 simulated minutes).
pub const LONG_TAIL_RATE_DEFAULT: f64 = 0.01;
/// Default lifetime of an output link: 24 h, the short end of Runway's "24–48 hours".
pub const OUTPUT_TTL_MS_DEFAULT: u64 = 24 * 3600 * 1000;
/// Default credit balance reported by `GET /v1/organization`.
pub const CREDIT_BALANCE_DEFAULT: u64 = 1_000_000;

/// A per-model override on the command line: `MODEL=N`, e.g. `gen4.5=3`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelLimit {
    pub model: Model,
    pub limit: u32,
}

impl FromStr for ModelLimit {
    type Err = String;
    fn from_str(s: &str) -> Result<ModelLimit, String> {
        let (model, limit) = s
            .split_once('=')
            .ok_or_else(|| format!("expected MODEL=N, e.g. gen4.5=3 (got {s:?})"))?;
        Ok(ModelLimit {
            model: model.trim().parse()?,
            limit: limit
                .trim()
                .parse()
                .map_err(|e| format!("{s:?}: the limit is not a number: {e}"))?,
        })
    }
}

/// How the simulator behaves: the organization's limits, speed, and which faults to inject.
///
/// Time: task durations and the daily window (24 h) are multiplied by `time_scale`.
/// `output_ttl_ms`, `cancelled_visible_ms`, `cancel_lag_ms` and `slow_ms` are **real**
/// milliseconds, not scaled: they bound what a client does in real time (a download, a
/// read-back, a timeout), whatever the speed of the simulated provider.
///
/// Fault semantics (each drawn per `/v1/…` request, after the key and version checks, from an
/// RNG of its own seeded by `seed`, so request n's faults depend on the seed and n only):
/// - `fail_5xx_rate`: answered 502, 503 or 504 `{"error"}` **before** taking effect (a create
///   creates nothing).
/// - `lost_answer_rate`: the request takes effect, then the connection is closed without an
///   answer (the client sees a connection error, no status): the in-doubt create.
/// - `slow_rate`/`slow_ms`: the request takes effect, then the answer waits `slow_ms`.
/// - `slow_first`: the first N requests are slow that way whatever `slow_rate` draws (as in
///   the Kling simulator): e.g. a create whose answer is still on its way when a crash test
///   kills the client, and fast answers after it. It consumes no randomness.
/// - `failure_after_accept_rate`: an accepted task ends `FAILED` with a `failureCode` drawn
///   from the documented codes (drawn with the task's timing, not per request).
/// - `read_429_rate`, `read_5xx_rate`: a `GET /v1/tasks/{id}` is answered 429 ("too many
///   requests") or 502/503/504 before it takes effect; reads only, drawn from a stream of
///   their own (read n's faults depend on the seed and n only), so creates are never refused
///   by them and the other faults' draws are unchanged.
/// - `create_429_rate`: a create is answered 429 ("Too many requests") before it takes
///   effect: Runway's rate limit, not its daily limit (nothing is created and the day's count,
///   which `GET /v1/organization` reports, is unchanged). Creates only, drawn from a stream of
///   their own (create n's draw depends on the seed and n only), so the other faults stay
///   those of the seed.
#[derive(Clone, Debug, clap::Args)]
pub struct RunwayOptions {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = LISTEN_DEFAULT)]
    pub listen: SocketAddr,
    /// The API key clients must send as `Authorization: Bearer <key>`.
    #[arg(long, default_value = API_KEY_DEFAULT)]
    pub api_key: String,
    /// Tasks per model that may hold a slot (PENDING or RUNNING) at once; more wait THROTTLED.
    #[arg(long, default_value_t = CONCURRENCY_DEFAULT)]
    pub concurrency: u32,
    /// Per-model concurrency, `MODEL=N` (repeatable; beats `--concurrency`).
    #[arg(long = "model-concurrency", value_name = "MODEL=N")]
    pub model_concurrency: Vec<ModelLimit>,
    /// Accepted creates per model in a rolling 24 h (scaled); beyond it creates get 429.
    #[arg(long, default_value_t = DAILY_LIMIT_DEFAULT)]
    pub daily_limit: u32,
    /// Per-model daily limit, `MODEL=N` (repeatable; beats `--daily-limit`).
    #[arg(long = "model-daily-limit", value_name = "MODEL=N")]
    pub model_daily_limit: Vec<ModelLimit>,
    /// Length of the daily limit's rolling "24 hours" in real seconds, whatever the time scale
    /// (a shortened day for tests); unset: 24 h times `--time-scale`.
    #[arg(long)]
    pub day_seconds: Option<f64>,
    /// Answer a daily-limit 429 with `Retry-After` (seconds until the oldest counted create
    /// leaves the window). Runway does not document such a header on 429: off by default.
    #[arg(long, default_value_t = false)]
    pub daily_retry_after: bool,
    /// Factor applied to simulated durations: 1.0 = real, 0.001 = 1000x faster.
    #[arg(long, default_value_t = TIME_SCALE_DEFAULT)]
    pub time_scale: f64,
    /// Seed of every random draw (task ids, durations, outcomes, faults).
    #[arg(long, default_value_t = SEED_DEFAULT)]
    pub seed: u64,
    /// Share of tasks drawn from the long tail (5–10 simulated minutes) (0..1).
    #[arg(long, default_value_t = LONG_TAIL_RATE_DEFAULT)]
    pub long_tail_rate: f64,
    /// Share of `/v1/…` requests answered 502/503/504 before taking effect (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub fail_5xx_rate: f64,
    /// Share of `/v1/…` requests whose answer is lost after taking effect (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub lost_answer_rate: f64,
    /// Share of accepted tasks that end FAILED with a failureCode (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub failure_after_accept_rate: f64,
    /// Share of task reads (`GET /v1/tasks/{id}`) answered 429 before taking effect (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub read_429_rate: f64,
    /// Share of task reads answered 502/503/504 before taking effect (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub read_5xx_rate: f64,
    /// Share of creates answered 429 "Too many requests" before taking effect: the rate
    /// limit, with the daily limit not reached (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub create_429_rate: f64,
    /// Share of `/v1/…` answers delayed by `--slow-ms` after taking effect (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub slow_rate: f64,
    /// Delay of a slow answer, real milliseconds.
    #[arg(long, default_value_t = SLOW_MS_DEFAULT)]
    pub slow_ms: u64,
    /// The first N `/v1/…` requests (past the key and version checks) are answered slowly
    /// (`--slow-ms`), whatever `--slow-rate`.
    #[arg(long, default_value_t = 0)]
    pub slow_first: u32,
    /// Lifetime of a minted output link, real milliseconds.
    #[arg(long, default_value_t = OUTPUT_TTL_MS_DEFAULT)]
    pub output_ttl_ms: u64,
    /// How long a cancelled task still answers CANCELLED before 404, real milliseconds.
    #[arg(long, default_value_t = 0)]
    pub cancelled_visible_ms: u64,
    /// How long an unfinished task keeps its status (and its slot) after the first `DELETE`
    /// asked to cancel it, real milliseconds; 0 cancels at once. Runway does not say whether a
    /// cancelled task's slot frees at once: a client must wait until the task is gone.
    #[arg(long, default_value_t = 0)]
    pub cancel_lag_ms: u64,
    /// Credits at start; succeeded tasks spend them (nothing is refused for lack of credits).
    #[arg(long, default_value_t = CREDIT_BALANCE_DEFAULT)]
    pub credit_balance: u64,
}

impl Default for RunwayOptions {
    fn default() -> Self {
        RunwayOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 18091)),
            api_key: API_KEY_DEFAULT.to_owned(),
            concurrency: CONCURRENCY_DEFAULT,
            model_concurrency: Vec::new(),
            daily_limit: DAILY_LIMIT_DEFAULT,
            model_daily_limit: Vec::new(),
            day_seconds: None,
            daily_retry_after: false,
            time_scale: TIME_SCALE_DEFAULT,
            seed: SEED_DEFAULT,
            long_tail_rate: LONG_TAIL_RATE_DEFAULT,
            fail_5xx_rate: 0.0,
            lost_answer_rate: 0.0,
            failure_after_accept_rate: 0.0,
            read_429_rate: 0.0,
            read_5xx_rate: 0.0,
            create_429_rate: 0.0,
            slow_rate: 0.0,
            slow_ms: SLOW_MS_DEFAULT,
            slow_first: 0,
            output_ttl_ms: OUTPUT_TTL_MS_DEFAULT,
            cancelled_visible_ms: 0,
            cancel_lag_ms: 0,
            credit_balance: CREDIT_BALANCE_DEFAULT,
        }
    }
}

impl RunwayOptions {
    /// `model`'s concurrency: its last `--model-concurrency`, else `--concurrency`.
    pub fn concurrency_for(&self, model: Model) -> u32 {
        override_for(&self.model_concurrency, model).unwrap_or(self.concurrency)
    }

    /// `model`'s daily limit: its last `--model-daily-limit`, else `--daily-limit`.
    pub fn daily_limit_for(&self, model: Model) -> u32 {
        override_for(&self.model_daily_limit, model).unwrap_or(self.daily_limit)
    }

    /// The rolling "24 hours" of the daily limit, in real time: `--day-seconds`, else scaled.
    pub(crate) fn daily_window(&self) -> Duration {
        self.day_seconds.map_or_else(
            || scaled(self.time_scale, 86_400.0),
            Duration::from_secs_f64,
        )
    }

    /// Runway's pace for reading one task: five seconds, scaled.
    pub(crate) fn read_pace(&self) -> Duration {
        scaled(self.time_scale, 5.0)
    }

    /// Refuses nonsense at start-up, naming the flag, instead of misbehaving later.
    pub fn validate(&self) -> anyhow::Result<()> {
        crate::options::check(
            "--concurrency and --model-concurrency",
            self.concurrency > 0 && self.model_concurrency.iter().all(|l| l.limit > 0),
            self.time_scale,
            &[
                ("--long-tail-rate", self.long_tail_rate),
                ("--fail-5xx-rate", self.fail_5xx_rate),
                ("--lost-answer-rate", self.lost_answer_rate),
                (
                    "--failure-after-accept-rate",
                    self.failure_after_accept_rate,
                ),
                ("--slow-rate", self.slow_rate),
                ("--read-429-rate", self.read_429_rate),
                ("--read-5xx-rate", self.read_5xx_rate),
                ("--create-429-rate", self.create_429_rate),
            ],
        )?;
        if let Some(d) = self.day_seconds
            && !(d.is_finite() && d > 0.0 && d <= 86_400.0)
        {
            bail!("--day-seconds must be a positive number of seconds up to 86400 (got {d})");
        }
        if self.api_key.is_empty() || self.api_key.chars().any(char::is_whitespace) {
            bail!("--api-key must be non-empty and without whitespace");
        }
        Ok(())
    }
}

fn override_for(limits: &[ModelLimit], model: Model) -> Option<u32> {
    limits
        .iter()
        .rev()
        .find(|l| l.model == model)
        .map(|l| l.limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_and_validation() {
        assert!(API_KEY_DEFAULT.len() == 4 + 128 && API_KEY_DEFAULT.starts_with("key_"));
        assert!(API_KEY_DEFAULT[4..].bytes().all(|b| b.is_ascii_hexdigit()));
        let opts = RunwayOptions {
            model_concurrency: vec!["gen4.5=3".parse().unwrap_or_else(|e| panic!("{e}"))],
            ..RunwayOptions::default()
        };
        assert_eq!(opts.concurrency_for(Model::Gen45), 3);
        assert_eq!(opts.concurrency_for(Model::Veo3), CONCURRENCY_DEFAULT);
        assert!(opts.validate().is_ok());
        assert!("gen4.5".parse::<ModelLimit>().is_err());
        assert!("gen9=1".parse::<ModelLimit>().is_err());
        assert!("veo3=x".parse::<ModelLimit>().is_err());
        let bad = RunwayOptions {
            lost_answer_rate: 2.0,
            ..RunwayOptions::default()
        };
        let err = bad
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("--lost-answer-rate"), "{err}");
    }
}
