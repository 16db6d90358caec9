//! The rollout loop of every scheduler (docs/handlers.md, "Staged rollout"): each running
//! rollout's stage is judged (`judge.rs`) every [`JUDGE_EVERY`], once enough of the
//! candidate's units ended in it, on the outcomes of the units its candidate and its incumbent
//! submitted since the rollout began; a stage that passes
//! moves on (the last promotes the candidate to its handler's current release), one that fails
//! rolls the candidate back and retries the tasks whose units it failed. That retry is also a
//! standing sweep of every judge pass ([`Scheduler::sweep_rollbacks`]): until each process's
//! release follower has dropped the canary the candidate may still take units, and its jobs in
//! flight stay on it, so whatever it fails after the move is retried too, and a scheduler
//! killed between the move and the retry leaves the retry to the next pass of any scheduler.
//! Every move is a
//! compare-and-set on the rollout's stage and state, so two schedulers judging at once move
//! it once, and a scheduler killed mid-rollout leaves the stage, its start and its counts
//! (they are the units' own records) to the survivor. Each move is logged, counted
//! (`slotd_rollout_moves_total`), recorded as a step of the rollout (`handler_rollout_events`,
//! shown by `GET /v1/handlers/{name}/releases`) and wakes every process's release follower.

pub mod judge;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::Scheduler;
use judge::{Evidence, Side, Verdict, judge};
use slotd_coord::wake::WakeKey;
use slotd_store::{Rollout, RolloutMove, RolloutState};

/// How often running rollouts are judged.
pub const JUDGE_EVERY: Duration = Duration::from_secs(1);

impl Scheduler {
    pub(super) async fn rollout_loop(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            if let Err(e) = self.judge_rollouts().await {
                tracing::warn!(error = %e, "could not judge the running rollouts");
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(JUDGE_EVERY) => {}
            }
        }
    }

    /// Judge every running rollout once, and sweep the rolled-back ones.
    pub async fn judge_rollouts(&self) -> slotd_store::StoreResult<()> {
        let s = &self.services;
        let rollouts = s.store.rollout_list(None, 200).await?;
        self.sweep_rollbacks(&rollouts).await?;
        let mut seen = std::collections::BTreeSet::new();
        for r in rollouts {
            if !seen.insert(r.name.clone()) || r.state != RolloutState::Running {
                continue;
            }
            // The stage's own progress, then everything since the rollout started.
            let candidate = [r.candidate.clone()];
            let stage = s
                .store
                .release_outcomes(&candidate, r.stage_started_at)
                .await?;
            let stage_ended = Side::of(&stage, &r.candidate).ended;
            let releases = [r.candidate.clone(), r.incumbent.clone()];
            let outcomes = s.store.release_outcomes(&releases, r.started_at).await?;
            let signals = s.store.release_signals(&releases, r.started_at).await?;
            let signals_of = |release: &str| {
                signals
                    .iter()
                    .find(|(r, _)| r == release)
                    .map(|(_, s)| s.clone())
                    .unwrap_or_default()
            };
            let evidence = Evidence {
                candidate: Side::of(&outcomes, &r.candidate),
                incumbent: Side::of(&outcomes, &r.incumbent),
                candidate_signals: signals_of(&r.candidate),
                incumbent_signals: signals_of(&r.incumbent),
            };
            let (verdict, figures) = judge(&evidence, stage_ended, r.min_units, r.margin);
            let figures = serde_json::to_value(&figures).ok();
            if let (Verdict::Wait(_), Some(f)) = (&verdict, &figures) {
                // What a provider team watches while the stage is judged.
                s.store.rollout_figures(&r.id, f).await?;
                continue;
            }
            let now = s.clock.now_ms();
            let last = r.stage as usize + 1 >= r.stages.len();
            let (stage, state, reason) = match verdict {
                Verdict::Wait(_) => continue,
                Verdict::Pass(said) if last => (
                    r.stage,
                    RolloutState::Promoted,
                    format!(
                        "stage {} ({} %) passed: {said}; promoted",
                        r.stage + 1,
                        r.share()
                    ),
                ),
                Verdict::Pass(said) => (
                    r.stage + 1,
                    RolloutState::Running,
                    format!(
                        "stage {} ({} %) passed: {said}; next {} %",
                        r.stage + 1,
                        r.share(),
                        r.stages.get(r.stage as usize + 1).copied().unwrap_or(100)
                    ),
                ),
                Verdict::Fail(said) => (
                    r.stage,
                    RolloutState::RolledBack,
                    format!(
                        "stage {} ({} %) failed: {said}; rolled back",
                        r.stage + 1,
                        r.share()
                    ),
                ),
            };
            let m = r.move_to(stage, state, reason, figures, now);
            self.move_rollout(&r, &m).await?;
        }
        Ok(())
    }

    /// Retry the tasks whose units the candidate of a rolled-back rollout failed, for as long
    /// as it may still fail any: every pass for a stage deadline (plus [`ROLLBACK_SWEEP_GRACE`])
    /// after the rollback, and past that while it has jobs in flight (read to their end),
    /// looked for every [`ROLLBACK_LATE_CHECK`]. Each pass retries only what failed since the last (a retried unit is
    /// `pending` again), so a quiet sweep costs one read per rolled-back rollout.
    pub async fn sweep_rollbacks(&self, rollouts: &[Rollout]) -> slotd_store::StoreResult<()> {
        let s = &self.services;
        let now = s.clock.now_ms();
        let window = ms(s.config.scheduler.stage_deadline + ROLLBACK_SWEEP_GRACE);
        let (recent, older): (Vec<&Rollout>, Vec<&Rollout>) = rollouts
            .iter()
            .filter(|r| r.state == RolloutState::RolledBack)
            .partition(|r| now.saturating_sub(r.updated_at) <= window);
        for r in recent {
            retry_candidate_failures(s, r, now).await?;
        }
        // Past the window only a job still in flight (read to its end) can fail on the
        // candidate: the jobs in flight are read at most once a minute for that, not every pass.
        let due = ms(ROLLBACK_LATE_CHECK);
        let last = self.rollback_late_check.load(Ordering::Relaxed);
        if older.is_empty() || now.saturating_sub(last) < due {
            return Ok(());
        }
        self.rollback_late_check.store(now, Ordering::Relaxed);
        let in_flight: std::collections::HashMap<String, i64> =
            s.store.unit_job_releases().await?.into_iter().collect();
        for r in older {
            if in_flight.get(&r.candidate).is_some_and(|n| *n > 0) {
                retry_candidate_failures(s, r, now).await?;
            }
        }
        Ok(())
    }

    /// Apply a move (if nobody moved the rollout first) and everything that follows from it.
    pub async fn move_rollout(
        &self,
        r: &Rollout,
        m: &RolloutMove,
    ) -> slotd_store::StoreResult<bool> {
        apply_move(&self.services, r, m).await
    }
}

