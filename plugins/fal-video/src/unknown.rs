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
//! The hold is said as `retry-after` with error code `timeout` (the host refuses `running`
//! for a unit without a provider job id): the unit stays `submitted` with its slot, spends no
//! retry budget, and its state (with `unknown_since`) is stored.

use serde_json::Value;
use slotd_sdk::polling::path_segment;
use slotd_sdk::{Change, Host, Level, Outcome, ProviderError, Unit};

use crate::fal::{self, Answer, Call};
use crate::settings::Config;
use crate::spec::Spec;
use crate::state::{State, SubmitRecord};
use crate::time;

/// The error code of a unit whose submit outcome stayed unknown.
pub const SUBMISSION_UNKNOWN: &str = "submission_unknown";
/// How often the history is read for an unknown outcome (seconds of fal time).
pub const RECONCILE_SECS: f64 = 30.0;
/// Clock skew tolerated between slotd and fal when matching `sent_at`.
pub const SKEW_MS: u64 = 60_000;
/// Items asked for per history read (fal's maximum).
pub const HISTORY_LIMIT: u32 = 100;
/// The contract's code for "the provider did not answer in time" (no retry budget spent).
const TIMEOUT: &str = "timeout";
/// Why an in-doubt unit with nothing recorded has an unknown outcome.
const LOST_BY_SLOTD: &str = "slotd lost track of the submit call (a crash, trap or timeout \
                             between sending it and recording the request id)";

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
        let (since, reason, checked_at) = match state.record_for(unit) {
            SubmitRecord::Refused => return None,
            SubmitRecord::Unknown { since, reason } => (since, reason, state.checked_at_ms),
            SubmitRecord::None if unit.in_doubt => (
                unit.submitted_at_ms.unwrap_or(now_ms),
                LOST_BY_SLOTD.to_string(),
                None,
            ),
            SubmitRecord::None => return None,
        };
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
    if State::of(unit).unknown_since != Some(u.since) {
        host.warn(&format!(
            "unit {} (task {}): {lost}; it is never submitted again automatically. Its slot \
             stays held for up to {hold_s} s while fal's request history is searched for it.",
            unit.id, unit.task_id
        ));
    }
    let outcome = if now_ms >= u.until && looked.is_some() {
        Outcome::Fail(ProviderError::new(
            Some(SUBMISSION_UNKNOWN),
            format!(
                "{lost}. fal's request history showed no matching request within {hold_s} s, \
                 the longest such a clip is expected to take{read_failed}. A retry of this \
                 task resubmits the unit on purpose, possibly generating (and paying for) the \
                 video twice."
            ),
        ))
    } else {
        let next = Unknown {
            checked_at,
            ..u.clone()
        }
        .next_check(cfg)
        .min(u.until);
        let remaining = u.until.saturating_sub(now_ms).div_ceil(1000);
        Outcome::RetryAfter {
            after_ms: Some(next.saturating_sub(now_ms).max(1)),
            error: ProviderError::new(
                Some(TIMEOUT),
                format!(
                    "{lost}; it is never submitted again automatically. Looking for it in \
                     fal's request history{read_failed}; the slot stays held {remaining} s \
                     more at most, then the unit fails with {SUBMISSION_UNKNOWN}."
                ),
            ),
        }
    };
    Change {
        state: Some(state.to_json()),
        ..Change::of(unit, outcome)
    }
}
