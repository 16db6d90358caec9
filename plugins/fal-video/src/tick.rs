//! One `tick`, in at most two rounds of requests (each one `send-authorized`):
//!
//! 1. every unit with a request id reads its status (`GET status_url`); every unit without one
//!    is submitted (`POST {base_url}/{model id}`) when that is safe (fresh, or its last
//!    submit was answered "not created"); a unit whose submit outcome is unknown reads the
//!    request history when due (see [`crate::unknown`]) and is otherwise held without a
//!    request;
//! 2. every request seen `COMPLETED` reads its result (`GET response_url`) at once: fal keeps
//!    results only about an hour.

use slotd_sdk::polling::Round;
use slotd_sdk::{Change, Host, Outcome, TickContext, Unit};

use crate::fal::{self, Answer, Call, Fal};
use crate::models::Model;
use crate::poll::{self, Status};
use crate::settings::Config;
use crate::spec::Spec;
use crate::state::State;
use crate::submit::{self, Submitted};
use crate::unknown::{self, Unknown};

/// Who asked for a request of round 1.
enum Owner<'u> {
    Poll(&'u Unit, Spec),
    Submit(&'u Unit, Spec),
    Lookup(&'u Unit, Spec, Unknown),
}

/// The queue URLs of a unit's request: fal's own when recorded, else built from the base URL.
pub struct Urls {
    pub status: String,
    pub response: String,
    pub cancel: String,
}

impl Urls {
    pub fn of(cfg: &Config, model: Model, id: &str, state: &State) -> Urls {
        let built = |suffix: &str| fal::request_url(cfg, model, id, suffix);
        Urls {
            status: state.status_url.clone().unwrap_or_else(|| built("/status")),
            response: state.response_url.clone().unwrap_or_else(|| built("")),
            cancel: state.cancel_url.clone().unwrap_or_else(|| built("/cancel")),
        }
    }
}

/// Advance a batch.
pub fn run(host: &dyn Host, ctx: &TickContext, batch: &[Unit]) -> Result<Vec<Change>, String> {
    let cfg = Config::read(host)?;
    let fal = Fal { host, cfg: &cfg };
    let now = ctx.now_ms;
    let mut changes = Vec::with_capacity(batch.len());
    let mut round = Round::new();
    for unit in batch {
        let spec = match Spec::read(&unit.spec) {
            Ok(spec) => spec,
            Err(why) => {
                changes.push(Change::unusable(unit, why));
                continue;
            }
        };
        if let Some(id) = &unit.provider_job_id {
            let urls = Urls::of(&cfg, spec.model, id, &State::of(unit));
            round.push(Owner::Poll(unit, spec), Call::Get(urls.status));
        } else if let Some(u) = Unknown::of(unit, &spec, &cfg, now) {
            if u.due(&cfg, now) {
                let call = u.lookup(&cfg, &spec);
                round.push(Owner::Lookup(unit, spec, u), call);
            } else {
                changes.push(unknown::hold(host, unit, &cfg, now, &u, None));
            }
        } else {
            let url = fal::submit_url(&cfg, spec.model, ctx.callback_url.as_deref());
            let call = Call::Submit(url, spec.input.clone());
            round.push(Owner::Submit(unit, spec), call);
        }
    }
    let mut results = Round::new();
    let mut taken = Vec::new();
    for (owner, answer) in round.send(|calls| fal.send(calls)) {
        match owner {
            Owner::Poll(unit, spec) => match poll::status(&answer, now) {
                Ok(Status::Completed) => {
                    let id = unit.provider_job_id.as_deref().unwrap_or_default();
                    let urls = Urls::of(&cfg, spec.model, id, &State::of(unit));
                    results.push((unit, spec), Call::Get(urls.response));
                }
                Ok(status) => changes.push(poll::running(host, unit, &cfg, &status)),
                Err(outcome) => changes.push(Change::of(unit, outcome)),
            },
            Owner::Submit(unit, spec) => {
                let webhook = ctx.callback_url.is_some();
                changes.push(submitted(host, unit, &spec, &cfg, now, webhook, &answer));
            }
            Owner::Lookup(unit, spec, u) => {
                changes.push(match unknown::find(&answer, &spec, &u, &mut taken) {
                    Ok(Some(found)) => unknown::accepted(host, unit, &found, now),
                    Ok(None) => unknown::hold(host, unit, &cfg, now, &u, Some(Ok(()))),
                    Err(why) => unknown::hold(host, unit, &cfg, now, &u, Some(Err(why))),
                });
            }
        }
    }
    for ((unit, spec), answer) in results.send(|calls| fal.send(calls)) {
        changes.push(poll::result(unit, &spec, &cfg, &answer, now));
    }
    Ok(changes)
}

/// The change a submit answer means.
fn submitted(
    host: &dyn Host,
    unit: &Unit,
    spec: &Spec,
    cfg: &Config,
    now: u64,
    webhook: bool,
    answer: &Answer,
) -> Change {
    match submit::classify(cfg, answer, now) {
        Submitted::Accepted {
            id,
            status_url,
            response_url,
            cancel_url,
        } => {
            let state = State {
                accepted_at_ms: Some(now),
                status_url,
                response_url,
                cancel_url,
                webhook,
                ..State::default()
            };
            Change {
                state: Some(state.to_json()),
                ..Change::of(unit, Outcome::Accepted(id))
            }
        }
        // Nothing was created: recorded, so a unit handed back in doubt is submitted again.
        Submitted::Refused(outcome) => Change {
            state: Some(State::refused(unit, now).to_json()),
            ..Change::of(unit, outcome)
        },
        Submitted::Failed(error) => Change::of(unit, Outcome::Fail(error)),
        Submitted::Unknown(reason) => {
            let u = Unknown::new(unit, spec, cfg, now, reason, None);
            unknown::hold(host, unit, cfg, now, &u, None)
        }
    }
}
