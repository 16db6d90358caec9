//! Contract 1.5's `routes` export on a loaded handler: the models it serves in routes, read
//! once at load, and `plan-shot`, a canonical shot as one of its units (docs/routes.md).

use super::*;

/// Most models a handler may list for routes; more is a declaration error.
const ROUTE_MODELS_MAX: usize = 256;

impl Handler {
    /// The component's `routes` export (contract 1.5), found at load; `None` before 1.5.
    pub(crate) fn set_routes(&mut self, route: Option<routes::GuestIndices>) {
        self.route = route;
    }

    /// Whether route targets may name this handler (it exports `routes`).
    pub fn routable(&self) -> bool {
        self.route.is_some()
    }

    /// Read `routes.models` into [`Handler::route_models`] (nothing before 1.5). Empty,
    /// repeated or too many names are a declaration error naming them.
    pub(crate) async fn read_route_models(&mut self) -> anyhow::Result<()> {
        let Some(route) = &self.route else {
            return Ok(());
        };
        let models = ext_call!(self, route, "models", |g, store| g.call_models(store))
            .0
            .map_err(|fault| anyhow::anyhow!("routes.models failed: {fault}"))?;
        if models.len() > ROUTE_MODELS_MAX {
            anyhow::bail!(
                "routes.models lists {} models; at most {ROUTE_MODELS_MAX}",
                models.len()
            );
        }
        let mut seen = std::collections::HashSet::new();
        for m in &models {
            if m.trim().is_empty() {
                anyhow::bail!("routes.models lists an empty model name");
            }
            if !seen.insert(m.as_str()) {
                anyhow::bail!("routes.models lists {m:?} twice");
            }
        }
        self.route_models = models;
        Ok(())
    }

    /// The expected cost of each spec of `task_type` (contract 1.2 `costs.estimate`), in order,
    /// checked as a plan's are; all unknown without `costs`.
    pub async fn estimate_specs(&self, task_type: &str, specs: &[String]) -> Vec<Option<f64>> {
        let units: Vec<PlannedUnit> = specs
            .iter()
            .map(|spec| PlannedUnit {
                spec: spec.clone(),
                state: String::new(),
                pools: Vec::new(),
                cost: None,
            })
            .collect();
        self.estimate(task_type, &units).await
    }

    /// Map one canonical shot (JSON the host checked) to a unit of this handler for `model`
    /// (contract 1.5 `routes.plan-shot`). `Ok(Err(_))`: the handler cannot make this shot
    /// with that model, and says why. A handler without `routes` refuses every shot.
    pub async fn plan_shot(
        &self,
        model: &str,
        shot: &str,
    ) -> Result<Result<RoutedShot, PlanError>, HandlerFault> {
        let Some(route) = &self.route else {
            return Ok(Err(PlanError {
                field: None,
                message: format!(
                    "handler {} (contract {}) serves no routes: it has no routes export (1.5)",
                    self.name, self.contract
                ),
            }));
        };
        let answer = ext_call!(self, route, "plan-shot", |g, store| g
            .call_plan_shot(store, model, shot))
        .0?;
        Ok(answer
            .map(|r| RoutedShot {
                task_type: r.task_type,
                pool: r.pool,
                spec: r.spec,
                state: r.state,
            })
            .map_err(convert::plan_error))
    }
}
