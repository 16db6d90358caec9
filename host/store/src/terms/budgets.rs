//! Tenant budgets: a tenant with a budget may have units whose reserved-or-spent cost in the
//! current period sums to at most its limit. Periods are aligned to the Unix epoch
//! (`period_start = now - now % period`), so every instance agrees on them. A unit's estimate
//! is reserved in the transaction of its submit marker, one ledger row per submission (unit,
//! stage, submit attempt): a crash after the marker leaves the unit in doubt and its row
//! reserved, and the submission that resolves it settles that same row
//! (docs/accounts-deadlines-budgets.md).

use serde::Serialize;

use super::grant::Grant;
use crate::StoreResult;
use crate::shared::on_both_drivers;

/// A tenant's budget.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Budget {
    pub tenant: String,
    /// The most its units may cost per period, in the provider's unit.
    pub limit: f64,
    /// The period in milliseconds.
    pub period_ms: i64,
    /// Who set it last: `config` or `api`.
    pub source: String,
    pub updated_at: i64,
}

/// A tenant's spending in the current period.
#[derive(Clone, Debug, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Usage {
    /// Start of the period (Unix ms), aligned to the epoch.
    pub period_start: i64,
    /// End of the period (Unix ms): reservations start afresh then.
    pub period_end: i64,
    /// Settled cost of the submissions that ended (provider-reported where known).
    pub spent: f64,
    /// Estimates reserved by submissions still running.
    pub reserved: f64,
    /// Submissions counted (ended and running).
    pub submissions: u64,
}

/// How a submission that ended is settled: the provider's cost when it reported one; the
/// estimate when the job succeeded (or moved to its next stage) without one; nothing when no
/// job ran to completion (refused, failed, cancelled, back to pending).
#[derive(Clone, Debug)]
pub struct Settle {
    pub unit_id: String,
    /// `Some(cost)`: spent exactly this. `None`: see `succeeded`.
    pub cost: Option<f64>,
    /// Without a cost: the job succeeded, so the estimate counts as spent.
    pub succeeded: bool,
}

/// The settlements for applied updates: updates that report a cost, or that take a unit out
/// of `submitted`.
pub(crate) fn settlements(updates: &[crate::UnitUpdate], applied: &[String]) -> Vec<Settle> {
    let applied: std::collections::HashSet<&str> = applied.iter().map(String::as_str).collect();
    updates
        .iter()
        .filter(|u| applied.contains(u.unit_id.as_str()))
        .filter_map(settlement)
        .collect()
}

/// The settlement of `u`'s open reservation, if applying `u` ends or prices its submission.
pub(crate) fn settlement(u: &crate::UnitUpdate) -> Option<Settle> {
    use slotd_core::model::UnitStatus;
    let cost = u.cost.as_deref().and_then(parse_cost);
    let leaving =
        u.from == Some(UnitStatus::Submitted) && u.to.is_some_and(|t| t != UnitStatus::Submitted);
    if cost.is_none() && !leaving {
        return None;
    }
    let succeeded = u.to == Some(UnitStatus::Succeeded)
        || (u.to == Some(UnitStatus::Pending) && u.stage.is_some());
    Some(Settle {
        unit_id: u.unit_id.clone(),
        cost,
        succeeded,
    })
}

/// A provider-reported cost (Kling's `final_unit_deduction` is a decimal string): finite and
/// not negative, else not a cost.
pub fn parse_cost(text: &str) -> Option<f64> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|c| c.is_finite() && *c >= 0.0)
}

/// Appended to the event of a unit held for budget or spend whose handler gives no cost
/// estimate: such a unit reserves nothing and is counted at its settled cost, so it runs while
/// its period has room and waits, like any other, once the period is spent.
pub(crate) const UNESTIMATED_WAIT: &str = "; the unit has no cost estimate (its handler gives none): \
     it reserves nothing, is counted at the cost the provider reports, and waits while the \
     period is spent";

