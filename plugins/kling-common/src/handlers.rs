//! The two Kling handlers as [`slotd_sdk::Handler`]s; the `kling-video` and `kling-avatar`
//! components only export them. Neither claims a 1.1 feature (no `cancel`, no routing).
//! `kling-video` estimates each shot's cost in resource-pack units (contract 1.2 `costs`, see
//! [`crate::price`]), states each shot's expected duration (contract 1.3
//! `provider.durations`, see [`video::expected_duration`]) and serves routes with every video
//! model (contract 1.5 `routes`, see [`crate::video_route`]); `kling-avatar` has no published
//! price and states no duration (a statement is about a unit's first stage, its 5–20 s voice,
//! while the unit goes on to a 10–90 s element), leaving both unknown.
//!
//! Configuration (`[handlers.<name>]`): `base_url`, `access_key`, the secret `secret_key`
//! (signs the JWT in the host), optionally the secret `webhook_secret`, `request_timeout_ms`
//! and `expected_duration_scale` (poll hints and stated durations × this; 0.01 against a 100×
//! simulator); `stated_duration_scale` (default: the same) moves the stated durations alone,
//! for a provider whose jobs run faster or slower than documented (and the benchmark of a
//! wrong prior).

use slotd_sdk::{
    Artifact, CallbackChange, Change, ExpectedDuration, Finalized, Handler, HandlerInfo, Host,
    PlanError, PlannedUnit, PoolInfo, RoutedShot, StageInfo, TaskTypeInfo, TickContext, Unit,
};

use crate::flow;
use crate::job::Job;
use crate::{avatar, price, video, video_route, webhook};

/// `kling-video`: text-to-video and image-to-video, one unit per shot on `kling:video`.
/// `KlingVideo<true>` is the same handler declaring version [`video::NEXT_VERSION`], so reload
/// tests can alternate two real versions against the simulator (crate `kling-video-next`).
pub struct KlingVideo<const NEXT: bool = false>;

/// `kling-avatar`: an avatar clone is one unit in two stages on `kling:avatar` — a custom
/// voice, then an advanced custom element speaking with it (the voice id is carried in the
/// unit state).
pub struct KlingAvatar;

fn info(
    name: &str,
    version: &str,
    task_type: &str,
    stages: &[&str],
    pool: &str,
    slots: u32,
) -> HandlerInfo {
    HandlerInfo {
        name: name.into(),
        version: version.into(),
        task_types: vec![TaskTypeInfo {
            name: task_type.into(),
            stages: stages.iter().map(|s| StageInfo::new(*s, pool)).collect(),
        }],
        pools: vec![PoolInfo::new(pool, slots)],
    }
}

/// A video unit's job: its collection follows from the spec (`image2video` with an image).
fn video_job(unit: &Unit) -> Result<Job<'_>, String> {
    let (collection, body) = video::job_of(&unit.spec)?;
    Ok(Job {
        unit,
        collection,
        expected_secs: video::expected_secs(&body),
        stated: true,
        body,
        page_size_max: video::PAGE_SIZE_MAX,
    })
}

/// An avatar unit's job in its current stage.
fn avatar_job(unit: &Unit) -> Result<Job<'_>, String> {
    let (collection, body) = avatar::job_of(&unit.stage, &unit.spec, &unit.state)?;
    Ok(Job {
        unit,
        collection,
        body,
        expected_secs: avatar::expected_secs(&unit.stage),
        stated: false,
        page_size_max: avatar::page_size_max(collection),
    })
}

fn planned(specs: Vec<String>) -> Vec<PlannedUnit> {
    specs.into_iter().map(PlannedUnit::new).collect()
}

impl<const NEXT: bool> Handler for KlingVideo<NEXT> {
    fn describe() -> HandlerInfo {
        let version = if NEXT {
            video::NEXT_VERSION
        } else {
            video::VERSION
        };
        let stages = [video::STAGE];
        info(
            video::HANDLER,
            version,
            video::TASK_TYPE,
            &stages,
            video::POOL,
            video::DEFAULT_SLOTS,
        )
    }

