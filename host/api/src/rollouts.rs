//! Staged rollouts over HTTP (docs/handlers.md, "Staged rollout"): the terms of
//! `POST /v1/handlers?rollout=…` and the start of a rollout (called by `releases.rs`), and
//! `POST /v1/handlers/{name}/rollout`, a person's promote, rollback, pause or resume.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::{Tenant, publish_rights};
use super::error::{ApiError, log_store_error};
use slotd_store::{Rollout, RolloutState, current_releases};
use slotd_units::services::Services;

/// Routes of rollouts.
pub fn router() -> OpenApiRouter<Services> {
    OpenApiRouter::new().routes(routes!(rollout_action))
}

/// Default candidate units ended before a stage is judged.
pub const MIN_UNITS_DEFAULT: u32 = 20;
/// Default margin of a stage's judgement.
pub const MARGIN_DEFAULT: f64 = 0.05;

/// The stages of `?rollout=`.
fn parse_stages(text: &str) -> Result<Vec<u32>, ApiError> {
    // Well-formed (the schema's pattern) but not a rollout: 422, naming the field.
    let bad = |why: String| ApiError::invalid_field("rollout", why);
    let mut stages = Vec::new();
    for part in text.split(',') {
        let n: u32 = part
            .trim()
            .parse()
            .map_err(|_| bad(format!("{part:?} is not a whole percentage")))?;
        if n == 0 || n > 100 || stages.last().is_some_and(|l| *l >= n) {
            return Err(bad(format!(
                "stages are ascending percentages from 1 to 100; {text:?} is not"
            )));
        }
        stages.push(n);
    }
    if stages.last() != Some(&100) || stages.len() > 10 {
        return Err(bad(format!(
            "the last stage must be 100 (all new units), at most 10 stages: {text:?}"
        )));
    }
    Ok(stages)
}

/// A rollout's terms as a publish asked for them (`?rollout=&min_units=&margin=`).
pub(crate) struct RolloutTerms {
    pub stages: Vec<u32>,
    pub min_units: u32,
    pub margin: f64,
}

impl RolloutTerms {
    /// The terms, when `rollout` is given; defaults for the rest.
    pub(crate) fn of(
        rollout: Option<&str>,
        min_units: Option<u32>,
        margin: Option<f64>,
    ) -> Result<Option<RolloutTerms>, ApiError> {
        let min_units = min_units.unwrap_or(MIN_UNITS_DEFAULT);
        if min_units == 0 {
            return Err(ApiError::bad_field(
                "min_units",
                "min_units must be at least 1",
            ));
        }
        let margin = margin.unwrap_or(MARGIN_DEFAULT);
        if !(0.0..1.0).contains(&margin) {
            return Err(ApiError::bad_field(
                "margin",
                "margin is a share from 0 to below 1",
            ));
        }
        let Some(rollout) = rollout else {
            return Ok(None);
        };
        Ok(Some(RolloutTerms {
            stages: parse_stages(rollout)?,
            min_units,
            margin,
        }))
    }
}

/// The release a rollout of `candidate` for handler `name` is judged against: its current
/// release, which must exist and not be `candidate`, with no rollout of `name` in progress.
pub(crate) async fn incumbent_for(
    services: &Services,
    name: &str,
    candidate: &str,
) -> Result<String, ApiError> {
    let all = services
        .store
        .release_list(Some(name))
        .await
        .map_err(log_store_error("reading the handler's releases"))?;
    let current = current_releases(&all).get(name).map(|r| r.sha256.clone());
    let incumbent = match current {
        None => {
            return Err(ApiError::unprocessable(format!(
                "handler {name:?} has no current release to roll out against: publish it \
                 without a rollout first"
            )));
        }
        Some(c) if c == candidate => {
            return Err(ApiError::Conflict(format!(
                "this file is already handler {name:?}'s current release"
            )));
        }
        Some(c) => c,
    };
    if let Some(r) = in_progress(services, name).await? {
        return Err(in_progress_conflict(name, &r.id));
    }
    Ok(incumbent)
}

/// Handler `name`'s rollout in progress (running or paused), if any.
async fn in_progress(services: &Services, name: &str) -> Result<Option<Rollout>, ApiError> {
    Ok(services
        .store
        .rollout_list(Some(name), 1)
        .await
        .map_err(log_store_error("reading the rollouts"))?
        .into_iter()
        .find(|r| !r.state.ended()))
}

fn in_progress_conflict(name: &str, id: &str) -> ApiError {
    ApiError::Conflict(format!(
        "rollout {id} of handler {name:?} is in progress: promote it, roll it back or wait for \
         its end (GET /v1/handlers/{name}/releases)"
    ))
}

