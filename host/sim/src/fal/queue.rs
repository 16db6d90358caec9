//! The fal queue as the simulator models it (FAL_API.md "Concurrency, queueing", "Choices for
//! the simulator"): over an account's concurrency nothing is refused, requests wait
//! `IN_QUEUE`; a queued request starts exactly when it is dispatchable (a short delay after
//! submit) and its account (and, when limited, its endpoint) has a free runner, `normal`
//! before `low`, then in submission order; `queue_position` counts the account's requests
//! ahead of it. Pure and driven by the caller's clock (`now`, ms), so tests replay it exactly.

use std::collections::BTreeMap;

/// `X-Fal-Queue-Priority`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Priority {
    Normal,
    Low,
}

/// Where a request is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    InQueue,
    InProgress {
        started_at: i64,
    },
    /// Ended: run to its end (`cancelled` false) or cancelled while queued.
    Completed {
        started_at: Option<i64>,
        ended_at: i64,
        cancelled: bool,
    },
}

/// One request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub id: String,
    pub account: String,
    pub endpoint: String,
    pub priority: Priority,
    pub submitted_at: i64,
    /// When a runner may take it (submit plus the dispatch delay).
    pub dispatchable_at: i64,
    /// How long it runs once started (ms).
    pub run_ms: i64,
    pub state: State,
    seq: u64,
}

/// What a cancel did (FAL_API.md "Cancel").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancelled {
    /// It was queued: removed at once (202 `CANCELLATION_REQUESTED`).
    Requested,
    /// Running or ended (400 `ALREADY_COMPLETED`).
    AlreadyCompleted,
    NotFound,
}

/// The queue of every account.
#[derive(Debug, Default)]
pub struct Queue {
    /// Requests of one account `IN_PROGRESS` at once (FAL_API.md: 2 for new accounts, up to 40).
    pub account_limit: usize,
    /// Per-account limits that differ from `account_limit`.
    pub account_limits: BTreeMap<String, usize>,
    /// Optional per-endpoint limits, across accounts.
    pub endpoint_limits: BTreeMap<String, usize>,
    requests: BTreeMap<String, Request>,
    next_seq: u64,
    /// The instant the queue was last brought to (no request starts before it).
    clock: i64,
}

impl Queue {
    pub fn new(account_limit: usize) -> Queue {
        Queue {
            account_limit: account_limit.max(1),
            ..Queue::default()
        }
    }

    /// Enqueue a request (runs are decided by the caller: durations, faults).
    pub fn submit(&mut self, r: NewRequest, now: i64) {
        self.advance(now);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.requests.insert(
            r.id.clone(),
            Request {
                id: r.id,
                account: r.account,
                endpoint: r.endpoint,
                priority: r.priority,
                submitted_at: now,
                dispatchable_at: now.saturating_add(r.dispatch_delay_ms.max(0)),
                run_ms: r.run_ms.max(0),
                state: State::InQueue,
                seq,
            },
        );
    }

    pub fn get(&self, id: &str) -> Option<&Request> {
        self.requests.get(id)
    }

    /// `account`'s concurrency limit.
    pub fn limit_of(&self, account: &str) -> usize {
        self.account_limits
            .get(account)
            .copied()
            .unwrap_or(self.account_limit)
    }

    /// Drops an ended request from the model (its caller keeps the history); a request still
    /// queued or running stays.
    pub fn forget(&mut self, id: &str) -> Option<Request> {
        match self.requests.get(id)?.state {
            State::Completed { .. } => self.requests.remove(id),
            _ => None,
        }
    }

    /// When the next request starts or ends, if any: what a driver waits for.
    pub fn next_event(&self) -> Option<i64> {
        let next_end = self
            .requests
            .values()
            .filter_map(|r| match r.state {
                State::InProgress { started_at } => Some(started_at.saturating_add(r.run_ms)),
                _ => None,
            })
            .min();
        let next_start = self.next_start().map(|(at, _)| at);
        match (next_end, next_start) {
            (Some(e), Some(s)) => Some(e.min(s)),
            (e, s) => e.or(s),
        }
    }

    /// Requests `IN_PROGRESS` now (after [`Queue::advance`]).
    pub fn running(&self, account: &str) -> usize {
        self.requests
            .values()
            .filter(|r| r.account == account && matches!(r.state, State::InProgress { .. }))
            .count()
    }

    /// The account's queued requests ahead of `id` in dispatch order (0 = next); `None` unless
    /// it is queued.
    pub fn position(&self, id: &str) -> Option<usize> {
        let r = self.requests.get(id)?;
        if r.state != State::InQueue {
            return None;
        }
        let key = (r.priority, r.seq);
        Some(
            self.requests
                .values()
                .filter(|o| o.account == r.account && o.state == State::InQueue)
                .filter(|o| (o.priority, o.seq) < key)
                .count(),
        )
    }