    fn plan(_: &dyn Host, task_type: &str, payload: &str) -> Result<Vec<PlannedUnit>, PlanError> {
        video::plan(task_type, payload).map(planned)
    }

    /// Resource-pack units by mode and duration (see [`price`]).
    fn estimate(task_type: &str, spec: &str) -> Option<f64> {
        if task_type != video::TASK_TYPE {
            return None;
        }
        price::video_spec_units(spec)
    }

    /// Contract 1.3: a shot's expected run from its mode and clip length (KLING_API.md "How
    /// long things take"), times `stated_duration_scale` (`expected_duration_scale` unless
    /// set); unknown when a scale is unusable (ticks refuse it too).
    fn expected_duration(host: &dyn Host, task_type: &str, spec: &str) -> Option<ExpectedDuration> {
        if task_type != video::TASK_TYPE {
            return None;
        }
        let scales = crate::task::scales(host, video::HANDLER).ok()?;
        video::expected_duration(spec, scales.prior)
    }

    /// Contract 1.5: every video model (see [`video_route`]).
    fn route_models() -> Vec<String> {
        video_route::models()
    }

    /// Contract 1.5: a canonical shot as a `video` unit on `kling:video`, its spec the create
    /// body `plan` writes for the equivalent shot.
    fn plan_shot(_: &dyn Host, model: &str, shot: &str) -> Result<RoutedShot, PlanError> {
        video_route::plan_shot(model, shot)
    }

    fn tick(host: &dyn Host, ctx: &TickContext, batch: Vec<Unit>) -> Result<Vec<Change>, String> {
        let success = |_: &Unit, task: &_| video::success(task);
        flow::tick(host, video::HANDLER, ctx, &batch, video_job, &success)
    }

    fn finalize(_: &dyn Host, _: &TickContext, unit: Unit) -> Result<Finalized, String> {
        let url = video::artifact_url(unit.result.as_deref())
            .map_err(|e| format!("unit {}: {e}", unit.id))?;
        let video = Artifact {
            name: "video.mp4".into(),
            url,
            content_type: Some("video/mp4".into()),
        };
        Ok(Finalized {
            artifacts: vec![video],
            result: None,
        })
    }

    fn on_callback(
        host: &dyn Host,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Vec<CallbackChange>, String> {
        webhook::changes(host, headers, body, &video::success)
    }
}

impl Handler for KlingAvatar {
    fn describe() -> HandlerInfo {
        let stages = [avatar::STAGE_VOICE, avatar::STAGE_ELEMENT];
        info(
            avatar::HANDLER,
            avatar::VERSION,
            avatar::TASK_TYPE,
            &stages,
            avatar::POOL,
            avatar::DEFAULT_SLOTS,
        )
    }

    fn plan(_: &dyn Host, task_type: &str, payload: &str) -> Result<Vec<PlannedUnit>, PlanError> {
        avatar::plan(task_type, payload).map(planned)
    }

    fn tick(host: &dyn Host, ctx: &TickContext, batch: Vec<Unit>) -> Result<Vec<Change>, String> {
        let success = |unit: &Unit, task: &_| avatar::success(task, Some(&unit.state));
        flow::tick(host, avatar::HANDLER, ctx, &batch, avatar_job, &success)
    }

    fn finalize(_: &dyn Host, _: &TickContext, unit: Unit) -> Result<Finalized, String> {
        let result = avatar::finalized_result(unit.result.as_deref())
            .map_err(|e| format!("unit {}: {e}", unit.id))?;
        Ok(Finalized {
            artifacts: Vec::new(),
            result: Some(result),
        })
    }

    fn on_callback(
        host: &dyn Host,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Vec<CallbackChange>, String> {
        webhook::changes(host, headers, body, &|task| avatar::success(task, None))
    }
}
