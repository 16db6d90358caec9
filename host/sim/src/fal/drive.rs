//! Time moving on: the queue model only changes when brought to an instant, so [`Inner::drive`]
//! takes it there event by event (each start, end and `X-Fal-Request-Timeout` in its order),
//! mirroring every change into the requests and the counters as it happens, so a maximum seen
//! between two client requests is still counted. A driver task sleeps until the next event, so
//! webhooks leave when their request ends even if nobody asks.

use std::future::pending;

use tokio::time::sleep_until;

use super::job::Outcome;
use super::queue::{Cancelled, State};
use super::state::{Inner, Sim};

impl Inner {
    /// Brings everything to `now`; returns the ids of the requests that ended on the way.
    pub(crate) fn drive(&mut self, now: i64) -> Vec<String> {
        let mut ended = Vec::new();
        loop {
            let next = self.queue.next_event();
            match (next, self.next_deadline()) {
                // A timeout strictly before the next start or end: it wins.
                (q, Some((d, id))) if d <= now && q.is_none_or(|q| d < q) => {
                    let timed_out = self.queue.cancel(&id, d) == Cancelled::Requested;
                    if let Some(job) = self.jobs.get_mut(&id) {
                        job.deadline_ms = None;
                        if timed_out {
                            job.outcome = Some(Outcome::TimedOut);
                        }
                    }
                    self.sync(&mut ended);
                }
                (Some(q), _) if q <= now => {
                    self.queue.advance(q);
                    self.sync(&mut ended);
                }
                _ => break,
            }
        }
        self.queue.advance(now);
        self.sync(&mut ended);
        ended
    }

    /// When the driver must look again: the next start, end or timeout.
    pub(crate) fn next_wake(&self) -> Option<i64> {
        let deadline = self.next_deadline().map(|(d, _)| d);
        match (self.queue.next_event(), deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The earliest `X-Fal-Request-Timeout` of a request still queued.
    fn next_deadline(&self) -> Option<(i64, String)> {
        self.unfinished
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .filter(|j| j.started_ms.is_none())
            .filter_map(|j| j.deadline_ms.map(|d| (d, j.id.clone())))
            .min()
    }

    /// Mirrors the queue model's states into the requests and counters; a request that ended
    /// gets its outcome, leaves the model and is added to `ended`.
    fn sync(&mut self, ended: &mut Vec<String>) {
        let ids: Vec<String> = self.unfinished.iter().cloned().collect();
        for id in ids {
            let Some(state) = self.queue.get(&id).map(|r| r.state.clone()) else {
                continue;
            };
            let Some(job) = self.jobs.get_mut(&id) else {
                continue;
            };
            let Some(acct) = self.accounts.get_mut(&job.account) else {
                continue;
            };
            let stats = &mut self.stats;
            match state {
                State::InQueue => {}
                State::InProgress { started_at } => {
                    if job.started_ms.is_none() {
                        job.started_ms = Some(started_at);
                        acct.queued = acct.queued.saturating_sub(1);
                        acct.in_progress += 1;
                    }
                }
                State::Completed {
                    started_at,
                    ended_at,
                    cancelled,
                } => {
                    if job.started_ms.is_some() {
                        acct.in_progress = acct.in_progress.saturating_sub(1);
                    } else {
                        acct.queued = acct.queued.saturating_sub(1);
                        job.started_ms = started_at;
                    }
                    job.ended_ms = Some(ended_at);
                    let outcome = if cancelled {
                        job.outcome.clone().unwrap_or(Outcome::Cancelled)
                    } else {
                        job.planned.clone()
                    };
                    acct.unfinished = acct.unfinished.saturating_sub(1);
                    acct.completed += 1;
                    stats.completed += 1;
                    match &outcome {
                        Outcome::Success => {
                            acct.succeeded += 1;
                            acct.billed_usd += job.price_usd;
                            stats.succeeded += 1;
                            stats.billed_usd += job.price_usd;
                        }
                        other => {
                            if *other == Outcome::Cancelled {
                                acct.cancelled += 1;
                                stats.cancelled += 1;
                            }
                            let kind = other.error_type().unwrap_or_default();
                            *stats.failed_by_type.entry(kind).or_default() += 1;
                        }
                    }
                    job.outcome = Some(outcome);
                    ended.push(id.clone());
                    self.unfinished.remove(&id);
                    self.queue.forget(&id);
                }
            }
        }
        let mut running = 0;
        for a in self.accounts.values_mut() {
            a.max_in_progress = a.max_in_progress.max(a.in_progress);
            running += a.in_progress;
        }
        self.stats.max_in_progress = self.stats.max_in_progress.max(running);
    }
}

impl Sim {
    /// The driver: brings the state to each next event as it comes (sending its webhooks), and
    /// looks again whenever a request changed what comes next.
    pub(crate) fn spawn_driver(&self) {
        let sim = self.clone();
        self.base.tracker.spawn(async move {
            loop {
                let next = sim.at_now(|inner, _| inner.next_wake());
                let sleep = async {
                    match next {
                        Some(ms) => sleep_until(sim.base.clock.instant(ms)).await,
                        None => pending().await,
                    }
                };
                tokio::select! {
                    _ = sim.base.cancel.cancelled() => return,
                    _ = sim.wake.notified() => {}
                    _ = sleep => {}
                }
            }
        });
    }
}
