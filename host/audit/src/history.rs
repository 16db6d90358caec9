//! The rules that replay the unit log over time instead of reading one instant: at the end of
//! a run no unit is `submitted`, so a count of `submitted` units says nothing about what
//! happened during it.
//!
//! - **Slot peaks**: every `pending -> submitted` event takes a slot of the pool and account
//!   its submit marker names; the next event leaving `submitted` gives it back. Replayed in
//!   event id order over every unit, the count per pool and per pool and account must never
//!   exceed the configured maxima. Event ids follow causality: a grant that needed another
//!   unit's slot read its release, so the release's row was inserted first and has the lower
//!   id. (Two transactions that did not see each other may interleave the other way; that can
//!   hide an overlap of a few milliseconds, never invent one.)
//! - **Resubmits**: a unit's submissions are keyed `{unit}-{stage}-{attempt}`. An attempt
//!   above 0 is legal only after a `retry requested: submit attempt N` event (which leaves
//!   `failed`), and a key the provider accepted is never marked again without such a retry
//!   in between: either would be a second provider job for one unit.

use std::collections::{BTreeMap, BTreeSet};

use super::rows::{EventRow, Finding, Snapshot, UnitRow};

/// Prefix of the event detail written with the submit marker:
/// `submit marked: key K in pool P[ account A]` (`store::*::units::unit_mark_submitted`; rows
/// written before 0.27 end after the key).
pub(super) const MARKER_PREFIX: &str = "submit marked: key ";
/// Prefix of the event detail of an accepted submit: `accepted as provider job J`
/// (`scheduler::decide`).
pub(super) const ACCEPTED_PREFIX: &str = "accepted as provider job ";
/// Prefix of the event detail of an explicit retry (`store::*::tasks::task_retry_failed`).
const RETRY_PREFIX: &str = "retry requested: submit attempt ";

/// What a submit marker's detail says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Marker<'a> {
    /// The idempotency key: `{unit}-{stage}-{attempt}`.
    pub key: &'a str,
    /// The pool the slot was taken in (`None` in rows older than the field).
    pub pool: Option<&'a str>,
    /// The provider account (`None`: the implicit one, or an older row).
    pub account: Option<&'a str>,
}

/// Parse a submit marker's detail; `None` for any other event.
pub(super) fn marker(detail: &str) -> Option<Marker<'_>> {
    let rest = detail.strip_prefix(MARKER_PREFIX)?;
    let (key, place) = match rest.split_once(" in pool ") {
        Some((key, place)) => (key, Some(place)),
        None => (rest.split_whitespace().next().unwrap_or(rest), None),
    };
    let (pool, account) = match place {
        // Account names have no spaces (`config/handler.rs`), pool names may.
        Some(place) => match place.rsplit_once(" account ") {
            Some((pool, account)) if !account.contains(' ') => (Some(pool), Some(account)),
            _ => (Some(place), None),
        },
        None => (None, None),
    };
    Some(Marker { key, pool, account })
}

/// The submit attempt a key names (its last `-` part).
fn key_attempt(key: &str) -> Option<i64> {
    key.rsplit_once('-')?.1.parse().ok()
}

/// The first place a count went above its maximum, and its peak.
struct Over {
    peak: u32,
    first_event: i64,
    first_at: i64,
}

/// A running count of slots held, with the peaks above a maximum.
#[derive(Default)]
struct Counter {
    now: BTreeMap<String, u32>,
    over: BTreeMap<String, Over>,
}

impl Counter {
    fn take(&mut self, key: &str, max: Option<u32>, e: &EventRow) {
        let n = self.now.entry(key.to_string()).or_default();
        *n += 1;
        let n = *n;
        if max.is_some_and(|m| n > m) {
            let over = self.over.entry(key.to_string()).or_insert(Over {
                peak: n,
                first_event: e.id,
                first_at: e.at,
            });
            over.peak = over.peak.max(n);
        }
    }