/// The budget check's answer: the grants that fit (indexes, in order), those over budget, and
/// the tenants that have a budget (only their grants get ledger rows).
#[derive(Clone, Debug, Default)]
pub(crate) struct Checked {
    pub fit: Vec<usize>,
    pub over: Vec<usize>,
    /// Grants their pool's or account's spend limit cannot cover, with why.
    pub over_spend: Vec<(usize, super::spend::Refusal)>,
    pub budgeted: std::collections::HashSet<String>,
}

/// Grants checked against budgets: those with a tenant (the scheduler's; a bare
/// `unit_mark_submitted` names none and reserves nothing).
pub(crate) fn budgeted(grants: &[Grant]) -> bool {
    grants.iter().any(|g| !g.tenant.is_empty())
}

/// Whether any grant names a spend limit (and so the marker must check spend).
pub(crate) fn spending(grants: &[crate::Grant]) -> bool {
    grants.iter().any(|g| g.spend.is_some())
}

on_both_drivers! {
    use each crate::terms::spend as spend_db;

    /// The rooms of every scope the grants name, each locked for the transaction (PostgreSQL)
    /// and summed for the period containing `now`.
    pub(crate) async fn spend_rooms(
        conn: &mut Conn,
        grants: &[crate::Grant],
        now: i64,
    ) -> StoreResult<std::collections::HashMap<crate::terms::SpendScope, crate::terms::spend::Room>> {
        let mut scopes: Vec<(crate::terms::SpendScope, crate::terms::SpendLimit)> = grants
            .iter()
            .filter_map(|g| g.spend.as_deref())
            .flat_map(crate::terms::spend::scopes_of)
            .collect();
        // A stable order: two transactions lock the scopes they share in the same order.
        scopes.sort_by(|a, b| a.0.cmp(&b.0));
        scopes.dedup_by(|a, b| a.0 == b.0);
        let mut rooms = std::collections::HashMap::new();
        for (scope, limit) in scopes {
            if let Some(lock) = ADVISORY_LOCK {
                sqlx::query(lock)
                    .bind(scope.lock_name())
                    .execute(&mut *conn)
                    .await?;
            }
            let (since, _) = limit.period(now);
            let used = spend_db::used_in(&mut *conn, &scope, since).await?;
            rooms.insert(
                scope,
                crate::terms::spend::Room::new(limit, used, now),
            );
        }
        Ok(rooms)
    }


    /// The budget check of a submit marker, in its transaction: which grants fit their
    /// tenant's budget and their pool's and account's spend (in order; once a tenant's or a
    /// scope's grant does not fit, its later grants wait too, so its units keep their FIFO
    /// order). On PostgreSQL the budget row and the spend scopes are locked, so two pools
    /// reserving for one tenant or account at once take turns.
    pub(crate) async fn budget_check(
        conn: &mut Conn,
        grants: &[crate::Grant],
        now: i64,
        lock: &str,
    ) -> StoreResult<crate::terms::Checked> {
        use std::collections::HashMap;
        let mut tenants: Vec<&str> = grants.iter().map(|g| g.tenant.as_str()).collect();
        tenants.sort_unstable();
        tenants.dedup();
        // (limit, used so far, blocked)
        let mut room: HashMap<&str, (f64, f64, bool)> = HashMap::new();
        for tenant in tenants {
            let row: Option<(f64, i64)> = sqlx::query_as(&format!(
                "SELECT limit_amount, period_ms FROM tenant_budgets WHERE tenant = $1{lock}"
            ))
            .bind(tenant)
            .fetch_optional(&mut *conn)
            .await?;
            let Some((limit, period)) = row else { continue };
            let used: Option<f64> = sqlx::query_scalar(
                "SELECT SUM(COALESCE(spent, reserved)) FROM budget_ledger \
                 WHERE tenant = $1 AND period_start = $2",
            )
            .bind(tenant)
            .bind(crate::terms::period_start(now, period))
            .fetch_one(&mut *conn)
            .await?;
            room.insert(tenant, (limit, used.unwrap_or(0.0), false));
        }
        let mut spend = spend_rooms(&mut *conn, grants, now).await?;
        let (mut fit, mut over, mut over_spend) = (Vec::new(), Vec::new(), Vec::new());
        let budgeted = room.keys().map(|t| t.to_string()).collect();
        for (i, g) in grants.iter().enumerate() {
            // The provider's spend first: a grant it refuses does not hold its tenant back.
            let before = spend.clone();
            if let Some(terms) = &g.spend
                && let Err(why) =
                    crate::terms::spend::take(&mut spend, terms, g.estimate, g.budget_retry_at)
            {
                over_spend.push((i, why));
                continue;
            }
            let Some((limit, used, blocked)) = room.get_mut(g.tenant.as_str()) else {
                fit.push(i);
                continue;
            };
            // Nothing is taken from a period already spent, not even by a unit without an
            // estimate (it reserves 0). A small tolerance: estimates are decimal fractions
            // summed in binary.
            if *blocked || *limit - *used <= 1e-9 || *used + g.estimate > *limit + 1e-9 {
                *blocked = true;
                over.push(i);
                // Not marked: what it took of its spend scopes goes back.
                spend = before;
            } else {
                *used += g.estimate;
                fit.push(i);
            }
        }
        Ok(crate::terms::Checked { fit, over, over_spend, budgeted })
    }

    /// After the marker moved `marked`: their ledger rows (for tenants with a budget; a row
    /// of the same submission that was settled without a job, e.g. refused for capacity, is
    /// reserved again: the submission is being made anew), and `wait_reason = budget` (with
    /// one event when it starts) for the grants over budget.
    pub(crate) async fn budget_record(
        conn: &mut Conn,
        grants: &[crate::Grant],
        marked: &std::collections::HashSet<&str>,
        checked: &crate::terms::Checked,
        now: i64,
    ) -> StoreResult<()> {
        let over = &checked.over;
        let reserving = grants.iter().filter(|g| {
            marked.contains(g.unit_id.as_str())
                && (checked.budgeted.contains(&g.tenant) || g.spend.is_some())
        });
        for g in reserving {
            // The tenant's period when it has a budget; a row kept for spend only is counted
            // by its pool and account from `created_at`.
            let (pool, spend_account) = g
                .spend
                .as_deref()
                .map_or((None, None), |t| (Some(t.pool.as_str()), t.account.as_deref()));
            sqlx::query(
                "INSERT INTO budget_ledger (unit_id, submission, tenant, period_start, reserved, \
                     created_at, pool, spend_account) \
                 VALUES ($1, $2, $3, COALESCE((SELECT $4 - ($4 % period_ms) FROM tenant_budgets \
                     WHERE tenant = $3), $4), $5, $4, $6, $7) \
                 ON CONFLICT (unit_id, submission) DO UPDATE SET \
                     period_start = excluded.period_start, reserved = excluded.reserved, \
                     spent = NULL, settled_at = NULL, created_at = excluded.created_at, \
                     pool = excluded.pool, spend_account = excluded.spend_account \
                 WHERE budget_ledger.settled_at IS NOT NULL",
            )
            .bind(&g.unit_id)
            .bind(&g.submission)
            .bind(&g.tenant)
            .bind(now)
            .bind(g.estimate)
            .bind(pool)
            .bind(spend_account)
            .execute(&mut *conn)
            .await?;
        }
        for (i, why) in &checked.over_spend {
            let Some(g) = grants.get(*i) else { continue };
            let detail = format!("{}{}", why.detail, unestimated_note(&mut *conn, g).await?);
            hold_pending(&mut *conn, &g.unit_id, now, "spend", &detail, why.due).await?;
        }
        for &i in over {
            let Some(g) = grants.get(i) else { continue };
            let detail = if g.estimate > 0.0 {
                format!(
                    "waiting: budget (tenant {} cannot cover an estimate of {} this period)",
                    g.tenant, g.estimate
                )
            } else {
                format!(
                    "waiting: budget (tenant {} has no room left this period{})",
                    g.tenant,
                    unestimated_note(&mut *conn, g).await?
                )
            };
            hold_pending(&mut *conn, &g.unit_id, now, "budget", &detail, g.budget_retry_at)
                .await?;
        }
        Ok(())
    }

    /// What the event of a held unit adds when its handler gave no cost estimate (a routed
    /// unit's is its chosen target's, any other's is on the unit): why it waits although it
    /// reserves nothing. Empty for units with an estimate.
    async fn unestimated_note(conn: &mut Conn, g: &crate::Grant) -> StoreResult<&'static str> {
        if g.estimate > 0.0 {
            return Ok("");
        }
        let unknown = match &g.bind {
            Some(b) => b.estimate.is_none(),
            None => {
                let estimate: Option<Option<f64>> =
                    sqlx::query_scalar("SELECT cost_estimate FROM units WHERE id = $1")
                        .bind(&g.unit_id)
                        .fetch_optional(&mut *conn)
                        .await?;
                matches!(estimate, Some(None))
            }
        };
        Ok(if unknown { crate::terms::budgets::UNESTIMATED_WAIT } else { "" })
    }

    /// Keep a pending unit whose grant the marker refused waiting with `reason` until `due`;
    /// the event saying why is written once, when its wait begins.
    async fn hold_pending(
        conn: &mut Conn,
        unit_id: &str,
        now: i64,
        reason: &str,
        detail: &str,
        due: i64,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage, \
                 detail) \
             SELECT id, task_id, $2, 'pending', 'pending', stage, $3 FROM units \
             WHERE id = $1 AND status = 'pending' AND wait_reason IS NULL",
        )
        .bind(unit_id)
        .bind(now)
        .bind(detail)
        .execute(&mut *conn)
        .await?;
        sqlx::query(
            "UPDATE units SET wait_reason = $3, next_at = $2 WHERE id = $1 AND status = 'pending'",
        )
        .bind(unit_id)
        .bind(due)
        .bind(reason)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    /// Settle the open reservation of each unit (at most one is open per unit).
    pub(crate) async fn budget_settle(
        conn: &mut Conn,
        settle: &[crate::terms::Settle],
        now: i64,
    ) -> StoreResult<()> {
        if settle.is_empty() {
            return Ok(());
        }
        // Most deployments have no budgets: one indexed probe saves a statement per unit.
        let open: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM (SELECT 1 FROM budget_ledger WHERE settled_at IS NULL \
             LIMIT 1) AS o",
        )
        .fetch_one(&mut *conn)
        .await?;
        if open == 0 {
            return Ok(());
        }
        for s in settle {
            sqlx::query(
                "UPDATE budget_ledger SET settled_at = $2, \
                     spent = CASE WHEN $3 IS NOT NULL THEN $3 \
                                  WHEN $4 = 1 THEN reserved ELSE 0 END \
                 WHERE unit_id = $1 AND settled_at IS NULL",
            )
            .bind(&s.unit_id)
            .bind(now)
            .bind(s.cost)
            .bind(i32::from(s.succeeded))
            .execute(&mut *conn)
            .await?;
        }
        Ok(())
    }

    /// A tenant's budget, if it has one.
    pub(crate) async fn budget_get(
        pool: &Pool,
        tenant: &str,
    ) -> StoreResult<Option<crate::Budget>> {
        let row: Option<(String, f64, i64, String, i64)> = sqlx::query_as(
            "SELECT tenant, limit_amount, period_ms, source, updated_at FROM tenant_budgets \
             WHERE tenant = $1",
        )
        .bind(tenant)
        .fetch_optional(pool)
        .await?;
        Ok(row.map(|(tenant, limit, period_ms, source, updated_at)| crate::Budget {
            tenant,
            limit,
            period_ms,
            source,
            updated_at,
        }))
    }

    /// Set a tenant's budget. From the configuration (`source = config`), a budget last set
    /// through the API is kept: the operator's runtime decision outlives a restart.
    pub(crate) async fn budget_set(
        pool: &Pool,
        b: &crate::Budget,
    ) -> StoreResult<()> {
        let guard = if b.source == "config" {
            " WHERE tenant_budgets.source = 'config'"
        } else {
            ""
        };
        sqlx::query(&format!(
            "INSERT INTO tenant_budgets (tenant, limit_amount, period_ms, source, updated_at) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (tenant) DO UPDATE SET limit_amount = excluded.limit_amount, \
                 period_ms = excluded.period_ms, source = excluded.source, \
                 updated_at = excluded.updated_at{guard}"
        ))
        .bind(&b.tenant)
        .bind(b.limit)
        .bind(b.period_ms)
        .bind(&b.source)
        .bind(b.updated_at)
        .execute(pool)
        .await?;
        Ok(())
    }

    /// Make `tenant`'s units held back (`pending` with a wait reason: its budget, a spend
    /// limit) due at `now`, for the fill to decide anew; the (task, pool) of each.
    pub(crate) async fn unit_release_holds(
        pool: &Pool,
        tenant: &str,
        now: i64,
    ) -> StoreResult<Vec<(String, String)>> {
        Ok(sqlx::query_as(
            "UPDATE units SET wait_reason = NULL, next_at = $2 \
             WHERE tenant = $1 AND status = 'pending' AND wait_reason IS NOT NULL \
             RETURNING task_id, pool",
        )
        .bind(tenant)
        .bind(now)
        .fetch_all(pool)
        .await?)
    }

    /// Remove the budgets the configuration file set (`source = config`) for tenants it no
    /// longer names; budgets set through the API stay. Returns the tenants whose budget went.
    pub(crate) async fn budget_prune_config(
        pool: &Pool,
        keep: &[String],
    ) -> StoreResult<Vec<String>> {
        let configured: Vec<String> =
            sqlx::query_scalar("SELECT tenant FROM tenant_budgets WHERE source = 'config'")
                .fetch_all(pool)
                .await?;
        let mut removed = Vec::new();
        for tenant in configured.into_iter().filter(|t| !keep.contains(t)) {
            sqlx::query("DELETE FROM tenant_budgets WHERE tenant = $1 AND source = 'config'")
                .bind(&tenant)
                .execute(pool)
                .await?;
            removed.push(tenant);
        }
        Ok(removed)
    }

    /// A tenant's spending in the period containing `now` (of `period_ms`).
    pub(crate) async fn budget_usage(
        pool: &Pool,
        tenant: &str,
        period_ms: i64,
        now: i64,
    ) -> StoreResult<crate::Usage> {
        let start = crate::terms::period_start(now, period_ms);
        let (spent, reserved, n): (Option<f64>, Option<f64>, i64) = sqlx::query_as(
            "SELECT SUM(CASE WHEN settled_at IS NOT NULL THEN spent END), \
                 SUM(CASE WHEN settled_at IS NULL THEN reserved END), COUNT(*) \
             FROM budget_ledger WHERE tenant = $1 AND period_start = $2",
        )
        .bind(tenant)
        .bind(start)
        .fetch_one(pool)
        .await?;
        Ok(crate::Usage {
            period_start: start,
            period_end: start.saturating_add(period_ms),
            spent: spent.unwrap_or(0.0),
            reserved: reserved.unwrap_or(0.0),
            submissions: u64::try_from(n).map_err(|_| crate::StoreError::Corrupt("a negative ledger count".into()))?,
        })
    }

    /// Provider cost and the estimates, summed per tenant over every unit (the demo's summary
    /// and `GET /v1/tenants/{name}/usage`'s all-time figures).
    pub(crate) async fn cost_by_tenant(pool: &Pool) -> StoreResult<Vec<(String, f64, f64, i64)>> {
        let rows: Vec<(String, Option<String>, Option<f64>)> = sqlx::query_as(
            "SELECT tenant, cost, cost_estimate FROM units \
             WHERE cost IS NOT NULL OR cost_estimate IS NOT NULL",
        )
        .fetch_all(pool)
        .await?;
        let mut sums: std::collections::BTreeMap<String, (f64, f64, i64)> = Default::default();
        for (tenant, cost, estimate) in rows {
            let e = sums.entry(tenant).or_default();
            if let Some(c) = cost.as_deref().and_then(crate::terms::parse_cost) {
                e.0 += c;
                e.2 += 1;
            }
            e.1 += estimate.unwrap_or(0.0);
        }
        Ok(sums.into_iter().map(|(t, (c, e, n))| (t, c, e, n)).collect())
    }
}
