//! Test-only: `kling-video` changed the way a careless edit would, classifying Kling's 1303
//! ("the account's concurrency is full, nothing was created") as a permanent failure instead
//! of `capacity-rejected`. Never installed; the host's replay tests show that such a change
//! fails the replay of the committed Kling recordings, and a staged rollout of it (as version
//! 1.0.1) is rolled back on its provider outcomes.

use slotd_sdk::{
    Change, Finalized, Handler, HandlerInfo, Host, Outcome, PlanError, PlannedUnit, ProviderError,
    TickContext, Unit,
};

type KlingVideo = kling_common::KlingVideo<false>;

struct Misclassified;

impl Handler for Misclassified {
    fn describe() -> HandlerInfo {
        // A release of its own (a staged rollout publishes it beside 1.0.0).
        HandlerInfo {
            version: "1.0.1".into(),
            ..KlingVideo::describe()
        }
    }

    fn plan(
        host: &dyn Host,
        task_type: &str,
        payload: &str,
    ) -> Result<Vec<PlannedUnit>, PlanError> {
        KlingVideo::plan(host, task_type, payload)
    }

    fn tick(host: &dyn Host, ctx: &TickContext, batch: Vec<Unit>) -> Result<Vec<Change>, String> {
        let mut changes = KlingVideo::tick(host, ctx, batch)?;
        for c in &mut changes {
            if matches!(c.outcome, Outcome::CapacityRejected(_)) {
                c.outcome = Outcome::Fail(ProviderError::new(Some("1303"), "over capacity"));
            }
        }
        Ok(changes)
    }

    fn finalize(host: &dyn Host, ctx: &TickContext, unit: Unit) -> Result<Finalized, String> {
        KlingVideo::finalize(host, ctx, unit)
    }
}

#[cfg(target_arch = "wasm32")]
slotd_sdk::export_handler!(Misclassified);
