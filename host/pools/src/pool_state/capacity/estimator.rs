//! The estimate of one slot set's room at the provider, as a pure function of what the ticks
//! saw: no clock, no I/O, so recorded refusal sequences replay exactly (`tests.rs`).
//!
//! A refusal ("over capacity", Kling 1303) is read against the level slotd held when it came
//! (its own jobs at the provider then), not counted as a loss to halve on:
//!
//! - **Noise**: a refusal at a level where the provider also accepts (another client's job
//!   took the room for a moment, or the provider refuses at random). It costs one request:
//!   the slot set waits the provider's back-off at the level it held (no create above it;
//!   doubled for every refused tick in a row), then asks with one create above it; accepted
//!   there, it fills every free slot again. The effective limit does not move.
//! - **Ceiling**: refusals that repeat. [`STRIKES`] refused ticks in a row with no clean tick
//!   (nothing refused) above the level refused in between make the level held the ceiling.
//!   Besides, every level keeps a tally of the creates
//!   accepted from it and the ticks refused at it (a tick's refusals attributed to the level
//!   held after it, its accepted creates to the levels below), halved every two `probe_max`: a
//!   level refused at three times and at least four times as often as accepted from is a
//!   ceiling too, however the refusals were spread. The limit becomes it (never below
//!   `floor`). Random refusals, a
//!   quarter of creates, leave every level accepted three times as often as refused. A room
//!   that shrinks is followed down the same way, level by level.
//! - **Probe**: a learned ceiling is probed: after `probe` one create above it is let through.
//!   Refused, the next probe waits twice as long (up to `probe_max`); accepted, the ceiling
//!   rises and the next probe opens at once, each accepted probe climbing twice as far as the
//!   one before (1, 2, 4 … slots), so room another client gave back is taken within a few
//!   round trips.
//! - **Queued**: a provider that queues jobs of ours instead of refusing them (contract 1.4
//!   `observe.queued`) runs only what it runs: the ceiling is that, probed the same way.

use serde::{Deserialize, Serialize};

/// Refused ticks in a row, no clean tick above the level refused in between, that make the
/// level held a ceiling.
pub const STRIKES: u32 = 4;

/// Refused ticks at a level (decayed) that, four times its accepted creates or more, make it a
/// ceiling.
const TALLY_STRIKES: f64 = 3.0;

/// How the estimate behaves (`[scheduler] capacity_floor`, `capacity_probe`,
/// `capacity_probe_max`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The lowest limit a ceiling can set.
    pub floor: u32,
    /// Wait before the first probe above a learned ceiling (ms).
    pub probe_ms: i64,
    /// Longest wait between probes, and how long an accepted level counts as "recent" (ms).
    pub probe_max_ms: i64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            floor: 1,
            probe_ms: 10_000,
            probe_max_ms: 120_000,
        }
    }
}

/// What one tick saw of the provider's capacity for one slot set.
#[derive(Clone, Copy, Debug, Default)]
pub struct Observed {
    /// Submits the provider refused for capacity.
    pub rejected: u32,
    /// Submits it accepted.
    pub accepted: u32,
    /// Units holding a slot after the tick (the jobs the provider runs or queues for us).
    pub in_flight: u32,
    /// Of those, the jobs the provider holds in its own queue for lack of room (contract 1.4
    /// `observe.queued`), when this tick saw such a job; 0 otherwise.
    pub queued: u32,
    /// The provider's back-off for its refusals (the handler's hint), ms.
    pub retry_after_ms: Option<u64>,
}

/// What the estimate made of a tick's answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Refused at a level accepted recently: one request spent, the limit kept.
    Noise,
    /// Refusals repeated at a level: the limit is that level.
    Ceiling,
    /// The create above the ceiling was refused: the ceiling stands, probed later.
    ProbeRefused,
    /// The create above the ceiling was accepted: the ceiling rose.
    ProbeAccepted,
    /// The provider queues jobs of ours: the limit is what it runs.
    Queued,
    /// Back at the configured limit: nothing learned any more.
    Restored,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Noise => "noise",
            Verdict::Ceiling => "ceiling",
            Verdict::ProbeRefused => "probe_refused",
            Verdict::ProbeAccepted => "probe_accepted",
            Verdict::Queued => "queued",
            Verdict::Restored => "restored",
        }
    }
}

