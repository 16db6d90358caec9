//! Finalization (docs/unit-journey.md): `succeeded -> finalizing -> completed`, on its own bounded
//! worker pool that never touches provider slots.
//!
//! A unit is claimed with a durable lease (owner, expiry). If this process dies, the lease
//! expires and another finalizer (or this one after a restart) claims it again, so nothing stays
//! `finalizing` forever (the seed's problem 3). A live finalizer renews its lease while it works,
//! so a download slower than the lease is never taken over (and done twice).
//!
//! When the attempts are spent the unit stays `succeeded`, keeping its provider result, with the
//! reason in `error` and `next_at` at [`FINALIZE_PARKED_AT`](slotd_core::model::FINALIZE_PARKED_AT):
//! no finalizer claims it until `POST /v1/tasks/{id}/retry` makes it due again. The provider job
//! is not redone for a storage or download problem.
//!
//! A worker that has stored a unit's artifacts does not write its completion itself: it
//! queues it and wakes the finalizer, whose next pass writes every queued completion in one
//! statement before it claims again. The finalizer takes the wakes of a short spell together
//! (service.rs), so at a steady hundred units a second a claim and a completion are a
//! fraction of a statement per unit instead of one each. Until it is written the unit stays
//! `finalizing` under this instance's lease: a crash meanwhile costs a second download, never
//! a lost or doubled result.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Map, Value};

use slotd_core::model::Unit;
use slotd_objects::{StoredObject, artifact_key};
use slotd_runtime::{Artifact, Finalized, TickContext};
use slotd_store::FinalizeRelease;

use super::Scheduler;
use super::download;
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

/// The unit's result with the handler's extra fields and the stored artifacts merged in. The
/// first artifact's `object_key`, `bytes` and `sha256` are also top-level fields (docs/interfaces.md).
fn merged_result(unit: &Unit, fin: &Finalized, stored: &[(Artifact, StoredObject)]) -> String {
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
    let artifacts: Vec<Value> = stored
        .iter()
        .map(|(a, o)| {
            let mut m = Map::new();
            m.insert("name".into(), Value::String(a.name.clone()));
            m.insert("source_url".into(), Value::String(a.url.clone()));
            if let Some(ct) = &a.content_type {
                m.insert("content_type".into(), Value::String(ct.clone()));
            }
            m.insert("object_key".into(), Value::String(o.object_key.clone()));
            m.insert("bytes".into(), Value::from(o.bytes));
            m.insert("sha256".into(), Value::String(o.sha256.clone()));
            Value::Object(m)
        })
        .collect();
    if let Some((_, first)) = stored.first() {
        obj.insert("object_key".into(), Value::String(first.object_key.clone()));
        obj.insert("bytes".into(), Value::from(first.bytes));
        obj.insert("sha256".into(), Value::String(first.sha256.clone()));
    }
    obj.insert("artifacts".into(), Value::Array(artifacts));
    Value::Object(obj).to_string()
}

impl Scheduler {
    /// Claim as many finalizable units as there are free workers and start them. Returns at
    /// once; the work runs on `finalize_tasks` (awaitable with [`Scheduler::finalize_idle`]).
    pub async fn finalize_once(
        self: &std::sync::Arc<Self>,
        now: i64,
    ) -> Result<FinalizeReport, slotd_store::StoreError> {
        self.write_completions(now).await?;
        let free = self.finalize_permits.available_permits();
        if free == 0 {
            return Ok(FinalizeReport::default());
        }
        let cfg = &self.services.config.scheduler;
        let lease_until = now + ms(cfg.finalize_lease);
        let limit = u32::try_from(free).unwrap_or(u32::MAX);
        let units = slotd_units::lifecycle::claim_finalize(
            &self.services,
            &self.owner,
            lease_until,
            now,
            limit,
        )
        .await?;
        let started = units.len();
        let backlog = u32::try_from(started).unwrap_or(u32::MAX) >= limit;
        self.finalize_backlog.store(backlog, Ordering::Relaxed);
        for unit in units {
            let Ok(permit) = self.finalize_permits.clone().try_acquire_owned() else {
                // Cannot happen (we asked for no more than `free`); the lease will expire and
                // the unit be claimed again.
                break;
            };
            let me = self.clone();
            self.finalize_tasks.spawn(async move {
                let queued = me.finalize_unit(unit).await;
                drop(permit);
                // A completion to write, or a free worker while the last claim left work
                // behind: the finalizer's next pass (which takes the wakes of a short spell
                // together when there is no backlog; service.rs).
                if queued || me.finalize_backlog.load(Ordering::Relaxed) {
                    me.services.wake.wake(slotd_coord::wake::WakeKey::Finalizer);
                }
            });
        }
        Ok(FinalizeReport { started })
    }

