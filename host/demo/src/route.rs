//! The demo's route (docs/routes.md): `clip`, one canonical payload that Kling, Runway and Pika
//! (through fal) all serve, policy `ordered` (Kling first, then Runway, then Pika, among the
//! targets with room). Its shots wait on the route and are bound to a target only when that
//! target's pool grants a slot, so they fill whichever provider frees first.
//!
//! Partway, Kling's resource packs run out: once the Kling tasks no longer need an account
//! (the backup's when no `kling:video` unit waits any more, the main account's when the avatar
//! clones have ended too, so no figure of the Kling pools depends on it), the demo empties its
//! balance through the simulator's control endpoint (`POST /_sim/account {"balance": 0}`).
//! From then on only routed shots meet it: it refuses their creates 429/1102 before any job
//! exists, and they fail over, to the other account while it has packs, else to Runway or
//! Pika. (Leaving it a unit or two would let Kling serve a shot more, but with the default
//! seed the simulator draws that next Kling job a long tail that stretches the demo by half a
//! minute.) The summary counts what each target served, the failovers by reason and where those
//! units went, and checks in the simulators' own job lists that every routed unit had exactly
//! one provider job.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use slotd_core::config::{Config, RouteConfig, RoutePolicy, RouteTarget};
use slotd_sim::fal::FalSimHandle;
use slotd_sim::kling::SimHandle;
use slotd_sim::runway::RunwaySimHandle;

use super::{get_json, pika, runway};

/// The route's name: a task type (`POST /v1/tasks/clip`).
pub const ROUTE: &str = "clip";
/// Its targets in order: (handler, model).
pub const TARGETS: [(&str, &str); 3] = [
    ("kling-video", "kling-v1-6"),
    (runway::HANDLER, "gen4_turbo"),
    (pika::HANDLER, pika::POOLS[1].0),
];
/// Routed shots the demo submits.
pub const SHOTS: u32 = 8;
/// Every this many shots, one carries a `seed`: Kling takes none, so only Runway and Pika
/// plan it.
const SEED_EVERY: u32 = 4;
/// Shots that carry a seed.
pub const SEEDED: u32 = SHOTS / SEED_EVERY;
/// Why a target was left out of a shot when the task was planned (not a failover).
const PLAN_REASONS: [&str; 3] = ["plan", "unavailable", "contract"];
/// The Kling tasks' pools: once their work is handed out, Kling's packs run out.
const KLING_VIDEO: &str = "kling:video";
const KLING_AVATAR: &str = "kling:avatar";

/// `[routes.clip]`.
pub fn configure(c: &mut Config) {
    c.routes.insert(
        ROUTE.into(),
        RouteConfig {
            policy: RoutePolicy::Ordered,
            targets: TARGETS
                .iter()
                .map(|(handler, model)| RouteTarget {
                    handler: (*handler).into(),
                    model: (*model).into(),
                    weight: None,
                })
                .collect(),
        },
    );
}

/// Shot `i`'s prompt (unique: fal's job list is matched to units by it).
fn prompt(i: u32) -> String {
    format!(
        "clip shot {}: a paper boat drifts down a rain-soaked gutter",
        i + 1
    )
}

/// The routed part of the workload: (tenant, task type, label, payload, units).
pub fn workload() -> Vec<(&'static str, &'static str, String, Value, u32)> {
    let shots: Vec<Value> = (0..SHOTS)
        .map(|i| {
            let mut s = json!({"prompt": prompt(i),
                               "image_url": format!("https://example.com/boats/{}.png", i + 1),
                               "duration": 5, "aspect_ratio": "16:9"});
            if i % SEED_EVERY == SEED_EVERY - 1 {
                s["seed"] = json!(40 + i);
            }
            s
        })
        .collect();
    vec![(
        "studio-c",
        ROUTE,
        format!("route {ROUTE}, {SHOTS} shots (kling|runway|pika)"),
        json!({ "shots": shots }),
        SHOTS,
    )]
}

/// The `target` of a route refusal event (`route clip: H/M refused it (REASON: …`) and its
/// reason.
fn refusal(detail: &str) -> Option<(&str, &str)> {
    let rest = detail
        .strip_prefix("route ")?
        .strip_prefix(ROUTE)?
        .strip_prefix(": ")?;
    let (target, rest) = rest.split_once(" refused it (")?;
    let reason = rest.split(':').next()?;
    Some((target, reason))
}

