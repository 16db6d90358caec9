//! Test stand-ins for the store.
//!
//! [`MemStore`] is an in-memory `TaskStore` covering what the API calls, so the API tests run
//! before the SQLite store is merged. INTERIM: once `store` is on main, `super::test_store`
//! opens a real SQLite file instead, and `MemStore` stays only for the "database down" cases
//! ([`MemStore::set_down`]), which are hard to arrange with a real file.

use std::collections::BTreeMap;

use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::model::{Unit, UnitCounts, UnitStatus};
use crate::store::{
    ApplyReport, Cancelled, Created, NewTask, PoolStatusCount, StoreError, StoreResult, TaskFilter,
    TaskPage, TaskRecord, TaskStore, UnitEvent, UnitUpdate,
};

#[derive(Default)]
struct State {
    /// (seq, header) in creation order.
    tasks: Vec<(i64, TaskRecord)>,
    units: Vec<Unit>,
    events: Vec<UnitEvent>,
}

impl State {
    fn record(&self, t: &TaskRecord) -> TaskRecord {
        let mut counts = UnitCounts::default();
        for u in self.units.iter().filter(|u| u.task_id == t.id) {
            counts.add(u.status, 1);
        }
        TaskRecord {
            counts,
            ..t.clone()
        }
    }

    fn owned(&self, tenant: &str, id: &str) -> Option<TaskRecord> {
        self.tasks
            .iter()
            .find(|(_, t)| t.id == id && t.tenant == tenant)
            .map(|(_, t)| self.record(t))
    }

    fn event(&mut self, unit: &Unit, from: UnitStatus, now: i64, detail: &str) {
        let id = i64::try_from(self.events.len()).unwrap_or(i64::MAX) + 1;
        self.events.push(UnitEvent {
            id,
            unit_id: unit.id.clone(),
            task_id: unit.task_id.clone(),
            at: now,
            from_status: Some(from.as_str().to_string()),
            to_status: unit.status.as_str().to_string(),
            stage: unit.stage.clone(),
            detail: Some(detail.to_string()),
            error: unit.error.clone(),
        });
    }
}

/// In-memory store (see the module header).
#[derive(Default)]
pub struct MemStore {
    state: Mutex<State>,
    /// When set, the calls the API makes answer `Unavailable`, as a dead database would.
    down: AtomicBool,
}

impl MemStore {
    /// Make the database "go down" (or come back).
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    fn check(&self) -> StoreResult<()> {
        if self.down.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable("connection refused (test)".into()))
        } else {
            Ok(())
        }
    }
}

fn unused(what: &str) -> StoreError {
    StoreError::Other(format!("{what} is not used by the API tests"))
}

#[async_trait]
impl TaskStore for MemStore {
    async fn migrate(&self) -> StoreResult<()> {
        Ok(())
    }
    async fn ping(&self) -> StoreResult<()> {
        self.check()
    }

    async fn task_create(&self, task: NewTask) -> StoreResult<Created> {
        self.check()?;
        let mut st = self.state.lock();
        if let Some(key) = &task.idempotency_key
            && let Some((_, t)) = st
                .tasks
                .iter()
                .find(|(_, t)| t.tenant == task.tenant && t.idempotency_key.as_ref() == Some(key))
        {
            return Ok(Created::Existing(t.id.clone()));
        }
        let seq = i64::try_from(st.tasks.len()).unwrap_or(i64::MAX) + 1;
        for (i, u) in task.units.iter().enumerate() {
            st.units.push(Unit {
                id: u.id.clone(),
                task_id: task.id.clone(),
                index: u32::try_from(i).unwrap_or(u32::MAX),
                tenant: task.tenant.clone(),
                task_type: task.task_type.clone(),
                pool: u.pool.clone(),
                stage: u.stage.clone(),
                status: UnitStatus::Pending,
                priority: task.priority,
                spec: u.spec.clone(),
                state: u.state.clone(),
                provider_job_id: None,
                submit_attempt: 0,
                attempts: 0,
                polls: 0,
                next_at: task.now,
                submitted_at: None,
                error: None,
                result: None,
                cost: None,
                created_at: task.now,
                updated_at: task.now,
            });
        }
        st.tasks.push((
            seq,
            TaskRecord {
                id: task.id.clone(),
                tenant: task.tenant,
                task_type: task.task_type,
                payload: task.payload,
                idempotency_key: task.idempotency_key,
                priority: task.priority,
                callback_url: task.callback_url,
                created_at: task.now,
                updated_at: task.now,
                counts: UnitCounts::default(),
            },
        ));
        Ok(Created::New(task.id))
    }

