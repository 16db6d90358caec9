//! `cancel` (contract 1.1): stop the fal requests of cancelled slotd tasks.
//!
//! A unit with a request id: `PUT cancel_url`. 202 `CANCELLATION_REQUESTED` (any 2xx) or 404
//! → ended. 400 `ALREADY_COMPLETED` → the status is read: `COMPLETED` (or 404) → ended; still
//! `IN_QUEUE`/`IN_PROGRESS` (or unreadable) → `running`: fal runs it on and bills it, so the
//! slot stays held until fal reports the end. 5xx, 429, 401, 403, a timeout → retry-after.
//!
//! A unit without one whose submit outcome is unknown (or handed back in doubt) may have a
//! request at fal: the history is read when due (as in `tick`). Found and ended → ended; found
//! still running → recorded (`found_request_id`) and `running`, so the next call PUTs it; not
//! found → `running` until the hold has passed, then ended. Any other unit without one
//! (never sent, or answered "not created") → ended. At most two rounds of requests.

use slotd_sdk::client::transport_error;
use slotd_sdk::polling::Round;
use slotd_sdk::retry_after::retry_after_ms;
use slotd_sdk::{CancelChange, CancelOutcome, Host, Outcome, TickContext, Unit};

use crate::fal::{self, Answer, Call, Fal};
use crate::poll::{self, Status};
use crate::settings::Config;
use crate::spec::Spec;
use crate::state::State;
use crate::tick::Urls;
use crate::unknown::{self, Unknown};

enum Owner<'u> {
    /// The unit and its request's status URL (read after `ALREADY_COMPLETED`).
    Put(&'u Unit, String),
    Lookup(&'u Unit, Spec, Unknown),
}

/// Ask fal to cancel the requests of `units`.
pub fn run(
    host: &dyn Host,
    ctx: &TickContext,
    units: &[Unit],
) -> Result<Vec<CancelChange>, String> {
    let cfg = Config::read(host)?;
    let fal = Fal { host, cfg: &cfg };
    let now = ctx.now_ms;
    let mut changes = Vec::with_capacity(units.len());
    let mut round = Round::new();
    for unit in units {
        let state = State::of(unit);
        let spec = Spec::read(&unit.spec);
        let id = unit
            .provider_job_id
            .clone()
            .or_else(|| state.found_request_id.clone());
        match (id, spec) {
            (Some(id), Ok(spec)) => {
                let urls = Urls::of(&cfg, spec.model, &id, &state);
                round.push(Owner::Put(unit, urls.status), Call::Put(urls.cancel));
            }
            // No spec: nothing this handler could have submitted.
            (_, Err(_)) => changes.push(change(unit, CancelOutcome::Ended, None)),
            (None, Ok(spec)) => match Unknown::of(unit, &spec, &cfg, now) {
                None => changes.push(change(unit, CancelOutcome::Ended, None)),
                Some(u) if u.due(&cfg, now) => {
                    let call = u.lookup(&cfg, &spec);
                    round.push(Owner::Lookup(unit, spec, u), call);
                }
                Some(u) => changes.push(held(host, unit, &cfg, now, &u, None)),
            },
        }
    }
    let mut reads = Round::new();
    let mut taken = Vec::new();
    for (owner, answer) in round.send(|calls| fal.send(calls)) {
        match owner {
            Owner::Put(unit, status_url) => match put(&answer, now) {
                Put::Ended => changes.push(change(unit, CancelOutcome::Ended, None)),
                Put::ReadStatus => reads.push(unit, Call::Get(status_url)),
                Put::Outcome(outcome) => changes.push(change(unit, outcome, None)),
            },
            Owner::Lookup(unit, spec, u) => {
                let found = unknown::find(&answer, &spec, &u, &mut taken);
                changes.push(match found {
                    Ok(Some(f)) if f.ended => change(unit, CancelOutcome::Ended, None),
                    Ok(Some(f)) => {
                        let state = State {
                            found_request_id: Some(f.request_id),
                            ..State::of(unit)
                        };
                        change(unit, CancelOutcome::Running(Some(1)), Some(state.to_json()))
                    }
                    Ok(None) => held(host, unit, &cfg, now, &u, Some(Ok(()))),
                    Err(why) => held(host, unit, &cfg, now, &u, Some(Err(why))),
                });
            }
        }
    }
    for (unit, answer) in reads.send(|calls| fal.send(calls)) {
        let again = CancelOutcome::Running(Some(poll::hint(&cfg, unit, false)));
        let outcome = match poll::status(&answer, now) {
            Ok(Status::Completed) => CancelOutcome::Ended,
            Err(Outcome::Fail(e)) if e.code.as_deref() == Some(poll::REQUEST_NOT_FOUND) => {
                CancelOutcome::Ended
            }
            _ => again,
        };
        changes.push(change(unit, outcome, None));
    }
    Ok(changes)
}

enum Put {
    Ended,
    ReadStatus,
    Outcome(CancelOutcome),
}

/// What a cancel answer means.
fn put(answer: &Answer, now_ms: u64) -> Put {
    let r = match answer {
        Ok(r) => r,
        Err(e) => {
            return Put::Outcome(CancelOutcome::RetryAfter {
                after_ms: None,
                error: transport_error(e),
            });
        }
    };
    let said = fal::json(r)
        .ok()
        .and_then(|b| b.get("status").and_then(|s| s.as_str().map(str::to_string)));
    match (r.status, said.as_deref()) {
        (_, Some("ALREADY_COMPLETED")) => Put::ReadStatus,
        (200..=299 | 404, _) => Put::Ended,
        (400, _) => Put::ReadStatus,
        _ => Put::Outcome(match fal::account(r, now_ms) {
            Some(Outcome::RetryAfter { after_ms, error }) => {
                CancelOutcome::RetryAfter { after_ms, error }
            }
            _ => CancelOutcome::RetryAfter {
                after_ms: retry_after_ms(&r.headers, now_ms),
                error: fal::error(r),
            },
        }),
    }
}

/// A unit with no request found: `running` until its hold has passed, then ended.
fn held(
    host: &dyn Host,
    unit: &Unit,
    cfg: &Config,
    now: u64,
    u: &Unknown,
    looked: Option<Result<(), String>>,
) -> CancelChange {
    if now >= u.until {
        return change(unit, CancelOutcome::Ended, None);
    }
    let hold = unknown::hold(host, unit, cfg, now, u, looked);
    let after = match hold.outcome {
        Outcome::RetryAfter { after_ms, .. } => after_ms,
        _ => None,
    };
    change(unit, CancelOutcome::Running(after), hold.state)
}

fn change(unit: &Unit, outcome: CancelOutcome, state: Option<String>) -> CancelChange {
    CancelChange {
        unit_id: unit.id.clone(),
        outcome,
        state,
        cost: None,
    }
}
