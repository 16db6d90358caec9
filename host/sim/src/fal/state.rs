//! The simulated fal: its accounts, requests, queue model, counters and seeded RNGs, behind one
//! mutex (never held across an await). Every operation first brings the queue to now
//! ([`Sim::with_now`], event by event, see `drive`), so what a client reads is exact at the
//! instant of its request, and the webhooks of requests that ended are sent once the lock is
//! released.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Deref;
use std::sync::Arc;

use axum::http::StatusCode;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Notify;

use super::deliver::Delivery;
use super::job::{Job, Outcome};
use super::options::{FalOptions, LostAs};
use super::queue::{Priority, Queue};
use super::stats::{FalAccountStats, FalJob, FalStats};
use super::webhook::Signer;
use crate::files::file_len;
use crate::handle::{Base, Simulator};

/// A cheap handle on the shared simulator (the axum state).
#[derive(Clone)]
pub struct Sim(Arc<Shared>);

impl Simulator for Sim {
    const NAME: &'static str = "fal simulator";
    fn base(&self) -> &Base {
        &self.base
    }
    fn router(&self) -> axum::Router {
        super::routes::router(self.clone())
    }
    fn concurrency(&self) -> u32 {
        self.opts.concurrency
    }
}

impl Deref for Sim {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

pub struct Shared {
    pub opts: FalOptions,
    /// Base of every URL handed out, shutdown (the driver, webhooks and slow answers stop
    /// waiting), the driver and deliveries in flight, the clock.
    pub base: Base,
    pub signer: Signer,
    /// Signs the deliveries drawn to carry a bad signature: a key no JWKS lists.
    pub forger: Signer,
    /// Webhook client (no proxy: webhooks go to loopback).
    pub http: reqwest::Client,
    /// Wakes the driver when a request changed what happens next.
    pub wake: Notify,
    /// `(key, account)`.
    keys: Vec<(String, String)>,
    pub(super) inner: Mutex<Inner>,
}

pub(crate) struct Inner {
    /// Request ids, timings, outcomes.
    pub fate_rng: StdRng,
    /// Submit faults, a stream of its own: submit n's faults depend on the seed and n only.
    pub submit_rng: StdRng,
    /// Read faults (status, result, cancel).
    pub read_rng: StdRng,
    pub queue: Queue,
    pub jobs: HashMap<String, Job>,
    /// Request ids in submission order.
    pub order: Vec<String>,
    /// Requests not yet `COMPLETED`.
    pub unfinished: BTreeSet<String>,
    /// `account`, model and input hash of every accepted submit (`duplicate_inputs`).
    pub inputs_seen: HashSet<(String, String, String)>,
    pub accounts: BTreeMap<String, FalAccountStats>,
    /// Global counters (`accounts`, `queued`, `in_progress` filled in at snapshot).
    pub stats: FalStats,
    /// `lost_answer_rate` now (a test may change it mid-run).
    pub lost_answer_rate: f64,
}

/// The faults drawn for one submit.
pub(crate) struct SubmitFaults {
    /// 500, 503 or 429 before any check.
    pub before: Option<StatusCode>,
    /// The answer is lost this way after acceptance.
    pub lost: Option<LostAs>,
    pub slow: bool,
}

impl Sim {
    pub(crate) fn new(opts: FalOptions, base_url: String) -> anyhow::Result<Sim> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(opts.webhook_timeout)
            .build()?;
        let mut queue = Queue::new(opts.concurrency as usize);
        let mut accounts = BTreeMap::new();
        for a in opts.accounts() {
            let limit = opts.concurrency_for(&a);
            queue.account_limits.insert(a.clone(), limit as usize);
            accounts.insert(
                a.clone(),
                FalAccountStats {
                    concurrency: limit,
                    user_id: a.clone(),
                    exhausted: opts.exhausted.contains(&a),
                    ..FalAccountStats::default()
                },
            );
        }
        for l in &opts.endpoint_concurrency {
            queue
                .endpoint_limits
                .insert(l.name.clone(), l.limit as usize);
        }
        let seed = opts.seed;
        let inner = Inner {
            fate_rng: StdRng::seed_from_u64(seed),
            submit_rng: StdRng::seed_from_u64(seed ^ 0x5eed_fa17_0000_0001),
            read_rng: StdRng::seed_from_u64(seed ^ 0x5eed_fa17_0000_0002),
            queue,
            jobs: HashMap::new(),
            order: Vec::new(),
            unfinished: BTreeSet::new(),
            inputs_seen: HashSet::new(),
            accounts,
            stats: FalStats {
                time_scale: opts.time_scale,
                ..FalStats::default()
            },
            lost_answer_rate: opts.lost_answer_rate,
        };
        let keys = opts
            .keys
            .iter()
            .map(|k| (k.key.clone(), k.account.clone()))
            .collect();
        Ok(Sim(Arc::new(Shared {
            signer: Signer::from_seed(seed),
            forger: Signer::from_seed(!seed),
            base: Base::new(base_url, opts.time_scale),
            opts,
            http,
            wake: Notify::new(),
            keys,
            inner: Mutex::new(inner),
        })))
    }

