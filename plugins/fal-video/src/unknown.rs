//! The outcome-unknown rule. fal has **no idempotency key**: a submit whose answer was lost (a
//! gateway's 502 or 504 page without fal's error, a timeout, a transport error, an unreadable
//! 2xx, or a call slotd lost track of: an `in-doubt` unit with nothing recorded) may have
//! queued a request that will run and be billed. Such a unit is **never submitted again automatically**. Instead:
//!
//! 1. it keeps its slot (a phantom request may hold one of the account's concurrency), for at
//!    most the clip's longest expected run ([`crate::spec::Spec::hold_ms`], e.g. 900 s, ×
//!    `expected_duration_scale`), counted from `unknown_since`;
//! 2. every [`RECONCILE_SECS`] (× scale) it reads fal's request history for the model
//!    (`GET {history_url}/v1/models/requests/by-endpoint`, payloads expanded, from 60 s
//!    before the submit) and looks for an item whose `json_input` equals the input it sent and
//!    whose `sent_at` lies in the submit's window (± 60 s of clock skew). Found: the unit is
//!    `accepted` with that request id and polled as usual;
//! 3. nothing found once the hold has passed (after one last look): it fails with code
//!    [`SUBMISSION_UNKNOWN`]; a retry of the task resubmits on purpose.
//!
//! The record, the rule and how the hold is said to the host (`retry-after` with error code
//! `timeout`) are the SDK's ([`slotd_sdk::jobs`]); this file says how long a fal submit is
//! held, how its request is looked for, and in fal's words.

use serde_json::Value;
use slotd_sdk::jobs::{self, SUBMISSION_UNKNOWN};
use slotd_sdk::polling::path_segment;
use slotd_sdk::{Change, Host, Level, Outcome, Unit};

use crate::fal::{self, Answer, Call};
use crate::settings::Config;
use crate::spec::Spec;
use crate::state::State;
use crate::time;

/// How often the history is read for an unknown outcome (seconds of fal time).
pub const RECONCILE_SECS: f64 = 30.0;
/// Clock skew tolerated between slotd and fal when matching `sent_at`.
pub const SKEW_MS: u64 = 60_000;
/// Items asked for per history read (fal's maximum).
pub const HISTORY_LIMIT: u32 = 100;

/// A submission whose outcome is unknown.
#[derive(Clone, Debug, PartialEq)]
pub struct Unknown {
    /// slotd's clock when the outcome became unknown.
    pub since: u64,
    pub reason: String,
    /// When the history was last read.
    pub checked_at: Option<u64>,
    /// When the hold ends.
    pub until: u64,
    /// The submit went out in `[from, to]` (slotd's clock, skew included).
    pub window: (u64, u64),
}

impl Unknown {
    /// The unknown outcome of a unit without a request id, `None` when submitting is safe
    /// (fresh, or fal answered its last submit "not created").
    pub fn of(unit: &Unit, spec: &Spec, cfg: &Config, now_ms: u64) -> Option<Unknown> {
        let state = State::of(unit);
        let lost = jobs::lost_by_slotd("submit", "request id");
        let doubt = state.record.doubt(unit, now_ms, &lost)?;
        let checked_at = if doubt.recorded {
            state.checked_at_ms
        } else {
            None
        };
        let (since, reason) = (doubt.since, doubt.reason);
        Some(Unknown::new(unit, spec, cfg, since, reason, checked_at))
    }

    /// An outcome unknown since `since`.
    pub fn new(
        unit: &Unit,
        spec: &Spec,
        cfg: &Config,
        since: u64,
        reason: String,
        checked_at: Option<u64>,
    ) -> Unknown {
        let sent = unit.submitted_at_ms.unwrap_or(since).min(since);
        Unknown {
            since,
            reason,
            checked_at,
            until: since.saturating_add(spec.hold_ms(cfg)),
            window: (sent.saturating_sub(SKEW_MS), since.saturating_add(SKEW_MS)),
        }
    }

    /// When the history is read next.
    fn next_check(&self, cfg: &Config) -> u64 {
        let last = self.checked_at.unwrap_or(self.since);
        last.saturating_add(cfg.scaled_ms(RECONCILE_SECS).max(1))
    }

    /// Whether this call reads the history (every 30 s × scale, and once more at the end).
    pub fn due(&self, cfg: &Config, now_ms: u64) -> bool {
        now_ms >= self.until || now_ms >= self.next_check(cfg)
    }

    /// The history read for this submission.
    pub fn lookup(&self, cfg: &Config, spec: &Spec) -> Call {
        let start = time::format_ms(self.window.0);
        Call::Get(format!(
            "{}/v1/models/requests/by-endpoint?endpoint_id={}&start={}&expand=payloads&limit={HISTORY_LIMIT}",
            cfg.history_url,
            path_segment(spec.model.id()),
            path_segment(&start)
        ))
    }
}

