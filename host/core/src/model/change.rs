//! The outcome vocabulary shared with handlers (the WIT `outcome` variant) and the validation of
//! every change a handler returns.
//!
//! A handler is third-party code: anything it returns is checked here against the unit it names
//! before the scheduler turns it into a database write. A refused change is never applied; the
//! scheduler logs it and counts it against the handler.

use serde::{Deserialize, Serialize};

use super::UnitStatus;

/// An error as the provider (or the path to it) reported it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderError {
    /// The provider's own code (Kling: `code`), when it gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    pub message: String,
}

impl ProviderError {
    /// The error as a unit's `error` column holds it (JSON; `{}` if it cannot be written).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }
}

/// What a handler says happened to one unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The provider accepted the job; record its id. The unit stays submitted.
    Accepted { job_id: String },
    /// Still running; poll again, after `after_ms` if given.
    Running { after_ms: Option<u64> },
    /// The last stage succeeded with this JSON result.
    Succeeded { result: String },
    /// The current stage succeeded; move to `stage`, pending.
    NextStage { stage: String },
    /// Refused for lack of capacity: back to pending, no failure.
    CapacityRejected { after_ms: Option<u64> },
    /// A transient error: retry after a delay, within the retry budget.
    RetryAfter {
        after_ms: Option<u64>,
        error: ProviderError,
    },
    /// A permanent failure.
    Fail { error: ProviderError },
}

impl Outcome {
    /// Short name for logs and metrics labels.
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Accepted { .. } => "accepted",
            Outcome::Running { .. } => "running",
            Outcome::Succeeded { .. } => "succeeded",
            Outcome::NextStage { .. } => "next_stage",
            Outcome::CapacityRejected { .. } => "capacity_rejected",
            Outcome::RetryAfter { .. } => "retry_after",
            Outcome::Fail { .. } => "fail",
        }
    }
}

/// One change returned by a handler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub unit_id: String,
    pub outcome: Outcome,
    /// Replacement handler-private state (JSON).
    pub state: Option<String>,
    /// Provider-reported cost.
    pub cost: Option<String>,
    /// Said beside a `running` outcome (contract 1.4 `observe.queued`): the provider holds the
    /// job in its own queue, not started. `None`: not said (the job runs, or the handler
    /// predates 1.4).
    pub provider_queue: Option<ProviderQueue>,
}

/// A job the provider accepted but holds in its own queue (fal `IN_QUEUE`, Runway
/// `THROTTLED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProviderQueue {
    /// Jobs ahead of it, when the provider says.
    pub position: Option<u32>,
}

/// What the validator needs to know about the unit a change names.
#[derive(Clone, Copy, Debug)]
pub struct UnitView<'a> {
    pub status: UnitStatus,
    pub stage: &'a str,
    pub provider_job_id: Option<&'a str>,
    /// The stages of the unit's task type, in order.
    pub stages: &'a [String],
}

/// Why a change was refused. The message names the unit's situation and what was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IllegalChange {
    #[error("unit {0} is not in the batch")]
    NotInBatch(String),
    #[error("unit {0} has more than one change in this batch")]
    Duplicate(String),
    #[error("{outcome} is not allowed for a unit in status {status}")]
    WrongStatus {
        outcome: &'static str,
        status: UnitStatus,
    },
    #[error("accepted with an empty provider job id")]
    EmptyJobId,
    #[error("accepted as job {new} but the unit already runs as job {old}")]
    JobIdChanged { old: String, new: String },
    #[error("running reported for a unit with no provider job id; report accepted first")]
    RunningWithoutJob,
    #[error("capacity-rejected for a unit the provider already accepted as job {0}")]
    RejectedAfterAccept(String),
    #[error("succeeded in stage {stage:?}, which is not the last stage; use next-stage")]
    NotLastStage { stage: String },
    #[error("next-stage {to:?} does not follow stage {from:?}")]
    BadNextStage { from: String, to: String },
    #[error("{what} is not valid JSON: {reason}")]
    BadJson { what: &'static str, reason: String },
    #[error("{what} is {len} bytes, over the {max}-byte limit")]
    TooLarge {
        what: &'static str,
        len: usize,
        max: usize,
    },
}

/// Handler-private state and results are stored per unit; cap them so a handler cannot bloat
/// the database.
pub const MAX_STATE_BYTES: usize = 64 * 1024;
pub const MAX_RESULT_BYTES: usize = 256 * 1024;
pub const MAX_TEXT_BYTES: usize = 4 * 1024;

