//! Provider callbacks' job lookups, read together.
//!
//! Every provider callback names the jobs it reports on, and each has to be found among the
//! submitted units before the change is checked and applied. Read one by one, that was a
//! statement per callback: two per unit in the steady scale run, where Kling calls back once
//! when a job starts and once when it ends. Here the first lookup after a quiet spell is read
//! at once; the lookups that arrive while it is read, and during a short pause after it, are
//! read together in the next pass (one statement per handler), so a busy instance answers a
//! burst of callbacks with a few reads and a quiet one adds no wait at all.
//!
//! The pass runs on a task of its own, so a callback whose connection drops does not stop
//! the lookups of the others; should that task end anyway (its runtime shutting down) the
//! next lookup starts another.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use slotd_core::model::Unit;
use slotd_store::{DynServiceStore, StoreError, StoreResult};

/// One waiting lookup: the jobs of one callback among the units of one handler's task types.
struct Ask {
    task_types: Vec<String>,
    jobs: Vec<String>,
    reply: oneshot::Sender<StoreResult<Vec<Unit>>>,
}

#[derive(Default)]
struct Queue {
    asks: Vec<Ask>,
    /// A pass is running (or pausing after one): new asks wait for it.
    reading: bool,
}

/// The lookups of this process's callbacks (cheap to clone; one per [`crate::services::Services`]).
#[derive(Clone, Default)]
pub struct JobLookups {
    queue: Arc<Mutex<Queue>>,
    /// Reads made so far (a test signal: how many statements the lookups cost).
    reads: Arc<AtomicU64>,
}

impl JobLookups {
    /// The submitted units of `task_types` whose provider job is one of `jobs` (at most one
    /// per job), read with whatever other lookups are waiting. `pause` is the shortest time
    /// between two reads: the lookups that come meanwhile wait for the next.
    pub async fn find(
        &self,
        store: &DynServiceStore,
        task_types: &[String],
        jobs: Vec<String>,
        pause: Duration,
    ) -> StoreResult<Vec<Unit>> {
        if task_types.is_empty() || jobs.is_empty() {
            return Ok(Vec::new());
        }
        let (reply, answer) = oneshot::channel();
        let lead = {
            let mut q = self.queue.lock();
            q.asks.push(Ask {
                task_types: task_types.to_vec(),
                jobs,
                reply,
            });
            !std::mem::replace(&mut q.reading, true)
        };
        if lead {
            let passes = Passes {
                queue: self.queue.clone(),
                reads: self.reads.clone(),
                store: store.clone(),
                pause,
            };
            tokio::spawn(passes.run());
        }
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(
                "the callback lookups stopped (shutting down)".into(),
            ))
        })
    }

    /// Reads made so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

/// Clears `reading` if the passes end early (their task dropped), so the asks after it never
/// wait for a pass that will not come.
struct Reading {
    queue: Arc<Mutex<Queue>>,
    done: bool,
}

impl Drop for Reading {
    fn drop(&mut self) {
        if !self.done {
            self.queue.lock().reading = false;
        }
    }
}

/// The passes one task makes, until one finds nothing waiting.
struct Passes {
    queue: Arc<Mutex<Queue>>,
    reads: Arc<AtomicU64>,
    store: DynServiceStore,
    pause: Duration,
}

