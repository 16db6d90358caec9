//! The simulator's knobs: one typed struct the CLI flattens (`slotd sim fal …`) and tests build
//! with `..FalOptions::default()` (or [`FalOptions::with_account`]).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use anyhow::bail;

use super::fate::FailureKind;
use super::schema::schema_of;
pub use crate::options::{SEED_DEFAULT, SLOW_MS_DEFAULT, TIME_SCALE_DEFAULT};

/// Default listen address of `slotd sim fal` (Kling uses 18090, Runway 18091).
pub const LISTEN_DEFAULT: &str = "127.0.0.1:18092";
/// Default account, owner of [`KEY_DEFAULT`].
pub const ACCOUNT_DEFAULT: &str = "default";
/// Default key, `<key_id>:<key_secret>` as fal issues them (a UUID and 32 hex digits).
pub const KEY_DEFAULT: &str =
    "6f1d2c3b-4a59-4e7f-9c2d-1b8a7e6f5d40:3c9e1f0a7b2d4e6f8a1c3e5b7d9f0a2c";
/// Default concurrency of every account (FAL_API.md: 2 for new accounts, up to 40).
pub const CONCURRENCY_DEFAULT: u32 = 8;
/// Default share of requests that land in the long tail (4–8 simulated minutes).
pub const LONG_TAIL_RATE_DEFAULT: f64 = 0.02;
/// Default webhook attempts per delivery (the first and the retries).
pub const WEBHOOK_ATTEMPTS_DEFAULT: u32 = 4;
/// At most this many (fal itself makes up to 11 within 2 hours).
pub const WEBHOOK_ATTEMPTS_MAX: u32 = 20;

/// `--key ACCOUNT=KEY_ID:KEY_SECRET`: a key and the account it belongs to (several keys may
/// share an account, and with it the account's concurrency).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySpec {
    pub account: String,
    /// `<key_id>:<key_secret>`, what `Authorization: Key …` carries.
    pub key: String,
}

impl KeySpec {
    pub fn new(account: &str, key: &str) -> KeySpec {
        KeySpec {
            account: account.to_owned(),
            key: key.to_owned(),
        }
    }
}

impl FromStr for KeySpec {
    type Err = String;
    fn from_str(s: &str) -> Result<KeySpec, String> {
        let (account, key) = s
            .split_once('=')
            .ok_or_else(|| format!("expected ACCOUNT=KEY_ID:KEY_SECRET (got {s:?})"))?;
        let spec = KeySpec::new(account.trim(), key.trim());
        spec.check()?;
        Ok(spec)
    }
}

impl KeySpec {
    fn check(&self) -> Result<(), String> {
        if self.account.is_empty() || self.account.chars().any(char::is_whitespace) {
            return Err(format!("account {:?}: non-empty, no spaces", self.account));
        }
        match self.key.split_once(':') {
            Some((id, secret))
                if !id.is_empty()
                    && !secret.is_empty()
                    && !self.key.chars().any(char::is_whitespace) =>
            {
                Ok(())
            }
            _ => Err(format!(
                "key of {:?} must be KEY_ID:KEY_SECRET without spaces",
                self.account
            )),
        }
    }
}

/// `NAME=N`: a limit for one account (`--account-concurrency`) or one model id
/// (`--endpoint-concurrency`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedLimit {
    pub name: String,
    pub limit: u32,
}

impl FromStr for NamedLimit {
    type Err = String;
    fn from_str(s: &str) -> Result<NamedLimit, String> {
        let (name, limit) = s
            .rsplit_once('=')
            .ok_or_else(|| format!("expected NAME=N, e.g. studio=4 (got {s:?})"))?;
        Ok(NamedLimit {
            name: name.trim().to_owned(),
            limit: limit
                .trim()
                .parse()
                .map_err(|e| format!("{s:?}: the limit is not a number: {e}"))?,
        })
    }
}

/// How a lost answer looks to the client (the request was created all the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LostAs {
    /// The connection closes before any status line.
    Drop,
    /// An ingress 502 HTML page without `x-fal-request-id`.
    #[value(name = "502")]
    BadGateway,
    /// An ingress 504 HTML page without `x-fal-request-id`.
    #[value(name = "504")]
    GatewayTimeout,
    /// One of the three, drawn per lost answer.
    Any,
}

