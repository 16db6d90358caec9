//! Staged rollouts of handler releases (migrations: 0019 on SQLite, 0020 on PostgreSQL): one
//! row per rollout, moved from stage to stage (and to its end) only by a compare-and-set on its
//! stage and state, so that two schedulers judging the same stage cannot both move it, and a
//! scheduler killed mid-rollout leaves the stage and its start for the survivor.

use serde::Serialize;
use sqlx::Row;

use crate::StoreResult;
use crate::shared::on_both_drivers;

/// Where a rollout is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RolloutState {
    /// Its stage's share of new units goes to the candidate; the stage is judged.
    Running,
    /// No new unit goes to the candidate; its jobs finish; nothing is judged until resumed.
    Paused,
    /// The candidate became the handler's current release.
    Promoted,
    /// The candidate takes no new unit; the units it failed were retried.
    RolledBack,
}

impl RolloutState {
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutState::Running => "running",
            RolloutState::Paused => "paused",
            RolloutState::Promoted => "promoted",
            RolloutState::RolledBack => "rolled_back",
        }
    }

    pub fn parse(s: &str) -> Option<RolloutState> {
        Some(match s {
            "running" => RolloutState::Running,
            "paused" => RolloutState::Paused,
            "promoted" => RolloutState::Promoted,
            "rolled_back" => RolloutState::RolledBack,
            _ => return None,
        })
    }

    /// Whether the rollout is over.
    pub fn ended(self) -> bool {
        matches!(self, RolloutState::Promoted | RolloutState::RolledBack)
    }
}

/// A rollout as stored.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Rollout {
    pub id: String,
    /// The handler.
    pub name: String,
    /// The release rolled out (sha256).
    pub candidate: String,
    /// The release serving when it started (sha256).
    pub incumbent: String,
    /// Shares of new units per stage, in percent (the last is 100).
    pub stages: Vec<u32>,
    /// Index of the stage in force.
    pub stage: u32,
    pub state: RolloutState,
    /// Candidate units ended before a stage is judged.
    pub min_units: u32,
    /// How much higher the candidate's failure share may be than the incumbent's (0..1).
    pub margin: f64,
    pub started_at: i64,
    pub stage_started_at: i64,
    pub updated_at: i64,
    /// Why it last moved.
    pub reason: Option<String>,
    /// The last judgement's figures (JSON), if any.
    #[schema(value_type = Option<Object>)]
    pub figures: Option<serde_json::Value>,
    /// Its steps, oldest first (filled in by listings that show them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<RolloutEvent>,
}

impl Rollout {
    /// The move of this rollout, as it stands, to `stage` in `state`.
    pub fn move_to(
        &self,
        stage: u32,
        state: RolloutState,
        reason: String,
        figures: Option<serde_json::Value>,
        now: i64,
    ) -> RolloutMove {
        RolloutMove {
            id: self.id.clone(),
            from_stage: self.stage,
            from_state: self.state,
            stage,
            state,
            reason,
            figures,
            now,
        }
    }

    /// The share of new units the candidate takes now, in percent (0 unless running).
    pub fn share(&self) -> u32 {
        match self.state {
            RolloutState::Running => self.stages.get(self.stage as usize).copied().unwrap_or(0),
            _ => 0,
        }
    }
}

/// One step of a rollout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RolloutEvent {
    /// Unix ms.
    pub at: i64,
    /// Index of the stage it was at.
    pub stage: u32,
    pub state: RolloutState,
    pub reason: String,
}

/// A move of a rollout, applied only if it is still at `from_stage` in `from_state`.
#[derive(Clone, Debug)]
pub struct RolloutMove {
    pub id: String,
    pub from_stage: u32,
    pub from_state: RolloutState,
    pub stage: u32,
    pub state: RolloutState,
    pub reason: String,
    pub figures: Option<serde_json::Value>,
    pub now: i64,
}

/// Units whose jobs one release created and that ended (or last changed) since a time, by
/// status and error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseOutcome {
    pub release: String,
    pub status: String,
    /// The unit's error JSON when it failed.
    pub error: Option<String>,
    pub units: i64,
}