fn check_json(what: &'static str, text: &str, max: usize) -> Result<(), IllegalChange> {
    if text.len() > max {
        return Err(IllegalChange::TooLarge {
            what,
            len: text.len(),
            max,
        });
    }
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(|_| ())
        .map_err(|e| IllegalChange::BadJson {
            what,
            reason: e.to_string(),
        })
}

fn check_text(what: &'static str, text: &str) -> Result<(), IllegalChange> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(IllegalChange::TooLarge {
            what,
            len: text.len(),
            max: MAX_TEXT_BYTES,
        });
    }
    Ok(())
}

/// Validate one change against the unit it names. Pure: no I/O, no clock.
pub fn validate(change: &Change, unit: UnitView<'_>) -> Result<(), IllegalChange> {
    if let Some(state) = &change.state {
        check_json("state", state, MAX_STATE_BYTES)?;
    }
    if let Some(cost) = &change.cost {
        check_text("cost", cost)?;
    }
    let outcome = change.outcome.kind();
    if unit.status != UnitStatus::Submitted {
        return Err(IllegalChange::WrongStatus {
            outcome,
            status: unit.status,
        });
    }
    match &change.outcome {
        Outcome::Accepted { job_id } => {
            if job_id.trim().is_empty() {
                return Err(IllegalChange::EmptyJobId);
            }
            check_text("provider job id", job_id)?;
            match unit.provider_job_id {
                Some(old) if old != job_id => Err(IllegalChange::JobIdChanged {
                    old: old.to_string(),
                    new: job_id.clone(),
                }),
                _ => Ok(()),
            }
        }
        Outcome::Running { .. } => match unit.provider_job_id {
            Some(_) => Ok(()),
            None => Err(IllegalChange::RunningWithoutJob),
        },
        Outcome::Succeeded { result } => {
            check_json("result", result, MAX_RESULT_BYTES)?;
            match unit.stages.last() {
                Some(last) if last != unit.stage => Err(IllegalChange::NotLastStage {
                    stage: unit.stage.to_string(),
                }),
                _ => Ok(()),
            }
        }
        Outcome::NextStage { stage } => {
            let pos = unit.stages.iter().position(|s| s == unit.stage);
            let next = pos.and_then(|p| unit.stages.get(p + 1));
            if next == Some(stage) {
                Ok(())
            } else {
                Err(IllegalChange::BadNextStage {
                    from: unit.stage.to_string(),
                    to: stage.clone(),
                })
            }
        }
        Outcome::CapacityRejected { .. } => match unit.provider_job_id {
            Some(job) => Err(IllegalChange::RejectedAfterAccept(job.to_string())),
            None => Ok(()),
        },
        Outcome::RetryAfter { error, .. } | Outcome::Fail { error } => {
            check_text("error message", &error.message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stages() -> Vec<String> {
        vec!["voice".into(), "element".into()]
    }

    fn change(outcome: Outcome) -> Change {
        Change {
            provider_queue: None,
            unit_id: "u1".into(),
            outcome,
            state: None,
            cost: None,
        }
    }

    fn view<'a>(stages: &'a [String], stage: &'a str, job: Option<&'a str>) -> UnitView<'a> {
        UnitView {
            status: UnitStatus::Submitted,
            stage,
            provider_job_id: job,
            stages,
        }
    }

    #[test]
    fn accepted_records_a_job_once() {
        let st = stages();
        let ok = change(Outcome::Accepted {
            job_id: "j1".into(),
        });
        assert_eq!(validate(&ok, view(&st, "voice", None)), Ok(()));
        assert_eq!(validate(&ok, view(&st, "voice", Some("j1"))), Ok(()));
        assert!(matches!(
            validate(&ok, view(&st, "voice", Some("j0"))),
            Err(IllegalChange::JobIdChanged { .. })
        ));
        let empty = change(Outcome::Accepted { job_id: " ".into() });
        assert_eq!(
            validate(&empty, view(&st, "voice", None)),
            Err(IllegalChange::EmptyJobId)
        );
    }

    #[test]
    fn stages_must_advance_in_order() {
        let st = stages();
        let next = change(Outcome::NextStage {
            stage: "element".into(),
        });
        assert_eq!(validate(&next, view(&st, "voice", Some("j"))), Ok(()));
        assert!(validate(&next, view(&st, "element", Some("j"))).is_err());
        let done = change(Outcome::Succeeded {
            result: "{}".into(),
        });
        assert!(matches!(
            validate(&done, view(&st, "voice", Some("j"))),
            Err(IllegalChange::NotLastStage { .. })
        ));
        assert_eq!(validate(&done, view(&st, "element", Some("j"))), Ok(()));
    }

    #[test]
    fn only_submitted_units_change() {
        let st = stages();
        let mut v = view(&st, "voice", Some("j"));
        v.status = UnitStatus::Completed;
        let c = change(Outcome::Fail {
            error: ProviderError {
                code: None,
                message: "x".into(),
            },
        });
        assert!(matches!(
            validate(&c, v),
            Err(IllegalChange::WrongStatus { .. })
        ));
    }

    #[test]
    fn bad_json_and_sizes_are_refused() {
        let st = stages();
        let v = view(&st, "element", Some("j"));
        let c = change(Outcome::Succeeded {
            result: "{not json".into(),
        });
        assert!(matches!(
            validate(&c, v),
            Err(IllegalChange::BadJson { what: "result", .. })
        ));
        let mut c = change(Outcome::Running { after_ms: None });
        c.state = Some(format!("\"{}\"", "x".repeat(MAX_STATE_BYTES)));
        assert!(matches!(
            validate(&c, v),
            Err(IllegalChange::TooLarge { what: "state", .. })
        ));
    }

    /// A JSON string of exactly `len` bytes.
    fn json_of(len: usize) -> String {
        format!("\"{}\"", "x".repeat(len - 2))
    }

    /// The documented limits, byte for byte (64 KiB state, 256 KiB result, 4 KiB text): at
    /// the limit accepted, one byte over refused with the limit named.
    #[test]
    fn size_limits_hold_at_the_byte() {
        let st = stages();
        let v = view(&st, "element", Some("j"));
        let mut c = change(Outcome::Running { after_ms: None });
        c.state = Some(json_of(65_536));
        assert_eq!(validate(&c, v), Ok(()));
        c.state = Some(json_of(65_537));
        assert_eq!(
            validate(&c, v),
            Err(IllegalChange::TooLarge {
                what: "state",
                len: 65_537,
                max: 65_536
            })
        );
        let done = |len| {
            change(Outcome::Succeeded {
                result: json_of(len),
            })
        };
        assert_eq!(validate(&done(262_144), v), Ok(()));
        assert_eq!(
            validate(&done(262_145), v),
            Err(IllegalChange::TooLarge {
                what: "result",
                len: 262_145,
                max: 262_144
            })
        );
        let accepted = |len| {
            change(Outcome::Accepted {
                job_id: "j".repeat(len),
            })
        };
        let fresh = view(&st, "voice", None);
        assert_eq!(validate(&accepted(4_096), fresh), Ok(()));
        assert!(matches!(
            validate(&accepted(4_097), fresh),
            Err(IllegalChange::TooLarge { max: 4_096, .. })
        ));
    }

    /// The outcome's name is what a refusal says it was (and what metrics are labelled by).
    #[test]
    fn refusals_name_the_outcome() {
        let st = stages();
        let mut v = view(&st, "voice", Some("j"));
        v.status = UnitStatus::Completed;
        let error = ProviderError {
            code: None,
            message: "x".into(),
        };
        let cases = [
            (Outcome::Accepted { job_id: "j".into() }, "accepted"),
            (Outcome::Running { after_ms: None }, "running"),
            (
                Outcome::Succeeded {
                    result: "{}".into(),
                },
                "succeeded",
            ),
            (
                Outcome::NextStage {
                    stage: "element".into(),
                },
                "next_stage",
            ),
            (
                Outcome::CapacityRejected { after_ms: None },
                "capacity_rejected",
            ),
            (
                Outcome::RetryAfter {
                    after_ms: None,
                    error: error.clone(),
                },
                "retry_after",
            ),
            (Outcome::Fail { error }, "fail"),
        ];
        for (outcome, name) in cases {
            let refused = validate(&change(outcome), v).expect_err("not submitted");
            assert_eq!(
                refused,
                IllegalChange::WrongStatus {
                    outcome: name,
                    status: UnitStatus::Completed
                }
            );
        }
    }

    #[test]
    fn capacity_rejection_only_before_acceptance() {
        let st = stages();
        let c = change(Outcome::CapacityRejected { after_ms: None });
        assert_eq!(validate(&c, view(&st, "voice", None)), Ok(()));
        assert!(validate(&c, view(&st, "voice", Some("j"))).is_err());
        let r = change(Outcome::Running { after_ms: None });
        assert_eq!(
            validate(&r, view(&st, "voice", None)),
            Err(IllegalChange::RunningWithoutJob)
        );
    }
}