    /// Wait until no finalization is running and the finished ones are written (tests,
    /// shutdown).
    pub async fn finalize_idle(&self) {
        let total = self.services.config.scheduler.finalize_concurrency;
        let all = u32::try_from(total).unwrap_or(u32::MAX);
        if let Ok(p) = self.finalize_permits.acquire_many(all).await {
            drop(p);
        }
        let now = self.services.clock.now_ms();
        if let Err(e) = self.write_completions(now).await {
            tracing::warn!(error = %e, "recording finalizations failed; the next pass retries");
        }
    }

    /// Write the completions the workers queued, in one statement (`finalizing -> completed`
    /// for each unit whose lease this instance still holds). On a store error they are queued
    /// again for the next pass.
    pub(crate) async fn write_completions(&self, now: i64) -> Result<(), slotd_store::StoreError> {
        let done = std::mem::take(&mut *self.finalized.lock());
        if done.is_empty() {
            return Ok(());
        }
        let s = &self.services;
        let completed = match slotd_units::lifecycle::complete_finalize_many(
            s,
            &self.owner,
            &done,
            now,
        )
        .await
        {
            Ok(c) => c,
            Err(e) => {
                let mut queued = self.finalized.lock();
                let later = std::mem::replace(&mut *queued, done);
                queued.extend(later);
                return Err(e);
            }
        };
        for (unit, _) in &done {
            let _span =
                tracing::info_span!("slotd.finalize", unit = %unit.id, task_type = %unit.task_type)
                    .entered();
            if completed.contains(&unit.id) {
                s.metrics.record(|| metrics::counter!("slotd_finalizations_total", "task_type" => unit.task_type.clone()).increment(1));
                // End to end: from the task's creation to its stored result (docs/operations.md).
                let secs = now.saturating_sub(unit.created_at).max(0) as f64 / 1000.0;
                s.metrics.record(|| {
                    metrics::histogram!("slotd_unit_end_to_end_seconds", "pool" => unit.pool.clone())
                        .record(secs)
                });
            } else {
                tracing::warn!("finalization lease lost; another finalizer owns the unit");
            }
        }
        Ok(())
    }