/// Start a rollout of release `candidate` against `incumbent` (a rollout started meanwhile by
/// another request is a conflict).
pub(crate) async fn start(
    services: &Services,
    terms: RolloutTerms,
    name: &str,
    candidate: &str,
    incumbent: String,
    tenant: &str,
    now: i64,
) -> Result<Rollout, ApiError> {
    let r = Rollout {
        id: uuid::Uuid::now_v7().to_string(),
        name: name.to_string(),
        candidate: candidate.to_string(),
        incumbent,
        stages: terms.stages,
        stage: 0,
        state: RolloutState::Running,
        min_units: terms.min_units,
        margin: terms.margin,
        started_at: now,
        stage_started_at: now,
        updated_at: now,
        reason: Some(format!("published by {tenant}: rollout started")),
        figures: None,
        events: Vec::new(),
    };
    let started = services
        .store
        .rollout_start(&r)
        .await
        .map_err(log_store_error("starting a rollout"))?;
    if !started {
        return Err(in_progress_conflict(name, "(started meanwhile)"));
    }
    tracing::info!(handler = %name, rollout = %r.id, stages = ?r.stages, "rollout started");
    Ok(r)
}

/// What a person does to a rollout.
#[derive(Clone, Copy, Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RolloutAction {
    /// Make the candidate the current release now.
    Promote,
    /// Send no new unit to the candidate; its jobs finish on it; the tasks it failed units of
    /// are retried.
    Rollback,
    /// Send no new unit to the candidate for now; nothing is judged until resumed.
    Pause,
    /// Go on with the stage in force.
    Resume,
}

/// Body of `POST /v1/handlers/{name}/rollout`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RolloutRequest {
    pub action: RolloutAction,
}

/// Act on a rollout
///
/// Promote, roll back, pause or resume handler `name`'s rollout in progress (the keys that may
/// publish the handler may). The move is recorded as one of the rollout's steps, with its reason.
#[utoipa::path(
    post,
    path = "/v1/handlers/{name}/rollout",
    tag = "handlers",
    operation_id = "rollout_action",
    params(("name" = String, Path, description = "The handler's name")),
    request_body = RolloutRequest,
    responses(
        (status = 200, description = "The rollout after the move", body = Rollout),
        (status = 403, description = "This key may not publish this handler"),
        (status = 404, description = "The handler has no rollout in progress"),
        (status = 409, description = "The move does not apply to the rollout's state, or it moved meanwhile"),
    ),
)]
async fn rollout_action(
    State(services): State<Services>,
    Tenant(tenant): Tenant,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Result<Json<RolloutRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Rollout>, ApiError> {
    let Json(req) = body.map_err(|e| ApiError::BadRequest {
        detail: format!("bad body: {}", e.body_text()),
        field: None,
    })?;
    if let Some(names) = publish_rights(&services, &headers)?
        && !names.contains(&name)
    {
        return Err(ApiError::Forbidden(format!(
            "the key of tenant {tenant:?} may act only on the rollouts of {names:?}"
        )));
    }
    let r = in_progress(&services, &name).await?.ok_or_else(|| {
        ApiError::NotFound(format!("handler {name:?} has no rollout in progress"))
    })?;
    let (stage, state) = match (req.action, r.state) {
        (RolloutAction::Promote, _) => (r.stage, RolloutState::Promoted),
        (RolloutAction::Rollback, _) => (r.stage, RolloutState::RolledBack),
        (RolloutAction::Pause, RolloutState::Running) => (r.stage, RolloutState::Paused),
        (RolloutAction::Resume, RolloutState::Paused) => (r.stage, RolloutState::Running),
        (action, state) => {
            return Err(ApiError::Conflict(format!(
                "cannot {action:?} a rollout that is {}",
                state.as_str()
            )));
        }
    };
    let now = services.clock.now_ms();
    let reason = format!("{:?} by {tenant}", req.action).to_lowercase();
    let m = r.move_to(stage, state, reason, None, now);
    let moved = slotd_scheduler::rollout::apply_move(&services, &r, &m)
        .await
        .map_err(log_store_error("moving a rollout"))?;
    if !moved {
        return Err(ApiError::Conflict(
            "the rollout moved meanwhile; read it again".into(),
        ));
    }
    let after = services
        .store
        .rollout_list(Some(&name), 1)
        .await
        .map_err(log_store_error("reading the rollout"))?
        .into_iter()
        .next()
        .ok_or(ApiError::Internal)?;
    Ok(Json(after))
}