/// Apply `m` to rollout `r` and its consequences: a promoted candidate becomes the current
/// release, a rolled-back one's failed tasks are retried. Returns false (nothing done) when
/// the rollout had moved already.
pub async fn apply_move(
    s: &slotd_units::services::Services,
    r: &Rollout,
    m: &RolloutMove,
) -> slotd_store::StoreResult<bool> {
    if !s.store.rollout_move(m).await? {
        return Ok(false);
    }
    tracing::info!(handler = %r.name, rollout = %r.id, state = m.state.as_str(), stage = m.stage + 1, "rollout: {}", m.reason);
    s.metrics.record(|| {
        metrics::counter!("slotd_rollout_moves_total", "handler" => r.name.clone(), "to" => m.state.as_str())
            .increment(1)
    });
    match m.state {
        RolloutState::Promoted => {
            s.store.release_promote(&r.candidate, m.now).await?;
        }
        RolloutState::RolledBack => {
            // The followers drop the canary first (woken below); what the candidate fails
            // until then, and while its jobs run on, the standing sweep retries.
            s.wake.wake(WakeKey::Releases);
            retry_candidate_failures(s, r, m.now).await?;
            return Ok(true);
        }
        RolloutState::Running | RolloutState::Paused => {}
    }
    s.wake.wake(WakeKey::Releases);
    Ok(true)
}

/// How long past a stage deadline after a rollback its candidate's failures are still swept.
pub const ROLLBACK_SWEEP_GRACE: Duration = Duration::from_secs(600);
/// How often, past that, the rolled-back candidates' jobs still in flight are looked for.
pub const ROLLBACK_LATE_CHECK: Duration = Duration::from_secs(60);

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Retry the tasks of which the candidate of rolled-back `r` failed units since it started.
async fn retry_candidate_failures(
    s: &slotd_units::services::Services,
    r: &Rollout,
    now: i64,
) -> slotd_store::StoreResult<()> {
    let tasks = s
        .store
        .release_failed_tasks(&r.candidate, r.started_at)
        .await?;
    if tasks.is_empty() {
        return Ok(());
    }
    let mut retried = 0;
    for (tenant, task) in &tasks {
        if let Some(n) = slotd_units::lifecycle::retry_task(s, tenant, task, now).await? {
            retried += n;
        }
    }
    tracing::info!(handler = %r.name, rollout = %r.id, tasks = tasks.len(), units = retried, "rollout rolled back: the tasks its candidate failed units of are retried");
    Ok(())
}
