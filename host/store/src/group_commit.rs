//! Group commit for task creation (docs/testing.md: 5,000 durable `POST /v1/tasks` a second on two
//! cores). Concurrent creates queue for one writer; while it commits a batch the next one
//! gathers, and the writer takes everything gathered (up to a bound) into one transaction: one
//! commit (one log flush where the database flushes on commit), three statements on SQLite and
//! one on PostgreSQL whatever the batch size. A lone create is written at once (no waiting for
//! company), so latency under light load stays one commit. Each caller is answered only when
//! its own task is durable, with its own result; idempotency keys resolve in batch order, as
//! they would one by one.
//!
//! A batch that fails as a whole (one task breaking a constraint, say) is written again one
//! task at a time, so each caller gets the error of its own task and no other task fails for
//! it.

use tokio::sync::{mpsc, oneshot};

use super::{Created, DynUnitWriter, NewTask, StoreError, StoreResult};

/// The most tasks one batch holds.
pub const MAX_BATCH_TASKS: usize = 512;
/// The most units one batch holds (a batch also ends at the first task that would pass it).
pub const MAX_BATCH_UNITS: usize = 20_000;
/// Creates waiting for the writer before callers wait to queue (backpressure).
const QUEUE: usize = 4096;

struct Job {
    task: NewTask,
    done: oneshot::Sender<StoreResult<Created>>,
}

/// The front of the task writer; cheap to clone. Dropping every clone stops the writer after
/// the batches in flight.
#[derive(Clone)]
pub struct TaskWriter {
    queue: mpsc::Sender<Job>,
}

impl std::fmt::Debug for TaskWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskWriter").finish_non_exhaustive()
    }
}

impl TaskWriter {
    /// Start the writer on the current tokio runtime.
    pub fn start(store: DynUnitWriter, metrics: slotd_core::telemetry::Metrics) -> TaskWriter {
        let (queue, rx) = mpsc::channel(QUEUE);
        tokio::spawn(writer(store, rx, metrics));
        TaskWriter { queue }
    }

    /// Store `task` (as [`super::UnitWrite::task_create`]), in the next batch; returns once it
    /// is committed.
    pub async fn create(&self, task: NewTask) -> StoreResult<Created> {
        let (done, answer) = oneshot::channel();
        self.queue
            .send(Job { task, done })
            .await
            .map_err(|_| StoreError::Unavailable("the task writer has stopped".into()))?;
        answer.await.map_err(|_| {
            StoreError::Unavailable("the task writer stopped before answering".into())
        })?
    }
}

async fn writer(
    store: DynUnitWriter,
    mut rx: mpsc::Receiver<Job>,
    metrics: slotd_core::telemetry::Metrics,
) {
    let mut held: Option<Job> = None;
    loop {
        let first = match held.take() {
            Some(job) => job,
            None => match rx.recv().await {
                Some(job) => job,
                None => return,
            },
        };
        let mut units = first.task.units.len();
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH_TASKS {
            let Ok(job) = rx.try_recv() else { break };
            if units + job.task.units.len() > MAX_BATCH_UNITS {
                held = Some(job);
                break;
            }
            units += job.task.units.len();
            batch.push(job);
        }
        write(&store, batch, &metrics).await;
    }
}

/// Write one batch and answer its callers.
async fn write(store: &DynUnitWriter, batch: Vec<Job>, metrics: &slotd_core::telemetry::Metrics) {
    metrics
        .record(|| metrics::histogram!("slotd_task_commit_batch_size").record(batch.len() as f64));
    let (tasks, answers): (Vec<NewTask>, Vec<_>) =
        batch.into_iter().map(|j| (j.task, j.done)).unzip();
    match store.task_create_batch(&tasks).await {
        Ok(created) if created.len() == tasks.len() => {
            for (answer, c) in answers.into_iter().zip(created) {
                // A caller that went away (client disconnected) still has its task stored.
                let _ = answer.send(Ok(c));
            }
        }
        Ok(created) => {
            let e = format!(
                "the store answered {} results for a batch of {} tasks",
                created.len(),
                tasks.len()
            );
            tracing::error!("{e}");
            for answer in answers {
                let _ = answer.send(Err(StoreError::Other(e.clone())));
            }
        }
        Err(e) if tasks.len() == 1 => {
            let _ = answers.into_iter().next().map(|a| a.send(Err(e)));
        }
        Err(e) => {
            tracing::warn!(tasks = tasks.len(), error = %e, "a batch of task creates failed; writing them one by one");
            for (i, answer) in answers.into_iter().enumerate() {
                let result = store
                    .task_create_batch(&tasks[i..=i])
                    .await
                    .and_then(|mut c| {
                        c.pop().ok_or_else(|| {
                            StoreError::Other("the store answered no result for a task".into())
                        })
                    });
                let _ = answer.send(result);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::prelude::*;
    use crate::{DynStore, NewUnit};

    fn task(id: usize, key: Option<&str>) -> NewTask {
        NewTask {
            id: format!("t{id}"),
            tenant: "acme".into(),
            task_type: "video".into(),
            payload: "{}".into(),
            idempotency_key: key.map(String::from),
            priority: 0,
            completion_webhook_url: None,
            units: vec![NewUnit {
                id: format!("t{id}-u0"),
                pool: "p".into(),
                stage: "main".into(),
                spec: "{}".into(),
                state: "{}".into(),
                routes: None,
                routing: None,
                cost_estimate: None,
                planned_release: None,
            }],
            now: 1_000,
            terms: Default::default(),
        }
    }

    /// Many creates at once through the writer: each caller gets its own answer, and creates
    /// with one key all name the one task stored for it, whichever batch they fell into.
    #[tokio::test]
    async fn concurrent_creates_are_each_answered() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("slotd.db").display());
        let store = crate::sqlite::SqliteStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let store: DynStore = Arc::new(store);
        let writer = TaskWriter::start(store.clone(), Default::default());
        let calls = (0..200).map(|i| {
            let writer = writer.clone();
            // Every tenth create reuses one key.
            let key = (i % 10 == 0).then_some("shared");
            tokio::spawn(async move { writer.create(task(i, key)).await })
        });
        let answers: Vec<Created> = futures::future::join_all(calls)
            .await
            .into_iter()
            .map(|j| j.unwrap().unwrap())
            .collect();
        let new = answers
            .iter()
            .filter(|c| matches!(c, Created::New(_)))
            .count();
        assert_eq!(new, 181, "180 unkeyed tasks and one keyed");
        let holders: std::collections::BTreeSet<&str> = answers
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 10 == 0)
            .map(|(_, c)| match c {
                Created::New(id) | Created::Existing(id) => id.as_str(),
            })
            .collect();
        assert_eq!(
            holders.len(),
            1,
            "every keyed create names one task: {holders:?}"
        );
        let stored: u64 = store
            .unit_count_by_pool()
            .await
            .unwrap()
            .iter()
            .map(|c| c.count)
            .sum();
        assert_eq!(stored, 181);
    }
}
