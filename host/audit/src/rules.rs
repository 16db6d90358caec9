//! The invariants `slotd check` verifies, as pure functions over rows already read: each
//! returns findings and touches no database, so every rule is tested on hand-made rows.

use std::collections::{BTreeMap, BTreeSet};

use super::history::{ACCEPTED_PREFIX, marker};
use super::rows::{Finding, Snapshot, UnitRow};
use slotd_core::model::UnitStatus;

/// Every unit's event log is a legal path of the state machine (docs/state-machine.md): it starts with the
/// `created` row (`NULL -> pending`), each row leaves the status the previous one reached,
/// each move is legal, and the last row ends in the unit's current status.
pub fn event_paths(snap: &Snapshot) -> Vec<Finding> {
    let mut out = Vec::new();
    for unit in &snap.units {
        let events = snap.events.get(&unit.id).map(Vec::as_slice).unwrap_or(&[]);
        let Some(first) = events.first() else {
            out.push(unit_finding(
                unit,
                "event log",
                "the unit has no events".into(),
            ));
            continue;
        };
        if first.from_status.is_some() || first.to_status != "pending" {
            out.push(unit_finding(
                unit,
                "event log",
                format!(
                    "the first event (#{}) is {} -> {}, not the creation (none -> pending)",
                    first.id,
                    first.from_status.as_deref().unwrap_or("none"),
                    first.to_status
                ),
            ));
        }
        let mut reached: Option<&str> = None;
        for e in events {
            let from = e.from_status.as_deref();
            if let (Some(prev), Some(from)) = (reached, from)
                && prev != from
            {
                out.push(unit_finding(
                    unit,
                    "event log",
                    format!(
                        "event #{} leaves {from}, but the unit was {prev} after the previous event",
                        e.id
                    ),
                ));
            }
            if let Some(from) = from {
                match (
                    from.parse::<UnitStatus>(),
                    e.to_status.parse::<UnitStatus>(),
                ) {
                    (Ok(f), Ok(t)) if f.can_move_to(t) => {}
                    (Ok(f), Ok(t)) => out.push(unit_finding(
                        unit,
                        "illegal transition",
                        format!(
                            "event #{} moves {f} -> {t}, which the state machine forbids",
                            e.id
                        ),
                    )),
                    _ => out.push(unit_finding(
                        unit,
                        "event log",
                        format!(
                            "event #{} names an unknown status ({from} -> {})",
                            e.id, e.to_status
                        ),
                    )),
                }
            }
            reached = Some(&e.to_status);
        }
        if let Some(last) = reached
            && last != unit.status
        {
            out.push(unit_finding(
                unit,
                "event log",
                format!(
                    "the event log ends in {last}, but the unit is {}",
                    unit.status
                ),
            ));
        }
    }
    out
}

/// No idempotency key was accepted as two different provider jobs, and no provider job is
/// recorded on two units of the same pool.
pub fn idempotency(snap: &Snapshot) -> Vec<Finding> {
    let mut out = Vec::new();
    for unit in &snap.units {
        let events = snap.events.get(&unit.id).map(Vec::as_slice).unwrap_or(&[]);
        let mut key: Option<&str> = None;
        let mut jobs: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for e in events {
            let Some(detail) = e.detail.as_deref() else {
                continue;
            };
            if let Some(m) = marker(detail) {
                key = Some(m.key);
            } else if let (Some(k), Some(rest)) = (key, detail.strip_prefix(ACCEPTED_PREFIX)) {
                // The id is the first word: a callback appends " (callback)".
                if let Some(job) = rest.split_whitespace().next() {
                    jobs.entry(k).or_default().insert(job);
                }
            }
        }
        for (k, set) in jobs.into_iter().filter(|(_, s)| s.len() > 1) {
            let list: Vec<&str> = set.into_iter().collect();
            out.push(unit_finding(
                unit,
                "submitted twice",
                format!(
                    "idempotency key {k} was accepted as {} provider jobs: {}",
                    list.len(),
                    list.join(", ")
                ),
            ));
        }
    }
    let mut by_job: BTreeMap<(&str, &str), Vec<&UnitRow>> = BTreeMap::new();
    for u in &snap.units {
        if let Some(job) = u.provider_job_id.as_deref() {
            by_job.entry((&u.pool, job)).or_default().push(u);
        }
    }
    for ((pool, job), units) in by_job.into_iter().filter(|(_, v)| v.len() > 1) {
        let ids: Vec<&str> = units.iter().map(|u| u.id.as_str()).collect();
        out.push(Finding {
            kind: "submitted twice",
            task_id: units.first().map(|u| u.task_id.clone()),
            unit_id: None,
            message: format!(
                "provider job {job} of pool {pool} is recorded on {} units: {}",
                ids.len(),
                ids.join(", ")
            ),
        });
    }
    out
}

