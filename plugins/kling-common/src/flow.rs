//! One tick of a Kling handler, as rounds of concurrent requests (one `send-batch` each):
//!
//! 1. units without a job id: `in-doubt` ones are first looked up by external id
//!    (`GET {collection}/{idempotency-key}`); found → adopted, 404/1203 → submitted;
//!    the others are submitted at once (`POST {collection}` with `external_task_id` and
//!    `callback_url`);
//! 2. a submit refused as a duplicate external id (or any 1201 on an in-doubt unit) is looked
//!    up by external id and adopted, never resubmitted;
//! 3. units with a job id are polled, several of one collection through its list endpoint
//!    (see `list`), the rest by single queries.
//!
//! Lookups, submits and polls of the same round go out together, so a tick takes as many round
//! trips as its longest chain (at most lookup → submit → lookup), not one per unit.

use std::collections::BTreeMap;

use serde_json::Value;
use slotd_sdk::client::Call;
use slotd_sdk::polling::{ListPoll, Listing, Round, path_segment};
use slotd_sdk::{Change, Host, Outcome, ProviderError, TickContext, Unit};

use crate::answer::{CAPACITY_RETRY_MS, Class, Problem};
use crate::client::Client;
use crate::job::Job;
use crate::list;
use crate::task::{self, Read, Success, TaskObject};

/// Rounds a tick may take: lookup → submit → lookup, or list pages → single queries.
const MAX_ROUNDS: usize = 6;
/// Units of one collection due together from which the list endpoint is used.
pub const LIST_MIN_UNITS: usize = 2;

/// Per-call settings.
pub struct Settings<'a> {
    pub now_ms: u64,
    pub callback_url: Option<&'a str>,
    /// Multiply poll hints: the pace (`expected_duration_scale` in the handler config) and the
    /// expected durations (`stated_duration_scale`, the same unless set).
    pub hint_scale: crate::task::Scales,
}

/// Decides what a `succeed` task means for a unit.
pub type SuccessFn<'a> = &'a dyn Fn(&Unit, &TaskObject) -> Success;

/// A handler's whole tick: units whose spec `job_of` cannot read fail (`bad_spec`), the rest
/// run through [`run`]. `expected_duration_scale` (default 1) multiplies poll hints, for
/// simulators running faster than the real provider; `stated_duration_scale` (default: the
/// same) only the durations the handler expects of jobs.
pub fn tick(
    host: &dyn Host,
    handler: &str,
    ctx: &TickContext,
    batch: &[Unit],
    job_of: fn(&Unit) -> Result<Job<'_>, String>,
    success: SuccessFn<'_>,
) -> Result<Vec<Change>, String> {
    let hint_scale = crate::task::scales(host, handler)?;
    let mut client = Client::new(host, handler, ctx.now_ms)?;
    let mut changes = Vec::with_capacity(batch.len());
    let mut jobs = Vec::with_capacity(batch.len());
    for unit in batch {
        match job_of(unit) {
            Ok(job) => jobs.push(job),
            Err(why) => changes.push(Change::unusable(unit, why)),
        }
    }
    let settings = Settings {
        now_ms: ctx.now_ms,
        callback_url: ctx.callback_url.as_deref(),
        hint_scale,
    };
    changes.extend(run(&mut client, &jobs, &settings, success));
    Ok(changes)
}

/// Where one unit is in the tick.
enum Step {
    Lookup {
        after_submit: Option<ProviderError>,
    },
    Submit,
    Poll,
    /// Waiting for its collection's list pages.
    Listed,
    Done(Change),
}

