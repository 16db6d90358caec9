//! The queue API's reads and cancel, as one account sees its requests: the status (positions,
//! logs, metrics, errors), the result (400 before completion, 404 after `--result-ttl`), the
//! cancel answers of FAL_API.md's simulator section, and whether a CDN file is still served.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::error::FalError;
use super::job::{Job, Outcome};
use super::queue::Cancelled;
use super::state::{Inner, Sim};

impl Sim {
    /// The request `id` as `account` may see it under `prefix` (its `owner/app`, or its model
    /// id with `--allow-model-path`).
    fn visible<'a>(
        &self,
        inner: &'a Inner,
        account: &str,
        prefix: &str,
        id: &str,
    ) -> Option<&'a Job> {
        inner.jobs.get(id).filter(|j| {
            j.account == account
                && (j.app == prefix || (self.opts.allow_model_path && j.endpoint == prefix))
        })
    }

    /// `GET …/requests/{id}/status`.
    pub(crate) fn status(
        &self,
        account: &str,
        prefix: &str,
        id: &str,
        logs: bool,
    ) -> Result<(StatusCode, Value), FalError> {
        self.with_now(|inner, _| {
            inner.stats.status_reads += 1;
            let Some(job) = self.visible(inner, account, prefix, id) else {
                inner.stats.not_found += 1;
                return Err(FalError::request_not_found(id));
            };
            let position = inner.queue.position(id);
            let inference = job
                .started_ms
                .zip(job.ended_ms)
                .map(|(s, e)| (self.base.clock.simulated_s(e - s) * 1000.0).round() / 1000.0);
            let logs = logs.then(|| self.logs(job));
            Ok(job.status(
                &self.base.base_url,
                position,
                logs,
                inference,
                self.opts.status_hides_errors,
            ))
        })
    }

    /// The runner's log lines so far.
    fn logs(&self, job: &Job) -> Value {
        let line = |ms: i64, message: String| {
            json!({"message": message, "level": "INFO", "source": "user",
                   "timestamp": self.base.clock.iso(ms)})
        };
        let mut lines = Vec::new();
        if let Some(s) = job.started_ms {
            lines.push(line(
                s,
                format!(
                    "Generating a {} s {} video",
                    job.spec.seconds,
                    job.spec.resolution()
                ),
            ));
        }
        if let (Some(e), Some(o)) = (job.ended_ms, &job.outcome) {
            let text = match o.error() {
                None => "Video generated".to_owned(),
                Some(err) => format!("Request ended: {err}"),
            };
            lines.push(line(e, text));
        }
        Value::Array(lines)
    }

    /// `GET …/requests/{id}`: the output, or the model's error; 400 before completion; 404
    /// after `--result-ttl`.
    pub(crate) fn result(&self, account: &str, prefix: &str, id: &str) -> Result<Value, FalError> {
        let ttl_ms = i64::try_from(self.opts.result_ttl.as_millis()).unwrap_or(i64::MAX);
        self.with_now(|inner, now| {
            inner.stats.result_reads += 1;
            let Some(job) = self.visible(inner, account, prefix, id) else {
                inner.stats.not_found += 1;
                return Err(FalError::request_not_found(id));
            };
            if job
                .ended_ms
                .is_some_and(|e| now.saturating_sub(e) >= ttl_ms)
            {
                inner.stats.not_found += 1;
                return Err(FalError::detail(
                    StatusCode::NOT_FOUND,
                    format!("The result of request {id:?} has expired"),
                ));
            }
            match job.result(&self.base.base_url) {
                Some(r) => r,
                None => Err(FalError::detail(
                    StatusCode::BAD_REQUEST,
                    "Request is still in progress",
                )),
            }
        })
    }

    /// `PUT …/requests/{id}/cancel`.
    pub(crate) fn cancel(&self, account: &str, prefix: &str, id: &str) -> (StatusCode, Value) {
        let answer = |code: StatusCode, status: &str| (code, json!({ "status": status }));
        self.with_now(|inner, now| {
            inner.stats.cancel_requests += 1;
            match self.visible(inner, account, prefix, id) {
                None => {
                    inner.stats.not_found += 1;
                    return answer(StatusCode::NOT_FOUND, "NOT_FOUND");
                }
                // Ended requests have left the queue model.
                Some(job) if job.ended_ms.is_some() => {
                    return answer(StatusCode::BAD_REQUEST, "ALREADY_COMPLETED");
                }
                Some(_) => {}
            }
            let done = if self.opts.cancel_running {
                inner.queue.cancel_running(id, now)
            } else {
                inner.queue.cancel(id, now)
            };
            match done {
                Cancelled::Requested => {
                    if let Some(job) = inner.jobs.get_mut(id) {
                        job.outcome = Some(Outcome::Cancelled);
                    }
                    answer(StatusCode::ACCEPTED, "CANCELLATION_REQUESTED")
                }
                Cancelled::AlreadyCompleted => answer(StatusCode::BAD_REQUEST, "ALREADY_COMPLETED"),
                Cancelled::NotFound => answer(StatusCode::NOT_FOUND, "NOT_FOUND"),
            }
        })
    }

    /// Whether request `id`'s CDN file can be served now (it succeeded and has not expired);
    /// counts the download or the 404.
    pub(crate) fn file_available(&self, id: &str) -> bool {
        self.with_now(|inner, now| {
            let ok = inner.jobs.get(id).is_some_and(|j| {
                j.outcome == Some(Outcome::Success)
                    && match (j.ended_ms, j.media_ttl) {
                        (Some(_), None) => true,
                        (Some(e), Some(ttl)) => {
                            now.saturating_sub(e)
                                < i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
                        }
                        (None, _) => false,
                    }
            });
            if ok {
                inner.stats.file_downloads += 1;
            } else {
                inner.stats.files_not_found += 1;
            }
            ok
        })
    }
}