/// No unit stays `finalizing` without a live lease beyond `grace_ms`: a dead finalizer's
/// units must be taken over.
pub fn finalize_leases(snap: &Snapshot, now: i64, grace_ms: i64) -> Vec<Finding> {
    snap.units
        .iter()
        .filter(|u| u.status == "finalizing")
        .filter_map(|u| match u.lease_until {
            Some(until) if until.saturating_add(grace_ms) >= now => None,
            Some(until) => Some(unit_finding(
                u,
                "stuck finalizing",
                format!(
                    "finalizing, but its lease (owner {}) expired {} ms ago",
                    u.lease_owner.as_deref().unwrap_or("none"),
                    now.saturating_sub(until)
                ),
            )),
            None => Some(unit_finding(
                u,
                "stuck finalizing",
                "finalizing without a lease".into(),
            )),
        })
        .collect()
}

/// Tasks and units agree: every task has units, indexed 0..n without gaps, and every unit's
/// task exists.
pub fn tasks(snap: &Snapshot) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut by_task: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for u in &snap.units {
        by_task.entry(&u.task_id).or_default().push(u.idx);
    }
    for task in &snap.tasks {
        match by_task.get_mut(task.as_str()) {
            None => out.push(Finding {
                kind: "task",
                task_id: Some(task.clone()),
                unit_id: None,
                message: "the task has no units".into(),
            }),
            Some(idx) => {
                idx.sort_unstable();
                let expected: Vec<i64> = (0..idx.len() as i64).collect();
                if *idx != expected {
                    out.push(Finding {
                        kind: "task",
                        task_id: Some(task.clone()),
                        unit_id: None,
                        message: format!("unit indexes are {idx:?}, expected 0..{}", idx.len()),
                    });
                }
            }
        }
    }
    let known: BTreeSet<&str> = snap.tasks.iter().map(String::as_str).collect();
    for u in snap
        .units
        .iter()
        .filter(|u| !known.contains(u.task_id.as_str()))
    {
        out.push(unit_finding(
            u,
            "task",
            "the unit's task does not exist".into(),
        ));
    }
    out
}

/// No unit gave up a provider job that was still running (docs/state-machine.md, the slot
/// rule): from the unit's log, a submission whose job was accepted that then failed because its
/// retry budget was spent on transient errors, or at its stage deadline without the job
/// cancelled at the provider. Either freed the slot while the provider ran (and billed) the
/// job, which nobody then fetched.
pub fn abandoned_jobs(snap: &Snapshot) -> Vec<Finding> {
    let mut out = Vec::new();
    for unit in &snap.units {
        let events = snap.events.get(&unit.id).map(Vec::as_slice).unwrap_or(&[]);
        let mut job: Option<&str> = None;
        for e in events {
            let detail = e.detail.as_deref().unwrap_or_default();
            let from = e.from_status.as_deref();
            if let Some(rest) = detail.strip_prefix(ACCEPTED_PREFIX) {
                job = rest.split_whitespace().next();
                continue;
            }
            if from != Some("submitted") || e.to_status == "submitted" {
                if e.to_status == "submitted" && from != Some("submitted") {
                    job = None;
                }
                continue;
            }
            let Some(running) = job.take() else { continue };
            let budget = detail.starts_with("retry budget of ");
            let deadline =
                detail.contains("scheduler.stage_deadline") && !detail.contains("cancelled");
            if budget || deadline {
                out.push(unit_finding(
                    unit,
                    "abandoned job",
                    format!(
                        "event #{} left `submitted` for `{}` ({detail}) while provider job \
                         {running} ran: its slot was freed before the job ended",
                        e.id, e.to_status
                    ),
                ));
            }
        }
    }
    out
}

fn unit_finding(unit: &UnitRow, kind: &'static str, message: String) -> Finding {
    Finding {
        kind,
        task_id: Some(unit.task_id.clone()),
        unit_id: Some(unit.id.clone()),
        message,
    }
}