/// Units of a pool (`GET /v1/pools` entry) in `statuses`.
fn units_in(pool: &Value, statuses: &[&str]) -> u64 {
    statuses
        .iter()
        .filter_map(|s| pool["units"][*s].as_u64())
        .sum()
}

/// What the watcher saw in `GET /v1/pools` of the Kling tasks' work.
#[derive(Clone, Copy, Debug, PartialEq)]
struct KlingWork {
    /// No `kling:video` unit waits for a slot: the backup account (video only) has done its part.
    video_handed_out: bool,
    /// Nor does any avatar clone need a create any more: the main account has done its part too.
    all_handed_out: bool,
    /// A `kling:video` unit waits for a create (again): either account may get it.
    video_waiting: bool,
    /// An avatar clone waits for a create: only the main account serves avatars.
    avatar_waiting: bool,
}

impl KlingWork {
    /// A Kling task's unit waits for a create on an account whose packs ran out (`ran_out`:
    /// main, backup). An avatar clone waiting while only the backup (video only) ran out does
    /// not need it.
    fn needs_packs(&self, ran_out: [bool; 2]) -> bool {
        let [main, backup] = ran_out;
        (self.video_waiting && (main || backup)) || (self.avatar_waiting && main)
    }
}

/// The Kling tasks' work as `GET /v1/pools` shows it; `None` while a Kling pool is missing.
fn kling_work(pools: &Value) -> Option<KlingWork> {
    let pool = |name: &str| {
        pools
            .as_array()?
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
    };
    let (video, avatar) = (pool(KLING_VIDEO)?, pool(KLING_AVATAR)?);
    const ALL: [&str; 7] = [
        "pending",
        "submitted",
        "succeeded",
        "finalizing",
        "completed",
        "failed",
        "cancelled",
    ];
    const OPEN: [&str; 4] = ["pending", "submitted", "succeeded", "finalizing"];
    let video_handed_out = units_in(&video, &ALL) > 0 && units_in(&video, &["pending"]) == 0;
    Some(KlingWork {
        video_handed_out,
        all_handed_out: video_handed_out
            && units_in(&avatar, &ALL) > 0
            && units_in(&avatar, &OPEN) == 0,
        video_waiting: units_in(&video, &["pending"]) > 0,
        avatar_waiting: units_in(&avatar, &["pending"]) > 0,
    })
}

/// Set a Kling account's balance (`null`: unlimited).
async fn set_balance(client: &reqwest::Client, url: &str, balance: Value) -> bool {
    let r = client
        .post(format!("{url}/_sim/account"))
        .json(&json!({ "balance": balance }))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status);
    match r {
        Ok(_) => true,
        Err(e) => {
            eprintln!("could not set the Kling account's balance at {url}: {e}");
            false
        }
    }
}

/// When each Kling account's packs ran out (main, backup), and whether they had to be topped
/// up again.
#[derive(Clone, Copy, Debug, Default)]
pub struct Packs {
    pub ran_out_at: [Option<Duration>; 2],
    pub topped_up_at: Option<Duration>,
}