/// Who asked for a call of a round.
enum Owner {
    Unit(usize),
    List(&'static str),
}

/// Run a tick over `jobs` and return one change per job.
pub fn run(
    client: &mut Client<'_>,
    jobs: &[Job<'_>],
    settings: &Settings<'_>,
    success: SuccessFn<'_>,
) -> Vec<Change> {
    let mut steps: Vec<Step> = jobs
        .iter()
        .map(|j| match (&j.unit.provider_job_id, j.unit.in_doubt) {
            (None, true) => Step::Lookup { after_submit: None },
            (None, false) => Step::Submit,
            (Some(_), _) => Step::Poll,
        })
        .collect();
    let mut lists = plan_lists(jobs, &mut steps);
    for _ in 0..MAX_ROUNDS {
        let mut round = Round::new();
        for (i, (job, step)) in jobs.iter().zip(&steps).enumerate() {
            if let Some(call) = step_call(job, step, settings) {
                round.push(Owner::Unit(i), call);
            }
        }
        for (collection, list) in &lists {
            if let Some(page) = list.next_page() {
                round.push(Owner::List(collection), list::call(collection, page));
            }
        }
        if round.is_empty() {
            break;
        }
        let mut list_answers = Vec::new();
        for (owner, answer) in round.send(|calls| client.round(calls)) {
            match owner {
                Owner::Unit(i) => {
                    steps[i] = advance(&jobs[i], &steps[i], answer, settings, success)
                }
                Owner::List(collection) => list_answers.push((collection, answer)),
            }
        }
        for (collection, answer) in list_answers {
            let Some(list) = lists.get_mut(collection) else {
                continue;
            };
            let Listing { found, give_up } = list.absorb(list::page(answer));
            for (i, task) in found {
                steps[i] = Step::Done(task_change(
                    &jobs[i],
                    &task,
                    settings,
                    success,
                    Read::Listed,
                ));
            }
            for i in give_up {
                steps[i] = Step::Poll;
            }
        }
    }
    jobs.iter()
        .zip(steps)
        .map(|(job, step)| match step {
            Step::Done(change) => change,
            // Out of rounds (cannot happen with the chains above): try again next tick.
            _ => retry(
                job.unit,
                ProviderError::new(None, "the tick ran out of request rounds"),
            ),
        })
        .collect()
}

/// The request a unit's step needs, if any.
fn step_call(job: &Job<'_>, step: &Step, settings: &Settings<'_>) -> Option<Call> {
    let unit = job.unit;
    Some(match step {
        Step::Lookup { .. } => Call::Get(format!(
            "{}/{}",
            job.collection,
            path_segment(&unit.idempotency_key)
        )),
        Step::Submit => Call::Post(job.collection.to_string(), create_body(job, settings)),
        Step::Poll => Call::Get(format!(
            "{}/{}",
            job.collection,
            path_segment(unit.provider_job_id.as_deref().unwrap_or_default())
        )),
        Step::Listed | Step::Done(_) => return None,
    })
}

/// Units with a job id in collections with several of them wait for list pages.
fn plan_lists(jobs: &[Job<'_>], steps: &mut [Step]) -> BTreeMap<&'static str, ListPoll> {
    let mut groups: BTreeMap<&'static str, Vec<usize>> = BTreeMap::new();
    for (i, (job, step)) in jobs.iter().zip(steps.iter()).enumerate() {
        if matches!(step, Step::Poll) {
            groups.entry(job.collection).or_default().push(i);
        }
    }
    let mut lists = BTreeMap::new();
    for (collection, members) in groups {
        if members.len() < LIST_MIN_UNITS {
            continue;
        }
        for &i in &members {
            steps[i] = Step::Listed;
        }
        lists.insert(collection, list::poll(&members, jobs));
    }
    lists
}

fn create_body(job: &Job<'_>, settings: &Settings<'_>) -> Value {
    let mut body = job.body.clone();
    if let Value::Object(map) = &mut body {
        map.insert(
            "external_task_id".into(),
            Value::String(job.unit.idempotency_key.clone()),
        );
        if let Some(url) = settings.callback_url {
            map.insert("callback_url".into(), Value::String(url.to_string()));
        }
    }
    body
}

/// The next step of a unit after the answer to its call.
fn advance(
    job: &Job<'_>,
    step: &Step,
    answer: Result<Value, Problem>,
    settings: &Settings<'_>,
    success: SuccessFn<'_>,
) -> Step {
    let unit = job.unit;
    let found = |data: Value| match TaskObject::parse(&data) {
        Ok(task) => Step::Done(task_change(job, &task, settings, success, Read::Single)),
        Err(e) => Step::Done(retry(unit, ProviderError::new(Some("malformed"), e))),
    };
    match (step, answer) {
        (Step::Lookup { .. }, Ok(data)) | (Step::Poll, Ok(data)) => found(data),
        (Step::Lookup { after_submit: None }, Err(p)) if p.class == Class::NotFound => Step::Submit,
        (
            Step::Lookup {
                after_submit: Some(e),
            },
            Err(p),
        ) if p.class == Class::NotFound => {
            let message = format!(
                "create refused ({}) but no task has external_task_id {}",
                e.message, unit.idempotency_key
            );
            Step::Done(retry(unit, ProviderError::new(e.code.as_deref(), message)))
        }
        (Step::Submit, Ok(data)) => match task::text(data.get("task_id")) {
            Some(id) => Step::Done(Change::of(unit, Outcome::Accepted(id))),
            // Created or not, the unit stays submitted and is looked up next tick.
            None => Step::Done(retry(
                unit,
                ProviderError::new(Some("malformed"), "create answer has no data.task_id"),
            )),
        },
        (Step::Submit, Err(p))
            if p.class == Class::Duplicate
                || (unit.in_doubt && p.class == Class::InvalidParameter) =>
        {
            Step::Lookup {
                after_submit: Some(p.error),
            }
        }
        (Step::Submit, Err(p)) => Step::Done(problem_change(unit, p, true)),
        (_, Err(p)) => Step::Done(problem_change(unit, p, false)),
        (Step::Listed | Step::Done(_), Ok(_)) => Step::Done(retry(
            unit,
            ProviderError::new(None, "unexpected answer for a unit with no request"),
        )),
    }
}

fn task_change(
    job: &Job<'_>,
    task: &TaskObject,
    settings: &Settings<'_>,
    success: SuccessFn<'_>,
    read: Read,
) -> Change {
    let hint = if job.stated {
        task::pace_hint(settings.hint_scale, read)
    } else {
        task::running_hint(
            job.unit,
            settings.now_ms,
            job.expected_secs,
            settings.hint_scale,
            read,
        )
    };
    task::change_for(job.unit, task, hint, success)
}

/// A refusal turned into an outcome. On a submit, 1303 is `capacity-rejected` and an HTTP 5xx
/// answer is `not_created` (contract 1.5: the host sends the unit back to `pending` instead of
/// looking the submission up; a timeout or transport error stays an ordinary retry, which
/// the host follows with an in-doubt lookup). A poll or lookup that cannot find its task is
/// retried (the budget decides), not failed at once.
fn problem_change(unit: &Unit, p: Problem, submit: bool) -> Change {
    if submit && let Some(error) = p.not_created() {
        return Change::of(unit, Outcome::retry(error));
    }
    let outcome = match p.class {
        Class::Capacity if submit && unit.provider_job_id.is_none() => {
            Outcome::CapacityRejected(Some(CAPACITY_RETRY_MS))
        }
        // The account, not the job (contract 1.2): the host gives the unit back without
        // spending its retry budget and drains the account.
        Class::AccountRefused | Class::AccountExhausted => Outcome::retry(p.error),
        Class::Capacity | Class::Transient | Class::TokenTime => Outcome::retry(p.error),
        Class::NotFound if !submit => Outcome::retry(p.error),
        _ => Outcome::Fail(p.error),
    };
    Change::of(unit, outcome)
}

fn retry(unit: &Unit, error: ProviderError) -> Change {
    Change::of(unit, Outcome::retry(error))
}
