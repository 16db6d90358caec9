//! Accounts and the submit marker's records: what the marker wrote (the grant it is written
//! for is `grant.rs`'s), the grants grouped per account (one statement each), and the
//! submitted units per account that slot reconciliation reads.

use super::grant::Grant;
use crate::StoreResult;
use crate::shared::on_both_drivers;

/// What [`crate::UnitWrite::unit_mark_granted`] did.
#[derive(Clone, Debug, Default)]
pub struct Marked {
    /// The units marked submitted, in the order of the grants.
    pub units: Vec<slotd_core::model::Unit>,
    /// Grants refused because their tenant's budget could not cover them (the units stay
    /// pending with `wait_reason = "budget"`).
    pub over_budget: Vec<String>,
    /// Grants refused because their pool's or account's spend limit could not cover them
    /// (the units stay pending with `wait_reason = "spend"`).
    pub over_spend: Vec<String>,
}

/// A submitted unit as slot reconciliation sees it: the unit, the account whose slot set holds
/// it, and the instant of its submit marker, which names the submission in the slot set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submission {
    pub unit_id: String,
    pub account: Option<String>,
    /// `submitted_at` (0 for a row without one, which no marker writes).
    pub submitted_at: i64,
}

/// The grants at `fit`, grouped by account (in order of first appearance), as the marker
/// writes them: one statement per account.
pub(crate) fn by_account<'a>(
    grants: &'a [Grant],
    fit: &[usize],
) -> Vec<(Option<&'a str>, Vec<String>)> {
    let mut out: Vec<(Option<&str>, Vec<String>)> = Vec::new();
    for &i in fit {
        let Some(g) = grants.get(i) else { continue };
        let account = g.account.as_deref();
        match out.iter_mut().find(|(a, _)| *a == account) {
            Some((_, ids)) => ids.push(g.unit_id.clone()),
            None => out.push((account, vec![g.unit_id.clone()])),
        }
    }
    out
}

/// Put marked units in the order of the grants and name the grants over budget.
pub(crate) fn marked(
    grants: &[Grant],
    mut units: Vec<slotd_core::model::Unit>,
    checked: &super::Checked,
) -> Marked {
    let order: std::collections::HashMap<&str, usize> = grants
        .iter()
        .enumerate()
        .map(|(i, g)| (g.unit_id.as_str(), i))
        .collect();
    units.sort_by_key(|u| order.get(u.id.as_str()).copied().unwrap_or(usize::MAX));
    Marked {
        units,
        over_budget: checked
            .over
            .iter()
            .filter_map(|&i| grants.get(i).map(|g| g.unit_id.clone()))
            .collect(),
        over_spend: checked
            .over_spend
            .iter()
            .filter_map(|(i, _)| grants.get(*i).map(|g| g.unit_id.clone()))
            .collect(),
    }
}

on_both_drivers! {
    /// Slots each tenant's units hold in `pool` (tenants holding none are left out).
    pub(crate) async fn submitted_by_tenant(
        pool: &Pool,
        sched_pool: &str,
    ) -> StoreResult<Vec<(String, u64)>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT tenant, CAST(COUNT(*) AS BIGINT) FROM units \
             WHERE pool = $1 AND status = 'submitted' GROUP BY tenant",
        )
        .bind(sched_pool)
        .fetch_all(pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(t, n)| (t, u64::try_from(n).unwrap_or(0)))
            .collect())
    }

    /// Submitted units of `pool` with their accounts and submissions (slot reconciliation
    /// per account).
    pub(crate) async fn submitted_by_account(
        pool: &Pool,
        sched_pool: &str,
    ) -> StoreResult<Vec<super::Submission>> {
        let rows: Vec<(String, Option<String>, i64)> = sqlx::query_as(
            "SELECT id, account, COALESCE(submitted_at, 0) FROM units \
             WHERE pool = $1 AND status = 'submitted'",
        )
        .bind(sched_pool)
        .fetch_all(pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(unit_id, account, submitted_at)| super::Submission {
                unit_id,
                account,
                submitted_at,
            })
            .collect())
    }
}