/// How the simulator behaves: accounts and keys, speed, and which faults to inject.
///
/// Time: run times, dispatch delays, `X-Fal-Request-Timeout` and webhook backoff are simulated
/// and multiplied by `time_scale`. `result_ttl`, `media_ttl`, an
/// `X-Fal-Object-Lifecycle-Preference`, `slow_ms` and the webhook timeout are **real** time:
/// they bound what a client does in real time (a download, a read-back).
///
/// Faults (each drawn from a seeded RNG of its own, so request n's faults depend on the seed
/// and n only):
/// - `submit_5xx_rate`, `submit_429_rate`: a submit is answered 500 (`internal_error`, JSON),
///   503 (an ingress HTML page) or 429 (`rate_limited`) **before** any check: nothing is made.
/// - `lost_answer_rate` (`lost_answer_as`): an accepted submit's answer is lost — the request
///   exists, the client sees a dropped connection or an ingress 502/504: outcome unknown.
/// - `slow_rate`/`slow_ms`: an accepted submit's answer waits `slow_ms`.
/// - `read_5xx_rate`: a status, result or cancel request is answered 503 before its effect.
/// - `failure_rate` (`failure_kinds`): an accepted request fails when it runs
///   (`runner_server_error` 500, `content_policy_violation` 422, `file_download_error` 422 for
///   models with images).
#[derive(Clone, Debug, clap::Args)]
pub struct FalOptions {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = LISTEN_DEFAULT)]
    pub listen: SocketAddr,
    /// A key and its account, `ACCOUNT=KEY_ID:KEY_SECRET` (repeatable; keys of one account
    /// share its concurrency). The account name is also its webhook user id.
    #[arg(long = "key", value_name = "ACCOUNT=KEY_ID:KEY_SECRET",
          default_values_t = [KeySpec::new(ACCOUNT_DEFAULT, KEY_DEFAULT)])]
    pub keys: Vec<KeySpec>,
    /// Requests of one account IN_PROGRESS at once; more wait IN_QUEUE (nothing is refused).
    #[arg(long, default_value_t = CONCURRENCY_DEFAULT)]
    pub concurrency: u32,
    /// Per-account concurrency, `ACCOUNT=N` (repeatable; beats `--concurrency`).
    #[arg(long = "account-concurrency", value_name = "ACCOUNT=N")]
    pub account_concurrency: Vec<NamedLimit>,
    /// Per-model limit across accounts, `MODEL_ID=N` (repeatable; fal's high-demand limits).
    #[arg(long = "endpoint-concurrency", value_name = "MODEL_ID=N")]
    pub endpoint_concurrency: Vec<NamedLimit>,
    /// Accounts whose balance is exhausted: their submits get 403 "User is locked"
    /// (repeatable; also `POST /_sim/accounts/{account}`).
    #[arg(long = "exhausted", value_name = "ACCOUNT")]
    pub exhausted: Vec<String>,
    /// Factor applied to simulated durations: 1.0 = real, 0.001 = 1000x faster.
    #[arg(long, default_value_t = TIME_SCALE_DEFAULT)]
    pub time_scale: f64,
    /// Seed of every random draw (request ids, durations, outcomes, faults).
    #[arg(long, default_value_t = SEED_DEFAULT)]
    pub seed: u64,
    /// Share of requests drawn from the long tail (4–8 simulated minutes) (0..1).
    #[arg(long, default_value_t = LONG_TAIL_RATE_DEFAULT)]
    pub long_tail_rate: f64,
    /// How long a result stays readable after completion (real time); 404 afterwards.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    pub result_ttl: Duration,
    /// How long CDN files live without an `X-Fal-Object-Lifecycle-Preference` (real time).
    #[arg(long, default_value = "7d", value_parser = humantime::parse_duration)]
    pub media_ttl: Duration,
    /// Check bodies at submit (422, nothing made) instead of when a runner picks them up.
    #[arg(long)]
    pub validate_at_submit: bool,
    /// Refuse unknown input keys (`extra_forbidden`) instead of ignoring and counting them.
    #[arg(long)]
    pub refuse_unknown_keys: bool,
    /// Serve status, result and cancel also with the model path inserted
    /// (`/fal-ai/pika/v2.2/text-to-video/requests/{id}`); by default those answer 404.
    #[arg(long)]
    pub allow_model_path: bool,
    /// Accept the cancel of an IN_PROGRESS request (202, its runner freed at once) instead of
    /// 400 ALREADY_COMPLETED.
    #[arg(long)]
    pub cancel_running: bool,
    /// The status of a failed request omits `error` and `error_type` (as once captured).
    #[arg(long)]
    pub status_hides_errors: bool,
    /// The request history also lists unfinished requests (`ended_at` null).
    #[arg(long)]
    pub history_includes_unfinished: bool,
    /// Share of submits answered 500 or 503 before any check (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub submit_5xx_rate: f64,
    /// Share of submits answered 429 before any check (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub submit_429_rate: f64,
    /// Share of accepted submits whose answer is lost (the request exists) (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub lost_answer_rate: f64,
    /// What a lost answer looks like.
    #[arg(long, value_enum, default_value_t = LostAs::Any)]
    pub lost_answer_as: LostAs,
    /// Share of accepted submits whose answer waits `--slow-ms` (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub slow_rate: f64,
    /// Delay of a slow answer, real milliseconds.
    #[arg(long, default_value_t = SLOW_MS_DEFAULT)]
    pub slow_ms: u64,
    /// Share of status, result and cancel requests answered 503 before their effect (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub read_5xx_rate: f64,
    /// Share of accepted requests that fail when they run (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub failure_rate: f64,
    /// The failures drawn (repeatable; default: all that apply to the model).
    #[arg(long = "failure-kind", value_enum)]
    pub failure_kinds: Vec<FailureKind>,
    /// Webhook attempts per delivery; retries back off 10, 20, 40… simulated seconds.
    #[arg(long, default_value_t = WEBHOOK_ATTEMPTS_DEFAULT)]
    pub webhook_attempts: u32,
    /// Real time one webhook attempt may take before it counts as failed.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub webhook_timeout: Duration,
    /// Share of webhooks sent with a signature no published key verifies (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub webhook_bad_signature_rate: f64,
    /// Share of webhooks delivered twice (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub webhook_duplicate_rate: f64,
}

