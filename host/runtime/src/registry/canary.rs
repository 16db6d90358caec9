//! The candidate of a staged rollout (docs/handlers.md, "Staged rollout"): loaded beside the
//! serving version, it takes its stage's share of a handler's new units, chosen by unit id so
//! that every scheduler (and every retry of a unit) picks the same version for the same unit.

use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::{Registry, Snapshot, short};
use crate::handler::Handler;

/// The bucket of a unit, 0..100: the candidate takes the units whose bucket is below its share.
pub fn share_bucket(unit_id: &str) -> u32 {
    let digest = Sha256::digest(unit_id.as_bytes());
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) % 100
}

impl Registry {
    /// The version a new unit of `task_type` (no provider job yet) goes to: the candidate of
    /// its handler's rollout when the unit's bucket falls within the stage's share, else the
    /// serving version.
    pub fn for_new(&self, task_type: &str, unit_id: &str) -> Option<Arc<Handler>> {
        let snap = self.current.load();
        let name = snap.by_type.get(task_type)?;
        if let Some((candidate, share)) = snap.canary.get(name)
            && share_bucket(unit_id) < *share
        {
            return Some(candidate.clone());
        }
        snap.by_name.get(name).cloned()
    }

    /// Make `candidate` its handler's canary taking `share` percent of new units (0 while its
    /// rollout is paused). Refused when it does not serve the same task types as the serving
    /// version (new units of a type must have a version to go to either way).
    pub fn set_canary(&self, candidate: Arc<Handler>, share: u32) -> Result<(), String> {
        let _book = self.book.lock();
        let old = self.current.load_full();
        let name = candidate.info.name.clone();
        if let Some(serving) = old.by_name.get(&name) {
            let types = |h: &Handler| {
                let mut t: Vec<String> = h.info.task_types.iter().map(|t| t.name.clone()).collect();
                t.sort();
                t
            };
            if types(serving) != types(&candidate) {
                return Err(format!(
                    "the candidate serves task types {:?}, the serving version {:?}",
                    types(&candidate),
                    types(serving)
                ));
            }
        }
        let mut canary = old.canary.clone();
        canary.insert(name, (candidate, share.min(100)));
        self.current.store(Arc::new(Snapshot {
            by_name: old.by_name.clone(),
            by_type: old.by_type.clone(),
            draining: old.draining.clone(),
            canary,
        }));
        Ok(())
    }

    /// The canary of handler `name`, if any.
    pub fn canary(&self, name: &str) -> Option<(Arc<Handler>, u32)> {
        self.current.load().canary.get(name).cloned()
    }

    /// Handler `name`'s rollout ended without promotion: its candidate takes no new unit and
    /// is kept draining for the jobs it created (the release follower drops it after the last).
    pub fn clear_canary(&self, name: &str) -> Option<Arc<Handler>> {
        let _book = self.book.lock();
        let old = self.current.load_full();
        let (candidate, _) = old.canary.get(name)?.clone();
        let mut canary = old.canary.clone();
        canary.remove(name);
        let mut draining = old.draining.clone();
        draining.insert(candidate.sha256.clone(), candidate.clone());
        self.current.store(Arc::new(Snapshot {
            by_name: old.by_name.clone(),
            by_type: old.by_type.clone(),
            draining,
            canary,
        }));
        tracing::info!(handler = %name, sha256 = %short(&candidate.sha256), "rollout candidate takes no new unit; its jobs finish on it");
        Some(candidate)
    }
}