    /// Updates counters.
    pub(crate) fn count(&self, f: impl FnOnce(&mut FalStats)) {
        f(&mut self.inner.lock().stats);
    }

    /// The account owning `key` (compared in constant time: keys are secrets).
    pub(crate) fn account_of(&self, key: &str) -> Option<String> {
        let same = |a: &[u8], b: &[u8]| {
            a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
        };
        self.keys
            .iter()
            .find(|(k, _)| same(k.as_bytes(), key.as_bytes()))
            .map(|(_, a)| a.clone())
    }

    pub(crate) fn is_exhausted(&self, account: &str) -> bool {
        self.inner
            .lock()
            .accounts
            .get(account)
            .is_some_and(|a| a.exhausted)
    }

    /// Locks or unlocks an account's submits; `None` for an unknown account.
    pub(crate) fn set_exhausted(&self, account: &str, exhausted: bool) -> Option<FalAccountStats> {
        let mut inner = self.inner.lock();
        let a = inner.accounts.get_mut(account)?;
        a.exhausted = exhausted;
        Some(a.clone())
    }

    /// Draws a submit's faults: always five numbers, whatever the rates.
    pub(crate) fn draw_submit_faults(&self) -> SubmitFaults {
        let o = &self.opts;
        let ([fail, which, lost, how, slow], lost_rate) = {
            let mut inner = self.inner.lock();
            let n: [f64; 5] = inner.submit_rng.random();
            (n, inner.lost_answer_rate)
        };
        let before = if fail < o.submit_429_rate {
            Some(StatusCode::TOO_MANY_REQUESTS)
        } else if fail < o.submit_429_rate + o.submit_5xx_rate {
            Some(if which < 0.5 {
                StatusCode::INTERNAL_SERVER_ERROR
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            })
        } else {
            None
        };
        let lost = (lost < lost_rate).then(|| match o.lost_answer_as {
            LostAs::Any => [LostAs::Drop, LostAs::BadGateway, LostAs::GatewayTimeout]
                [((how * 3.0) as usize).min(2)],
            kind => kind,
        });
        SubmitFaults {
            before,
            lost,
            slow: slow < o.slow_rate,
        }
    }

    /// Whether this status, result or cancel request is answered 503 (one number per request).
    pub(crate) fn draw_read_fault(&self) -> bool {
        let n: f64 = self.inner.lock().read_rng.random();
        n < self.opts.read_5xx_rate
    }

    /// Runs `f` on the state brought to now; then sends the webhooks of requests that ended
    /// meanwhile (or through `f`), and wakes the driver.
    pub(crate) fn with_now<T>(&self, f: impl FnOnce(&mut Inner, i64) -> T) -> T {
        let out = self.at_now(f);
        self.wake.notify_one();
        out
    }

