//! Finalization (SPEC section 9): `succeeded -> finalizing -> completed`, on its own bounded
//! worker pool that never touches provider slots.
//!
//! A unit is claimed with a durable lease (owner, expiry). If this process dies, the lease
//! expires and another finalizer (or this one after a restart) claims it again, so nothing stays
//! `finalizing` forever (the seed's problem 3).

use std::time::Duration;

use serde_json::{Map, Value};

use crate::model::Unit;
use crate::runtime::{Finalized, TickContext};

use super::Scheduler;
use super::policy::retry_delay_ms;

/// What one `finalize_once` started.
#[derive(Clone, Debug, Default)]
pub struct FinalizeReport {
    /// Units claimed and handed to finalization workers.
    pub started: usize,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The unit's result with the handler's extra fields and the artifact list merged in.
fn merged_result(unit: &Unit, fin: &Finalized) -> String {
    let mut obj = unit
        .result
        .as_deref()
        .and_then(|r| serde_json::from_str::<Value>(r).ok())
        .and_then(|v| match v {
            Value::Object(m) => Some(m),
            _ => None,
        })
        .unwrap_or_default();
    if let Some(extra) = fin
        .result
        .as_deref()
        .and_then(|r| serde_json::from_str::<Value>(r).ok())
    {
        match extra {
            Value::Object(m) => obj.extend(m),
            other => {
                obj.insert("finalized".into(), other);
            }
        }
    }
    let artifacts: Vec<Value> = fin
        .artifacts
        .iter()
        .map(|a| {
            let mut m = Map::new();
            m.insert("name".into(), Value::String(a.name.clone()));
            m.insert("url".into(), Value::String(a.url.clone()));
            if let Some(ct) = &a.content_type {
                m.insert("content_type".into(), Value::String(ct.clone()));
            }
            Value::Object(m)
        })
        .collect();
    obj.insert("artifacts".into(), Value::Array(artifacts));
    Value::Object(obj).to_string()
}

impl Scheduler {
    /// Claim as many finalizable units as there are free workers and start them. Returns at
    /// once; the work runs on `finalize_tasks` (awaitable with [`Scheduler::finalize_idle`]).
    pub async fn finalize_once(
        self: &std::sync::Arc<Self>,
        now: i64,
    ) -> Result<FinalizeReport, crate::store::StoreError> {
        let free = self.finalize_permits.available_permits();
        if free == 0 {
            return Ok(FinalizeReport::default());
        }
        let cfg = &self.services.config.scheduler;
        let lease_until = now + ms(cfg.finalize_lease);
        let limit = u32::try_from(free).unwrap_or(u32::MAX);
        let units = self
            .services
            .store
            .unit_claim_finalize(&self.owner, lease_until, now, limit)
            .await?;
        let started = units.len();
        for unit in units {
            let Ok(permit) = self.finalize_permits.clone().try_acquire_owned() else {
                // Cannot happen (we asked for no more than `free`); the lease will expire and
                // the unit be claimed again.
                break;
            };
            let me = self.clone();
            self.finalize_tasks.spawn(async move {
                me.finalize_unit(unit).await;
                drop(permit);
                // A worker is free: look for more work now rather than at the next interval.
                me.finalize_wake.notify_one();
            });
        }
        Ok(FinalizeReport { started })
    }

    /// Wait until no finalization is running (tests, shutdown).
    pub async fn finalize_idle(&self) {
        let total = self.services.config.scheduler.finalize_concurrency;
        let all = u32::try_from(total).unwrap_or(u32::MAX);
        if let Ok(p) = self.finalize_permits.acquire_many(all).await {
            drop(p);
        }
    }

    #[tracing::instrument(name = "slotd.finalize", skip(self, unit), fields(unit = %unit.id, task_type = %unit.task_type))]
    async fn finalize_unit(&self, unit: Unit) {
        let s = &self.services;
        let cfg = &s.config.scheduler;
        let now = s.clock.now_ms();
        let outcome = match s.registry.for_type(&unit.task_type) {
            None => Err(format!("no handler serves task type {:?}", unit.task_type)),
            Some(h) => {
                let ctx = TickContext {
                    pool: unit.pool.clone(),
                    now_ms: u64::try_from(now).unwrap_or(0),
                    callback_url: None,
                };
                h.finalize(&ctx, &unit).await.map_err(|f| f.to_string())
            }
        };
        let store = &s.store;
        let result = match outcome {
            Ok(fin) => {
                let result = merged_result(&unit, &fin);
                store
                    .unit_complete(&unit.id, &self.owner, &result, s.clock.now_ms())
                    .await
            }
            Err(reason) => {
                let attempt = unit.attempts.saturating_add(1);
                let fail = attempt >= cfg.finalize_attempts;
                let error =
                    serde_json::json!({ "code": "finalize", "message": reason }).to_string();
                let now = s.clock.now_ms();
                tracing::warn!(attempt, fail, %reason, "finalization failed");
                store
                    .unit_finalize_release(
                        &unit.id,
                        &self.owner,
                        &error,
                        now + retry_delay_ms(cfg, attempt, None),
                        fail,
                        now,
                    )
                    .await
            }
        };
        match result {
            Ok(true) => {
                metrics::counter!("slotd_finalizations_total", "task_type" => unit.task_type.clone()).increment(1);
            }
            Ok(false) => tracing::warn!("finalization lease lost; another finalizer owns the unit"),
            Err(e) => {
                tracing::warn!(error = %e, "recording finalization failed; the lease will expire and it is retried")
            }
        }
    }
}
