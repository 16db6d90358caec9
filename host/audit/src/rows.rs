//! What the checks read and report: the rows of one snapshot of the database (tasks, units,
//! their events, fences, reservations, creates) and a finding, each rule's verdict.

use std::collections::BTreeMap;
use std::fmt;

/// One thing that is wrong, with the ids to look it up by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// Which invariant (`event log`, `illegal transition`, `pool limit`, …).
    pub kind: &'static str,
    pub task_id: Option<String>,
    pub unit_id: Option<String>,
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.kind)?;
        if let Some(t) = &self.task_id {
            write!(f, " task {t}")?;
        }
        if let Some(u) = &self.unit_id {
            write!(f, " unit {u}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// The rows a check needs, read in one pass.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub tasks: Vec<String>,
    pub units: Vec<UnitRow>,
    /// Each unit's events, oldest first.
    pub events: BTreeMap<String, Vec<EventRow>>,
    /// The database's fencing token per pool.
    pub fences: BTreeMap<String, i64>,
    /// The budget ledger's open reservations: (unit id, submission `stage-attempt`).
    pub open_reservations: Vec<(String, String)>,
    /// The recorded creates of pools with quotas: (pool, account, Unix ms), oldest first.
    pub creates: Vec<(String, Option<String>, i64)>,
    /// The published handler releases, each with the sha256 of the bytes stored under it.
    pub releases: Vec<ReleaseRow>,
}

/// A published handler release as the check reads it: its key and what its bytes hash to.
#[derive(Clone, Debug, Default)]
pub struct ReleaseRow {
    /// The key it was published under (hex sha256).
    pub sha256: String,
    pub name: String,
    pub version: String,
    /// The hex sha256 of the bytes stored now.
    pub content_sha256: String,
}

/// The columns of a unit the rules read.
#[derive(Clone, Debug, Default)]
pub struct UnitRow {
    pub id: String,
    pub task_id: String,
    pub idx: i64,
    pub pool: String,
    pub stage: String,
    pub status: String,
    pub provider_job_id: Option<String>,
    pub lease_owner: Option<String>,
    pub lease_until: Option<i64>,
    pub result: Option<String>,
    /// The provider account of its latest submit marker (`None`: the implicit account).
    pub account: Option<String>,
    /// Its submit attempt in the current stage.
    pub submit_attempt: i64,
    /// The instant of its latest submit marker (with the id, the name of its slot while
    /// `submitted`: `slotd_coord::slots::holder`).
    pub submitted_at: Option<i64>,
}

/// One row of the event log.
#[derive(Clone, Debug, Default)]
pub struct EventRow {
    pub id: i64,
    /// When it was written (Unix ms, the writer's clock).
    pub at: i64,
    pub from_status: Option<String>,
    pub to_status: String,
    pub detail: Option<String>,
}
