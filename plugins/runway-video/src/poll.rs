//! What the answer to `GET /v1/tasks/{id}` means for a unit: still going (with a poll hint),
//! succeeded (result and cost), failed (classified by `failureCode`), or a transient problem.

use serde_json::json;
use slotd_sdk::client::transport_error;
use slotd_sdk::retry_after::retry_after_ms;
use slotd_sdk::{Change, Host, HttpError, Outcome, ProviderError, Response, Unit};

use crate::answers::{self, Status, Task};
use crate::settings::Config;
use crate::spec::Spec;
use crate::state::State;

/// Runway asks for at most one poll per task every five seconds.
pub const MIN_POLL_SECS: f64 = 5.0;
/// The code of a task Runway does not know (never made, deleted, or cancelled and removed).
pub const TASK_NOT_FOUND: &str = "task_not_found";
/// The code of a task cancelled at Runway by someone else (the portal, another client).
pub const CANCELLED_AT_PROVIDER: &str = "cancelled_at_provider";
/// The code of an answer this handler cannot read.
pub const UNEXPECTED_ANSWER: &str = "unexpected_answer";

/// One unit's poll, with what it needs to be judged.
pub struct Poll<'a> {
    pub host: &'a dyn Host,
    pub unit: &'a Unit,
    pub spec: &'a Spec,
    pub cfg: &'a Config,
    pub now_ms: u64,
}

impl Poll<'_> {
    /// The change the answer means. A read answered with an error (a 429, a 5xx, an answer
    /// that cannot be read, none at all) was a read all the same: the next one waits Runway's
    /// five-second pace too, or longer when Runway says so (`Retry-After`).
    pub fn change(&self, answer: &Result<Response, HttpError>) -> Change {
        let mut change = self.judge(answer);
        if let Outcome::RetryAfter { after_ms, .. } = &mut change.outcome {
            let pace = self.cfg.scaled_ms(MIN_POLL_SECS).max(1);
            *after_ms = Some(after_ms.map_or(pace, |ms| ms.max(pace)));
        }
        change
    }

    fn judge(&self, answer: &Result<Response, HttpError>) -> Change {
        let r = match answer {
            Ok(r) => r,
            Err(e) => return self.change_of(Outcome::retry(transport_error(e))),
        };
        match r.status {
            200..=299 => match answers::task(r) {
                Ok(task) => self.of_task(&task),
                Err(why) => self.change_of(Outcome::retry(ProviderError::new(
                    Some(UNEXPECTED_ANSWER),
                    why,
                ))),
            },
            404 => self.change_of(Outcome::Fail(ProviderError::new(
                Some(TASK_NOT_FOUND),
                format!(
                    "Runway has no task {} (deleted, or cancelled and removed): {}",
                    self.job_id(),
                    answers::error(r).message
                ),
            ))),
            // The key is refused (contract 1.2 `account_refused`): the task runs on; poll it
            // again once the account is restored.
            401 => self.change_of(Outcome::RetryAfter {
                after_ms: retry_after_ms(&r.headers, self.now_ms),
                error: crate::create::account_refused(r),
            }),
            // Transient, or an access problem the operator can fix while the task runs on.
            403 | 429 | 500..=599 => self.change_of(Outcome::RetryAfter {
                after_ms: retry_after_ms(&r.headers, self.now_ms),
                error: answers::error(r),
            }),
            _ => self.change_of(Outcome::Fail(answers::error(r))),
        }
    }

    fn of_task(&self, task: &Task) -> Change {
        match task.status {
            Status::Throttled | Status::Pending | Status::Running => self.running(task),
            Status::Succeeded if task.output.is_empty() => {
                self.change_of(Outcome::retry(ProviderError::new(
                    Some(UNEXPECTED_ANSWER),
                    format!("Runway's task {} SUCCEEDED without output", task.id),
                )))
            }
            Status::Succeeded => {
                let result = json!({
                    "task_id": task.id,
                    "created_at": task.created_at,
                    "output": task.output,
                });
                let cost = task.credits.as_ref().map_or_else(
                    || self.spec.listed_credits().to_string(),
                    ToString::to_string,
                );
                // The link is fresh now: `finalize` stores it without reading the task again
                // (a read right after this one would be sooner than Runway's pace).
                let state = State {
                    succeeded_at_ms: Some(self.now_ms),
                    ..State::of(self.unit)
                };
                Change {
                    cost: Some(cost),
                    state: Some(state.to_json()),
                    ..self.change_of(Outcome::Succeeded(result.to_string()))
                }
            }
            Status::Failed | Status::Cancelled => Change {
                cost: task.credits.as_ref().map(ToString::to_string),
                ..self.change_of(Outcome::Fail(ended_error(task)))
            },
        }
    }

    /// Still going: poll again after the hint; record the status when it changed.
    fn running(&self, task: &Task) -> Change {
        let old = State::of(self.unit);
        let new = State {
            status: Some(task.status.as_str().to_string()),
            progress: task.progress.or(old.progress),
            ..old.clone()
        };
        if task.status == Status::Throttled && old.status.as_deref() != Some("THROTTLED") {
            let pool = self.spec.model.pool();
            self.host.warn(&format!(
                "Runway task {} (unit {}) is THROTTLED: the account is at its concurrency limit \
                 for {}, so pool {pool} has more slots than Runway runs at once (check \
                 handlers.runway-video.tier or [pools.\"{pool}\"] max_slots)",
                task.id, self.unit.id, self.spec.model
            ));
        }
        Change {
            state: (new != old).then(|| new.to_json()),
            ..self.change_of(Outcome::Running(Some(self.hint(&old))))
        }
    }

    /// Until the shortest expected run has passed, the time left to it; then Runway's
    /// five-second pace. Both times `expected_duration_scale`; a hint, never a sleep.
    fn hint(&self, state: &State) -> u64 {
        let started = state
            .created_at_ms
            .or(self.unit.submitted_at_ms)
            .unwrap_or(self.now_ms);
        let elapsed = self.now_ms.saturating_sub(started);
        let shortest = self
            .cfg
            .scaled_ms(self.spec.model.expected_secs(self.spec.duration).0);
        shortest
            .saturating_sub(elapsed)
            .max(self.cfg.scaled_ms(MIN_POLL_SECS))
            .max(1)
    }

    fn job_id(&self) -> &str {
        self.unit.provider_job_id.as_deref().unwrap_or_default()
    }

    fn change_of(&self, outcome: Outcome) -> Change {
        Change::of(self.unit, outcome)
    }
}