    fn give(&mut self, key: &str) {
        if let Some(n) = self.now.get_mut(key) {
            *n = n.saturating_sub(1);
        }
    }
}

/// Where a unit's slot is held: (pool, account).
pub type Holding = (String, Option<String>);

/// Replay the unit log (see the module docs): `f` is called with each event that takes a slot
/// (`true`) or gives one back (`false`), and where the slot is held.
fn replay_slots<'a>(snap: &'a Snapshot, mut f: impl FnMut(&'a EventRow, &Holding, bool)) {
    let units: BTreeMap<&str, &UnitRow> = snap.units.iter().map(|u| (u.id.as_str(), u)).collect();
    let mut log: Vec<(&str, &EventRow)> = snap
        .events
        .iter()
        .flat_map(|(unit, events)| events.iter().map(move |e| (unit.as_str(), e)))
        .collect();
    log.sort_by_key(|(_, e)| e.id);
    let mut holding: BTreeMap<&str, Holding> = BTreeMap::new();
    for (unit, e) in log {
        let entered = e.to_status == "submitted" && e.from_status.as_deref() != Some("submitted");
        let left = e.from_status.as_deref() == Some("submitted") && e.to_status != "submitted";
        if entered && !holding.contains_key(unit) {
            let named = e.detail.as_deref().and_then(marker);
            let row = units.get(unit);
            let pool = named
                .as_ref()
                .and_then(|m| m.pool)
                .map(String::from)
                .or_else(|| row.map(|u| u.pool.clone()))
                .unwrap_or_default();
            let account = match named.as_ref().filter(|m| m.pool.is_some()) {
                Some(m) => m.account.map(String::from),
                None => row.and_then(|u| u.account.clone()),
            };
            let held = (pool, account);
            f(e, &held, true);
            holding.insert(unit, held);
        } else if left && let Some(held) = holding.remove(unit) {
            f(e, &held, false);
        }
    }
}

/// A provider account whose limit spans pools (`[provider_accounts.NAME]`), as the check
/// reads it: its limit, and each slot set on it, (pool, handler account), with its share's
/// maximum.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SharedCheck {
    pub limit: u32,
    pub members: BTreeMap<Holding, u32>,
}

/// No provider account shared by pools ever held more `submitted` units over its pools than
/// its limit, nor a pool more than its share's maximum, replayed from the unit log.
pub fn shared_peaks(snap: &Snapshot, shared: &BTreeMap<String, SharedCheck>) -> Vec<Finding> {
    if shared.is_empty() {
        return Vec::new();
    }
    let (mut total, mut share) = (Counter::default(), Counter::default());
    replay_slots(snap, |e, held, took| {
        for (name, a) in shared {
            let Some(max) = a.members.get(held) else {
                continue;
            };
            let member = format!("{name}/{}", slot_name(held));
            if took {
                total.take(name, Some(a.limit), e);
                share.take(&member, Some(*max), e);
            } else {
                total.give(name);
                share.give(&member);
            }
        }
    });
    let mut out: Vec<Finding> = total
        .over
        .iter()
        .map(|(name, o)| Finding {
            kind: "account limit",
            task_id: None,
            unit_id: None,
            message: format!(
                "provider account {name} held {} submitted units at once over its pools (first \
                 above at event #{}, {}); its max_slots is {}",
                o.peak,
                o.first_event,
                o.first_at,
                shared.get(name).map_or(0, |a| a.limit)
            ),
        })
        .collect();
    out.extend(share.over.iter().map(|(member, o)| Finding {
        kind: "account limit",
        task_id: None,
        unit_id: None,
        message: format!(
            "{member} held {} submitted units at once (first above at event #{}, {}), more than \
             its share's max",
            o.peak, o.first_event, o.first_at
        ),
    }));
    out
}

/// A slot set's name: `pool` or `pool@account`.
fn slot_name((pool, account): &Holding) -> String {
    match account {
        Some(a) => format!("{pool}@{a}"),
        None => pool.clone(),
    }
}