    async fn task_get(&self, tenant: &str, id: &str) -> StoreResult<Option<TaskRecord>> {
        self.check()?;
        Ok(self.state.lock().owned(tenant, id))
    }

    async fn task_units(&self, task_id: &str) -> StoreResult<Vec<Unit>> {
        let st = self.state.lock();
        let mut units: Vec<Unit> = st
            .units
            .iter()
            .filter(|u| u.task_id == task_id)
            .cloned()
            .collect();
        units.sort_by_key(|u| u.index);
        Ok(units)
    }

    async fn task_list(&self, tenant: &str, filter: &TaskFilter) -> StoreResult<TaskPage> {
        self.check()?;
        let st = self.state.lock();
        let mut out = Vec::new();
        let mut last = None;
        for (seq, t) in st.tasks.iter().rev() {
            let rec = st.record(t);
            let keep = t.tenant == tenant
                && filter.before.is_none_or(|b| *seq < b)
                && filter
                    .task_type
                    .as_ref()
                    .is_none_or(|ty| *ty == t.task_type)
                && filter
                    .unit_status
                    .is_none_or(|s| st.units.iter().any(|u| u.task_id == t.id && u.status == s));
            if keep {
                out.push(rec);
                last = Some(*seq);
                if out.len() >= filter.limit as usize {
                    break;
                }
            }
        }
        let next = if out.len() >= filter.limit as usize {
            last
        } else {
            None
        };
        Ok(TaskPage { tasks: out, next })
    }

    async fn task_cancel(
        &self,
        tenant: &str,
        id: &str,
        now: i64,
    ) -> StoreResult<Option<Cancelled>> {
        let mut st = self.state.lock();
        if st.owned(tenant, id).is_none() {
            return Ok(None);
        }
        let mut out = Cancelled::default();
        let mut moved = Vec::new();
        for u in st.units.iter_mut().filter(|u| u.task_id == id) {
            if !u.status.is_terminal() {
                let from = u.status;
                if from == UnitStatus::Submitted {
                    out.released.push((u.pool.clone(), u.id.clone()));
                }
                u.status = UnitStatus::Cancelled;
                u.updated_at = now;
                out.units += 1;
                moved.push((u.clone(), from));
            }
        }
        for (u, from) in moved {
            st.event(&u, from, now, "cancelled");
        }
        Ok(Some(out))
    }

    async fn task_retry_failed(
        &self,
        tenant: &str,
        id: &str,
        now: i64,
    ) -> StoreResult<Option<u32>> {
        let mut st = self.state.lock();
        if st.owned(tenant, id).is_none() {
            return Ok(None);
        }
        let mut moved = Vec::new();
        for u in st.units.iter_mut().filter(|u| u.task_id == id) {
            if u.status == UnitStatus::Failed {
                u.status = UnitStatus::Pending;
                u.submit_attempt += 1;
                u.error = None;
                u.updated_at = now;
                moved.push(u.clone());
            }
        }
        let n = u32::try_from(moved.len()).unwrap_or(u32::MAX);
        for u in moved {
            st.event(&u, UnitStatus::Failed, now, "retried");
        }
        Ok(Some(n))
    }

    async fn unit_list_pending(
        &self,
        _pool: &str,
        _task_types: &[String],
        _now: i64,
        _limit: u32,
    ) -> StoreResult<Vec<Unit>> {
        Err(unused("unit_list_pending"))
    }

