//! The `runway-video` handler: Runway image-to-video and text-to-video (`RUNWAY_API.md`), one
//! unit per shot, each on its model's pool `runway:<model>` (Runway limits concurrency per
//! model). Built on `slotd-sdk`: the logic is plain Rust over a `Host`, tested on the build
//! machine against the SDK's scripted host; the component is the one `export_handler!` line.
//!
//! Claims the contract-1.1 features `cancel` (DELETE the Runway task of a cancelled unit) and
//! `routing` (a unit's pool is chosen in `plan-routed`). Runway has no webhooks, no
//! idempotency key and no task list: units are polled, and a create whose answer was lost is
//! never sent again automatically (see [`unknown`]). The key is never in the guest: every
//! request goes through `send-authorized` with the credential `Authorization: Bearer
//! <api_key>`.
//!
//! # Layout
//! - [`settings`]: `describe`, `stage-pools` (sized by the tier), configuration, the client.
//! - [`models`]: the models in scope and what each accepts; [`assets`]: image and prompt
//!   forms; [`payload`]: `plan` (one spec per shot); [`spec`]: the spec read back.
//! - [`tick`]: a tick in one round; [`create`]: what a create answer means, and
//!   [`rate_limit`] what a create's 429 means (the rate limit or the daily limit, on the
//!   organization's figures); [`poll`]: what a task means; [`unknown`]: the outcome-unknown
//!   rule; [`state`]: the unit state.
//! - [`cancel`], [`finalize`]; [`answers`]: reading Runway's bodies.
//! - [`organization`]: contract 1.3 `provider`: expected durations, and the account's limits
//!   from `GET /v1/organization`.
//! - [`route`]: contract 1.5 `routes`: a canonical shot as a unit of a Runway model.

pub mod answers;
pub mod assets;
pub mod cancel;
pub mod create;
pub mod finalize;
pub mod models;
pub mod organization;
pub mod payload;
pub mod poll;
pub mod rate_limit;
pub mod route;
pub mod settings;
pub mod spec;
pub mod state;
pub mod tick;
pub mod unknown;

#[cfg(test)]
mod tests;

use slotd_sdk::jobs;
use slotd_sdk::{
    CallbackChange, CancelChange, Change, ExpectedDuration, Finalized, Handler, HandlerInfo, Host,
    LimitsContext, PlanError, PlannedUnit, PoolLimits, RoutedShot, RoutedUnit, StagePool,
    TickContext, Unit,
};

use crate::settings::{DEFAULT_MODEL, STAGE};

/// The handler.
pub struct RunwayVideo;

impl Handler for RunwayVideo {
    const CANCEL: bool = true;
    const ROUTING: bool = true;

    fn describe() -> HandlerInfo {
        settings::describe()
    }

    /// Only for a host that does not route (the host calls `plan-routed`, since this handler
    /// claims `routing`): every unit would land on the default pool, so only `gen4_turbo`
    /// payloads are taken.
    fn plan(_: &dyn Host, task_type: &str, payload: &str) -> Result<Vec<PlannedUnit>, PlanError> {
        let shots = payload::plan(task_type, payload)?;
        jobs::plan_default_pool(
            shots.into_iter().map(|s| (s.model, s.spec)).collect(),
            DEFAULT_MODEL,
        )
    }

    /// Credits by Runway's documented per-second rates (RUNWAY_API.md "Cost"), e.g.
    /// `gen4_turbo` 5 credits/s: a 5 s clip 25 credits.
    fn estimate(task_type: &str, spec: &str) -> Option<f64> {
        if task_type != payload::TASK_TYPE {
            return None;
        }
        let credits = spec::Spec::read(spec).ok()?.listed_credits();
        // Credits are small whole numbers; u32 converts to f64 exactly.
        u32::try_from(credits).ok().map(f64::from)
    }

    /// Contract 1.3: a task's expected run from its model and clip length (see
    /// [`organization`]).
    fn expected_duration(host: &dyn Host, task_type: &str, spec: &str) -> Option<ExpectedDuration> {
        if task_type != payload::TASK_TYPE {
            return None;
        }
        let cfg = settings::Config::read(host).ok()?;
        organization::expected(&cfg, spec)
    }

    /// Contract 1.3: the account's concurrency and daily limits per model, and today's creates,
    /// from `GET /v1/organization`.
    fn limits(host: &dyn Host, ctx: &LimitsContext) -> Result<Vec<PoolLimits>, String> {
        organization::limits(host, ctx)
    }

    fn plan_routed(
        _: &dyn Host,
        task_type: &str,
        payload: &str,
    ) -> Result<Vec<RoutedUnit>, PlanError> {
        let shots = payload::plan(task_type, payload)?;
        Ok(jobs::routed(
            STAGE,
            shots.into_iter().map(|s| (s.model.pool(), s.spec)),
        ))
    }

    fn stage_pools(host: &dyn Host) -> Vec<StagePool> {
        settings::stage_pools(host)
    }

    /// Contract 1.5: every model (see [`route`]).
    fn route_models() -> Vec<String> {
        route::models()
    }

    /// Contract 1.5: a canonical shot as a `runway_video` unit on its model's pool, its spec
    /// the create request `plan-routed` writes for the equivalent shot.
    fn plan_shot(_: &dyn Host, model: &str, shot: &str) -> Result<RoutedShot, PlanError> {
        route::plan_shot(model, shot)
    }

    fn tick(host: &dyn Host, ctx: &TickContext, batch: Vec<Unit>) -> Result<Vec<Change>, String> {
        tick::run(host, ctx, &batch)
    }

    fn finalize(host: &dyn Host, ctx: &TickContext, unit: Unit) -> Result<Finalized, String> {
        finalize::run(host, ctx, &unit)
    }

    fn on_callback(
        _: &dyn Host,
        _: &[(String, String)],
        _: &[u8],
    ) -> Result<Vec<CallbackChange>, String> {
        Err("Runway sends no webhooks; runway-video polls its tasks".into())
    }

    fn cancel(
        host: &dyn Host,
        ctx: &TickContext,
        units: Vec<Unit>,
    ) -> Result<Vec<CancelChange>, String> {
        cancel::run(host, ctx, &units)
    }
}

// Only the component exports the contract: a native cdylib (`cargo build` on the build
// machine) cannot carry the contract's export names through the system linker.
#[cfg(target_arch = "wasm32")]
slotd_sdk::export_handler!(RunwayVideo);
