//! The simulated organization: its tasks, per-model slots and queues, daily windows, counters
//! and the seeded RNGs, behind one mutex (never held across an await). Requests land here
//! through [`Sim`]'s methods; how tasks move between statuses is in `lifecycle`.

use std::collections::{HashMap, VecDeque};
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::error::ApiError;
use super::lifecycle::Start;
use super::links::Signer;
use super::model::Model;
use super::options::RunwayOptions;
use super::stats::{ModelStats, RunwayJob, RunwayRead, RunwayStats};
use super::task::{Task, draw_fate};
use super::validate::CreateRequest;
use crate::clock::unix_ms_now;
use crate::handle::{Base, Simulator};

/// `tier.maxMonthlyCreditSpend` of `GET /v1/organization`: tier 3's $2,000 in credits.
pub const MAX_MONTHLY_CREDIT_SPEND: u64 = 200_000;

/// A cheap handle on the shared simulator (the axum state).
#[derive(Clone)]
pub struct Sim(Arc<Shared>);

impl Simulator for Sim {
    const NAME: &'static str = "Runway simulator";
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

/// Unix milliseconds now, as link expiries count them.
pub(crate) fn unix_ms_u64() -> u64 {
    u64::try_from(unix_ms_now()).unwrap_or(0)
}

impl Deref for Sim {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

pub struct Shared {
    pub opts: RunwayOptions,
    /// Base of output links, shutdown, task timers in flight, the clock.
    pub base: Base,
    pub(crate) links: Signer,
    pub(super) inner: Mutex<Inner>,
}

pub(super) struct Inner {
    /// Task ids, timings and outcomes.
    pub plan_rng: StdRng,
    /// Faults, a stream of its own: request n's faults depend on the seed and n only, not on
    /// how many tasks were drawn in between.
    pub fault_rng: StdRng,
    /// Faults of task reads only (`read_429_rate`, `read_5xx_rate`), a stream of its own:
    /// read n's faults depend on the seed and n only, and the other draws stay those of the
    /// seed whatever these rates.
    pub read_fault_rng: StdRng,
    /// Rate-limit 429s of creates only (`create_429_rate`), a stream of its own: create n's
    /// draw depends on the seed and n only, and the other draws stay those of the seed.
    pub create_fault_rng: StdRng,
    /// Every `GET /v1/tasks/{id}` past the key and version checks, in arrival order, with
    /// the status it was answered (faults included): the request log of reads.
    pub reads: Vec<(String, Instant, u16)>,
    pub tasks: HashMap<String, Task>,
    /// Task ids in creation order (`/_sim/jobs`).
    pub order: Vec<String>,
    /// Per model, indexed by [`Model::index`].
    pub models: Vec<ModelSlot>,
    pub first_create: Option<Instant>,
    /// Requests that reached the fault layer so far (for `slow_first`).
    pub fault_draws: u64,
    /// Global counters; `models` is filled in by [`Sim::stats`].
    pub stats: RunwayStats,
    /// `lost_answer_rate` now: the option's value until a test changes it
    /// ([`RunwaySimHandle::set_lost_answer_rate`](super::RunwaySimHandle::set_lost_answer_rate)).
    pub lost_answer_rate: f64,
}

/// One model's concurrency and daily-limit state.
pub(super) struct ModelSlot {
    /// Live counters (`daily_used` is computed at snapshot).
    pub stats: ModelStats,
    /// `THROTTLED` task ids in submission order.
    pub queue: VecDeque<String>,
    /// Instants of accepted creates inside the daily window, oldest first.
    pub accepted: VecDeque<Instant>,
}

impl ModelSlot {
    /// Forgets creates older than the window.
    fn prune(&mut self, now: Instant, window: Duration) {
        while self
            .accepted
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= window)
        {
            self.accepted.pop_front();
        }
    }
}

/// The faults drawn for one request.
pub(crate) struct FaultDraw {
    /// 502, 503 or 504 before the effect.
    pub fail: Option<StatusCode>,
    pub lost: bool,
    pub slow: bool,
}

impl Sim {
    pub(crate) fn new(opts: RunwayOptions, base_url: String) -> Sim {
        let models = Model::ALL
            .iter()
            .map(|m| ModelSlot {
                stats: ModelStats {
                    concurrency: opts.concurrency_for(*m),
                    daily_limit: opts.daily_limit_for(*m),
                    ..ModelStats::default()
                },
                queue: VecDeque::new(),
                accepted: VecDeque::new(),
            })
            .collect();
        let inner = Inner {
            plan_rng: StdRng::seed_from_u64(opts.seed),
            fault_rng: StdRng::seed_from_u64(opts.seed ^ 0x5eed_fa17_5eed_fa17),
            read_fault_rng: StdRng::seed_from_u64(opts.seed ^ 0x4ead_fa17_4ead_fa17),
            create_fault_rng: StdRng::seed_from_u64(opts.seed ^ 0xc4ea_7e42_9c4e_a7e4),
            reads: Vec::new(),
            tasks: HashMap::new(),
            order: Vec::new(),
            models,
            first_create: None,
            fault_draws: 0,
            stats: RunwayStats {
                time_scale: opts.time_scale,
                day_secs: opts.daily_window().as_secs_f64(),
                ..RunwayStats::default()
            },
            lost_answer_rate: opts.lost_answer_rate,
        };
        Sim(Arc::new(Shared {
            links: Signer::new(opts.seed, &opts.api_key),
            base: Base::new(base_url, opts.time_scale),
            opts,
            inner: Mutex::new(inner),
        }))
    }

