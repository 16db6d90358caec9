//! The [`Handler`] trait: one provider's knowledge, written against the SDK's plain types and
//! a [`Host`], exported as a component by [`crate::export_handler!`].

use crate::host::Host;
use crate::info::{
    CancelChange, ExpectedDuration, HandlerInfo, LimitsContext, PoolLimits, RoutedUnit, StagePool,
};
use crate::route::{self, RoutedShot};
use crate::types::{CallbackChange, Change, Finalized, PlanError, PlannedUnit, TickContext, Unit};

/// A slotd handler. Every method is an associated function: each call runs in a fresh
/// instance, so there is no `self` to keep anything in; whatever a unit needs later goes into
/// its `state`. Methods that may read configuration or talk to the provider get the `host`;
/// pass a [`crate::testing::ScriptedHost`] to drive them in ordinary tests.
///
/// The 1.1 extensions are optional: set [`Handler::CANCEL`] or [`Handler::ROUTING`] and
/// implement the matching methods; the host calls nothing that is not claimed. The 1.2 cost
/// estimate ([`Handler::estimate`]) is optional too: by default every unit's cost is unknown.
/// So are 1.3's expected durations ([`Handler::expected_duration`]) and the provider's published
/// limits ([`Handler::limits`]): by default unknown, and none. And 1.5's routes
/// ([`Handler::route_models`], [`Handler::plan_shot`]): by default no models, so the handler is
/// no route's target.
pub trait Handler {
    /// Claim the `cancel` feature: the host calls [`Handler::cancel`] for submitted units of
    /// cancelled tasks.
    const CANCEL: bool = false;
    /// Claim the `routing` feature: the host calls [`Handler::stage_pools`] once per load and
    /// [`Handler::plan_routed`] instead of [`Handler::plan`].
    const ROUTING: bool = false;

    /// Name, version, task types with their stages, pools. Must not do I/O.
    fn describe() -> HandlerInfo;

    /// Validate a task payload (JSON) and split it into units; an error is the caller's 422.
    fn plan(host: &dyn Host, task_type: &str, payload: &str)
    -> Result<Vec<PlannedUnit>, PlanError>;

    /// Advance a batch of units of one pool: submit those without a provider job id, poll
    /// the others. At most one change per unit; an `Err` leaves the whole batch unchanged.
    fn tick(host: &dyn Host, ctx: &TickContext, batch: Vec<Unit>) -> Result<Vec<Change>, String>;

    /// Say what to store for a succeeded unit. An `Err` is retried with backoff.
    fn finalize(host: &dyn Host, ctx: &TickContext, unit: Unit) -> Result<Finalized, String>;

    /// Turn a provider webhook into changes addressed by provider job id or idempotency key.
    /// An `Err` answers the provider 400. Default: no callbacks.
    fn on_callback(
        host: &dyn Host,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Vec<CallbackChange>, String> {
        let _ = (host, headers, body);
        Err("this handler takes no callbacks".into())
    }

    /// Ask the provider to cancel the jobs of these units (needs [`Handler::CANCEL`]).
    fn cancel(
        host: &dyn Host,
        ctx: &TickContext,
        units: Vec<Unit>,
    ) -> Result<Vec<CancelChange>, String> {
        let _ = (host, ctx, units);
        Err("this handler does not cancel provider jobs".into())
    }

    /// Extra pools each stage may route units to (needs [`Handler::ROUTING`]). Configuration
    /// is readable; must not do I/O. Default: none.
    fn stage_pools(host: &dyn Host) -> Vec<StagePool> {
        let _ = host;
        Vec::new()
    }

    /// The expected provider cost of one planned unit of `task_type`, from its `spec` (as
    /// [`Handler::plan`] or [`Handler::plan_routed`] wrote it), in the provider's own unit
    /// (Kling units, Runway credits). The host asks right after a successful plan; it must not
    /// do I/O. `None`: unknown (the default). Negative or non-finite values are ignored.
    fn estimate(task_type: &str, spec: &str) -> Option<f64> {
        let _ = (task_type, spec);
        None
    }

    /// How long one planned unit's provider job is expected to take in its first stage (the
    /// median and the 95th percentile, ms), from its `spec` and what the handler knows of its
    /// provider. The host uses it for ETAs and deadline decisions until the pool's jobs have
    /// ended and their durations replace it. Must not do I/O. `None`: unknown (the default).
    fn expected_duration(host: &dyn Host, task_type: &str, spec: &str) -> Option<ExpectedDuration> {
        let _ = (host, task_type, spec);
        None
    }

    /// The account's limits and usage as the provider publishes them, one entry per pool (I/O
    /// allowed: read the provider's account endpoint). The host asks at load, on a slow period
    /// and after a refusal, and takes the lower of a configured and a discovered limit. An
    /// empty list (the default): the provider publishes nothing. An `Err` keeps what was known.
    fn limits(host: &dyn Host, ctx: &LimitsContext) -> Result<Vec<PoolLimits>, String> {
        let _ = (host, ctx);
        Ok(Vec::new())
    }

    /// The models a route target may name for this handler (contract 1.5 `routes.models`),
    /// e.g. `kling-v1-6`. Called once per load; must not do I/O. Empty (the default): the
    /// handler serves no routes.
    fn route_models() -> Vec<String> {
        Vec::new()
    }

    /// Map one canonical shot (JSON; parse it with [`route::Shot::parse`]) to a unit of this
    /// handler for `model`, one of [`Handler::route_models`] (contract 1.5
    /// `routes.plan-shot`): the task type and first-stage pool it runs in, and the spec and
    /// state [`Handler::plan`] (or [`Handler::plan_routed`]) would give the equivalent
    /// payload's unit, so [`Handler::estimate`], [`Handler::expected_duration`],
    /// [`Handler::tick`] and [`Handler::finalize`] take it like any other. Refuse what the
    /// model cannot honour with [`PlanError::at`] naming the shot's field (`duration`) and
    /// saying what it can do instead. Must not do I/O. Default: refused (no routes).
    fn plan_shot(host: &dyn Host, model: &str, shot: &str) -> Result<RoutedShot, PlanError> {
        let _ = (host, model, shot);
        Err(route::not_routable())
    }

    /// [`Handler::plan`] with a pool per stage (needs [`Handler::ROUTING`]). Default: refused.
    fn plan_routed(
        host: &dyn Host,
        task_type: &str,
        payload: &str,
    ) -> Result<Vec<RoutedUnit>, PlanError> {
        let _ = (host, task_type, payload);
        Err(PlanError::whole("this handler does not route units"))
    }
}
