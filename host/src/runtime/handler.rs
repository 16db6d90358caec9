//! [`Handler`]: a loaded handler component with typed async calls.
//!
//! STUB: the engine-backed implementation replaces the bodies; the signatures are the contract
//! the scheduler and the API use.

use std::path::PathBuf;

use super::{
    BatchUnit, CallbackChange, Finalized, HandlerFault, HandlerInfo, PlanError, PlannedUnit,
    TickContext,
};
use crate::model::{Change, Unit};

/// One loaded version of a handler.
pub struct Handler {
    /// What `describe` declared at load time.
    pub info: HandlerInfo,
    /// sha256 of the component file, hex.
    pub sha256: String,
    /// Where it was loaded from.
    pub path: PathBuf,
}

impl Handler {
    /// Validate a payload and split it into units.
    pub async fn plan(
        &self,
        _task_type: &str,
        _payload: &str,
    ) -> Result<Result<Vec<PlannedUnit>, PlanError>, HandlerFault> {
        Err(HandlerFault::Instantiate("runtime not built yet".into()))
    }

    /// Advance a batch of units of one pool.
    pub async fn tick(
        &self,
        _ctx: &TickContext,
        _batch: &[BatchUnit],
    ) -> Result<Vec<Change>, HandlerFault> {
        Err(HandlerFault::Instantiate("runtime not built yet".into()))
    }

    /// Say what to store for a succeeded unit.
    pub async fn finalize(
        &self,
        _ctx: &TickContext,
        _unit: &Unit,
    ) -> Result<Finalized, HandlerFault> {
        Err(HandlerFault::Instantiate("runtime not built yet".into()))
    }

    /// Turn a provider webhook into changes.
    pub async fn on_callback(
        &self,
        _headers: &[(String, String)],
        _body: &[u8],
    ) -> Result<Vec<CallbackChange>, HandlerFault> {
        Err(HandlerFault::Instantiate("runtime not built yet".into()))
    }
}