impl Passes {
    async fn run(self) {
        let Passes {
            queue,
            reads,
            store,
            pause,
        } = self;
        let mut reading = Reading {
            queue: queue.clone(),
            done: false,
        };
        loop {
            let asks = {
                let mut q = queue.lock();
                if q.asks.is_empty() {
                    // Under the lock: an ask that comes next sees no pass and starts one.
                    q.reading = false;
                    reading.done = true;
                    return;
                }
                std::mem::take(&mut q.asks)
            };
            let mut by_types: BTreeMap<Vec<String>, Vec<Ask>> = BTreeMap::new();
            for ask in asks {
                by_types
                    .entry(ask.task_types.clone())
                    .or_default()
                    .push(ask);
            }
            for (task_types, asks) in by_types {
                let mut jobs: Vec<String> = asks.iter().flat_map(|a| a.jobs.clone()).collect();
                jobs.sort_unstable();
                jobs.dedup();
                reads.fetch_add(1, Ordering::Relaxed);
                match store.unit_find_by_provider_jobs(&task_types, &jobs).await {
                    Ok(units) => {
                        for ask in asks {
                            let mine = units
                                .iter()
                                .filter(|u| {
                                    u.provider_job_id
                                        .as_ref()
                                        .is_some_and(|j| ask.jobs.contains(j))
                                })
                                .cloned()
                                .collect();
                            // The asker may be gone (its connection dropped): nothing to tell.
                            let _ = ask.reply.send(Ok(mine));
                        }
                    }
                    Err(e) => {
                        for ask in asks {
                            let _ = ask.reply.send(Err(e.clone()));
                        }
                    }
                }
            }
            tokio::time::sleep(pause).await;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use slotd_core::model::UnitStatus;
    use slotd_store::{Created, Field, NewTask, NewUnit, RecordWrite, UnitUpdate, UnitWrite};

    const VIDEO: &str = "video";

    /// A task of `n` units, all submitted, unit `i` running as provider job `job-{i}`.
    async fn submitted_jobs(
        n: usize,
    ) -> (tempfile::TempDir, Arc<slotd_store::sqlite::SqliteStore>) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("slotd.db").display());
        let store = slotd_store::sqlite::SqliteStore::connect(&url)
            .await
            .unwrap();
        store.migrate().await.unwrap();
        let store = Arc::new(store);
        let task = NewTask {
            id: "t".into(),
            tenant: "acme".into(),
            task_type: VIDEO.into(),
            payload: "{}".into(),
            idempotency_key: None,
            priority: 0,
            completion_webhook_url: None,
            units: (0..n)
                .map(|i| NewUnit {
                    id: format!("t-u{i}"),
                    pool: "p".into(),
                    stage: "main".into(),
                    spec: "{}".into(),
                    state: "{}".into(),
                    routes: None,
                    routing: None,
                    cost_estimate: None,
                    planned_release: None,
                })
                .collect(),
            now: 1,
            terms: Default::default(),
        };
        assert_eq!(
            store.task_create(task).await.unwrap(),
            Created::New("t".into())
        );
        let ids: Vec<String> = (0..n).map(|i| format!("t-u{i}")).collect();
        let marked = store.unit_mark_submitted(&ids, 2, 2, None).await.unwrap();
        assert_eq!(marked.len(), n);
        let accepted: Vec<UnitUpdate> = (0..n)
            .map(|i| UnitUpdate {
                unit_id: format!("t-u{i}"),
                from: Some(UnitStatus::Submitted),
                to: Some(UnitStatus::Submitted),
                provider_job_id: Field::Set(format!("job-{i}")),
                ..UnitUpdate::default()
            })
            .collect();
        assert_eq!(
            store
                .unit_apply(&accepted, 3, None)
                .await
                .unwrap()
                .applied
                .len(),
            n
        );
        (dir, store)
    }

    fn found(units: &[Unit]) -> Vec<&str> {
        units.iter().map(|u| u.id.as_str()).collect()
    }

    /// The first lookup is read at once; those that come while its pass pauses are read
    /// together in one statement, each answered with its own units; after a quiet spell the
    /// next lookup is read at once again.
    #[tokio::test]
    async fn lookups_that_meet_are_read_together() {
        let (_dir, sqlite) = submitted_jobs(20).await;
        let store: DynServiceStore = sqlite;
        let lookups = JobLookups::default();
        let types = vec![VIDEO.to_string()];
        let pause = Duration::from_millis(200);

        let first = lookups
            .find(&store, &types, vec!["job-0".into()], pause)
            .await
            .unwrap();
        assert_eq!(found(&first), ["t-u0"]);
        assert_eq!(lookups.reads(), 1);

        // Nineteen callbacks while the pass pauses, one naming no known job.
        let asks = (1..20).map(|i| {
            let job = if i == 19 {
                "job-none".to_string()
            } else {
                format!("job-{i}")
            };
            lookups.find(&store, &types, vec![job], pause)
        });
        let answers = futures::future::join_all(asks).await;
        for (i, answer) in (1..20).zip(answers) {
            let units = answer.unwrap();
            if i == 19 {
                assert!(units.is_empty(), "an unknown job finds nothing");
            } else {
                assert_eq!(found(&units), [format!("t-u{i}")]);
            }
        }
        assert_eq!(
            lookups.reads(),
            2,
            "the nineteen were read in one statement"
        );

        // Another handler's task types: read apart (its own statement), finding nothing.
        let other = lookups
            .find(&store, &["avatar".to_string()], vec!["job-1".into()], pause)
            .await
            .unwrap();
        assert!(other.is_empty());
        assert_eq!(lookups.reads(), 3);

        // No jobs named: nothing to read.
        assert!(
            lookups
                .find(&store, &types, Vec::new(), pause)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(lookups.reads(), 3);
    }

    /// A store that fails answers every waiting lookup with its error, and the next lookup
    /// starts a pass of its own (nothing is left waiting).
    #[tokio::test]
    async fn a_failed_read_answers_every_lookup_with_the_error() {
        let (_dir, sqlite) = submitted_jobs(2).await;
        sqlite.close().await;
        let store: DynServiceStore = sqlite;
        let lookups = JobLookups::default();
        let types = vec![VIDEO.to_string()];
        let asks =
            (0..2).map(|i| lookups.find(&store, &types, vec![format!("job-{i}")], Duration::ZERO));
        for answer in futures::future::join_all(asks).await {
            assert!(answer.is_err(), "a closed store's read fails: {answer:?}");
        }
        assert!(
            lookups
                .find(&store, &types, vec!["job-0".into()], Duration::ZERO)
                .await
                .is_err()
        );
        // The pass ends once it finds nothing waiting (right after answering).
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            while lookups.queue.lock().reading {
                tokio::task::yield_now().await;
            }
        });
        assert!(ended.await.is_ok(), "no pass is left running");
    }
}
