//! Provider callbacks' writes, written together.
//!
//! A provider calls back once per job that ends, and each callback's changes were one batch
//! write of their own: the largest share of PostgreSQL's work per unit in the saturated scale
//! run (0.77 statements per unit, docs/scale.md). The writes are gathered into passes
//! ([`crate::together`]) as the callbacks' job lookups are: the first after a quiet spell is
//! written at once, those that arrive meanwhile go together into the next pass's one batch
//! write, and each callback gets back the part of the report that is its own.
//!
//! A pass takes a callback's updates whole, and leaves a callback that names a unit an earlier
//! one of the pass already names for the next pass: two callbacks about one job are written in
//! the order they came, each under its own guard. Should the shared write fail, each callback's
//! updates are written alone, so a bad batch fails only its own callback; and since a write
//! whose answer was lost may have committed (its redo then meets its own moves and skips them),
//! such an answer says it was redone ([`Answer::redone`]), and the lifecycle reads back what
//! the skipped updates find, so no slot release or wake of a committed move is lost.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::together::{Pass, Together};
use slotd_store::{ApplyReport, DynUnitWriter, StoreError, StoreResult, UnitUpdate};

/// One callback's updates, waiting for a pass.
struct Ask {
    updates: Vec<UnitUpdate>,
    now: i64,
    reply: oneshot::Sender<StoreResult<Answer>>,
}

/// A callback's part of a pass's write.
#[derive(Debug)]
pub(super) struct Answer {
    pub report: ApplyReport,
    /// Written alone after a write that failed (the pass's shared one, or its own): that
    /// write may have committed before its answer was lost, so an update skipped now may be
    /// one that committed then.
    pub redone: bool,
}

/// The writes of this process's provider callbacks (cheap to clone; one per
/// [`super::UnitWriter`]).
#[derive(Clone, Default)]
pub struct CallbackWrites {
    asks: Together<Ask>,
    /// Batch writes made so far (a test signal: how many statements the writes cost).
    writes: Arc<AtomicU64>,
}

impl CallbackWrites {
    /// Write `updates` (unfenced, as a callback's are) with whatever other callbacks' wait.
    /// `pause` is the shortest time between two writes: the callbacks that come meanwhile
    /// wait for the next.
    pub(super) async fn apply(
        &self,
        store: &DynUnitWriter,
        updates: &[UnitUpdate],
        now: i64,
        pause: Duration,
    ) -> StoreResult<Answer> {
        let (reply, answer) = oneshot::channel();
        let ask = Ask {
            updates: updates.to_vec(),
            now,
            reply,
        };
        let write = Write {
            store: store.clone(),
            writes: self.writes.clone(),
        };
        self.asks.push(ask, pause, write);
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(
                "the callback writes stopped (shutting down)".into(),
            ))
        })
    }

    /// Batch writes made so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }
}

/// A pass: the waiting callbacks' updates in one batch write.
struct Write {
    store: DynUnitWriter,
    writes: Arc<AtomicU64>,
}

impl Write {
    async fn apply(&self, updates: &[UnitUpdate], now: i64) -> StoreResult<ApplyReport> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.store.unit_apply(updates, now, None).await
    }
}

impl Pass for Write {
    type Ask = Ask;

    async fn run(&self, asks: Vec<Ask>) -> Vec<Ask> {
        let mut named: HashSet<String> = HashSet::new();
        let mut taken = Vec::with_capacity(asks.len());
        let mut left = Vec::new();
        for ask in asks {
            if ask.updates.iter().any(|u| named.contains(&u.unit_id)) {
                left.push(ask);
            } else {
                named.extend(ask.updates.iter().map(|u| u.unit_id.clone()));
                taken.push(ask);
            }
        }
        let all: Vec<UnitUpdate> = taken
            .iter()
            .flat_map(|a| a.updates.iter().cloned())
            .collect();
        // The pass writes when the last of them came (or later): no update is dated before
        // its callback.
        let now = taken.iter().map(|a| a.now).max().unwrap_or_default();
        match self.apply(&all, now).await {
            Ok(report) => {
                for ask in taken {
                    // The asker may be gone (its connection dropped): nothing to tell.
                    let _ = ask.reply.send(Ok(Answer {
                        report: own_part(&report, &ask.updates),
                        redone: false,
                    }));
                }
            }
            Err(e) => {
                // Failed, or committed with its answer lost: written again, alone, and the
                // answer says so (a store that is down fails the redo too).
                tracing::warn!(error = %e, callbacks = taken.len(),
                    "callbacks' write failed; writing each alone");
                for ask in taken {
                    let redone = self.apply(&ask.updates, ask.now).await;
                    let _ = ask.reply.send(redone.map(|report| Answer {
                        report,
                        redone: true,
                    }));
                }
            }
        }
        left
    }
}