/// The error of a task that ended without output: `FAILED` by its `failureCode` (RUNWAY_API.md
/// "Failure codes"), or `CANCELLED`. The job has ended at Runway either way, so nothing is
/// retried here; the message says whether a retry of the task (a new generation) may help.
pub fn ended_error(task: &Task) -> ProviderError {
    if task.status == Status::Cancelled {
        return ProviderError::new(
            Some(CANCELLED_AT_PROVIDER),
            format!(
                "Runway task {} was cancelled at Runway (not by slotd); a retry of the task \
                 resubmits it",
                task.id
            ),
        );
    }
    let code = task.failure_code.as_deref().unwrap_or("task_failed");
    let what = task
        .failure
        .as_deref()
        .unwrap_or("Runway reports the task failed");
    ProviderError::new(
        Some(code),
        format!("{what} (task {}; {})", task.id, failure_advice(code)),
    )
}

/// Whether a failure code is worth a retry, in words.
fn failure_advice(code: &str) -> &'static str {
    let is = |prefix: &str| code == prefix || code.starts_with(&format!("{prefix}."));
    if is("SAFETY") || is("INPUT_PREPROCESSING.SAFETY") {
        "permanent: content moderation refused it; change the prompt or image before retrying"
    } else if is("ASSET.INVALID") {
        "permanent: an input asset is unusable; fix the input"
    } else if is("INTERNAL.BAD_OUTPUT") {
        "Runway rejected its own output (e.g. text in the input image); a retry of the task \
         resubmits it but is unlikely to help"
    } else if is("INTERNAL") || is("INPUT_PREPROCESSING.INTERNAL") {
        "retryable: an error at Runway; the job has ended, so a retry of the task resubmits it \
         as a new generation"
    } else {
        "a retry of the task resubmits it as a new generation"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(code: Option<&str>) -> Task {
        Task {
            id: "t1".into(),
            status: Status::Failed,
            created_at: None,
            progress: None,
            output: Vec::new(),
            failure: Some("Runway says no".into()),
            failure_code: code.map(String::from),
            credits: None,
        }
    }

    #[test]
    fn failure_codes_are_kept_and_explained() {
        for (code, advice) in [
            ("SAFETY.INPUT.TEXT", "permanent: content moderation"),
            ("SAFETY.OUTPUT.VIDEO", "permanent: content moderation"),
            (
                "INPUT_PREPROCESSING.SAFETY.TEXT",
                "permanent: content moderation",
            ),
            ("ASSET.INVALID", "fix the input"),
            ("INTERNAL.BAD_OUTPUT.CODE01", "unlikely to help"),
            ("INTERNAL", "retryable"),
            ("INPUT_PREPROCESSING.INTERNAL", "retryable"),
            ("SAFETYNET", "new generation"),
            ("SOMETHING.NEW", "new generation"),
        ] {
            let e = ended_error(&failed(Some(code)));
            assert_eq!(e.code.as_deref(), Some(code));
            assert!(e.message.contains(advice), "{code}: {}", e.message);
            assert!(e.message.starts_with("Runway says no (task t1;"));
        }
        let e = ended_error(&failed(None));
        assert_eq!(e.code.as_deref(), Some("task_failed"));
    }

    #[test]
    fn cancelled_tasks_are_cancelled_at_provider() {
        let task = Task {
            status: Status::Cancelled,
            ..failed(None)
        };
        assert_eq!(
            ended_error(&task).code.as_deref(),
            Some(CANCELLED_AT_PROVIDER)
        );
    }
}