/// Empty each Kling account's resource packs (the simulators' `POST /_sim/account
/// {"balance": 0}`) once the Kling tasks no longer need it: the backup account's when the
/// video backlog is handed out, the main account's when the avatar clones have ended too. From
/// then on only routed shots meet the account, and it refuses their creates (429/1102), so
/// they fail over. Should a Kling task's unit wait for a create on an account that ran out
/// after all (a resubmission; an avatar clone still waiting for the main account's share is
/// not one while only the backup ran out), both are topped up (unlimited) so that it does not wait for ever. Ends when
/// `done` is cancelled.
pub async fn run_out_of_packs(
    client: reqwest::Client,
    base: String,
    key: &'static str,
    [main, backup]: [String; 2],
    every: Duration,
    started: Instant,
    done: tokio_util::sync::CancellationToken,
) -> Packs {
    let mut packs = Packs::default();
    loop {
        let seen = get_json(&client, &format!("{base}/v1/pools"), key)
            .await
            .ok()
            .as_ref()
            .and_then(kling_work);
        if let Some(w) = seen
            && packs.topped_up_at.is_none()
        {
            if w.needs_packs(packs.ran_out_at.map(|t| t.is_some())) {
                let main_ok = set_balance(&client, &main, Value::Null).await;
                let backup_ok = set_balance(&client, &backup, Value::Null).await;
                if main_ok && backup_ok {
                    packs.topped_up_at = Some(started.elapsed());
                }
            } else {
                for (i, (url, due)) in [(&main, w.all_handed_out), (&backup, w.video_handed_out)]
                    .into_iter()
                    .enumerate()
                {
                    if due
                        && packs.ran_out_at[i].is_none()
                        && set_balance(&client, url, json!(0)).await
                    {
                        packs.ran_out_at[i] = Some(started.elapsed());
                    }
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = done.cancelled() => return packs,
        }
    }
}

/// How the route's task went.
#[derive(Clone, Debug, Default)]
pub struct RouteOutcome {
    /// Routed units, and those completed.
    pub units: u64,
    pub completed: u64,
    /// Units per target (`handler/model`) that served them, and of those the completed.
    pub served: BTreeMap<String, u64>,
    pub completed_by: BTreeMap<String, u64>,
    /// What each target's units cost, in its provider's own unit.
    pub cost: BTreeMap<String, f64>,
    /// Refusals before a job existed that sent a unit back to the route, by reason.
    pub failovers: BTreeMap<String, u64>,
    /// Shots a target refused to plan (left out for that shot), by target.
    pub left_out: BTreeMap<String, u64>,
    /// Each routed unit's provider jobs (`kling 17`, `runway <id>`, `fal <id>`), from the
    /// simulators' own job lists.
    pub jobs_per_unit: Vec<(String, Vec<String>)>,
    /// Runway or fal jobs no unit of the demo recorded (a job made twice would show here).
    pub unclaimed_jobs: usize,
    /// When Kling's packs ran out (and were topped up again, if a Kling task needed them),
    /// and the creates Kling refused for them.
    pub packs: Packs,
    pub balance_refusals: u64,
    /// Where the units that failed over ended, by target.
    pub failed_over_to: BTreeMap<String, u64>,
}

impl RouteOutcome {
    /// Every routed unit had exactly one provider job, and no job is unaccounted for.
    pub fn one_job_each(&self) -> bool {
        self.unclaimed_jobs == 0
            && self.jobs_per_unit.len() as u64 == self.units
            && self.jobs_per_unit.iter().all(|(_, jobs)| jobs.len() == 1)
    }
}

/// The simulators the route's jobs went to.
pub struct Sims<'a> {
    pub kling: [&'a SimHandle; 2],
    pub runway: &'a RunwaySimHandle,
    pub fal: &'a FalSimHandle,
}

/// Read the routed task (its units, results and events) and count its jobs in the simulators.
/// `other_runway` and `other_fal` are the units of the demo's other Runway and Pika tasks (one
/// job each), so a job no unit recorded is found.
pub async fn outcome(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    task_id: &str,
    sims: Sims<'_>,
    (other_runway, other_fal): (u64, u64),
) -> anyhow::Result<RouteOutcome> {
    let view = get_json(
        client,
        &format!("{base}/v1/tasks/{task_id}?units=true"),
        key,
    )
    .await?;
    let events = get_json(client, &format!("{base}/v1/tasks/{task_id}/events"), key).await?;
    let mut out = RouteOutcome::default();
    let results = view["results"].as_array().cloned().unwrap_or_default();
    for r in &results {
        out.count_result(r);
    }
    for e in events["events"].as_array().into_iter().flatten() {
        if let Some((_, reason)) = e["detail"].as_str().and_then(refusal) {
            *out.failovers.entry(reason.to_string()).or_default() += 1;
        }
    }
    let jobs = ProviderJobs::of(&sims);
    let units = view["units"].as_array().cloned().unwrap_or_default();
    out.jobs_per_unit = jobs.per_unit(&units, &results);
    let served = |handler: &str| -> u64 {
        out.served
            .iter()
            .filter(|(t, _)| t.starts_with(&format!("{handler}/")))
            .map(|(_, n)| n)
            .sum()
    };
    let unclaimed = |jobs: usize, claimed: u64| jobs.saturating_sub(claimed as usize);
    out.unclaimed_jobs = unclaimed(jobs.runway.len(), other_runway + served(runway::HANDLER))
        + unclaimed(jobs.fal.len(), other_fal + served(pika::HANDLER));
    out.balance_refusals = sims.kling.iter().map(|s| s.stats().balance_refusals).sum();
    Ok(out)
}

impl RouteOutcome {
    /// Count one routed unit's result: the target that served it, its cost, and the targets
    /// that refused it (a failover) or were left out when the task was planned.
    fn count_result(&mut self, r: &Value) {
        self.units += 1;
        if r["status"] == "completed" {
            self.completed += 1;
        }
        let route = &r["route"];
        if let (Some(h), Some(m)) = (route["handler"].as_str(), route["model"].as_str()) {
            let target = format!("{h}/{m}");
            *self.served.entry(target.clone()).or_default() += 1;
            if r["status"] == "completed" {
                *self.completed_by.entry(target.clone()).or_default() += 1;
            }
            if let Some(c) = r["cost"].as_f64() {
                *self.cost.entry(target).or_default() += c;
            }
        }
        let refused = route["refused"].as_array().cloned().unwrap_or_default();
        let at_plan = |x: &Value| PLAN_REASONS.iter().any(|r| x["reason"] == *r);
        if refused.iter().any(|x| !at_plan(x))
            && let (Some(h), Some(m)) = (route["handler"].as_str(), route["model"].as_str())
        {
            *self.failed_over_to.entry(format!("{h}/{m}")).or_default() += 1;
        }
        for x in &refused {
            if at_plan(x) {
                let target = format!(
                    "{}/{}",
                    x["handler"].as_str().unwrap_or("?"),
                    x["model"].as_str().unwrap_or("?")
                );
                *self.left_out.entry(target).or_default() += 1;
            }
        }
    }
}

/// The simulators' own job lists: Kling's as (`external_task_id`, task id), Runway's and fal's.
struct ProviderJobs {
    kling: Vec<(String, String)>,
    runway: Vec<slotd_sim::runway::RunwayJob>,
    fal: Vec<slotd_sim::fal::FalJob>,
}

impl ProviderJobs {
    fn of(sims: &Sims<'_>) -> Self {
        Self {
            kling: sims
                .kling
                .iter()
                .flat_map(|s| s.jobs())
                .filter_map(|j| Some((j.external_task_id?, j.task_id)))
                .collect(),
            runway: sims.runway.jobs(),
            fal: sims.fal.jobs(),
        }
    }

    /// Each unit's jobs: Kling's by `external_task_id` (the unit's key), fal's by the shot's
    /// prompt or the request id a unit fal served recorded, Runway's by the job id a unit
    /// Runway served recorded (Runway has no client id: a Runway job no unit recorded is
    /// counted against the units of every task). Job ids are matched per provider: two
    /// simulators on one seed draw the same ids.
    fn per_unit(&self, units: &[Value], results: &[Value]) -> Vec<(String, Vec<String>)> {
        let handler_of: BTreeMap<u64, String> = results
            .iter()
            .filter_map(|r| {
                Some((
                    r["index"].as_u64()?,
                    r["route"]["handler"].as_str()?.to_string(),
                ))
            })
            .collect();
        let mut out = Vec::new();
        for u in units {
            let id = u["id"].as_str().unwrap_or_default();
            let job = u["provider_job_id"].as_str();
            let index = u["index"].as_u64().unwrap_or(u64::MAX);
            let prompt = u32::try_from(index).ok().map(prompt);
            let served_by = |h: &str| handler_of.get(&index).is_some_and(|x| x == h);
            let (on_runway, on_fal) = (served_by(runway::HANDLER), served_by(pika::HANDLER));
            let mut jobs: Vec<String> = self
                .kling
                .iter()
                .filter(|(k, _)| !id.is_empty() && k.starts_with(id))
                .map(|(_, j)| format!("kling {j}"))
                .collect();
            jobs.extend(
                self.runway
                    .iter()
                    .filter(|j| on_runway && Some(j.task_id.as_str()) == job)
                    .map(|j| format!("runway {}", j.task_id)),
            );
            jobs.extend(
                self.fal
                    .iter()
                    .filter(|j| {
                        (on_fal && Some(j.request_id.as_str()) == job)
                            || (j.prompt.is_some() && j.prompt == prompt)
                    })
                    .map(|j| format!("fal {}", j.request_id)),
            );
            out.push((id.to_string(), jobs));
        }
        out
    }
}

/// The summary's route line.
pub fn summary(o: &RouteOutcome) -> String {
    let served: Vec<String> = TARGETS
        .iter()
        .map(|(h, m)| {
            let t = format!("{h}/{m}");
            let n = o.served.get(&t).copied().unwrap_or(0);
            match o.cost.get(&t) {
                Some(c) if n > 0 => format!("{t} {n} (cost {c:.2})"),
                _ => format!("{t} {n}"),
            }
        })
        .collect();
    let failovers: u64 = o.failovers.values().sum();
    let reasons: Vec<String> = o
        .failovers
        .iter()
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    let left_out: Vec<String> = o.left_out.iter().map(|(t, n)| format!("{t} {n}")).collect();
    let ran_out: Vec<String> = ["main", "backup"]
        .iter()
        .zip(o.packs.ran_out_at)
        .filter_map(|(name, at)| Some(format!("{name} at {:.1}s", at?.as_secs_f64())))
        .collect();
    let packs = if ran_out.is_empty() {
        String::new()
    } else {
        format!(
            "; Kling's resource packs ran out ({}): {} creates refused 429/1102{}",
            ran_out.join(", "),
            o.balance_refusals,
            match o.packs.topped_up_at {
                Some(t) => format!(", topped up at {:.1}s for a Kling task", t.as_secs_f64()),
                None => String::new(),
            }
        )
    };
    let moved: Vec<String> = o
        .failed_over_to
        .iter()
        .map(|(t, n)| format!("{t} {n}"))
        .collect();
    format!(
        "route {ROUTE} (ordered): {}/{} routed units completed; served by {}; failovers {failovers}{}{}; \
         left out when planned: {}; {}",
        o.completed,
        o.units,
        served.join(", "),
        if reasons.is_empty() {
            String::new()
        } else {
            format!(
                " ({}; those units then served by {})",
                reasons.join(", "),
                moved.join(", ")
            )
        },
        packs,
        if left_out.is_empty() {
            "none".to_string()
        } else {
            left_out.join(", ")
        },
        if o.one_job_each() {
            format!(
                "every routed unit had exactly one provider job ({} jobs)",
                o.jobs_per_unit.iter().map(|(_, j)| j.len()).sum::<usize>()
            )
        } else {
            format!(
                "NOT one provider job per routed unit: {:?}; {} jobs no unit recorded",
                o.jobs_per_unit
                    .iter()
                    .filter(|(_, j)| j.len() != 1)
                    .collect::<Vec<_>>(),
                o.unclaimed_jobs
            )
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_event_names_its_target_and_reason() {
        assert_eq!(
            refusal(
                "route clip: kling-video/kling-v1-6 refused it (account_exhausted: kling 1102 \
                 resource pack exhausted); back to the route"
            ),
            Some(("kling-video/kling-v1-6", "account_exhausted"))
        );
        assert_eq!(
            refusal("route clip: bound to kling-video/kling-v1-6 in pool kling:video"),
            None
        );
        assert_eq!(refusal("route other: x/y refused it (capacity: …)"), None);
    }

    #[test]
    fn the_packs_are_topped_up_only_for_work_an_emptied_account_would_serve() {
        let pools = |video: u64, avatar: u64| {
            json!([
                { "name": KLING_VIDEO, "units": { "pending": video, "completed": 40 } },
                { "name": KLING_AVATAR, "units": { "pending": avatar, "submitted": 1 } },
            ])
        };
        let avatars_waiting = kling_work(&pools(0, 3)).expect("both pools");
        assert!(avatars_waiting.video_handed_out && !avatars_waiting.all_handed_out);
        // Only the backup (video only) ran out: avatar clones waiting for the main account's
        // share do not need it (CI saw the demo top the packs up for them).
        assert!(!avatars_waiting.needs_packs([false, true]));
        assert!(avatars_waiting.needs_packs([true, true]));
        // A video unit waiting again may be sent to either account.
        let video_again = kling_work(&pools(1, 0)).expect("both pools");
        assert!(video_again.needs_packs([false, true]));
        assert!(!video_again.needs_packs([false, false]));
        assert_eq!(kling_work(&json!([{ "name": KLING_VIDEO }])), None);
    }

    #[test]
    fn the_routed_shots_are_canonical_and_some_carry_a_seed() {
        let w = workload();
        assert_eq!(w.len(), 1);
        let shots = w[0].3["shots"].as_array().cloned().unwrap_or_default();
        assert_eq!(shots.len() as u32, SHOTS);
        assert_eq!(w[0].4, SHOTS);
        for s in &shots {
            assert!(
                s["image_url"]
                    .as_str()
                    .is_some_and(|u| u.starts_with("https://"))
            );
            assert_eq!(s["duration"], 5);
            assert_eq!(s["aspect_ratio"], "16:9");
        }
        assert_eq!(
            shots.iter().filter(|s| s.get("seed").is_some()).count() as u32,
            SEEDED
        );
    }
}