/// No pool ever held more `submitted` units than its maximum, nor an account more than its
/// own in any pool, replayed from the unit log (see the module docs). `pools` are pools'
/// maxima by name, `accounts` accounts' maxima (per pool) by account name.
pub fn slot_peaks(
    snap: &Snapshot,
    pools: &BTreeMap<String, u32>,
    accounts: &BTreeMap<String, u32>,
) -> Vec<Finding> {
    let (mut by_pool, mut by_account) = (Counter::default(), Counter::default());
    replay_slots(snap, |e, (pool, account), took| {
        if took {
            by_pool.take(pool, pools.get(pool).copied(), e);
            if let Some(a) = account {
                by_account.take(&format!("{pool}@{a}"), accounts.get(a).copied(), e);
            }
        } else {
            by_pool.give(pool);
            if let Some(a) = account {
                by_account.give(&format!("{pool}@{a}"));
            }
        }
    });
    let mut out: Vec<Finding> = by_pool
        .over
        .iter()
        .map(|(pool, o)| Finding {
            kind: "pool limit",
            task_id: None,
            unit_id: None,
            message: format!(
                "pool {pool} held {} submitted units at once (first above its maximum at \
                 event #{}, {}); its maximum is {}",
                o.peak,
                o.first_event,
                o.first_at,
                pools.get(pool).copied().unwrap_or_default()
            ),
        })
        .collect();
    out.extend(by_account.over.iter().map(|(slot, o)| {
        let account = slot.rsplit_once('@').map_or("", |(_, a)| a);
        Finding {
            kind: "account limit",
            task_id: None,
            unit_id: None,
            message: format!(
                "{slot} held {} submitted units at once (first above at event #{}, {}); the \
                 account's maximum per pool is {}",
                o.peak,
                o.first_event,
                o.first_at,
                accounts.get(account).copied().unwrap_or_default()
            ),
        }
    }));
    out
}

/// Every submission of a unit under a new attempt follows a recorded retry, and no accepted
/// key is submitted again without one (see the module docs).
pub fn resubmits(snap: &Snapshot) -> Vec<Finding> {
    let mut out = Vec::new();
    for unit in &snap.units {
        let events = snap.events.get(&unit.id).map(Vec::as_slice).unwrap_or(&[]);
        let mut retried: BTreeSet<i64> = BTreeSet::from([0]);
        let mut accepted: BTreeSet<&str> = BTreeSet::new();
        let mut current: Option<&str> = None;
        for e in events {
            let Some(detail) = e.detail.as_deref() else {
                continue;
            };
            if let Some(n) = detail.strip_prefix(RETRY_PREFIX) {
                if let Ok(n) = n.trim().parse::<i64>() {
                    retried.insert(n);
                }
                // A retry starts a new submission: what was accepted before is over.
                accepted.clear();
            } else if let Some(rest) = detail.strip_prefix(ACCEPTED_PREFIX) {
                if rest.split_whitespace().next().is_some()
                    && let Some(k) = current
                {
                    accepted.insert(k);
                }
            } else if let Some(m) = marker(detail) {
                let finding = |message: String| Finding {
                    kind: "resubmitted",
                    task_id: Some(unit.task_id.clone()),
                    unit_id: Some(unit.id.clone()),
                    message,
                };
                match key_attempt(m.key) {
                    Some(n) if !retried.contains(&n) => out.push(finding(format!(
                        "event #{} submits under key {} (attempt {n}) with no retry of \
                         attempt {n} recorded before it",
                        e.id, m.key
                    ))),
                    None => out.push(finding(format!(
                        "event #{} submits under key {}, which names no attempt",
                        e.id, m.key
                    ))),
                    _ => {}
                }
                if accepted.contains(m.key) {
                    out.push(finding(format!(
                        "event #{} submits key {} again after the provider accepted it, with \
                         no failure and retry between",
                        e.id, m.key
                    )));
                }
                current = Some(m.key);
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "history_store_tests.rs"]
mod store_tests;