/// Every published handler release's bytes still hash to the key it was published under: a
/// process that loads a release by its key must get the file that was checked and published.
pub fn releases(snap: &Snapshot) -> Vec<Finding> {
    snap.releases
        .iter()
        .filter(|r| r.content_sha256 != r.sha256)
        .map(|r| Finding {
            kind: "handler release",
            task_id: None,
            unit_id: None,
            message: format!(
                "release {} of {} {}: its stored bytes hash to {}, not to its key",
                r.sha256, r.name, r.version, r.content_sha256
            ),
        })
        .collect()
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;

/// Every open budget reservation is the current submission of a `submitted` unit, and no unit
/// has two: a reservation outliving its submission would hold a tenant's budget forever.
pub fn reservations(snap: &Snapshot) -> Vec<Finding> {
    let units: BTreeMap<&str, &UnitRow> = snap.units.iter().map(|u| (u.id.as_str(), u)).collect();
    let mut out = Vec::new();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (unit_id, submission) in &snap.open_reservations {
        *seen.entry(unit_id.as_str()).or_default() += 1;
        let finding = |message: String| Finding {
            kind: "budget ledger",
            task_id: units.get(unit_id.as_str()).map(|u| u.task_id.clone()),
            unit_id: Some(unit_id.clone()),
            message,
        };
        match units.get(unit_id.as_str()) {
            None => out.push(finding(format!(
                "an open reservation ({submission}) names unit {unit_id}, which does not exist"
            ))),
            Some(u) if u.status != "submitted" => out.push(finding(format!(
                "unit {unit_id} is {} but its reservation for {submission} is still open",
                u.status
            ))),
            Some(u) if format!("{}-{}", u.stage, u.submit_attempt) != *submission => {
                out.push(finding(format!(
                    "unit {unit_id} is submitted as {}-{} but the open reservation is for \
                     {submission}",
                    u.stage, u.submit_attempt
                )))
            }
            Some(_) => {}
        }
    }
    for (unit_id, n) in seen.into_iter().filter(|(_, n)| *n > 1) {
        out.push(Finding {
            kind: "budget ledger",
            task_id: units.get(unit_id).map(|u| u.task_id.clone()),
            unit_id: Some(unit_id.to_string()),
            message: format!("unit {unit_id} has {n} open reservations; at most one may be"),
        });
    }
    out
}

/// No pool's recorded creates exceed one of its quotas: for a rolling window, no span of the
/// window's length holds more creates than the limit; for a calendar day, no day does.
pub fn quota_windows(
    snap: &Snapshot,
    quotas: &BTreeMap<String, Vec<slotd_core::config::Quota>>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for (pool, list) in quotas {
        let times: Vec<i64> = snap
            .creates
            .iter()
            .filter(|(p, _, _)| p == pool)
            .map(|(_, _, at)| *at)
            .collect();
        out.extend(over_quota(&format!("pool {pool}"), &times, list));
    }
    out
}

/// No account's recorded creates in one pool exceed one of its own quotas.
pub fn account_quota_windows(
    snap: &Snapshot,
    quotas: &BTreeMap<String, Vec<slotd_core::config::Quota>>,
) -> Vec<Finding> {
    let mut groups: BTreeMap<(&str, &str), Vec<i64>> = BTreeMap::new();
    for (pool, account, at) in &snap.creates {
        if let Some(a) = account.as_deref().filter(|a| quotas.contains_key(*a)) {
            groups.entry((pool.as_str(), a)).or_default().push(*at);
        }
    }
    let mut out = Vec::new();
    for ((pool, account), times) in groups {
        if let Some(list) = quotas.get(account) {
            out.extend(over_quota(
                &format!("account {account} in pool {pool}"),
                &times,
                list,
            ));
        }
    }
    out
}

/// The windows of `list` that `times` (ascending) exceed, as findings about `who`.
fn over_quota(who: &str, times: &[i64], list: &[slotd_core::config::Quota]) -> Vec<Finding> {
    use slotd_core::config::Window;
    let mut out = Vec::new();
    for q in list {
        let (count, at) = match q.window {
            Window::Rolling(_) => {
                let len = q.window.len_ms();
                let mut best = (0usize, 0i64);
                let mut first = 0;
                for (i, t) in times.iter().enumerate() {
                    while times[first] <= t - len {
                        first += 1;
                    }
                    if i + 1 - first > best.0 {
                        best = (i + 1 - first, times[first]);
                    }
                }
                best
            }
            Window::CalendarDay { .. } | Window::ZonedDay { .. } => {
                // Creates per calendar day (at the offset, or in the zone), by the day's start.
                let mut days: BTreeMap<i64, usize> = BTreeMap::new();
                for t in times {
                    *days
                        .entry(q.window.day_start(*t).unwrap_or(*t))
                        .or_default() += 1;
                }
                days.into_iter()
                    .max_by_key(|(_, n)| *n)
                    .map_or((0, 0), |(start, n)| (n, start))
            }
        };
        if count > q.limit as usize {
            out.push(Finding {
                kind: "quota window",
                task_id: None,
                unit_id: None,
                message: format!(
                    "{who}: {count} creates in the {} window from {at} (Unix ms); its quota \
                     allows {}",
                    q.window, q.limit
                ),
            });
        }
    }
    out
}
