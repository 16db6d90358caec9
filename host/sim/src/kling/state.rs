//! The simulated account: its tasks, its concurrency quota, its counters and the seeded RNG,
//! behind one mutex (never held across an await). Each accepted task gets a small timer task
//! that moves it `submitted → processing → succeed | failed` at its drawn instants; the slot is
//! released in the same critical section that ends the task, so a client that sees `succeed`
//! can create again at once without a spurious 1303. The other client of the account
//! ([`OtherClient`]) is brought up to date in the same critical sections, before and after
//! slotd's running count changes.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use tokio::time::Instant;

use super::account::{self, Account};
use super::error::SimError;
use super::options::SimOptions;
use super::other_client::OtherClient;
use super::stats::{SimJob, SimStats};
use super::task::{Fate, Kind, SimTask, Spec, Status, draw_fate};
use super::validate::CreateRequest;
use crate::clock::unix_ms_now;
use crate::handle::{Base, Simulator};

/// A cheap handle on the shared simulator (the axum state).
#[derive(Clone)]
pub struct Sim(Arc<Shared>);

impl Simulator for Sim {
    const NAME: &'static str = "Kling simulator";
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
    pub opts: SimOptions,
    /// Base of result URLs, shutdown, timers and callbacks in flight, the clock.
    pub base: Base,
    /// Client for callbacks (short timeout, no proxy: callbacks go where they are told).
    pub http: reqwest::Client,
    inner: Mutex<Inner>,
}

struct Inner {
    rng: StdRng,
    /// `/v1/…` requests seen so far (for `slow_first`).
    requests: u64,
    /// Next numeric id (task ids, voice ids, element ids).
    next_id: u64,
    tasks: HashMap<String, SimTask>,
    /// Task id → its create or its last query, whichever came last (for the single pace).
    last_read: HashMap<String, Instant>,
    /// Task ids per kind in creation order (lists answer newest first).
    order: HashMap<Kind, Vec<String>>,
    /// `external_task_id` → task id, account-wide.
    by_external: HashMap<String, String>,
    /// `voice_id`s of voices that succeeded (elements must name one).
    voices: HashMap<String, String>,
    running: u32,
    /// Of those, per kind (`text2video`, …).
    running_by_kind: HashMap<Kind, u32>,
    /// Slot time of tasks that ended.
    busy_ended: Duration,
    /// Σ (start − the clock's epoch) over running tasks: their busy time is `running × (now − epoch) − Σ`,
    /// so a stats snapshot costs O(1) however many tasks exist.
    running_start_sum: Duration,
    first_create: Option<Instant>,
    last_end: Option<Instant>,
    stats: SimStats,
    /// Revoked credentials, the balance and other clients' hold (`POST /_sim/account`).
    account: Account,
    /// The other client's hold and bursts (the plan is `account.other_client`).
    other: OtherClient,
}

/// The faults drawn for one request.
pub(crate) struct FaultDraw {
    pub fail: Option<SimError>,
    pub malformed: bool,
    pub slow: bool,
}