    /// Cancel `id` at `now` (after bringing the queue to `now`).
    pub fn cancel(&mut self, id: &str, now: i64) -> Cancelled {
        self.advance(now);
        let Some(r) = self.requests.get_mut(id) else {
            return Cancelled::NotFound;
        };
        if r.state != State::InQueue {
            return Cancelled::AlreadyCompleted;
        }
        r.state = State::Completed {
            started_at: None,
            ended_at: now,
            cancelled: true,
        };
        Cancelled::Requested
    }

    /// Cancel `id` at `now` whether queued or running (the simulator's flag that accepts the
    /// cancel of a running request): a running one ends at `now` and frees its runner.
    pub fn cancel_running(&mut self, id: &str, now: i64) -> Cancelled {
        self.advance(now);
        let Some(r) = self.requests.get_mut(id) else {
            return Cancelled::NotFound;
        };
        let started_at = match r.state {
            State::InQueue => None,
            State::InProgress { started_at } => Some(started_at),
            State::Completed { .. } => return Cancelled::AlreadyCompleted,
        };
        r.state = State::Completed {
            started_at,
            ended_at: now,
            cancelled: true,
        };
        Cancelled::Requested
    }

    /// Bring every request to `now`: runs end, and queued requests start at the exact instant
    /// a runner frees for them, in dispatch order, event by event.
    pub fn advance(&mut self, now: i64) {
        loop {
            let next_end = self
                .requests
                .values()
                .filter_map(|r| match r.state {
                    State::InProgress { started_at } => Some(started_at.saturating_add(r.run_ms)),
                    _ => None,
                })
                .min();
            let next_start = self.next_start();
            let event = match (next_end, &next_start) {
                (Some(e), Some((s, _))) => e.min(*s),
                (Some(e), None) => e,
                (None, Some((s, _))) => *s,
                (None, None) => {
                    self.clock = self.clock.max(now);
                    return;
                }
            };
            if event > now {
                self.clock = self.clock.max(now);
                return;
            }
            self.clock = self.clock.max(event);
            if next_end == Some(event) {
                // Ends first: a runner freed at `event` can take a request at `event`.
                for r in self.requests.values_mut() {
                    if let State::InProgress { started_at } = r.state
                        && started_at.saturating_add(r.run_ms) == event
                    {
                        r.state = State::Completed {
                            started_at: Some(started_at),
                            ended_at: event,
                            cancelled: false,
                        };
                    }
                }
                continue;
            }
            if let Some((at, id)) = next_start
                && let Some(r) = self.requests.get_mut(&id)
            {
                r.state = State::InProgress { started_at: at };
            }
        }
    }

    /// The queued request to start next and when: the first in dispatch order (priority, then
    /// submission) whose account and endpoint have a free runner, at its dispatchable time.
    fn next_start(&self) -> Option<(i64, String)> {
        let mut running_by_account: BTreeMap<&str, usize> = BTreeMap::new();
        let mut running_by_endpoint: BTreeMap<&str, usize> = BTreeMap::new();
        for r in self.requests.values() {
            if matches!(r.state, State::InProgress { .. }) {
                *running_by_account.entry(&r.account).or_default() += 1;
                *running_by_endpoint.entry(&r.endpoint).or_default() += 1;
            }
        }
        let mut queued: Vec<&Request> = self
            .requests
            .values()
            .filter(|r| r.state == State::InQueue)
            .collect();
        queued.sort_by_key(|r| (r.dispatchable_at.max(0), r.priority, r.seq));
        // The earliest instant any queued request may start, then dispatch order among those
        // dispatchable by then.
        let free = |r: &Request| {
            running_by_account
                .get(r.account.as_str())
                .copied()
                .unwrap_or(0)
                < self.limit_of(&r.account)
                && self.endpoint_limits.get(&r.endpoint).is_none_or(|l| {
                    running_by_endpoint
                        .get(r.endpoint.as_str())
                        .copied()
                        .unwrap_or(0)
                        < *l
                })
        };
        let at = queued
            .iter()
            .filter(|r| free(r))
            .map(|r| r.dispatchable_at)
            .min()?
            .max(self.clock);
        queued
            .iter()
            .filter(|r| free(r) && r.dispatchable_at <= at)
            .min_by_key(|r| (r.priority, r.seq))
            .map(|r| (at, r.id.clone()))
    }
}

/// A request as submitted.
#[derive(Clone, Debug)]
pub struct NewRequest {
    pub id: String,
    pub account: String,
    pub endpoint: String,
    pub priority: Priority,
    pub dispatch_delay_ms: i64,
    pub run_ms: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(id: &str, account: &str, priority: Priority, run_ms: i64) -> NewRequest {
        NewRequest {
            id: id.into(),
            account: account.into(),
            endpoint: "fal-ai/pika/v2.2/text-to-video".into(),
            priority,
            dispatch_delay_ms: 100,
            run_ms,
        }
    }

    fn started(q: &Queue, id: &str) -> Option<i64> {
        match q.get(id)?.state {
            State::InProgress { started_at } => Some(started_at),
            State::Completed { started_at, .. } => started_at,
            State::InQueue => None,
        }
    }