/// The part of a pass's `report` about the units `updates` name (no other callback of the
/// pass names them).
fn own_part(report: &ApplyReport, updates: &[UnitUpdate]) -> ApplyReport {
    let mine: HashSet<&str> = updates.iter().map(|u| u.unit_id.as_str()).collect();
    let of = |ids: &[String]| -> Vec<String> {
        ids.iter()
            .filter(|id| mine.contains(id.as_str()))
            .cloned()
            .collect()
    };
    ApplyReport {
        applied: of(&report.applied),
        skipped: of(&report.skipped),
        refused: report
            .refused
            .iter()
            .filter(|r| mine.contains(r.unit_id.as_str()))
            .cloned()
            .collect(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::test_support::submitted_jobs;
    use slotd_core::model::UnitStatus;
    use slotd_store::prelude::*;

    /// Unit `i`'s job ended well (or, `to` given, that move).
    fn ended(i: usize, to: UnitStatus) -> UnitUpdate {
        UnitUpdate {
            unit_id: format!("t-u{i}"),
            from: Some(UnitStatus::Submitted),
            to: Some(to),
            result: Some(format!(r#"{{"url":"https://x/{i}.mp4"}}"#)),
            ..UnitUpdate::default()
        }
    }

    /// The first callback is written at once; those that come while its pass pauses are
    /// written in one statement, each answered with its own part of the report (a refusal
    /// only to its own callback); a second callback about a unit of that pass waits for the
    /// next, and meets the first one's move.
    #[tokio::test]
    async fn callbacks_that_meet_are_written_together() {
        let (_dir, sqlite) = submitted_jobs(20).await;
        let store: DynUnitWriter = sqlite.clone();
        let writes = CallbackWrites::default();
        let pause = Duration::from_millis(200);

        let first = writes
            .apply(&store, &[ended(0, UnitStatus::Succeeded)], 10, pause)
            .await
            .unwrap()
            .report;
        assert_eq!(first.applied, ["t-u0"]);
        assert_eq!(writes.writes(), 1);

        // Seventeen jobs that ended, one callback told twice about unit 18, and one asking
        // an illegal move (submitted to completed), all while the pass pauses.
        let mut asks: Vec<Vec<UnitUpdate>> = (1..=18)
            .map(|i| vec![ended(i, UnitStatus::Succeeded)])
            .collect();
        asks.push(vec![ended(18, UnitStatus::Succeeded)]);
        asks.push(vec![ended(19, UnitStatus::Completed)]);
        let answers =
            futures::future::join_all(asks.iter().map(|u| writes.apply(&store, u, 11, pause)))
                .await;
        let answers: Vec<ApplyReport> = answers.into_iter().map(|a| a.unwrap().report).collect();
        for (i, report) in answers.iter().enumerate().take(18) {
            assert_eq!(report.applied, [format!("t-u{}", i + 1)], "{report:?}");
            assert!(report.skipped.is_empty() && report.refused.is_empty());
        }
        let again = &answers[18];
        assert!(again.applied.is_empty(), "{again:?}");
        assert_eq!(again.skipped, ["t-u18"], "the repeat meets the first move");
        let illegal = &answers[19];
        assert!(illegal.applied.is_empty() && illegal.skipped.is_empty());
        assert_eq!(illegal.refused.len(), 1);
        assert_eq!(illegal.refused[0].unit_id, "t-u19");
        assert_eq!(
            writes.writes(),
            3,
            "the nineteen in one statement, the repeat in the next"
        );

        let units = sqlite.task_units("t").await.unwrap();
        let status = |i: usize| units[i].status;
        assert!((0..=18).all(|i| status(i) == UnitStatus::Succeeded));
        assert_eq!(status(19), UnitStatus::Submitted);
        assert_eq!(units[5].updated_at, 11);
    }

    /// A store that fails answers every waiting callback with its error, after writing each
    /// alone; nothing is left waiting.
    #[tokio::test]
    async fn a_failed_write_answers_every_callback_with_its_error() {
        let (_dir, sqlite) = submitted_jobs(3).await;
        sqlite.close().await;
        let store: DynUnitWriter = sqlite;
        let writes = CallbackWrites::default();
        let asks: Vec<Vec<UnitUpdate>> = (0..3)
            .map(|i| vec![ended(i, UnitStatus::Succeeded)])
            .collect();
        let answers = futures::future::join_all(
            asks.iter()
                .map(|u| writes.apply(&store, u, 10, Duration::ZERO)),
        )
        .await;
        for answer in answers {
            assert!(answer.is_err(), "a closed store's write fails: {answer:?}");
        }
        let ended_passes = tokio::time::timeout(Duration::from_secs(10), async {
            while writes.asks.running() {
                tokio::task::yield_now().await;
            }
        });
        assert!(ended_passes.await.is_ok(), "no pass is left running");
        assert!(writes.writes() >= 3, "each was tried: {}", writes.writes());
    }
}