impl Sim {
    pub(crate) fn new(opts: SimOptions, base_url: String) -> anyhow::Result<Sim> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(2))
            .build()?;
        // Ids look like Kling's (18 digits) and differ between seeds.
        let next_id = 800_000_000_000_000_000 + (opts.seed % 100_000_000_000) * 1_000_000;
        let inner = Inner {
            rng: StdRng::seed_from_u64(opts.seed),
            requests: 0,
            next_id,
            tasks: HashMap::new(),
            last_read: HashMap::new(),
            order: HashMap::new(),
            by_external: HashMap::new(),
            voices: HashMap::new(),
            running: 0,
            running_by_kind: HashMap::new(),
            busy_ended: Duration::ZERO,
            running_start_sum: Duration::ZERO,
            first_create: None,
            last_end: None,
            stats: SimStats {
                concurrency: opts.concurrency,
                time_scale: opts.time_scale,
                ..SimStats::default()
            },
            account: Account {
                revoked: false,
                balance: opts.balance,
                over_capacity_rate: opts.over_capacity_rate,
                other_client: opts.other_client(),
            },
            other: OtherClient::default(),
        };
        Ok(Sim(Arc::new(Shared {
            base: Base::new(base_url, opts.time_scale),
            opts,
            http,
            inner: Mutex::new(inner),
        })))
    }

    /// Updates counters.
    pub(crate) fn count(&self, f: impl FnOnce(&mut SimStats)) {
        f(&mut self.inner.lock().stats);
    }

    /// Draws this request's faults.
    pub(crate) fn draw_faults(&self) -> FaultDraw {
        let o = &self.opts;
        let mut inner = self.inner.lock();
        let rng = &mut inner.rng;
        let fail = (o.fail_5xx_rate > 0.0 && rng.random::<f64>() < o.fail_5xx_rate).then(|| {
            use axum::http::StatusCode;
            match rng.random_range(0..3) {
                0 => SimError::new(StatusCode::INTERNAL_SERVER_ERROR, 5000, "internal error"),
                1 => SimError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    5001,
                    "service under maintenance",
                ),
                _ => SimError::new(StatusCode::GATEWAY_TIMEOUT, 5002, "internal timeout"),
            }
        });
        let malformed = o.malformed_rate > 0.0 && rng.random::<f64>() < o.malformed_rate;
        let drawn_slow = o.slow_rate > 0.0 && rng.random::<f64>() < o.slow_rate;
        inner.requests += 1;
        let slow = drawn_slow || inner.requests <= u64::from(o.slow_first);
        if fail.is_some() {
            inner.stats.faults.http_5xx += 1;
        }
        FaultDraw {
            fail,
            malformed,
            slow,
        }
    }

    /// Accepts a validated create: duplicate check, quota check, then the task exists and its
    /// timer runs. Returns the create answer's `data`.
    pub(crate) fn create(&self, kind: Kind, req: CreateRequest) -> Result<Value, SimError> {
        let (task, fate) = {
            let mut guard = self.inner.lock();
            let inner = &mut *guard;
            let now = Instant::now();
            let price = self.admit(inner, &req, now)?;
            if let Some(balance) = &mut inner.account.balance {
                *balance -= price;
            }
            let fate = draw_fate(
                &mut inner.rng,
                &req.spec,
                &self.base.clock,
                self.opts.long_tail_rate,
                self.opts.failure_after_accept_rate,
            );
            let id = inner.next_id.to_string();
            let result_id = inner.next_id + 1;
            inner.next_id += 2;
            let now_ms = unix_ms_now();
            let task = SimTask {
                id: id.clone(),
                kind,
                spec: req.spec,
                external_task_id: req.external_task_id,
                callback_url: req.callback_url,
                status: Status::Submitted,
                status_msg: String::new(),
                created_at_ms: now_ms,
                updated_at_ms: now_ms,
                started: now,
                ended: None,
                planned_seconds: self.base.clock.simulated(fate.queued + fate.run),
                result_id,
            };
            inner.last_read.insert(id.clone(), task.started);
            let stats = &mut inner.stats;
            stats.creates += 1;
            *stats
                .creates_by_kind
                .entry(kind.name().to_owned())
                .or_default() += 1;
            if let Some(ext) = &task.external_task_id {
                *stats.creates_by_external_id.entry(ext.clone()).or_default() += 1;
                inner.by_external.insert(ext.clone(), id.clone());
            }
            if let Spec::Element { voice_id, .. } = &task.spec {
                stats.element_voice_ids.insert(id.clone(), voice_id.clone());
            }
            if fate.failure.is_some() {
                stats.faults.failed_after_accept += 1;
            }
            inner.running += 1;
            stats.max_running = stats.max_running.max(inner.running);
            let of_kind = inner.running_by_kind.entry(kind).or_default();
            *of_kind += 1;
            let peak = stats
                .max_running_by_kind
                .entry(kind.name().to_owned())
                .or_default();
            *peak = (*peak).max(*of_kind);
            inner.running_start_sum += task
                .started
                .saturating_duration_since(self.base.clock.epoch());
            inner.first_create.get_or_insert(task.started);
            inner.other.anchor_at(now);
            self.sync_other_client(inner, now);
            inner.order.entry(kind).or_default().push(id.clone());
            inner.tasks.insert(id, task.clone());
            (task, fate)
        };
        self.spawn_timer(task.id.clone(), task.started, fate);
        Ok(task.create_json())
    }

    /// The refusals a create may meet before it takes effect, in this order: an unknown voice,
    /// a taken `external_task_id`, a balance short of its price, a full account (slotd's jobs,
    /// the other client's hold, or `over_capacity_rate`'s draw). Returns the price to deduct.
    fn admit(&self, inner: &mut Inner, req: &CreateRequest, now: Instant) -> Result<f64, SimError> {
        if let Spec::Element { voice_id, .. } = &req.spec
            && !inner.voices.contains_key(voice_id)
        {
            inner.stats.validation_refusals += 1;
            return Err(SimError::param(
                "element_voice_id",
                format!("no cloned voice with id {voice_id:?}"),
            ));
        }
        if let Some(ext) = &req.external_task_id
            && inner.by_external.contains_key(ext)
        {
            *inner
                .stats
                .creates_by_external_id
                .entry(ext.clone())
                .or_default() += 1;
            inner.stats.duplicate_refusals += 1;
            return Err(SimError::param(
                "external_task_id",
                format!("{ext:?} is already used by another task of this account"),
            ));
        }
        let price = account::price_units(&req.spec);
        if let Some(balance) = inner.account.balance
            && balance < price
        {
            inner.stats.balance_refusals += 1;
            return Err(account::exhausted(balance, price));
        }
        let rate = inner.account.over_capacity_rate;
        let others_hold_it = rate > 0.0 && inner.rng.random::<f64>() < rate;
        self.sync_other_client(inner, now);
        let concurrency = self.opts.concurrency;
        let full = inner.running >= concurrency;
        let other_holds_it = inner.running.saturating_add(inner.other.held()) >= concurrency;
        if full || other_holds_it || others_hold_it {
            inner.stats.rate_limited_1303 += 1;
            if other_holds_it && !full {
                inner.stats.rate_limited_1303_other_client += 1;
            }
            return Err(SimError::over_concurrency());
        }
        Ok(price)
    }

    /// Brings the other client's hold up to `now` with the room slotd's jobs leave.
    fn sync_other_client(&self, inner: &mut Inner, now: Instant) {
        let room = self.opts.concurrency.saturating_sub(inner.running);
        let plan = inner.account.other_client.as_ref();
        inner.other.sync(plan, &self.base.clock, now, room);
    }

    /// The account's state in force.
    pub(crate) fn account(&self) -> Account {
        self.inner.lock().account
    }

    /// Change what is given (`balance: Some(None)` = unlimited); returns the state in force.
    pub(crate) fn update_account(&self, change: account::AccountChange) -> Account {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        if let Some(revoked) = change.revoked {
            inner.account.revoked = revoked;
        }
        if let Some(balance) = change.balance {
            inner.account.balance = balance;
        }
        if let Some(rate) = change.over_capacity_rate {
            inner.account.over_capacity_rate = rate;
        }
        if let Some(plan) = change.other_client {
            let now = Instant::now();
            self.sync_other_client(inner, now);
            inner.other.restart(now, inner.first_create.is_some());
            inner.account.other_client = plan;
            self.sync_other_client(inner, now);
        }
        inner.account
    }

    /// Whether the account's credentials are revoked now; counts the refusal when they are.
    pub(crate) fn refuse_revoked(&self) -> bool {
        let mut inner = self.inner.lock();
        if inner.account.revoked {
            inner.stats.auth_refusals += 1;
            inner.stats.revoked_refusals += 1;
        }
        inner.account.revoked
    }

    /// One task by task id or external id, within `kind`.
    pub(crate) fn query(&self, kind: Kind, id: &str) -> Result<Value, SimError> {
        let mut inner = self.inner.lock();
        inner.stats.single_queries += 1;
        let found = inner
            .tasks
            .get(id)
            .filter(|t| t.kind == kind)
            .or_else(|| {
                inner
                    .by_external
                    .get(id)
                    .and_then(|tid| inner.tasks.get(tid))
                    .filter(|t| t.kind == kind)
            })
            .map(|t| (t.id.clone(), t.to_json(&self.base.base_url)));
        match found {
            Some((task_id, v)) => {
                let now = Instant::now();
                let pace = self.base.clock.scaled(super::stats::SINGLE_READ_PACE_S);
                if let Some(last) = inner.last_read.insert(task_id, now)
                    && now.saturating_duration_since(last) < pace
                {
                    inner.stats.single_reads_too_soon += 1;
                }
                Ok(v)
            }
            None => {
                inner.stats.not_found += 1;
                Err(SimError::not_found(format!(
                    "no {} task {id:?}",
                    kind.name()
                )))
            }
        }
    }

    /// A page of `kind`'s tasks, newest first (`page_num` counts from 1).
    pub(crate) fn list(&self, kind: Kind, page_num: u32, page_size: u32) -> Value {
        let mut inner = self.inner.lock();
        inner.stats.list_queries += 1;
        let skip = (page_num as usize - 1).saturating_mul(page_size as usize);
        let page: Vec<Value> = inner
            .order
            .get(&kind)
            .map(|ids| {
                ids.iter()
                    .rev()
                    .skip(skip)
                    .take(page_size as usize)
                    .filter_map(|id| inner.tasks.get(id))
                    .map(|t| t.to_json(&self.base.base_url))
                    .collect()
            })
            .unwrap_or_default();
        Value::Array(page)
    }

    /// Whether a download of this task's result is allowed (it succeeded); counts it.
    pub(crate) fn download_allowed(&self, task_id: &str) -> bool {
        let mut inner = self.inner.lock();
        let ok = inner
            .tasks
            .get(task_id)
            .is_some_and(|t| t.status == Status::Succeed);
        if ok {
            inner.stats.downloads += 1;
        } else {
            inner.stats.not_found += 1;
        }
        ok
    }

    /// When the first task was created (the origin of [`Sim::jobs`]' times), if any was.
    pub(crate) fn first_create(&self) -> Option<Instant> {
        self.inner.lock().first_create
    }

    /// Every task ever created, oldest first, with times in simulated seconds since the first
    /// create: what a benchmark needs to compare a run with an ideal scheduler.
    pub(crate) fn jobs(&self) -> Vec<SimJob> {
        let inner = self.inner.lock();
        let Some(origin) = inner.first_create else {
            return Vec::new();
        };
        let secs = |t: Instant| self.base.clock.simulated_since(origin, t);
        let mut jobs: Vec<SimJob> = inner
            .tasks
            .values()
            .map(|t| SimJob {
                task_id: t.id.clone(),
                kind: t.kind.name().to_owned(),
                external_task_id: t.external_task_id.clone(),
                status: t.status.as_str().to_owned(),
                started: secs(t.started),
                ended: t.ended.map(secs),
                planned_seconds: t.planned_seconds,
                callback_url: t.callback_url.clone(),
            })
            .collect();
        jobs.sort_by(|a, b| {
            a.started
                .total_cmp(&b.started)
                .then_with(|| a.task_id.cmp(&b.task_id))
        });
        jobs
    }

    /// A snapshot of the counters with the time-derived fields computed now.
    pub(crate) fn stats(&self) -> SimStats {
        let mut guard = self.inner.lock();
        let now = Instant::now();
        self.sync_other_client(&mut guard, now);
        let inner = &*guard;
        let clock = &self.base.clock;
        let running_busy = (now.saturating_duration_since(clock.epoch()) * inner.running)
            .saturating_sub(inner.running_start_sum);
        let mut stats = inner.stats.clone();
        stats.running = inner.running;
        stats.other_client_held = inner.other.held();
        if let Some(origin) = inner.first_create {
            stats.other_client_bursts = inner.other.bursts(clock, origin);
        }
        stats.busy_slot_seconds = clock.simulated(inner.busy_ended + running_busy);
        let window_end = if inner.running > 0 {
            Some(now)
        } else {
            inner.last_end
        };
        if let (Some(start), Some(end)) = (inner.first_create, window_end) {
            stats.busy_window_seconds = clock.simulated_since(start, end);
        }
        if stats.busy_window_seconds > 0.0 {
            stats.utilization = stats.busy_slot_seconds
                / (f64::from(self.opts.concurrency) * stats.busy_window_seconds);
        }
        stats
    }

    /// Moves a task to `to`; at the end releases its slot. Returns the callback to send.
    fn advance(&self, task_id: &str, to: Status, msg: &str) -> Option<(String, Value)> {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let now = Instant::now();
        if to.is_terminal() {
            self.sync_other_client(inner, now);
        }
        let task = inner.tasks.get_mut(task_id)?;
        task.status = to;
        task.status_msg = msg.to_owned();
        task.updated_at_ms = unix_ms_now();
        if to.is_terminal() {
            task.ended = Some(now);
            inner.running = inner.running.saturating_sub(1);
            if let Some(n) = inner.running_by_kind.get_mut(&task.kind) {
                *n = n.saturating_sub(1);
            }
            inner.busy_ended += now.saturating_duration_since(task.started);
            inner.running_start_sum = inner.running_start_sum.saturating_sub(
                task.started
                    .saturating_duration_since(self.base.clock.epoch()),
            );
            inner.last_end = Some(now);
            if to == Status::Succeed {
                inner.stats.succeeded += 1;
                if let Spec::Voice { voice_name } = &task.spec {
                    inner
                        .voices
                        .insert(task.result_id.to_string(), voice_name.clone());
                }
            } else {
                inner.stats.failed += 1;
            }
        }
        let json = task.to_json(&self.base.base_url);
        let callback = task.callback_url.clone().map(|url| (url, json));
        if to.is_terminal() {
            // The freed slot goes to the other client first, if it is in a burst.
            self.sync_other_client(inner, now);
        }
        callback
    }

    fn spawn_timer(&self, task_id: String, started: Instant, fate: Fate) {
        let sim = self.clone();
        self.base.tracker.spawn(async move {
            let lifecycle = async {
                tokio::time::sleep_until(started + fate.queued).await;
                if let Some((url, body)) = sim.advance(&task_id, Status::Processing, "") {
                    sim.send_callback(url, body);
                }
                tokio::time::sleep_until(started + fate.queued + fate.run).await;
                let (to, msg) = match fate.failure {
                    Some(msg) => (Status::Failed, msg),
                    None => (Status::Succeed, ""),
                };
                if let Some((url, body)) = sim.advance(&task_id, to, msg) {
                    sim.send_callback(url, body);
                }
            };
            tokio::select! {
                _ = sim.base.cancel.cancelled() => {}
                _ = lifecycle => {}
            }
        });
    }
}