/// A request the history shows for a lost submit.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    pub request_id: String,
    /// It has ended (`ended_at` set).
    pub ended: bool,
}

/// The item of a history answer that is this submission's request: same input, sent in the
/// window, not `taken` by another unit of this call (which it then is).
pub fn find(
    answer: &Answer,
    spec: &Spec,
    u: &Unknown,
    taken: &mut Vec<String>,
) -> Result<Option<Found>, String> {
    let r = answer
        .as_ref()
        .map_err(|e| format!("reading fal's request history: {e}"))?;
    if !(200..300).contains(&r.status) {
        return Err(format!(
            "reading fal's request history: {}",
            fal::error(r).message
        ));
    }
    let body = fal::json(r)?;
    let items = body
        .get("items")
        .and_then(Value::as_array)
        .ok_or("fal's request history answered without an items list")?;
    let (from, to) = (
        i64::try_from(u.window.0).unwrap_or(i64::MAX),
        i64::try_from(u.window.1).unwrap_or(i64::MAX),
    );
    for item in items {
        let Some(id) = item.get("request_id").and_then(Value::as_str) else {
            continue;
        };
        let sent = item
            .get("sent_at")
            .and_then(Value::as_str)
            .and_then(time::parse_ms);
        let in_window = sent.is_some_and(|t| (from..=to).contains(&t));
        if in_window
            && item.get("json_input") == Some(&spec.input)
            && !taken.iter().any(|t| t == id)
        {
            taken.push(id.to_string());
            let ended = item.get("ended_at").is_some_and(|e| !e.is_null());
            return Ok(Some(Found {
                request_id: id.to_string(),
                ended,
            }));
        }
    }
    Ok(None)
}

/// The change for a request found in the history: accepted, then polled as usual.
pub fn accepted(host: &dyn Host, unit: &Unit, found: &Found, now_ms: u64) -> Change {
    host.log(
        Level::Info,
        &format!(
            "unit {}: fal's request history shows request {} for the submit whose answer was \
             lost; polling it",
            unit.id, found.request_id
        ),
    );
    let state = State {
        accepted_at_ms: Some(now_ms),
        ..State::default()
    };
    Change {
        state: Some(state.to_json()),
        ..Change::of(unit, Outcome::Accepted(found.request_id.clone()))
    }
}

/// The change for a unit whose request was not found (`looked`: this call's history read, if
/// it made one, and whether it failed): held until the next read or the end of the hold, then
/// failed [`SUBMISSION_UNKNOWN`].
pub fn hold(
    host: &dyn Host,
    unit: &Unit,
    cfg: &Config,
    now_ms: u64,
    u: &Unknown,
    looked: Option<Result<(), String>>,
) -> Change {
    let checked_at = if looked.is_some() {
        Some(now_ms)
    } else {
        u.checked_at
    };
    let state = State::unknown(unit, u.since, &u.reason, checked_at);
    let hold_s = u.until.saturating_sub(u.since).div_ceil(1000);
    let lost = format!(
        "the outcome of fal's submit is unknown ({}): fal has no idempotency key, so a request \
         may exist (and be billed) that slotd did not record",
        u.reason
    );
    let read_failed = match &looked {
        Some(Err(why)) => format!(" (the last history read failed: {why})"),
        _ => String::new(),
    };
    if State::of(unit).record.first_seen(u.since) {
        host.warn(&format!(
            "unit {} (task {}): {lost}; it is never submitted again automatically. Its slot \
             stays held for up to {hold_s} s while fal's request history is searched for it.",
            unit.id, unit.task_id
        ));
    }
    if now_ms >= u.until && looked.is_some() {
        return jobs::give_up(
            unit,
            state.to_json(),
            format!(
                "{lost}. fal's request history showed no matching request within {hold_s} s, \
                 the longest such a clip is expected to take{read_failed}. A retry of this \
                 task resubmits the unit on purpose, possibly generating (and paying for) the \
                 video twice."
            ),
        );
    }
    let next = Unknown {
        checked_at,
        ..u.clone()
    }
    .next_check(cfg)
    .min(u.until);
    let remaining = u.until.saturating_sub(now_ms).div_ceil(1000);
    jobs::hold(
        unit,
        state.to_json(),
        next.saturating_sub(now_ms).max(1),
        format!(
            "{lost}; it is never submitted again automatically. Looking for it in fal's \
             request history{read_failed}; the slot stays held {remaining} s more at most, \
             then the unit fails with {SUBMISSION_UNKNOWN}."
        ),
    )
}