impl Default for FalOptions {
    fn default() -> Self {
        FalOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 18092)),
            keys: vec![KeySpec::new(ACCOUNT_DEFAULT, KEY_DEFAULT)],
            concurrency: CONCURRENCY_DEFAULT,
            account_concurrency: Vec::new(),
            endpoint_concurrency: Vec::new(),
            exhausted: Vec::new(),
            time_scale: TIME_SCALE_DEFAULT,
            seed: SEED_DEFAULT,
            long_tail_rate: LONG_TAIL_RATE_DEFAULT,
            result_ttl: Duration::from_secs(3600),
            media_ttl: Duration::from_secs(7 * 86_400),
            validate_at_submit: false,
            refuse_unknown_keys: false,
            allow_model_path: false,
            cancel_running: false,
            status_hides_errors: false,
            history_includes_unfinished: false,
            submit_5xx_rate: 0.0,
            submit_429_rate: 0.0,
            lost_answer_rate: 0.0,
            lost_answer_as: LostAs::Any,
            slow_rate: 0.0,
            slow_ms: SLOW_MS_DEFAULT,
            read_5xx_rate: 0.0,
            failure_rate: 0.0,
            failure_kinds: Vec::new(),
            webhook_attempts: WEBHOOK_ATTEMPTS_DEFAULT,
            webhook_timeout: Duration::from_secs(5),
            webhook_bad_signature_rate: 0.0,
            webhook_duplicate_rate: 0.0,
        }
    }
}

impl FalOptions {
    /// Adds `key` for `account` and sets the account's concurrency (an account given here
    /// for the first time is created; the default account stays unless `keys` is cleared).
    pub fn with_account(mut self, account: &str, key: &str, concurrency: u32) -> FalOptions {
        self.keys.push(KeySpec::new(account, key));
        self.account_concurrency.push(NamedLimit {
            name: account.to_owned(),
            limit: concurrency,
        });
        self
    }

    /// Every account, once, in the order of their first key.
    pub fn accounts(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        self.keys
            .iter()
            .filter(|k| seen.insert(k.account.clone()))
            .map(|k| k.account.clone())
            .collect()
    }

    /// `account`'s concurrency: its last `--account-concurrency`, else `--concurrency`.
    pub fn concurrency_for(&self, account: &str) -> u32 {
        self.account_concurrency
            .iter()
            .rev()
            .find(|l| l.name == account)
            .map_or(self.concurrency, |l| l.limit)
    }