    /// [`Sim::with_now`] without waking the driver (the driver's own step).
    pub(crate) fn at_now<T>(&self, f: impl FnOnce(&mut Inner, i64) -> T) -> T {
        let now = self.base.clock.now_ms();
        let (out, deliveries) = {
            let mut inner = self.inner.lock();
            let mut ended = inner.drive(now);
            let out = f(&mut inner, now);
            // A request submitted with no dispatch delay to speak of may start (and, when its
            // body is refused, end) at once.
            ended.extend(inner.drive(now));
            (out, self.deliveries(&inner, &ended))
        };
        for d in deliveries {
            self.spawn_delivery(d);
        }
        out
    }

    /// The webhooks owed by the requests in `ended`.
    pub(crate) fn deliveries(&self, inner: &Inner, ended: &[String]) -> Vec<Delivery> {
        ended
            .iter()
            .filter_map(|id| {
                let job = inner.jobs.get(id)?;
                let url = job.webhook.clone()?;
                if matches!(job.outcome, Some(Outcome::Cancelled)) {
                    return None;
                }
                let body = job.webhook_body(&self.base.base_url)?;
                Some(Delivery {
                    request_id: job.id.clone(),
                    user_id: inner.accounts.get(&job.account)?.user_id.clone(),
                    url,
                    body: super::deliver::python_json(&body).into_bytes(),
                    bad_signature: job.fate.bad_signature,
                    duplicate: job.fate.duplicate,
                })
            })
            .collect()
    }

    /// A snapshot of the counters.
    pub(crate) fn stats(&self) -> FalStats {
        self.with_now(|inner, _| {
            let mut stats = inner.stats.clone();
            stats.accounts = inner.accounts.clone();
            stats.queued = inner.accounts.values().map(|a| a.queued).sum();
            stats.in_progress = inner.accounts.values().map(|a| a.in_progress).sum();
            stats
        })
    }

    /// Every request, in submission order.
    pub(crate) fn jobs(&self) -> Vec<FalJob> {
        self.with_now(|inner, _| {
            let secs = |ms: i64| self.base.clock.simulated_s(ms);
            inner
                .order
                .iter()
                .filter_map(|id| inner.jobs.get(id))
                .map(|j| {
                    let success = j.planned == Outcome::Success;
                    FalJob {
                        request_id: j.id.clone(),
                        account: j.account.clone(),
                        endpoint: j.endpoint.clone(),
                        priority: match j.priority {
                            Priority::Normal => "normal".into(),
                            Priority::Low => "low".into(),
                        },
                        status: j.status_name().to_owned(),
                        submitted: secs(j.submitted_ms),
                        started: j.started_ms.map(secs),
                        ended: j.ended_ms.map(secs),
                        planned_seconds: j.fate.run_s,
                        status_code: j.outcome.as_ref().map(Outcome::status_code),
                        error_type: j.outcome.as_ref().and_then(Outcome::error_type),
                        cancelled: j.outcome == Some(Outcome::Cancelled),
                        lost_answer: j.lost_answer,
                        prompt: j.input["prompt"].as_str().map(str::to_owned),
                        input_sha256: j.input_sha256.clone(),
                        resolution: j.spec.resolution().to_owned(),
                        video_seconds: j.spec.seconds,
                        file_url: success.then(|| j.file_url(&self.base.base_url)),
                        file_sha256: j.file_sha256.clone(),
                        file_size: success.then(|| file_len(&j.id) as u64),
                        price_usd: j.price_usd,
                        billed_usd: if j.outcome == Some(Outcome::Success) {
                            j.price_usd
                        } else {
                            0.0
                        },
                        webhook_url: j.webhook.clone(),
                        webhook_attempts: j.webhook_attempts,
                        webhook_deliveries: j.webhook_deliveries,
                        unknown_keys: j.unknown_keys.clone(),
                    }
                })
                .collect()
        })
    }
}
