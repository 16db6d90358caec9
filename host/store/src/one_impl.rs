//! One implementation of the store's traits for both drivers. [`impl_task_store!`] writes every method whose body
//! is the same on SQLite and PostgreSQL once, over four names each driver gives its store:
//!
//! - `reader()`: where reads that need no transaction go (SQLite: its reader pool beside the
//!   one writer connection; PostgreSQL: the pool);
//! - `writer()`: where single-statement writes go (SQLite: the one writer connection;
//!   PostgreSQL: the pool);
//! - `begin()`: a write transaction (SQLite: `BEGIN IMMEDIATE` on the writer);
//! - `BUDGET_ROW_LOCK`: how the submit marker's budget check locks budget rows;
//! - `MIGRATOR`: the driver's embedded schema;
//!
//! and the driver's modules the bodies name: `shared` (the statements both drivers share,
//! [`crate::shared`]), `tasks`, `units`, `events`, and the driver's half of `crate::terms`.
//!
//! What differs in more than those names is passed in by the driver, in its own file, where
//! the difference is explained: the batch create, the batch apply,
//! finalization's claim, completion and release, and the fence advance. Those are the dialect
//! differences: SQLite has one writer and serializes every write transaction on it;
//! PostgreSQL locks rows (`FOR UPDATE`, `SKIP LOCKED`) and commits single statements without
//! a transaction.

