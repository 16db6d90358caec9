//! What a rollout is judged on besides its units' outcomes (migrations: 0020 on SQLite, 0021
//! on PostgreSQL): per handler release and minute, the counts every scheduler's ticks add
//! while the release's handler has a rollout running. Minutes keep the window of a judgement
//! (since the rollout started) apart from what a release did before it.

use serde::Serialize;
use sqlx::Row;

use crate::StoreResult;
use crate::shared::on_both_drivers;

/// One release's signals over a window (or one tick's, to add).
#[derive(Clone, Debug, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ReleaseSignals {
    /// Units its tick calls were given.
    pub units: i64,
    /// Creates it sent (units without a job).
    pub creates: i64,
    /// Of those, refused by the provider for capacity.
    pub create_refused: i64,
    /// Units of its calls that faulted (trap, budget, error, the provider past the deadline).
    pub faults: i64,
    /// Changes it asked for that the state machine refused.
    pub refused_changes: i64,
    /// Provider jobs it saw end, with the sum and the sum of squares of the natural logs of
    /// their durations (ln ms): a geometric mean, which one long-tail job does not swing.
    pub jobs: i64,
    pub job_log_ms: f64,
    pub job_log_ms_sq: f64,
}

impl ReleaseSignals {
    pub fn add(&mut self, o: &ReleaseSignals) {
        self.units += o.units;
        self.creates += o.creates;
        self.create_refused += o.create_refused;
        self.faults += o.faults;
        self.refused_changes += o.refused_changes;
        self.jobs += o.jobs;
        self.job_log_ms += o.job_log_ms;
        self.job_log_ms_sq += o.job_log_ms_sq;
    }

    /// A job of `ms` seen ending (1 ms at least).
    pub fn job(&mut self, ms: i64) {
        let ln = (ms.max(1) as f64).ln();
        self.jobs += 1;
        self.job_log_ms += ln;
        self.job_log_ms_sq += ln * ln;
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        *self == ReleaseSignals::default()
    }
}

/// The minute `at` (Unix ms) falls in.
fn minute(at: i64) -> i64 {
    at - at.rem_euclid(60_000)
}

on_both_drivers! {
    /// See [`crate::RecordWrite::release_signals_add`].
    pub(crate) async fn release_signals_add(
        pool: &Pool,
        release: &str,
        at: i64,
        s: &ReleaseSignals,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO release_signals (release, minute, units, creates, create_refused, \
                 faults, refused_changes, jobs, job_log_ms, job_log_ms_sq) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             ON CONFLICT (release, minute) DO UPDATE SET \
                 units = release_signals.units + excluded.units, \
                 creates = release_signals.creates + excluded.creates, \
                 create_refused = release_signals.create_refused + excluded.create_refused, \
                 faults = release_signals.faults + excluded.faults, \
                 refused_changes = release_signals.refused_changes + excluded.refused_changes, \
                 jobs = release_signals.jobs + excluded.jobs, \
                 job_log_ms = release_signals.job_log_ms + excluded.job_log_ms, \
                 job_log_ms_sq = release_signals.job_log_ms_sq + excluded.job_log_ms_sq",
        )
        .bind(release)
        .bind(minute(at))
        .bind(s.units)
        .bind(s.creates)
        .bind(s.create_refused)
        .bind(s.faults)
        .bind(s.refused_changes)
        .bind(s.jobs)
        .bind(s.job_log_ms)
        .bind(s.job_log_ms_sq)
        .execute(pool)
        .await?;
        Ok(())
    }

    /// See [`crate::StoreRead::release_signals`].
    pub(crate) async fn release_signals(
        pool: &Pool,
        releases: &[String],
        since: i64,
    ) -> StoreResult<Vec<(String, ReleaseSignals)>> {
        let mut out = Vec::new();
        for release in releases {
            let r = sqlx::query(
                "SELECT CAST(COALESCE(SUM(units), 0) AS BIGINT) AS units, \
                     CAST(COALESCE(SUM(creates), 0) AS BIGINT) AS creates, \
                     CAST(COALESCE(SUM(create_refused), 0) AS BIGINT) AS create_refused, \
                     CAST(COALESCE(SUM(faults), 0) AS BIGINT) AS faults, \
                     CAST(COALESCE(SUM(refused_changes), 0) AS BIGINT) AS refused_changes, \
                     CAST(COALESCE(SUM(jobs), 0) AS BIGINT) AS jobs, \
                     CAST(COALESCE(SUM(job_log_ms), 0) AS DOUBLE PRECISION) AS job_log_ms, \
                     CAST(COALESCE(SUM(job_log_ms_sq), 0) AS DOUBLE PRECISION) AS job_log_ms_sq \
                 FROM release_signals WHERE release = $1 AND minute >= $2",
            )
            .bind(release)
            .bind(minute(since))
            .fetch_one(pool)
            .await?;
            out.push((
                release.clone(),
                ReleaseSignals {
                    units: r.try_get("units")?,
                    creates: r.try_get("creates")?,
                    create_refused: r.try_get("create_refused")?,
                    faults: r.try_get("faults")?,
                    refused_changes: r.try_get("refused_changes")?,
                    jobs: r.try_get("jobs")?,
                    job_log_ms: r.try_get("job_log_ms")?,
                    job_log_ms_sq: r.try_get("job_log_ms_sq")?,
                },
            ));
        }
        Ok(out)
    }
}
