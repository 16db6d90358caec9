//! One `tick`: every unit of the batch in one round of requests (one `send-authorized`).
//!
//! - a unit with a job id is polled (`GET /v1/tasks/{id}`, see [`crate::poll`]);
//! - a unit without one is created (`POST` of its spec) when that is safe: it is fresh, or the
//!   last create of its current submission was answered "not created";
//! - otherwise its create outcome is unknown and it is held, then failed, without a request
//!   (see [`crate::unknown`]).

use slotd_sdk::client::Call;
use slotd_sdk::polling::{Round, path_segment};
use slotd_sdk::{Change, Host, HttpError, Outcome, Response, TickContext, Unit};

use crate::create::{self, Created};
use crate::poll::Poll;
use crate::rate_limit::{self, Figures};
use crate::settings::Config;
use crate::spec::Spec;
use crate::state::State;
use crate::unknown;

/// What a unit needs in this tick.
enum Step {
    Poll,
    Create,
    /// Outcome unknown since `since`.
    Hold {
        since: u64,
        reason: String,
    },
}

/// Who asked for a request of the round.
enum Owner<'u> {
    Poll(&'u Unit, Spec),
    Create(&'u Unit, Spec),
}

/// Advance a batch.
pub fn run(host: &dyn Host, ctx: &TickContext, batch: &[Unit]) -> Result<Vec<Change>, String> {
    let cfg = Config::read(host)?;
    let client = cfg.client(host);
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
        match step(unit, ctx.now_ms) {
            Step::Poll => {
                let call = Call::Get(task_path(unit.provider_job_id.as_deref().unwrap_or("")));
                round.push(Owner::Poll(unit, spec), call);
            }
            Step::Create => {
                let call = Call::Post(spec.endpoint.path().to_string(), spec.body.clone());
                round.push(Owner::Create(unit, spec), call);
            }
            Step::Hold { since, reason } => changes.push(unknown::hold(
                host, unit, spec.model, &cfg, ctx.now_ms, since, &reason,
            )),
        }
    }
    // A create answered 429 asks the organization what the 429 was, once per tick.
    let mut figures = Figures::new(host, &cfg);
    for (owner, answer) in round.send(|calls| client.send(calls)) {
        changes.push(match owner {
            Owner::Poll(unit, spec) => Poll {
                host,
                unit,
                spec: &spec,
                cfg: &cfg,
                now_ms: ctx.now_ms,
            }
            .change(&answer),
            Owner::Create(unit, spec) => {
                created(host, unit, &spec, &cfg, ctx.now_ms, &answer, &mut figures)
            }
        });
    }
    Ok(changes)
}

/// The request path of a task.
pub fn task_path(id: &str) -> String {
    format!("/v1/tasks/{}", path_segment(id))
}

fn step(unit: &Unit, now_ms: u64) -> Step {
    if unit.provider_job_id.is_some() {
        return Step::Poll;
    }
    if !unit.in_doubt {
        return Step::Create;
    }
    match unknown::in_doubt_since(unit, now_ms) {
        // The host kept the unit `submitted` after our `retry-after` and gives it back in
        // doubt. One window stays open: if the call that creates again is itself cut off (a
        // crash, or a call deadline shorter than the request timeout, which the defaults
        // avoid: 15 s against 30 s), the record still says "refused" and the next call
        // creates once more. The guest cannot write state before a request goes out.
        None => Step::Create,
        Some((since, reason)) => Step::Hold { since, reason },
    }
}

/// The change the answer to a create means; a 429 is judged on the organization's `figures`
/// (see [`crate::rate_limit`]).
fn created(
    host: &dyn Host,
    unit: &Unit,
    spec: &Spec,
    cfg: &Config,
    now_ms: u64,
    answer: &Result<Response, HttpError>,
    figures: &mut Figures<'_>,
) -> Change {
    let created = match create::classify(answer, now_ms) {
        Created::TooMany { after_ms, error } => {
            rate_limit::judge(error, after_ms, spec.model, figures.get())
        }
        other => other,
    };
    match created {
        Created::Accepted {
            id,
            estimated_credits,
        } => Change {
            state: Some(
                State {
                    created_at_ms: Some(now_ms),
                    estimated_credits,
                    ..State::default()
                }
                .to_json(),
            ),
            ..Change::of(unit, Outcome::Accepted(id))
        },
        Created::Refused { after_ms, error } | Created::TooMany { after_ms, error } => Change {
            state: Some(State::refused(unit, now_ms).to_json()),
            ..Change::of(unit, Outcome::RetryAfter { after_ms, error })
        },
        // The account, not the job: nothing was created, so the unit may be created again
        // (recorded as refused, like a daily-limit refusal, in case the host hands it back
        // in doubt); the host spends no retry budget on it.
        Created::AccountRefused(error) => Change {
            state: Some(State::refused(unit, now_ms).to_json()),
            ..Change::of(
                unit,
                Outcome::RetryAfter {
                    after_ms: None,
                    error,
                },
            )
        },
        Created::Failed(error) => Change::of(unit, Outcome::Fail(error)),
        Created::Unknown(reason) => {
            unknown::hold(host, unit, spec.model, cfg, now_ms, now_ms, &reason)
        }
    }
}