    /// Updates counters.
    pub(crate) fn count(&self, f: impl FnOnce(&mut RunwayStats)) {
        f(&mut self.inner.lock().stats);
    }

    /// Draws this request's faults (always four numbers, whatever the rates; `slow_first`
    /// counts requests, it draws nothing).
    pub(crate) fn draw_faults(&self) -> FaultDraw {
        let o = &self.opts;
        let (draws, [fail, which, lost, slow], lost_rate) = {
            let mut inner = self.inner.lock();
            inner.fault_draws += 1;
            let numbers: [f64; 4] = inner.fault_rng.random();
            (inner.fault_draws, numbers, inner.lost_answer_rate)
        };
        let status = match (which * 3.0) as u32 {
            0 => StatusCode::BAD_GATEWAY,
            1 => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::GATEWAY_TIMEOUT,
        };
        let fail = (fail < o.fail_5xx_rate).then_some(status);
        FaultDraw {
            fail,
            lost: lost < lost_rate,
            slow: slow < o.slow_rate || draws <= u64::from(o.slow_first),
        }
    }

    /// Draws a task read's own faults: 429, else 502/503/504, else none (always two
    /// numbers, whatever the rates).
    pub(crate) fn draw_read_fault(&self) -> Option<StatusCode> {
        let o = &self.opts;
        let [fault, which]: [f64; 2] = self.inner.lock().read_fault_rng.random();
        if fault < o.read_429_rate {
            return Some(StatusCode::TOO_MANY_REQUESTS);
        }
        let status = match (which * 3.0) as u32 {
            0 => StatusCode::BAD_GATEWAY,
            1 => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::GATEWAY_TIMEOUT,
        };
        (fault < o.read_429_rate + o.read_5xx_rate).then_some(status)
    }

    /// Draws a create's rate-limit 429 (always one number, whatever the rate).
    pub(crate) fn draw_create_fault(&self) -> Option<StatusCode> {
        let draw: f64 = self.inner.lock().create_fault_rng.random();
        (draw < self.opts.create_429_rate).then_some(StatusCode::TOO_MANY_REQUESTS)
    }

    /// Logs a task read that arrived at `at` and was answered `status`.
    pub(crate) fn log_read(&self, task_id: String, at: Instant, status: u16) {
        self.inner.lock().reads.push((task_id, at, status));
    }

    /// Every task read so far (the request log), in arrival order, times in simulated seconds
    /// since the first create, as in [`Sim::jobs`] (a read before any create is at 0).
    pub(crate) fn reads(&self) -> Vec<RunwayRead> {
        let inner = self.inner.lock();
        let clock = &self.base.clock;
        let secs = |t: Instant| {
            inner
                .first_create
                .map_or(0.0, |o| clock.simulated_since(o, t))
        };
        inner
            .reads
            .iter()
            .map(|(task_id, at, status)| RunwayRead {
                task_id: task_id.clone(),
                at: secs(*at),
                status: *status,
            })
            .collect()
    }