    async fn unit_mark_submitted(&self, ids: &[String], now: i64) -> StoreResult<Vec<Unit>> {
        let mut st = self.state.lock();
        let mut moved = Vec::new();
        for u in st.units.iter_mut() {
            if ids.contains(&u.id) && u.status == UnitStatus::Pending {
                u.status = UnitStatus::Submitted;
                u.submitted_at = Some(now);
                moved.push(u.clone());
            }
        }
        for u in &moved {
            st.event(u, UnitStatus::Pending, now, "submitted");
        }
        Ok(moved)
    }

    async fn unit_list_due(
        &self,
        _pool: &str,
        _task_types: &[String],
        _now: i64,
        _limit: u32,
    ) -> StoreResult<Vec<Unit>> {
        Err(unused("unit_list_due"))
    }

    /// Only the fields the API tests set: status, error, result, job id, cost.
    async fn unit_apply(&self, updates: &[UnitUpdate], now: i64) -> StoreResult<ApplyReport> {
        let mut st = self.state.lock();
        let mut report = ApplyReport::default();
        for up in updates {
            let Some(u) = st.units.iter_mut().find(|u| u.id == up.unit_id) else {
                report.skipped.push(up.unit_id.clone());
                continue;
            };
            if up.from.is_some_and(|f| f != u.status) {
                report.skipped.push(up.unit_id.clone());
                continue;
            }
            let from = u.status;
            if let Some(to) = up.to {
                u.status = to;
            }
            if let Some(e) = &up.error {
                u.error = e.clone();
            }
            if let Some(r) = &up.result {
                u.result = Some(r.clone());
            }
            if let Some(j) = &up.provider_job_id {
                u.provider_job_id = j.clone();
            }
            if let Some(c) = &up.cost {
                u.cost = Some(c.clone());
            }
            u.updated_at = now;
            let u = u.clone();
            st.event(&u, from, now, up.detail.as_deref().unwrap_or("applied"));
            report.applied.push(up.unit_id.clone());
        }
        Ok(report)
    }

    async fn unit_list_submitted_ids(&self, _pool: &str) -> StoreResult<Vec<String>> {
        Err(unused("unit_list_submitted_ids"))
    }

    async fn unit_find_by_provider(
        &self,
        _task_types: &[String],
        _provider_job_id: Option<&str>,
        _idempotency_key: Option<&str>,
    ) -> StoreResult<Option<Unit>> {
        Err(unused("unit_find_by_provider"))
    }

    async fn unit_claim_finalize(
        &self,
        _owner: &str,
        _lease_until: i64,
        _now: i64,
        _limit: u32,
    ) -> StoreResult<Vec<Unit>> {
        Err(unused("unit_claim_finalize"))
    }

    async fn unit_complete(
        &self,
        _id: &str,
        _owner: &str,
        _result: &str,
        _now: i64,
    ) -> StoreResult<bool> {
        Err(unused("unit_complete"))
    }

    async fn unit_finalize_release(
        &self,
        _id: &str,
        _owner: &str,
        _error: &str,
        _next_at: i64,
        _fail: bool,
        _now: i64,
    ) -> StoreResult<bool> {
        Err(unused("unit_finalize_release"))
    }

    async fn unit_count_by_pool(&self) -> StoreResult<Vec<PoolStatusCount>> {
        self.check()?;
        let st = self.state.lock();
        let mut counts: BTreeMap<(String, UnitStatus), u64> = BTreeMap::new();
        for u in &st.units {
            *counts.entry((u.pool.clone(), u.status)).or_default() += 1;
        }
        Ok(counts
            .into_iter()
            .map(|((pool, status), count)| PoolStatusCount {
                pool,
                status,
                count,
            })
            .collect())
    }

    async fn unit_events(&self, task_id: &str) -> StoreResult<Vec<UnitEvent>> {
        Ok(self
            .state
            .lock()
            .events
            .iter()
            .filter(|e| e.task_id == task_id)
            .cloned()
            .collect())
    }
}