/// The estimate for one slot set.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Estimator {
    /// The learned ceiling, below the configured limit; `None`: the configured limit.
    ceiling: Option<u32>,
    /// Per level (slots held): creates accepted from it and ticks refused at it, decayed.
    tallies: Vec<Tally>,
    decayed_at: i64,
    /// Refused ticks in a row, no create accepted above `hold_level` in between.
    streak: u32,
    /// After a refusal: no create above `hold_level` before `hold_until`; then, while
    /// `streak` > 0, one above it.
    hold_level: u32,
    hold_until: i64,
    /// The next probe above the ceiling, the wait after a refused one, and how far an accepted
    /// one climbs (0: one slot).
    probe_at: i64,
    probe_gap: i64,
    climb: u32,
    last: Option<(Verdict, i64)>,
    noise: u64,
    ceilings: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Tally {
    accepted: f64,
    refused: f64,
}

impl Tally {
    fn is_ceiling(&self) -> bool {
        self.refused >= TALLY_STRIKES && self.refused >= 4.0 * self.accepted
    }
}

/// The estimate as `GET /v1/pools` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EstimateView {
    /// The learned ceiling; `None`: the configured limit holds.
    pub ceiling: Option<u32>,
    /// While waiting out a refusal: no create above `level` before `until` (Unix ms).
    pub hold: Option<Hold>,
    /// When one create above the ceiling is let through next (Unix ms).
    pub next_probe_at: Option<i64>,
    /// The last decision and when it was made (Unix ms).
    pub last: Option<Verdict>,
    pub last_at: Option<i64>,
    /// Refusals read as noise (each cost one request) and refusals that set or kept a ceiling.
    pub refusals_noise: u64,
    pub refusals_ceiling: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Hold {
    pub level: u32,
    pub until: i64,
}

impl Estimator {
    /// The limit to fill to at `now`: the ceiling (or `configured`), above it by the probe's
    /// climb while a probe is open, no higher than a refusal's hold level while it lasts, and
    /// one above that level while refusals are being counted.
    pub fn limit(&self, configured: u32, now: i64) -> u32 {
        let mut limit = self.learned(configured);
        if limit < configured && now >= self.probe_at {
            limit = limit.saturating_add(self.climb.max(1)).min(configured);
        }
        if now < self.hold_until {
            limit = limit.min(self.hold_level);
        } else if self.streak > 0 {
            // Refused last time: one create above that level asks again, not every free slot.
            limit = limit.min(self.hold_level.saturating_add(1));
        }
        limit
    }

    /// The learned limit, without the moment's hold, ask or probe.
    pub fn estimate(&self, configured: u32) -> u32 {
        self.ceiling.map_or(configured, |c| c.min(configured))
    }

    fn learned(&self, configured: u32) -> u32 {
        self.estimate(configured)
    }

    /// When [`Estimator::limit`] changes next on its own (a hold ends, a probe opens), if
    /// after `now`.
    pub fn next_change(&self, configured: u32, now: i64) -> Option<i64> {
        let hold = (self.hold_until > now).then_some(self.hold_until);
        let probe =
            (self.learned(configured) < configured && self.probe_at > now).then_some(self.probe_at);
        hold.into_iter().chain(probe).min()
    }

    /// Take a tick's answers in; the verdict, if the tick carried news.
    pub fn observe(
        &mut self,
        configured: u32,
        seen: Observed,
        now: i64,
        policy: &Policy,
    ) -> Option<Verdict> {
        let held = seen.in_flight;
        self.decay(now, policy, configured);
        let mut verdict = None;
        if seen.accepted > 0 {
            for level in held.saturating_sub(seen.accepted)..held {
                self.tally(level).accepted += 1.0;
            }
            // A tick with nothing refused that went above the level refused last: the run of
            // refusals is over. (A tick that also met refusals does not end it: our count of
            // jobs can run ahead of the provider's, a job ended there not yet being read.)
            if held > self.hold_level && seen.rejected == 0 {
                self.streak = 0;
            }
            verdict = self.accepted(configured, held, now, policy);
        }
        if seen.queued > 0 && seen.rejected == 0 {
            let running = held.saturating_sub(seen.queued).max(policy.floor.max(1));
            self.set_ceiling(
                running.min(self.learned(configured)),
                configured,
                now,
                policy,
            );
            verdict = Some(Verdict::Queued);
        }
        if seen.rejected > 0 {
            self.tally(held).refused += 1.0;
            // Every refused tick in a row doubles the back-off (Kling's advice on 1303), until
            // a create is accepted above the level refused last.
            self.streak = self.streak.saturating_add(1);
            verdict = Some(self.refused(configured, seen, now, policy));
        }
        if let Some(v) = verdict {
            self.last = Some((v, now));
        }
        verdict
    }