/// The three traits of [`crate::TaskStore`] for `$store` ([`crate::StoreRead`],
/// [`crate::RecordWrite`], [`crate::UnitWrite`]), with the methods shared by both drivers
/// written here and the driver's own passed in (`records`: the fence advance; `units`: the
/// batch create, the batch apply and finalization's claim, completion and release). `$driver` names the driver's module in `crate::terms`'s
/// concept modules (`sqlite` or `postgres`); `$dialect` names the database in messages.
macro_rules! impl_task_store {
    ($store:ty, $driver:ident, $dialect:literal, records: { $($records:tt)* }, units: { $($units:tt)* }) => {
        #[async_trait::async_trait]
        impl crate::StoreRead for $store {
            async fn ping(&self) -> StoreResult<()> {
                sqlx::query("SELECT 1").execute(self.reader()).await?;
                Ok(())
            }

            async fn task_get(&self, tenant: &str, id: &str) -> StoreResult<Option<TaskRecord>> {
                let Some(task) = shared::task_row(self.reader(), tenant, id).await? else {
                    return Ok(None);
                };
                let mut tasks = [task];
                tasks::counts_for(self.reader(), &mut tasks).await?;
                let [task] = tasks;
                Ok(Some(task))
            }

            async fn task_units(&self, task_id: &str) -> StoreResult<Vec<Unit>> {
                shared::task_units(self.reader(), task_id).await
            }

            async fn task_list(&self, tenant: &str, filter: &TaskFilter) -> StoreResult<TaskPage> {
                self.task_list_any(Some(tenant), filter).await
            }

            async fn task_list_any(
                &self,
                tenant: Option<&str>,
                filter: &TaskFilter,
            ) -> StoreResult<TaskPage> {
                let mut page = shared::task_page(self.reader(), tenant, filter).await?;
                tasks::counts_for(self.reader(), &mut page.tasks).await?;
                Ok(page)
            }

            async fn task_tenant(&self, id: &str) -> StoreResult<Option<String>> {
                shared::task_tenant(self.reader(), id).await
            }

            async fn webhook_recent(
                &self,
                tenant: Option<&str>,
                status: Option<&str>,
                limit: u32,
            ) -> StoreResult<Vec<Delivery>> {
                crate::webhooks::$driver::webhook_recent(self.reader(), tenant, status, limit).await
            }

            async fn pool_slot_log(
                &self,
                pool: &str,
                since: i64,
                limit: u32,
            ) -> StoreResult<SlotLog> {
                shared::pool_slot_log(self.reader(), pool, since, limit).await
            }

            async fn unit_list_fill(
                &self,
                pool: &str,
                task_types: &[String],
                now: i64,
                limit: u32,
                except_tenants: &[String],
            ) -> StoreResult<Vec<Unit>> {
                units::unit_list_pending(self.reader(), pool, task_types, now, limit, except_tenants)
                    .await
            }

            async fn spend_used(
                &self,
                scope: &crate::SpendScope,
                since: i64,
            ) -> StoreResult<f64> {
                crate::terms::spend::$driver::used(self.reader(), scope, since).await
            }

            async fn quota_creates_since(
                &self,
                pool: &str,
                since: i64,
            ) -> StoreResult<Vec<crate::Create>> {
                crate::terms::creates::$driver::since(self.reader(), pool, since).await
            }

            async fn unit_count_submitted_by_tenant(
                &self,
                pool: &str,
            ) -> StoreResult<Vec<(String, u64)>> {
                crate::terms::accounts::$driver::submitted_by_tenant(self.reader(), pool).await
            }

            async fn unit_list_submitted_accounts(
                &self,
                pool: &str,
            ) -> StoreResult<Vec<crate::Submission>> {
                crate::terms::accounts::$driver::submitted_by_account(self.reader(), pool).await
            }

            async fn unit_list_deadlined(&self, pool: &str, limit: u32) -> StoreResult<Vec<Unit>> {
                let rows = crate::terms::deadlines::$driver::deadlined_pending(
                    self.reader(),
                    pool,
                    i64::from(limit),
                )
                .await?;
                shared::units_from_rows(&rows)
            }

            async fn unit_pending_groups(
                &self,
                pool: &str,
                min_priority: i32,
            ) -> StoreResult<Vec<crate::PendingGroup>> {
                crate::terms::deadlines::$driver::pending_groups(self.reader(), pool, min_priority)
                    .await
            }

            async fn unit_rank_in_group(&self, unit_id: &str, cap: u32) -> StoreResult<u64> {
                crate::terms::deadlines::$driver::rank_in_group(self.reader(), unit_id, cap).await
            }

            async fn budget_get(&self, tenant: &str) -> StoreResult<Option<crate::Budget>> {
                crate::terms::budgets::$driver::budget_get(self.reader(), tenant).await
            }

            async fn budget_usage(
                &self,
                tenant: &str,
                period_ms: i64,
                now: i64,
            ) -> StoreResult<crate::Usage> {
                crate::terms::budgets::$driver::budget_usage(self.reader(), tenant, period_ms, now)
                    .await
            }

            async fn cost_by_tenant(&self) -> StoreResult<Vec<(String, f64, f64, i64)>> {
                crate::terms::budgets::$driver::cost_by_tenant(self.reader()).await
            }

            async fn unit_list_due(
                &self,
                pool: &str,
                task_types: &[String],
                now: i64,
                limit: u32,
            ) -> StoreResult<Vec<Unit>> {
                units::unit_list_due(self.reader(), pool, task_types, now, limit).await
            }

            async fn unit_next_due(
                &self,
                pool: &str,
                status: slotd_core::model::UnitStatus,
            ) -> StoreResult<Option<i64>> {
                shared::unit_next_due(self.reader(), pool, status).await
            }

            async fn unit_next_due_of_both(
                &self,
                pool: &str,
                first: slotd_core::model::UnitStatus,
                second: slotd_core::model::UnitStatus,
            ) -> StoreResult<(Option<i64>, Option<i64>)> {
                shared::unit_next_due_of_both(self.reader(), pool, first, second).await
            }

            async fn unit_count_provider_queued(
                &self,
                pool: &str,
                account: Option<&str>,
            ) -> StoreResult<u32> {
                shared::unit_count_provider_queued(self.reader(), pool, account).await
            }

            async fn unit_list_submitted_ids(&self, pool: &str) -> StoreResult<Vec<String>> {
                shared::unit_list_submitted_ids(self.reader(), pool).await
            }

            async fn unit_find_by_provider(
                &self,
                task_types: &[String],
                provider_job_id: Option<&str>,
                idempotency_key: Option<&str>,
            ) -> StoreResult<Option<Unit>> {
                units::unit_find_by_provider(
                    self.reader(),
                    task_types,
                    provider_job_id,
                    idempotency_key,
                )
                .await
            }

            async fn unit_find_by_provider_refs(
                &self,
                task_types: &[String],
                jobs: &[String],
                keys: &[String],
            ) -> StoreResult<Vec<Unit>> {
                units::unit_find_by_provider_refs(self.array_reader(), task_types, jobs, keys)
                    .await
            }

            async fn unit_count_by_pool(&self) -> StoreResult<Vec<PoolStatusCount>> {
                shared::unit_count_by_pool(self.reader()).await
            }

            async fn task_queue_standing(
                &self,
                task_id: &str,
            ) -> StoreResult<Option<QueueStanding>> {
                shared::task_queue_standing(self.reader(), task_id).await
            }

            async fn unit_events(&self, task_id: &str) -> StoreResult<Vec<UnitEvent>> {
                shared::unit_events(self.reader(), task_id).await
            }

            async fn unit_events_recent_with(
                &self,
                prefix: &str,
                scan: i64,
            ) -> StoreResult<Vec<UnitEvent>> {
                shared::unit_events_recent_with(self.reader(), prefix, scan).await
            }

            async fn unit_events_after(
                &self,
                scope: EventScope<'_>,
                after: EventCursor,
                limit: u32,
            ) -> StoreResult<EventPage> {
                events::unit_events_after(self.reader(), scope, after, limit).await
            }

            async fn unit_event_scopes_after(
                &self,
                after: EventCursor,
                limit: u32,
            ) -> StoreResult<crate::ScopePage> {
                events::unit_event_scopes_after(self.reader(), after, limit).await
            }

            async fn unit_events_head(&self) -> StoreResult<EventCursor> {
                events::unit_events_head(self.reader()).await
            }

            async fn unit_events_behind(
                &self,
                task_id: &str,
                cursor: EventCursor,
            ) -> StoreResult<bool> {
                events::unit_events_behind(self.reader(), task_id, cursor).await
            }

            async fn webhook_open_tasks(
                &self,
                after: i64,
                limit: u32,
            ) -> StoreResult<Vec<(i64, String, String, i64)>> {
                crate::webhooks::$driver::webhook_open_tasks(self.reader(), after, limit).await
            }

            async fn webhook_list(
                &self,
                task_id: &str,
            ) -> StoreResult<Vec<(Delivery, Vec<Attempt>)>> {
                crate::webhooks::$driver::webhook_list(self.reader(), task_id).await
            }

            async fn handler_version_list(
                &self,
                name: Option<&str>,
                limit: u32,
            ) -> StoreResult<Vec<HandlerVersionRow>> {
                shared::handler_version_list(self.reader(), name, limit).await
            }

            async fn release_get(
                &self,
                sha256: &str,
            ) -> StoreResult<Option<(crate::Release, Vec<u8>)>> {
                crate::releases::$driver::release_get(self.reader(), sha256).await
            }

            async fn release_list(&self, name: Option<&str>) -> StoreResult<Vec<crate::Release>> {
                crate::releases::$driver::release_list(self.reader(), name).await
            }

            async fn handler_load_list(&self, since: i64) -> StoreResult<Vec<crate::HandlerLoad>> {
                crate::releases::$driver::handler_load_list(self.reader(), since).await
            }

            async fn rollout_events(&self, id: &str) -> StoreResult<Vec<crate::RolloutEvent>> {
                crate::rollouts::$driver::rollout_events(self.reader(), id).await
            }

            async fn rollout_list(
                &self,
                name: Option<&str>,
                limit: u32,
            ) -> StoreResult<Vec<crate::Rollout>> {
                crate::rollouts::$driver::rollout_list(self.reader(), name, limit).await
            }

            async fn release_outcomes(
                &self,
                releases: &[String],
                since: i64,
            ) -> StoreResult<Vec<crate::ReleaseOutcome>> {
                crate::rollouts::$driver::release_outcomes(self.reader(), releases, since).await
            }

            async fn release_signals(
                &self,
                releases: &[String],
                since: i64,
            ) -> StoreResult<Vec<(String, crate::ReleaseSignals)>> {
                crate::release_signals::$driver::release_signals(self.reader(), releases, since)
                    .await
            }

            async fn release_failed_tasks(
                &self,
                release: &str,
                since: i64,
            ) -> StoreResult<Vec<(String, String)>> {
                crate::rollouts::$driver::release_failed_tasks(self.reader(), release, since).await
            }

            async fn unit_job_releases(&self) -> StoreResult<Vec<(String, i64)>> {
                crate::releases::$driver::unit_job_releases(self.reader()).await
            }

            async fn handler_process_list(
                &self,
                since: i64,
            ) -> StoreResult<Vec<crate::ReleaseFollower>> {
                crate::releases::$driver::handler_process_list(self.reader(), since).await
            }
        }

        #[async_trait::async_trait]
        impl crate::RecordWrite for $store {
            $($records)*

            async fn migrate(&self) -> StoreResult<()> {
                MIGRATOR.run(self.writer()).await.map_err(|e| {
                    StoreError::Other(format!("migrating the {} schema: {e}", $dialect))
                })
            }

            async fn quota_creates_prune(&self, pool: &str, before: i64) -> StoreResult<u64> {
                crate::terms::creates::$driver::prune(self.writer(), pool, before).await
            }

            async fn budget_set(&self, budget: &crate::Budget) -> StoreResult<()> {
                crate::terms::budgets::$driver::budget_set(self.writer(), budget).await
            }

            async fn budget_prune_config(&self, keep: &[String]) -> StoreResult<Vec<String>> {
                crate::terms::budgets::$driver::budget_prune_config(self.writer(), keep).await
            }

            async fn webhook_enqueue_end(&self, d: &NewDelivery, ends: i64) -> StoreResult<bool> {
                crate::webhooks::$driver::webhook_enqueue_end(self.writer(), d, ends).await
            }

            async fn webhook_claim(
                &self,
                owner: &str,
                lease_until: i64,
                now: i64,
                limit: u32,
            ) -> StoreResult<Vec<Delivery>> {
                crate::webhooks::$driver::webhook_claim(self.writer(), owner, lease_until, now, limit).await
            }

            async fn webhook_attempt(&self, a: &AttemptOutcome<'_>) -> StoreResult<bool> {
                crate::webhooks::$driver::webhook_attempt(self.writer(), a).await
            }

            async fn host_key_get_or_create(
                &self,
                name: &str,
                candidate: &[u8],
                now: i64,
            ) -> StoreResult<Vec<u8>> {
                shared::host_key_get_or_create(self.writer(), name, candidate, now).await
            }

            async fn handler_version_record(&self, row: &HandlerVersionRow) -> StoreResult<()> {
                shared::handler_version_record(self.writer(), row).await
            }

            async fn release_put(&self, release: &crate::NewRelease) -> StoreResult<crate::Published> {
                crate::releases::$driver::release_put(self.writer(), release).await
            }

            async fn rollout_start(&self, rollout: &crate::Rollout) -> StoreResult<bool> {
                crate::rollouts::$driver::rollout_start(self.writer(), rollout).await
            }

            async fn rollout_move(&self, m: &crate::RolloutMove) -> StoreResult<bool> {
                crate::rollouts::$driver::rollout_move(self.writer(), m).await
            }

            async fn rollout_figures(
                &self,
                id: &str,
                figures: &serde_json::Value,
            ) -> StoreResult<()> {
                crate::rollouts::$driver::rollout_figures(self.writer(), id, figures).await
            }

            async fn release_signals_add(
                &self,
                release: &str,
                at: i64,
                signals: &crate::ReleaseSignals,
            ) -> StoreResult<()> {
                crate::release_signals::$driver::release_signals_add(
                    self.writer(),
                    release,
                    at,
                    signals,
                )
                .await
            }

            async fn release_promote(&self, sha256: &str, now: i64) -> StoreResult<bool> {
                crate::releases::$driver::release_promote(self.writer(), sha256, now).await
            }

            async fn release_withdraw(
                &self,
                name: &str,
                published_by: &str,
                reason: &str,
                now: i64,
            ) -> StoreResult<Vec<String>> {
                crate::releases::$driver::release_withdraw(self.writer(), name, published_by, reason, now)
                    .await
            }

            async fn handler_load_put(
                &self,
                follower: &crate::ReleaseFollower,
                loads: &[crate::HandlerLoad],
            ) -> StoreResult<()> {
                crate::releases::$driver::handler_load_put(self.writer(), follower, loads).await
            }

            async fn handler_load_prune(&self, before: i64) -> StoreResult<u64> {
                crate::releases::$driver::handler_load_prune(self.writer(), before).await
            }
        }

        #[async_trait::async_trait]
        impl crate::UnitWrite for $store {
            $($units)*

            async fn unit_release_holds(
                &self,
                tenant: &str,
                now: i64,
            ) -> StoreResult<Vec<(String, String)>> {
                crate::terms::budgets::$driver::unit_release_holds(self.writer(), tenant, now)
                    .await
            }

            async fn task_cancel(
                &self,
                tenant: &str,
                id: &str,
                now: i64,
            ) -> StoreResult<Option<Cancelled>> {
                tasks::task_cancel(self.begin().await?, tenant, id, now).await
            }

            async fn task_retry_failed(
                &self,
                tenant: &str,
                id: &str,
                now: i64,
            ) -> StoreResult<Option<u32>> {
                tasks::task_retry_failed(self.begin().await?, tenant, id, now).await
            }

            async fn unit_mark_granted(
                &self,
                grants: &[crate::Grant],
                now: i64,
                next_at: i64,
                fence: Option<&Fence>,
            ) -> StoreResult<crate::Marked> {
                use crate::terms;
                if grants.is_empty() {
                    return Ok(crate::Marked::default());
                }
                // Grants that write nothing but the move (no spend limit, route or create log)
                // are marked in one statement where the driver can: the budget lookup and the
                // fence go into it. What it leaves takes the transaction.
                let plain = !terms::budgets::spending(grants)
                    && grants.iter().all(|g| g.quota_pool.is_none() && g.bind.is_none());
                let alone = if plain {
                    let ids: Vec<String> = grants.iter().map(|g| g.unit_id.clone()).collect();
                    let accounts: Vec<Option<&str>> =
                        grants.iter().map(|g| g.account.as_deref()).collect();
                    units::unit_mark_alone(self.array_writer(), &ids, now, next_at, &accounts, fence)
                        .await?
                        .unwrap_or_default()
                } else {
                    Vec::new()
                };
                if alone.is_empty() {
                    return self.mark_in_transaction(grants, now, next_at, fence).await;
                }
                let done: std::collections::HashSet<&str> =
                    alone.iter().map(|u| u.id.as_str()).collect();
                let rest: Vec<crate::Grant> = grants
                    .iter()
                    .filter(|g| !done.contains(g.unit_id.as_str()))
                    .cloned()
                    .collect();
                let mut marked = if rest.is_empty() {
                    crate::Marked::default()
                } else {
                    self.mark_in_transaction(&rest, now, next_at, fence).await?
                };
                marked.units.extend(alone);
                let order: std::collections::HashMap<&str, usize> = grants
                    .iter()
                    .enumerate()
                    .map(|(i, g)| (g.unit_id.as_str(), i))
                    .collect();
                marked
                    .units
                    .sort_by_key(|u| order.get(u.id.as_str()).copied().unwrap_or(usize::MAX));
                Ok(marked)
            }

            async fn unit_finalize_renew(
                &self,
                id: &str,
                owner: &str,
                lease_until: i64,
            ) -> StoreResult<bool> {
                shared::unit_finalize_renew(self.writer(), id, owner, lease_until).await
            }
        }

        impl $store {
            /// The submit marker in one transaction: the fence, the budget and spend checks,
            /// routed units bound, the moves by account, the reservations and the create log.
            async fn mark_in_transaction(
                &self,
                grants: &[crate::Grant],
                now: i64,
                next_at: i64,
                fence: Option<&Fence>,
            ) -> StoreResult<crate::Marked> {
                use crate::terms::{self, budgets::$driver as budgets};
                let mut tx = self.begin().await?;
                if let Some(fence) = fence
                    && let Err(e) = shared::fence_check(&mut tx, fence).await
                {
                    return Err(crate::rollback(tx, e).await);
                }
                let budgeted = terms::budgeted(grants) || terms::budgets::spending(grants);
                let checked = if budgeted {
                    budgets::budget_check(&mut tx, grants, now, BUDGET_ROW_LOCK).await?
                } else {
                    terms::Checked {
                        fit: (0..grants.len()).collect(),
                        ..terms::Checked::default()
                    }
                };
                terms::routes::$driver::bind_routed(&mut tx, grants, &checked.fit, now).await?;
                let mut moved = Vec::with_capacity(checked.fit.len());
                for (account, ids) in terms::by_account(grants, &checked.fit) {
                    moved.extend(
                        units::unit_mark_submitted(&mut tx, &ids, now, next_at, account).await?,
                    );
                }
                if budgeted {
                    let ids: std::collections::HashSet<&str> =
                        moved.iter().map(|u| u.id.as_str()).collect();
                    budgets::budget_record(&mut tx, grants, &ids, &checked, now).await?;
                }
                terms::creates::$driver::record_marked(&mut tx, grants, &moved, now).await?;
                tx.commit().await?;
                Ok(terms::marked(grants, moved, &checked))
            }
        }
    };
}

pub(crate) use impl_task_store;