const ROLLOUT_COLS: &str = "id, name, candidate, incumbent, stages, stage, state, min_units, \
     margin, started_at, stage_started_at, updated_at, reason, figures";

on_both_drivers! {
    fn rollout_from_row(row: &DbRow) -> StoreResult<Rollout> {
        let id: String = row.try_get("id")?;
        let corrupt = |what: &str| crate::StoreError::Corrupt(format!("rollout {id}: {what}"));
        let stages: String = row.try_get("stages")?;
        let state: String = row.try_get("state")?;
        let figures: Option<String> = row.try_get("figures")?;
        let stage: i64 = row.try_get("stage")?;
        let min_units: i64 = row.try_get("min_units")?;
        Ok(Rollout {
            name: row.try_get("name")?,
            candidate: row.try_get("candidate")?,
            incumbent: row.try_get("incumbent")?,
            stages: serde_json::from_str(&stages).map_err(|_| corrupt("stages"))?,
            stage: u32::try_from(stage).map_err(|_| corrupt("stage"))?,
            state: RolloutState::parse(&state).ok_or_else(|| corrupt("state"))?,
            min_units: u32::try_from(min_units).map_err(|_| corrupt("min_units"))?,
            margin: row.try_get("margin")?,
            started_at: row.try_get("started_at")?,
            stage_started_at: row.try_get("stage_started_at")?,
            updated_at: row.try_get("updated_at")?,
            reason: row.try_get("reason")?,
            figures: figures.and_then(|f| serde_json::from_str(&f).ok()),
            events: Vec::new(),
            id,
        })
    }

    async fn rollout_event(
        conn: &mut Conn,
        id: &str,
        at: i64,
        stage: u32,
        state: RolloutState,
        reason: &str,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO handler_rollout_events (rollout_id, at, stage, state, reason) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(id)
        .bind(at)
        .bind(i64::from(stage))
        .bind(state.as_str())
        .bind(reason)
        .execute(conn)
        .await?;
        Ok(())
    }

    /// See [`crate::StoreRead::rollout_events`].
    pub(crate) async fn rollout_events(pool: &Pool, id: &str) -> StoreResult<Vec<RolloutEvent>> {
        let rows = sqlx::query(
            "SELECT at, stage, state, reason FROM handler_rollout_events \
             WHERE rollout_id = $1 ORDER BY at, stage",
        )
        .bind(id)
        .fetch_all(pool)
        .await?;
        rows.iter()
            .map(|r| {
                let state: String = r.try_get("state")?;
                let stage: i64 = r.try_get("stage")?;
                Ok(RolloutEvent {
                    at: r.try_get("at")?,
                    stage: u32::try_from(stage).unwrap_or(0),
                    state: RolloutState::parse(&state).ok_or_else(|| {
                        crate::StoreError::Corrupt(format!("rollout {id}: event state {state:?}"))
                    })?,
                    reason: r.try_get("reason")?,
                })
            })
            .collect()
    }

    /// See [`crate::RecordWrite::rollout_start`].
    /// The rollout, its first step and the check that none other runs are one transaction.
    pub(crate) async fn rollout_start(pool: &Pool, r: &Rollout) -> StoreResult<bool> {
        let mut tx = pool.begin().await?;
        if let Some(lock) = ADVISORY_LOCK {
            sqlx::query(lock)
                .bind(format!("rollout:{}", r.name))
                .execute(&mut *tx)
                .await?;
        }
        let running: Option<String> = sqlx::query_scalar(
            "SELECT id FROM handler_rollouts WHERE name = $1 AND state IN ('running', 'paused')",
        )
        .bind(&r.name)
        .fetch_optional(&mut *tx)
        .await?;
        if running.is_some() {
            tx.rollback().await?;
            return Ok(false);
        }
        sqlx::query(&format!(
            "INSERT INTO handler_rollouts ({ROLLOUT_COLS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
        ))
        .bind(&r.id)
        .bind(&r.name)
        .bind(&r.candidate)
        .bind(&r.incumbent)
        .bind(serde_json::to_string(&r.stages).unwrap_or_else(|_| "[100]".into()))
        .bind(i64::from(r.stage))
        .bind(r.state.as_str())
        .bind(i64::from(r.min_units))
        .bind(r.margin)
        .bind(r.started_at)
        .bind(r.stage_started_at)
        .bind(r.updated_at)
        .bind(&r.reason)
        .bind(r.figures.as_ref().map(|f| f.to_string()))
        .execute(&mut *tx)
        .await?;
        let reason = r.reason.as_deref().unwrap_or("started");
        rollout_event(&mut tx, &r.id, r.started_at, r.stage, r.state, reason).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// See [`crate::RecordWrite::rollout_move`].
    /// The move and its step are one transaction: a listing never shows one without the other.
    pub(crate) async fn rollout_move(pool: &Pool, m: &RolloutMove) -> StoreResult<bool> {
        let mut tx = pool.begin().await?;
        let moved = sqlx::query(
            "UPDATE handler_rollouts SET stage = $4, state = $5, reason = $6, \
                 figures = COALESCE($7, figures), updated_at = $8, \
                 stage_started_at = CASE WHEN stage = $4 AND state = $5 \
                     THEN stage_started_at ELSE $8 END \
             WHERE id = $1 AND stage = $2 AND state = $3",
        )
        .bind(&m.id)
        .bind(i64::from(m.from_stage))
        .bind(m.from_state.as_str())
        .bind(i64::from(m.stage))
        .bind(m.state.as_str())
        .bind(&m.reason)
        .bind(m.figures.as_ref().map(|f| f.to_string()))
        .bind(m.now)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if moved {
            rollout_event(&mut tx, &m.id, m.now, m.stage, m.state, &m.reason).await?;
        }
        tx.commit().await?;
        Ok(moved)
    }

    /// See [`crate::RecordWrite::rollout_figures`].
    pub(crate) async fn rollout_figures(
        pool: &Pool,
        id: &str,
        figures: &serde_json::Value,
    ) -> StoreResult<()> {
        sqlx::query("UPDATE handler_rollouts SET figures = $2 WHERE id = $1 AND state = 'running'")
            .bind(id)
            .bind(figures.to_string())
            .execute(pool)
            .await?;
        Ok(())
    }

    /// See [`crate::StoreRead::rollout_list`].
    pub(crate) async fn rollout_list(
        pool: &Pool,
        name: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<Rollout>> {
        let rows = sqlx::query(&format!(
            "SELECT {ROLLOUT_COLS} FROM handler_rollouts \
             WHERE CAST($1 AS TEXT) IS NULL OR name = $1 \
             ORDER BY started_at DESC, id LIMIT $2"
        ))
        .bind(name)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
        rows.iter().map(rollout_from_row).collect()
    }

    /// See [`crate::StoreRead::release_failed_tasks`].
    pub(crate) async fn release_failed_tasks(
        pool: &Pool,
        release: &str,
        since: i64,
    ) -> StoreResult<Vec<(String, String)>> {
        let rows = sqlx::query(
            "SELECT DISTINCT tenant, task_id FROM units \
             WHERE job_release = $1 AND status = 'failed' AND updated_at >= $2 \
             ORDER BY tenant, task_id",
        )
        .bind(release)
        .bind(since)
        .fetch_all(pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("tenant")?, r.try_get("task_id")?)))
            .collect()
    }

    /// See [`crate::StoreRead::release_outcomes`].
    pub(crate) async fn release_outcomes(
        pool: &Pool,
        releases: &[String],
        since: i64,
    ) -> StoreResult<Vec<ReleaseOutcome>> {
        let mut out = Vec::new();
        for release in releases {
            let rows = sqlx::query(
                "SELECT status, error, COUNT(*) AS units FROM units \
                 WHERE job_release = $1 AND updated_at >= $2 \
                   AND status IN ('succeeded', 'finalizing', 'completed', 'failed') \
                 GROUP BY status, error ORDER BY status, error",
            )
            .bind(release)
            .bind(since)
            .fetch_all(pool)
            .await?;
            for r in rows {
                out.push(ReleaseOutcome {
                    release: release.clone(),
                    status: r.try_get("status")?,
                    error: r.try_get("error")?,
                    units: r.try_get("units")?,
                });
            }
        }
        Ok(out)
    }
}
