//! Provider callbacks' job lookups, read together.
//!
//! Every provider callback names the jobs it reports on (by provider job id, or by the
//! idempotency key slotd gave the provider, for a job whose id is not recorded yet), and each
//! has to be found among the submitted units before the change is checked and applied. Read
//! one by one, that was a statement per callback: two per unit in the steady scale run, where
//! Kling calls back once when a job starts and once when it ends, and one more where a job's
//! callback came before its id was recorded. The lookups are gathered into passes
//! ([`crate::together`]): the first after a quiet spell is read at once, the ones that arrive
//! while it is read and during a short pause after it are read together in the next pass (one
//! statement per handler).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::together::{Pass, Together};
use slotd_core::model::Unit;
use slotd_store::{DynServiceStore, StoreError, StoreResult};

/// One waiting lookup: the jobs of one callback among the units of one handler's task types.
struct Ask {
    task_types: Vec<String>,
    jobs: Vec<String>,
    keys: Vec<String>,
    reply: oneshot::Sender<StoreResult<Vec<Unit>>>,
}

/// The lookups of this process's callbacks (cheap to clone; one per [`crate::services::Services`]).
#[derive(Clone, Default)]
pub struct JobLookups {
    asks: Together<Ask>,
    /// Reads made so far (a test signal: how many statements the lookups cost).
    reads: Arc<AtomicU64>,
}

impl JobLookups {
    /// The submitted units of `task_types` whose provider job is one of `jobs` (at most one
    /// per job) or whose idempotency key is one of `keys`, read with whatever other lookups
    /// are waiting. `pause` is the shortest time between two reads: the lookups that come
    /// meanwhile wait for the next.
    pub async fn find(
        &self,
        store: &DynServiceStore,
        task_types: &[String],
        jobs: Vec<String>,
        keys: Vec<String>,
        pause: Duration,
    ) -> StoreResult<Vec<Unit>> {
        if task_types.is_empty() || (jobs.is_empty() && keys.is_empty()) {
            return Ok(Vec::new());
        }
        let (reply, answer) = oneshot::channel();
        let ask = Ask {
            task_types: task_types.to_vec(),
            jobs,
            keys,
            reply,
        };
        let read = Read {
            store: store.clone(),
            reads: self.reads.clone(),
        };
        self.asks.push(ask, pause, read);
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

/// A pass: the waiting lookups, one read per handler's task types.
struct Read {
    store: DynServiceStore,
    reads: Arc<AtomicU64>,
}

impl Pass for Read {
    type Ask = Ask;

    async fn run(&self, asks: Vec<Ask>) -> Vec<Ask> {
        let mut by_types: BTreeMap<Vec<String>, Vec<Ask>> = BTreeMap::new();
        for ask in asks {
            by_types
                .entry(ask.task_types.clone())
                .or_default()
                .push(ask);
        }
        for (task_types, asks) in by_types {
            let listed = |of: fn(&Ask) -> &Vec<String>| {
                let mut all: Vec<String> = asks.iter().flat_map(|a| of(a).clone()).collect();
                all.sort_unstable();
                all.dedup();
                all
            };
            let (jobs, keys) = (listed(|a| &a.jobs), listed(|a| &a.keys));
            self.reads.fetch_add(1, Ordering::Relaxed);
            match self
                .store
                .unit_find_by_provider_refs(&task_types, &jobs, &keys)
                .await
            {
                Ok(units) => {
                    for ask in asks {
                        let mine = units
                            .iter()
                            .filter(|u| {
                                u.provider_job_id
                                    .as_ref()
                                    .is_some_and(|j| ask.jobs.contains(j))
                                    || ask.keys.contains(&u.idempotency_key())
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
        Vec::new()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::test_support::{VIDEO, submitted_jobs};

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
            .find(&store, &types, vec!["job-0".into()], Vec::new(), pause)
            .await
            .unwrap();
        assert_eq!(found(&first), ["t-u0"]);
        assert_eq!(lookups.reads(), 1);

        // Nineteen callbacks while the pass pauses, one naming no known job, one naming its
        // unit by the idempotency key alone (a job whose id is not recorded yet).
        let asks = (1..20).map(|i| {
            let (jobs, keys) = match i {
                19 => (vec!["job-none".to_string()], Vec::new()),
                18 => (Vec::new(), vec!["t-u18-main-0".to_string()]),
                _ => (vec![format!("job-{i}")], Vec::new()),
            };
            lookups.find(&store, &types, jobs, keys, pause)
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
            .find(
                &store,
                &["avatar".to_string()],
                vec!["job-1".into()],
                Vec::new(),
                pause,
            )
            .await
            .unwrap();
        assert!(other.is_empty());
        assert_eq!(lookups.reads(), 3);

        // No jobs named: nothing to read.
        assert!(
            lookups
                .find(&store, &types, Vec::new(), Vec::new(), pause)
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
        let asks = (0..2).map(|i| {
            lookups.find(
                &store,
                &types,
                vec![format!("job-{i}")],
                Vec::new(),
                Duration::ZERO,
            )
        });
        for answer in futures::future::join_all(asks).await {
            assert!(answer.is_err(), "a closed store's read fails: {answer:?}");
        }
        assert!(
            lookups
                .find(
                    &store,
                    &types,
                    vec!["job-0".into()],
                    Vec::new(),
                    Duration::ZERO
                )
                .await
                .is_err()
        );
        // The pass ends once it finds nothing waiting (right after answering).
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            while lookups.asks.running() {
                tokio::task::yield_now().await;
            }
        });
        assert!(ended.await.is_ok(), "no pass is left running");
    }
}
