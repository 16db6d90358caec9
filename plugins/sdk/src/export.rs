//! Exporting a [`Handler`] as a component: the generated `Guest` traits are implemented for
//! every `Handler` here (converting at the edge, with the real [`WitHost`]), so
//! [`crate::export_handler!`] only has to name the type.

use crate::bindings::exports::slotd::handler::{
    costs, extensions as ext, handler as core, provider as prov, routes,
};
use crate::bindings::slotd::handler::types as wit;
use crate::handler::Handler;
use crate::info::Features;
use crate::wit_host::WitHost;

/// The features a handler claims, from its constants.
pub fn features<H: Handler>() -> Features {
    Features {
        cancel: H::CANCEL,
        routing: H::ROUTING,
    }
}

impl<H: Handler> core::Guest for H {
    fn describe() -> wit::HandlerInfo {
        H::describe().into()
    }

    fn plan(task_type: String, payload: String) -> Result<Vec<wit::PlannedUnit>, wit::PlanError> {
        let units = H::plan(&WitHost, &task_type, &payload).map_err(wit::PlanError::from)?;
        Ok(units.into_iter().map(Into::into).collect())
    }

    fn tick(ctx: wit::TickContext, batch: Vec<wit::Unit>) -> Result<Vec<wit::Change>, String> {
        let batch = batch.into_iter().map(Into::into).collect();
        let changes = H::tick(&WitHost, &ctx.into(), batch)?;
        Ok(changes.into_iter().map(Into::into).collect())
    }

    fn finalize(ctx: wit::TickContext, unit: wit::Unit) -> Result<wit::Finalized, String> {
        H::finalize(&WitHost, &ctx.into(), unit.into()).map(Into::into)
    }

    fn on_callback(
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> Result<Vec<wit::CallbackChange>, String> {
        let changes = H::on_callback(&WitHost, &headers, &body)?;
        Ok(changes.into_iter().map(Into::into).collect())
    }
}

impl<H: Handler> ext::Guest for H {
    fn features() -> ext::FeatureSet {
        features::<H>().into()
    }

    fn cancel(
        ctx: wit::TickContext,
        units: Vec<wit::Unit>,
    ) -> Result<Vec<ext::CancelChange>, String> {
        let units = units.into_iter().map(Into::into).collect();
        let changes = H::cancel(&WitHost, &ctx.into(), units)?;
        Ok(changes.into_iter().map(Into::into).collect())
    }

    fn stage_pools() -> Vec<ext::StagePool> {
        H::stage_pools(&WitHost)
            .into_iter()
            .map(Into::into)
            .collect()
    }

    fn plan_routed(
        task_type: String,
        payload: String,
    ) -> Result<Vec<ext::RoutedUnit>, wit::PlanError> {
        let units = H::plan_routed(&WitHost, &task_type, &payload).map_err(wit::PlanError::from)?;
        Ok(units.into_iter().map(Into::into).collect())
    }
}

impl<H: Handler> costs::Guest for H {
    fn estimate(task_type: String, specs: Vec<String>) -> Vec<Option<f64>> {
        specs
            .iter()
            .map(|spec| H::estimate(&task_type, spec))
            .collect()
    }
}

impl<H: Handler> prov::Guest for H {
    fn durations(task_type: String, specs: Vec<String>) -> Vec<Option<prov::ExpectedDuration>> {
        specs
            .iter()
            .map(|spec| {
                H::expected_duration(&WitHost, &task_type, spec).map(|e| prov::ExpectedDuration {
                    p50_ms: e.p50_ms,
                    p95_ms: e.p95_ms,
                })
            })
            .collect()
    }

    fn limits(ctx: prov::LimitsContext) -> Result<Vec<prov::PoolLimits>, String> {
        let ctx = crate::info::LimitsContext {
            now_ms: ctx.now_ms,
            account: ctx.account,
        };
        let limits = H::limits(&WitHost, &ctx)?;
        Ok(limits
            .into_iter()
            .map(|p| prov::PoolLimits {
                pool: p.pool,
                max_slots: p.max_slots,
                quotas: p
                    .quotas
                    .into_iter()
                    .map(|q| prov::Quota {
                        dimension: q.dimension,
                        limit: q.limit,
                        window_ms: q.window_ms,
                        used: q.used,
                    })
                    .collect(),
            })
            .collect())
    }
}

impl<H: Handler> routes::Guest for H {
    fn models() -> Vec<String> {
        H::route_models()
    }

    fn plan_shot(model: String, shot: String) -> Result<routes::RoutedShot, wit::PlanError> {
        H::plan_shot(&WitHost, &model, &shot)
            .map(Into::into)
            .map_err(Into::into)
    }
}

/// Export a [`Handler`] as the component's `slotd-handler` world (contract 1.5: `handler`,
/// `extensions`, `costs`, `provider` and `routes`). Use it once, at the top level of a `cdylib`
/// crate built for `wasm32-wasip2`; the type must be named by a plain identifier (`use` it
/// first, or give it a `type` alias).
///
/// ```ignore
/// struct MyHandler;
/// impl slotd_sdk::Handler for MyHandler { /* … */ }
/// slotd_sdk::export_handler!(MyHandler);
/// ```
#[macro_export]
macro_rules! export_handler {
    ($handler:ident) => {
        $crate::bindings::__export_slotd_handler!($handler with_types_in $crate::bindings);
    };
}
