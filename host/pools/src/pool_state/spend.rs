//! Provider spend limits (docs/accounts-deadlines-budgets.md "Quotas"): `[pools."NAME"] spend`
//! and an account's `spend`, at most `limit` of the provider's cost unit per period. The
//! submit marker decides (slotd-store's `terms::spend`, in its transaction); here the fill's
//! terms for it, the fill's look ahead (an exhausted pool or account takes no grants), and
//! what `GET /v1/pools` shows.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use slotd_core::config::BudgetConfig;
use slotd_store::{SpendLimit, SpendScope, SpendTerms};

use super::{PoolAccount, PoolLimit};

/// Room below this is none: estimates are decimal fractions summed in binary.
const EPSILON: f64 = 1e-9;

/// A spend limit as `GET /v1/pools` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SpendView {
    /// The most the period's creates may cost, in the provider's cost unit.
    pub limit: f64,
    /// The period, e.g. `30days`; periods are aligned to the Unix epoch.
    pub period: String,
    /// Reserved (running submissions' estimates) and spent (settled, at the provider's
    /// reported cost where known) in the current period.
    pub used: f64,
    pub remaining: f64,
    /// When the current period ends (Unix ms): its spend starts afresh then.
    pub resets_at: i64,
}

impl SpendView {
    /// Nothing left: no grant is made until `resets_at` (or until settlements free room).
    pub fn exhausted(&self) -> bool {
        self.remaining <= EPSILON
    }
}

fn limit_of(b: &BudgetConfig) -> SpendLimit {
    SpendLimit {
        limit: b.limit,
        period_ms: b.period_ms().max(1),
    }
}

/// `handler/account`: how the ledger names a named account's spend (an account's credits are
/// the organization's, across every pool it serves).
pub fn account_name(account: &PoolAccount) -> Option<String> {
    Some(format!(
        "{}/{}",
        account.handler.as_ref()?,
        account.name.as_ref()?
    ))
}

/// What a grant of `pool` on `account` may spend, when either has a limit.
pub fn terms(pool: &str, limit: &PoolLimit, account: &PoolAccount) -> Option<Arc<SpendTerms>> {
    let account_limit = account.spend.as_ref().map(limit_of);
    let account = account_limit.and_then(|_| account_name(account));
    let pool_limit = limit.spend.as_ref().map(limit_of);
    if pool_limit.is_none() && account.is_none() {
        return None;
    }
    Some(Arc::new(SpendTerms {
        pool: pool.to_string(),
        pool_limit,
        account_limit: account.as_ref().and(account_limit),
        account,
    }))
}

/// One scope's spend now, read from the ledger.
pub async fn view(
    metrics: &slotd_core::telemetry::Metrics,
    store: &slotd_store::DynServiceStore,
    scope: &SpendScope,
    budget: &BudgetConfig,
    now: i64,
) -> Result<SpendView, slotd_store::StoreError> {
    let limit = limit_of(budget);
    let (since, resets_at) = limit.period(now);
    let used = store.spend_used(scope, since).await?;
    let remaining = (budget.limit - used).max(0.0);
    let label = match scope {
        SpendScope::Pool(p) => ("pool", p.clone()),
        SpendScope::Account(a) => ("account", a.clone()),
    };
    metrics.record(|| {
        metrics::gauge!("slotd_spend_remaining", "scope" => label.0, "name" => label.1)
            .set(remaining)
    });
    Ok(SpendView {
        limit: budget.limit,
        period: humantime::format_duration(budget.period).to_string(),
        used,
        remaining,
        resets_at,
    })
}

/// The pool's own spend now, if it has a limit (a failed read is logged and shows none).
pub async fn pool_view(
    metrics: &slotd_core::telemetry::Metrics,
    store: &slotd_store::DynServiceStore,
    limit: &PoolLimit,
    now: i64,
) -> Option<SpendView> {
    let budget = limit.spend.as_ref()?;
    let scope = SpendScope::Pool(limit.name.clone());
    log_failed(view(metrics, store, &scope, budget, now).await, &limit.name)
}

/// A named account's spend now, if it has a limit.
pub async fn account_view(
    metrics: &slotd_core::telemetry::Metrics,
    store: &slotd_store::DynServiceStore,
    account: &PoolAccount,
    now: i64,
) -> Option<SpendView> {
    let budget = account.spend.as_ref()?;
    let name = account_name(account)?;
    log_failed(
        view(
            metrics,
            store,
            &SpendScope::Account(name.clone()),
            budget,
            now,
        )
        .await,
        &name,
    )
}

fn log_failed(r: Result<SpendView, slotd_store::StoreError>, what: &str) -> Option<SpendView> {
    r.map_err(|e| tracing::warn!(spend = what, error = %e, "reading the spend ledger failed"))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(name: Option<&str>, spend: Option<BudgetConfig>) -> PoolAccount {
        PoolAccount {
            name: name.map(str::to_string),
            handler: Some("runway-video".into()),
            max_slots: 5,
            max_slots_source: super::super::source::SOURCE_CONFIG,
            quotas: Vec::new(),
            spend,
            share: None,
        }
    }

    #[test]
    fn terms_name_the_pool_and_the_handlers_account_only_where_a_limit_is_set() {
        let month = BudgetConfig {
            limit: 500.0,
            period: std::time::Duration::from_secs(30 * 86_400),
        };
        let mut limit = PoolLimit {
            name: "runway:gen4_turbo".into(),
            max_slots: 5,
            max_slots_source: super::super::source::SOURCE_CONFIG,
            task_types: Vec::new(),
            handlers: Vec::new(),
            accounts: Vec::new(),
            quotas: Vec::new(),
            spend: None,
        };
        assert_eq!(terms("p", &limit, &account(Some("studio"), None)), None);
        let t = terms("p", &limit, &account(Some("studio"), Some(month))).expect("terms");
        assert_eq!(t.account.as_deref(), Some("runway-video/studio"));
        assert_eq!(t.pool_limit, None);
        limit.spend = Some(month);
        let t = terms("p", &limit, &account(None, Some(month))).expect("terms");
        assert_eq!((t.account.clone(), t.account_limit), (None, None));
        assert_eq!(t.pool_limit.map(|l| l.limit), Some(500.0));
    }
}