    /// Refuses nonsense at start-up, naming the flag, instead of misbehaving later.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.keys.is_empty() {
            bail!("--key: at least one ACCOUNT=KEY_ID:KEY_SECRET");
        }
        let mut keys = BTreeSet::new();
        for k in &self.keys {
            if let Err(e) = k.check() {
                bail!("--key: {e}");
            }
            if !keys.insert(k.key.as_str()) {
                bail!("--key: the key of {:?} is given twice", k.account);
            }
        }
        crate::options::check(
            "--concurrency",
            self.concurrency > 0,
            self.time_scale,
            &[
                ("--long-tail-rate", self.long_tail_rate),
                ("--submit-5xx-rate", self.submit_5xx_rate),
                ("--submit-429-rate", self.submit_429_rate),
                ("--lost-answer-rate", self.lost_answer_rate),
                ("--slow-rate", self.slow_rate),
                ("--read-5xx-rate", self.read_5xx_rate),
                ("--failure-rate", self.failure_rate),
                (
                    "--webhook-bad-signature-rate",
                    self.webhook_bad_signature_rate,
                ),
                ("--webhook-duplicate-rate", self.webhook_duplicate_rate),
            ],
        )?;
        let accounts = self.accounts();
        let known = |name: &str| accounts.iter().any(|a| a == name);
        for l in &self.account_concurrency {
            if !known(&l.name) || l.limit == 0 {
                bail!(
                    "--account-concurrency {}={}: the account needs a --key and a limit of at least 1",
                    l.name,
                    l.limit
                );
            }
        }
        for l in &self.endpoint_concurrency {
            if schema_of(&l.name).is_none() || l.limit == 0 {
                bail!(
                    "--endpoint-concurrency {}={}: a served model id and a limit of at least 1",
                    l.name,
                    l.limit
                );
            }
        }
        if let Some(a) = self.exhausted.iter().find(|a| !known(a)) {
            bail!("--exhausted {a}: no --key names this account");
        }
        if !(1..=WEBHOOK_ATTEMPTS_MAX).contains(&self.webhook_attempts) {
            bail!("--webhook-attempts must be from 1 to {WEBHOOK_ATTEMPTS_MAX}");
        }
        if self.submit_5xx_rate + self.submit_429_rate > 1.0 {
            bail!("--submit-5xx-rate and --submit-429-rate together must not exceed 1");
        }
        Ok(())
    }
}

impl std::fmt::Display for KeySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.account, self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_accounts_and_validation() {
        let opts = FalOptions::default().with_account("studio", "k1:s1", 3);
        assert_eq!(opts.accounts(), ["default", "studio"]);
        assert_eq!(opts.concurrency_for("studio"), 3);
        assert_eq!(opts.concurrency_for("default"), CONCURRENCY_DEFAULT);
        assert!(opts.validate().is_ok());
        assert_eq!(
            "a=id:secret".parse::<KeySpec>(),
            Ok(KeySpec::new("a", "id:secret"))
        );
        for bad in ["id:secret", "a=nosecret", "a=id:", "=id:s"] {
            assert!(bad.parse::<KeySpec>().is_err(), "{bad}");
        }
        assert_eq!(
            "fal-ai/pika/v2.2/text-to-video=2".parse::<NamedLimit>(),
            Ok(NamedLimit {
                name: "fal-ai/pika/v2.2/text-to-video".into(),
                limit: 2
            })
        );
        let err = |o: FalOptions| {
            o.validate()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let twice = FalOptions::default().with_account("b", KEY_DEFAULT, 1);
        assert!(err(twice).contains("twice"));
        let stranger = FalOptions {
            exhausted: vec!["nobody".into()],
            ..FalOptions::default()
        };
        assert!(err(stranger).contains("--exhausted"));
        let rate = FalOptions {
            lost_answer_rate: 1.5,
            ..FalOptions::default()
        };
        assert!(err(rate).contains("--lost-answer-rate"));
        let model = FalOptions {
            endpoint_concurrency: vec!["fal-ai/veo3=1".parse().unwrap_or_else(|e| panic!("{e}"))],
            ..FalOptions::default()
        };
        assert!(err(model).contains("--endpoint-concurrency"));
    }

    #[test]
    fn the_cli_flags_parse_into_the_options() {
        use clap::{CommandFactory as _, Parser};
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            opts: FalOptions,
        }
        Cli::command().debug_assert();
        let defaults = Cli::try_parse_from(["fal"]).map_err(|e| e.to_string());
        let defaults = defaults.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(defaults.opts.keys, FalOptions::default().keys);
        assert_eq!(defaults.opts.media_ttl, FalOptions::default().media_ttl);
        let args = [
            "fal",
            "--listen=127.0.0.1:0",
            "--key=studio=k1:s1",
            "--key=studio=k2:s2",
            "--account-concurrency=studio=4",
            "--time-scale=0.001",
            "--result-ttl=10m",
            "--lost-answer-rate=0.1",
            "--lost-answer-as=502",
            "--failure-kind=content_policy_violation",
            "--cancel-running",
        ];
        let cli = Cli::try_parse_from(args).map_err(|e| e.to_string());
        let o = cli.unwrap_or_else(|e| panic!("{e}")).opts;
        assert_eq!(o.accounts(), ["studio"], "given keys replace the default");
        assert_eq!(o.concurrency_for("studio"), 4);
        assert_eq!(o.result_ttl, Duration::from_secs(600));
        assert_eq!(o.lost_answer_as, LostAs::BadGateway);
        assert_eq!(o.failure_kinds, [FailureKind::ContentPolicyViolation]);
        assert!(o.cancel_running && o.validate().is_ok());
    }
}