    /// Finalize `unit`: on success its completion is queued for the finalizer's next pass
    /// (true), on failure it is released for another attempt or parked, here (false).
    #[tracing::instrument(name = "slotd.finalize", skip(self, unit), fields(unit = %unit.id, task_type = %unit.task_type))]
    async fn finalize_unit(&self, unit: Unit) -> bool {
        let s = &self.services;
        let cfg = &s.config.scheduler;
        let now = s.clock.now_ms();
        let work = async {
            let job_release = unit.releases.job_release.as_deref();
            let Some(h) = s.registry.for_job(&unit.task_type, job_release) else {
                return Err(format!("no handler serves task type {:?}", unit.task_type));
            };
            let ctx = TickContext {
                pool: unit.pool.clone(),
                now_ms: u64::try_from(now).unwrap_or(0),
                provider_callback_url: None,
                account: unit.terms.account.clone(),
            };
            let fin = h.finalize(&ctx, &unit).await.map_err(|f| f.to_string())?;
            let stored = self.store_artifacts(&h.info.name, &unit, &fin).await?;
            Ok((fin, stored))
        };
        let outcome = self.under_lease(&unit.id, work).await;
        let result = match outcome {
            Ok((fin, stored)) => {
                let result = merged_result(&unit, &fin, &stored);
                self.finalized.lock().push((unit, result));
                return true;
            }
            Err(reason) => {
                // The claim set `attempts` to this finalization attempt (1-based). Once they
                // are spent the unit stays `succeeded` with its provider result and the reason,
                // parked until `POST /v1/tasks/{id}/retry`: the provider job is never redone
                // for a storage problem.
                let attempt = unit.attempts.max(1);
                let give_up = attempt >= cfg.finalize_attempts;
                let message = if give_up {
                    format!(
                        "finalization gave up after {attempt} attempts (retry the task to \
                         finalize again): {reason}"
                    )
                } else {
                    reason.clone()
                };
                let error =
                    serde_json::json!({ "code": "finalize", "message": message }).to_string();
                let now = s.clock.now_ms();
                tracing::warn!(attempt, give_up, %reason, "finalization failed");
                slotd_units::lifecycle::release_finalize(
                    s,
                    &unit,
                    FinalizeRelease {
                        id: &unit.id,
                        owner: &self.owner,
                        error: &error,
                        next_at: now + retry_delay_ms(cfg, attempt, None),
                        give_up,
                    },
                    now,
                )
                .await
            }
        };
        match result {
            Ok(true) => {
                self.services.metrics.record(|| metrics::counter!("slotd_finalizations_total", "task_type" => unit.task_type.clone()).increment(1));
            }
            Ok(false) => tracing::warn!("finalization lease lost; another finalizer owns the unit"),
            Err(e) => {
                tracing::warn!(error = %e, "recording finalization failed; the lease will expire and it is retried")
            }
        }
        false
    }
}

impl Scheduler {
    /// Download every artifact into the object store, streaming, under the handler's
    /// allowlist: every hop, redirects included (a handler cannot make the host fetch from
    /// anywhere else).
    async fn store_artifacts(
        &self,
        handler: &str,
        unit: &Unit,
        fin: &Finalized,
    ) -> Result<Vec<(Artifact, StoredObject)>, String> {
        let s = &self.services;
        let cfg = &s.config.scheduler;
        // The allowlist of the account the unit ran on (its provider's hosts), or the
        // section's own.
        let account = unit.terms.account.as_deref();
        let section = s.config.handlers.get(handler);
        let allowed_of = section
            .and_then(|h| account.and_then(|a| h.accounts.iter().find(|x| x.name == a)))
            .map(|a| a.config.allowed_hosts.clone())
            .or_else(|| section.map(|h| h.allowed_hosts.clone()))
            .unwrap_or_default();
        let allowed = allowed_of.as_slice();
        let allow_key = match account.filter(|_| section.is_some_and(|h| !h.accounts.is_empty())) {
            Some(a) => format!("handlers.{handler}.accounts[{a}].allowed_hosts"),
            None => format!("handlers.{handler}.allowed_hosts"),
        };
        let mut out = Vec::with_capacity(fin.artifacts.len());
        for a in &fin.artifacts {
            let url = url::Url::parse(&a.url)
                .map_err(|e| format!("artifact {:?}: bad url {:?}: {e}", a.name, a.url))?;
            let resp = download::get_allowed(
                &self.downloads,
                url,
                allowed,
                &allow_key,
                cfg.artifact_timeout,
            )
            .await
            .map_err(|e| format!("artifact {:?}: {e}", a.name))?;
            if !resp.status().is_success() {
                return Err(format!(
                    "artifact {:?}: download answered {}",
                    a.name,
                    resp.status()
                ));
            }
            let key = artifact_key(&unit.tenant, &unit.task_id, unit.index, &a.name);
            let stored = s
                .objects
                .put_stream(&key, resp.bytes_stream(), cfg.artifact_max_bytes)
                .await
                .map_err(|e| format!("artifact {:?}: {e}", a.name))?;
            self.services
                .metrics
                .record(|| metrics::counter!("slotd_artifact_bytes_total").increment(stored.bytes));
            out.push((a.clone(), stored));
        }
        Ok(out)
    }
}