    #[test]
    fn over_the_limit_requests_wait_and_start_as_runners_free() {
        let mut q = Queue::new(2);
        for (i, run) in [1_000, 3_000, 500].into_iter().enumerate() {
            q.submit(req(&format!("r{i}"), "acct", Priority::Normal, run), 0);
        }
        q.advance(50);
        assert_eq!(
            q.position("r0"),
            Some(0),
            "not dispatchable yet, still queued"
        );
        q.advance(100);
        assert_eq!(
            (started(&q, "r0"), started(&q, "r1")),
            (Some(100), Some(100))
        );
        assert_eq!(q.position("r2"), Some(0));
        assert_eq!(q.running("acct"), 2);
        // r0 ends at 1 100: r2 starts that instant, ends at 1 600.
        q.advance(2_000);
        assert_eq!(started(&q, "r2"), Some(1_100));
        assert!(matches!(
            q.get("r2").map(|r| &r.state),
            Some(State::Completed {
                ended_at: 1_600,
                cancelled: false,
                ..
            })
        ));
        assert_eq!(q.running("acct"), 1, "r1 runs until 3 100");
    }

    #[test]
    fn normal_goes_before_low_and_accounts_do_not_share_runners() {
        let mut q = Queue::new(1);
        q.submit(req("a0", "a", Priority::Normal, 1_000), 0);
        q.submit(req("a-low", "a", Priority::Low, 1_000), 0);
        q.submit(req("a-normal", "a", Priority::Normal, 1_000), 10);
        q.submit(req("b0", "b", Priority::Normal, 1_000), 20);
        q.advance(200);
        assert_eq!(started(&q, "a0"), Some(100));
        assert_eq!(started(&q, "b0"), Some(120), "another account's runner");
        assert_eq!(q.position("a-normal"), Some(0), "normal before low");
        assert_eq!(q.position("a-low"), Some(1));
        q.advance(1_100);
        assert_eq!(started(&q, "a-normal"), Some(1_100));
        assert_eq!(started(&q, "a-low"), None);
    }

    #[test]
    fn only_queued_requests_can_be_cancelled() {
        let mut q = Queue::new(1);
        q.submit(req("run", "a", Priority::Normal, 1_000), 0);
        q.submit(req("wait", "a", Priority::Normal, 1_000), 0);
        assert_eq!(q.cancel("wait", 500), Cancelled::Requested);
        assert_eq!(q.cancel("run", 500), Cancelled::AlreadyCompleted);
        assert_eq!(q.cancel("nobody", 500), Cancelled::NotFound);
        assert_eq!(q.position("wait"), None);
        q.advance(5_000);
        assert_eq!(started(&q, "wait"), None, "a cancelled request never runs");
    }

    #[test]
    fn an_endpoint_limit_holds_across_accounts() {
        let mut q = Queue::new(5);
        q.endpoint_limits
            .insert("fal-ai/pika/v2.2/text-to-video".into(), 1);
        q.submit(req("a", "x", Priority::Normal, 1_000), 0);
        q.submit(req("b", "y", Priority::Normal, 1_000), 0);
        q.advance(500);
        assert_eq!((started(&q, "a"), started(&q, "b")), (Some(100), None));
        q.advance(1_100);
        assert_eq!(started(&q, "b"), Some(1_100));
    }

    #[test]
    fn accounts_have_their_own_limits_and_the_next_event_is_announced() {
        let mut q = Queue::new(1);
        q.account_limits.insert("big".into(), 2);
        assert_eq!(q.next_event(), None);
        q.submit(req("b0", "big", Priority::Normal, 1_000), 0);
        q.submit(req("b1", "big", Priority::Normal, 2_000), 0);
        q.submit(req("s0", "small", Priority::Normal, 1_000), 0);
        q.submit(req("s1", "small", Priority::Normal, 1_000), 0);
        assert_eq!(q.next_event(), Some(100), "the dispatch delay");
        q.advance(100);
        assert_eq!((q.running("big"), q.running("small")), (2, 1));
        assert_eq!(q.next_event(), Some(1_100), "b0 and s0 end, s1 starts");
        q.advance(1_100);
        assert_eq!(started(&q, "s1"), Some(1_100));
        assert!(q.forget("b0").is_some(), "ended");
        assert!(q.forget("b1").is_none(), "still running");
        assert_eq!(q.get("b0"), None);
    }

    #[test]
    fn the_flagged_cancel_stops_a_running_request_and_frees_its_runner() {
        let mut q = Queue::new(1);
        q.submit(req("run", "a", Priority::Normal, 1_000), 0);
        q.submit(req("wait", "a", Priority::Normal, 1_000), 0);
        q.advance(500);
        assert_eq!(q.cancel_running("run", 500), Cancelled::Requested);
        assert_eq!(
            q.get("run").map(|r| r.state.clone()),
            Some(State::Completed {
                started_at: Some(100),
                ended_at: 500,
                cancelled: true
            })
        );
        q.advance(500);
        assert_eq!(
            started(&q, "wait"),
            Some(500),
            "the runner is taken at once"
        );
        assert_eq!(q.cancel_running("run", 600), Cancelled::AlreadyCompleted);
        assert_eq!(q.cancel_running("nobody", 600), Cancelled::NotFound);
    }
}