    fn tally(&mut self, level: u32) -> &mut Tally {
        let i = level as usize;
        if self.tallies.len() <= i {
            self.tallies.resize(i + 1, Tally::default());
        }
        &mut self.tallies[i]
    }

    /// Halve the tallies every two `probe_max` (probes and back-offs come at most every
    /// `probe_max`: a level refused at every one of them keeps three and more); levels above
    /// the configured limit are dropped.
    fn decay(&mut self, now: i64, policy: &Policy, configured: u32) {
        self.tallies.truncate(configured as usize + 1);
        let elapsed = now.saturating_sub(self.decayed_at);
        if elapsed <= 0 {
            return;
        }
        let half_life = policy.probe_max_ms.max(1).saturating_mul(2);
        let factor = 0.5f64.powf(elapsed as f64 / half_life as f64);
        for t in &mut self.tallies {
            t.accepted *= factor;
            t.refused *= factor;
        }
        self.decayed_at = now;
    }

    fn accepted(
        &mut self,
        configured: u32,
        held: u32,
        now: i64,
        policy: &Policy,
    ) -> Option<Verdict> {
        let ceiling = self.ceiling?;
        if held <= ceiling {
            return None;
        }
        if held >= configured {
            self.ceiling = None;
            return Some(Verdict::Restored);
        }
        // The levels above the ceiling took jobs: take them, and probe twice as far at once.
        self.ceiling = Some(held);
        self.probe_gap = policy.probe_ms;
        self.probe_at = now;
        self.climb = self.climb.max(1).saturating_mul(2);
        Some(Verdict::ProbeAccepted)
    }

    fn refused(&mut self, configured: u32, seen: Observed, now: i64, policy: &Policy) -> Verdict {
        let held = seen.in_flight;
        let probe = self.ceiling.is_some_and(|c| held >= c);
        // The provider's back-off, doubled for every refused tick in a row. It follows the
        // tick like every timing: at most a tenth of `probe` (Kling's 1 s at the defaults).
        let base = seen
            .retry_after_ms
            .map_or(i64::MAX, |ms| i64::try_from(ms).unwrap_or(i64::MAX))
            .min(policy.probe_ms / 10)
            .max(1);
        let doubling = 1i64 << self.streak.saturating_sub(1).min(20);
        self.hold_level = held;
        self.hold_until =
            now.saturating_add(base.saturating_mul(doubling).min(policy.probe_max_ms));
        let ceiling_here = self.streak >= STRIKES
            || self
                .tallies
                .get(held as usize)
                .is_some_and(Tally::is_ceiling);
        if probe {
            self.climb = 1;
            self.ceilings += u64::from(seen.rejected);
            self.probe_gap = self
                .probe_gap
                .saturating_mul(2)
                .clamp(policy.probe_ms, policy.probe_max_ms);
            self.probe_at = now.saturating_add(self.probe_gap);
            self.hold_until = self.hold_until.min(self.probe_at);
            Verdict::ProbeRefused
        } else if ceiling_here {
            self.ceilings += u64::from(seen.rejected);
            self.set_ceiling(held, configured, now, policy);
            Verdict::Ceiling
        } else {
            self.noise += u64::from(seen.rejected);
            Verdict::Noise
        }
    }

    fn set_ceiling(&mut self, level: u32, configured: u32, now: i64, policy: &Policy) {
        let level = level.max(policy.floor).max(1).min(configured);
        self.ceiling = (level < configured).then_some(level);
        self.streak = 0;
        self.probe_gap = policy.probe_ms;
        self.probe_at = now.saturating_add(policy.probe_ms);
        self.climb = 1;
    }

    pub fn view(&self, configured: u32, now: i64) -> EstimateView {
        let estimate = self.learned(configured);
        EstimateView {
            ceiling: (estimate < configured).then_some(estimate),
            hold: (self.hold_until > now).then_some(Hold {
                level: self.hold_level,
                until: self.hold_until,
            }),
            next_probe_at: (estimate < configured).then_some(self.probe_at),
            last: self.last.map(|(v, _)| v),
            last_at: self.last.map(|(_, at)| at),
            refusals_noise: self.noise,
            refusals_ceiling: self.ceilings,
        }
    }
}
