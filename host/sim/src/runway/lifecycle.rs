//! How tasks move: a new task joins its model's `THROTTLED` queue; whenever the model has a
//! free slot the head of the queue takes it (`PENDING`, and its timer starts); the timer moves
//! it to `RUNNING` and then to its end. Ending and cancelling free the slot and fill it again
//! **in the same critical section**, so the queue drains in submission order and a slot is
//! never held by two tasks, nor left idle while a task waits.

use std::time::Duration;

use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::model::Model;
use super::state::{Inner, Sim};
use super::task::{Fate, Status};

/// A task that just took a slot: its timer must start.
pub(super) struct Start {
    id: String,
    at: Instant,
    fate: Fate,
    stop: CancellationToken,
}

impl Inner {
    /// Puts a new task at the back of its model's queue, then fills free slots.
    pub(super) fn enqueue(&mut self, model: Model, id: &str, now: Instant) -> Vec<Start> {
        let slot = &mut self.models[model.index()];
        slot.queue.push_back(id.to_owned());
        let s = &mut slot.stats;
        s.creates += 1;
        s.throttled += 1;
        s.max_held_seen = s.max_held_seen.max(s.throttled + s.pending + s.running);
        self.fill(model, now)
    }

    /// Moves queue heads to `PENDING` while the model has free slots.
    pub(super) fn fill(&mut self, model: Model, now: Instant) -> Vec<Start> {
        let mut starts = Vec::new();
        let slot = &mut self.models[model.index()];
        while slot.stats.pending + slot.stats.running < slot.stats.concurrency {
            let Some(id) = slot.queue.pop_front() else {
                break;
            };
            let Some(task) = self.tasks.get_mut(&id) else {
                continue;
            };
            task.status = Status::Pending;
            task.started = Some(now);
            let s = &mut slot.stats;
            s.throttled = s.throttled.saturating_sub(1);
            s.pending += 1;
            s.max_running_seen = s.max_running_seen.max(s.pending + s.running);
            starts.push(Start {
                id,
                at: now,
                fate: task.fate,
                stop: task.stop.clone(),
            });
        }
        starts
    }

    /// `PENDING → RUNNING`, if the task is still pending.
    fn begin_running(&mut self, id: &str, now: Instant) {
        let Some(task) = self.tasks.get_mut(id) else {
            return;
        };
        if task.status != Status::Pending {
            return;
        }
        task.status = Status::Running;
        task.running_at = Some(now);
        let s = &mut self.models[task.req.model.index()].stats;
        s.pending = s.pending.saturating_sub(1);
        s.running += 1;
    }

    /// `RUNNING → SUCCEEDED | FAILED` (charging a success), then refills the freed slot.
    fn finish(&mut self, id: &str, now: Instant) -> Vec<Start> {
        let Some(task) = self.tasks.get_mut(id) else {
            return Vec::new();
        };
        if task.status != Status::Running {
            return Vec::new();
        }
        let model = task.req.model;
        let failed = task.fate.failure.is_some();
        task.status = if failed {
            Status::Failed
        } else {
            Status::Succeeded
        };
        task.ended = Some(now);
        let credits = task.cost();
        let s = &mut self.models[model.index()].stats;
        s.running = s.running.saturating_sub(1);
        if failed {
            s.failed += 1;
            self.stats.failed += 1;
        } else {
            s.succeeded += 1;
            self.stats.succeeded += 1;
            self.stats.credits_charged += credits;
        }
        self.fill(model, now)
    }

    /// Cancels an unfinished task: out of the queue or out of its slot (refilled at once);
    /// it answers `CANCELLED` for `visible_for`, then 404. A task that ended meanwhile (during
    /// a cancel lag) is left as it ended.
    pub(super) fn cancel(&mut self, id: &str, now: Instant, visible_for: Duration) -> Vec<Start> {
        let Some(task) = self.tasks.get_mut(id).filter(|t| !t.status.is_terminal()) else {
            return Vec::new();
        };
        let was = task.status;
        let model = task.req.model;
        task.status = Status::Cancelled;
        task.cancelled_at = Some(now);
        task.gone_at = Some(now + visible_for);
        task.stop.cancel();
        self.stats.cancelled += 1;
        let slot = &mut self.models[model.index()];
        slot.stats.cancelled += 1;
        match was {
            Status::Throttled => {
                slot.queue.retain(|q| q != id);
                slot.stats.throttled = slot.stats.throttled.saturating_sub(1);
                Vec::new()
            }
            Status::Pending | Status::Running => {
                let s = &mut slot.stats;
                if was == Status::Pending {
                    s.pending = s.pending.saturating_sub(1);
                } else {
                    s.running = s.running.saturating_sub(1);
                }
                self.fill(model, now)
            }
            Status::Succeeded | Status::Failed | Status::Cancelled => Vec::new(),
        }
    }
}

impl Sim {
    /// A `DELETE`d task's cancel, `cancel_lag_ms` after the request (its own timer runs on
    /// meanwhile, so it may still end by itself first).
    pub(super) fn spawn_cancel_lag(&self, id: String, at: Instant, visible_for: Duration) {
        let sim = self.clone();
        self.base.tracker.spawn(async move {
            tokio::select! {
                _ = sim.base.cancel.cancelled() => {}
                _ = sleep_until(at) => {
                    let next = sim.inner.lock().cancel(&id, Instant::now(), visible_for);
                    sim.start_timers(next);
                }
            }
        });
    }

    /// The task's own clock: `PENDING` for `fate.pending`, `RUNNING` for `fate.run`, then its
    /// end. Stops early when the task is cancelled or the simulator shuts down.
    pub(super) fn spawn_timer(&self, start: Start) {
        let sim = self.clone();
        self.base.tracker.spawn(async move {
            let Start { id, at, fate, stop } = start;
            let life = async {
                sleep_until(at + fate.pending).await;
                sim.inner.lock().begin_running(&id, Instant::now());
                sleep_until(at + fate.pending + fate.run).await;
                let next = sim.inner.lock().finish(&id, Instant::now());
                sim.start_timers(next);
            };
            tokio::select! {
                _ = sim.base.cancel.cancelled() => {}
                _ = stop.cancelled() => {}
                _ = life => {}
            }
        });
    }
}