    /// Accepts a validated create unless the model's daily limit is reached: the task exists,
    /// `THROTTLED` behind the model's queue, and takes a slot at once if one is free.
    /// `prompt_text` is kept for `/_sim/jobs`.
    pub(crate) fn create(
        &self,
        req: CreateRequest,
        prompt_text: Option<String>,
    ) -> Result<Value, ApiError> {
        let now = Instant::now();
        let (id, starts) = {
            let mut guard = self.inner.lock();
            let inner = &mut *guard;
            let slot = &mut inner.models[req.model.index()];
            slot.prune(now, self.opts.daily_window());
            let limit = slot.stats.daily_limit;
            if slot.accepted.len() >= limit as usize {
                // When the oldest counted create leaves the window, rounded up to a second.
                let frees_in = slot.accepted.front().map(|t| {
                    self.opts
                        .daily_window()
                        .saturating_sub(now.saturating_duration_since(*t))
                });
                inner.stats.daily_limit_refusals += 1;
                *inner.stats.creates_refused.entry("429".into()).or_default() += 1;
                let mut e = ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    format!(
                        "You have reached the daily generation limit for {} ({limit} per 24 hours)",
                        req.model
                    ),
                );
                if self.opts.daily_retry_after {
                    e.retry_after = frees_in.map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0));
                }
                return Err(e);
            }
            slot.accepted.push_back(now);
            let o = &self.opts;
            let fate = draw_fate(
                &mut inner.plan_rng,
                &req,
                &self.base.clock,
                o.long_tail_rate,
                o.failure_after_accept_rate,
            );
            let id = uuid::Builder::from_random_bytes(inner.plan_rng.random())
                .into_uuid()
                .to_string();
            inner.stats.creates += 1;
            if fate.failure.is_some() {
                inner.stats.faults.failed_after_accept += 1;
            }
            inner.first_create.get_or_insert(now);
            inner.order.push(id.clone());
            inner.tasks.insert(
                id.clone(),
                Task::new(id.clone(), req, prompt_text, fate, now),
            );
            let starts = inner.enqueue(req.model, &id, now);
            (id, starts)
        };
        self.start_timers(starts);
        Ok(json!({ "id": id, "estimatedCost": { "credits": req.credits() } }))
    }

    /// The task object, with a freshly minted output link when it succeeded.
    pub(crate) fn get(&self, id: &str) -> Result<Value, ApiError> {
        let now = Instant::now();
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        inner.stats.gets += 1;
        let pace = self.opts.read_pace();
        match inner.tasks.get_mut(id).filter(|t| t.visible(now)) {
            Some(task) => {
                // Runway: "updates are not expected more often than every five seconds per
                // task" (scaled); a read sooner than that after the create or the last read is
                // counted, not refused.
                let since = task.last_read.unwrap_or(task.created);
                task.last_read = Some(now);
                if now.saturating_duration_since(since) < pace {
                    task.reads_too_soon += 1;
                    inner.stats.polls_too_soon += 1;
                }
                let output = (task.status == super::task::Status::Succeeded).then(|| {
                    let exp = unix_ms_u64().saturating_add(self.opts.output_ttl_ms);
                    self.links.link(&self.base.base_url, id, exp)
                });
                Ok(task.to_json(now, output))
            }
            None => {
                inner.stats.not_found += 1;
                Err(ApiError::task_not_found())
            }
        }
    }

    /// Cancels an unfinished task (its slot frees at once, or after `cancel_lag_ms`; nothing
    /// is charged) or deletes a finished one; either way it then answers 404 (a cancelled one
    /// after `cancelled_visible_ms`). During the lag the task keeps its status and slot, and
    /// another `DELETE` changes nothing.
    pub(crate) fn delete(&self, id: &str) -> Result<(), ApiError> {
        let now = Instant::now();
        let visible_for = Duration::from_millis(self.opts.cancelled_visible_ms);
        let lag = Duration::from_millis(self.opts.cancel_lag_ms);
        let mut lagging = false;
        let starts = {
            let mut guard = self.inner.lock();
            let inner = &mut *guard;
            inner.stats.deletes += 1;
            let Some(task) = inner.tasks.get_mut(id).filter(|t| t.visible(now)) else {
                inner.stats.not_found += 1;
                return Err(ApiError::task_not_found());
            };
            if task.status.is_terminal() {
                task.gone_at = Some(now);
                inner.stats.deleted += 1;
                Vec::new()
            } else if lag.is_zero() {
                task.cancel_requested = Some(now);
                inner.cancel(id, now, visible_for)
            } else {
                lagging = task.cancel_requested.is_none();
                task.cancel_requested.get_or_insert(now);
                Vec::new()
            }
        };
        self.start_timers(starts);
        if lagging {
            self.spawn_cancel_lag(id.to_owned(), now + lag, visible_for);
        }
        Ok(())
    }

    /// Whether `task_id`'s output can be served (it exists, succeeded, and was not deleted).
    pub(crate) fn output_available(&self, task_id: &str) -> bool {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        let ok = inner
            .tasks
            .get(task_id)
            .is_some_and(|t| t.visible(now) && t.status == super::task::Status::Succeeded);
        if ok {
            inner.stats.downloads += 1;
        }
        ok
    }

    /// `GET /v1/organization`: limits, today's usage and the credit balance.
    pub(crate) fn organization(&self) -> Value {
        let stats = self.stats();
        let mut tier = Map::new();
        let mut usage = Map::new();
        for (name, m) in &stats.models {
            tier.insert(
                name.clone(),
                json!({
                    "maxConcurrentGenerations": m.concurrency,
                    "maxDailyGenerations": m.daily_limit,
                }),
            );
            usage.insert(name.clone(), json!({ "dailyGenerations": m.daily_used }));
        }
        self.count(|s| s.organization_gets += 1);
        json!({
            "creditBalance": self.opts.credit_balance.saturating_sub(stats.credits_charged),
            "tier": { "maxMonthlyCreditSpend": MAX_MONTHLY_CREDIT_SPEND, "models": tier },
            "usage": { "models": usage },
        })
    }

    /// A snapshot of the counters, with each model's daily window pruned to now.
    pub(crate) fn stats(&self) -> RunwayStats {
        let now = Instant::now();
        let window = self.opts.daily_window();
        let mut inner = self.inner.lock();
        let mut stats = inner.stats.clone();
        for (model, slot) in Model::ALL.iter().zip(inner.models.iter_mut()) {
            slot.prune(now, window);
            let mut m = slot.stats.clone();
            m.daily_used = u32::try_from(slot.accepted.len()).unwrap_or(u32::MAX);
            stats.models.insert(model.as_str().to_owned(), m);
        }
        stats
    }

    /// Every task ever created, in creation order, times in simulated seconds since the first
    /// create.
    pub(crate) fn jobs(&self) -> Vec<RunwayJob> {
        let now = Instant::now();
        let inner = self.inner.lock();
        let Some(origin) = inner.first_create else {
            return Vec::new();
        };
        let clock = &self.base.clock;
        let secs = |t: Instant| clock.simulated_since(origin, t);
        inner
            .order
            .iter()
            .filter_map(|id| inner.tasks.get(id))
            .map(|t| RunwayJob {
                task_id: t.id.clone(),
                model: t.req.model.as_str().to_owned(),
                endpoint: t.req.endpoint.name().to_owned(),
                duration: t.req.duration,
                status: t.status.as_str().to_owned(),
                gone: !t.visible(now),
                created: secs(t.created),
                started: t.started.map(secs),
                running: t.running_at.map(secs),
                ended: t.ended.map(secs),
                cancel_requested: t.cancel_requested.map(secs),
                cancelled_at: t.cancelled_at.map(secs),
                planned_seconds: clock.simulated(t.fate.pending + t.fate.run),
                failure_code: t.fate.failure.map(|f| f.code.to_owned()),
                credits: t.cost(),
                reads_too_soon: t.reads_too_soon,
                prompt_text: t.prompt_text.clone(),
            })
            .collect()
    }

    /// Starts the timers of tasks that just took a slot.
    pub(super) fn start_timers(&self, starts: Vec<Start>) {
        for start in starts {
            self.spawn_timer(start);
        }
    }
}
