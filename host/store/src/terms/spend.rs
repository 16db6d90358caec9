//! Provider spend (docs/accounts-deadlines-budgets.md "Quotas"): a pool's `spend` and a
//! provider account's, at most `limit` of the provider's cost unit per period. Checked in the
//! submit marker's transaction, as a tenant's budget is: a grant is marked only when its
//! estimate fits the reserved-or-spent cost of its pool's and its account's period, and its
//! ledger row (named by pool and `handler/account`) is written in the same transaction, so
//! no two schedulers can both spend the last of it (PostgreSQL: an advisory lock per pool and
//! account for the transaction; SQLite: one writer). Periods are aligned to the Unix epoch.

use std::collections::HashMap;

use crate::StoreResult;
use crate::shared::on_both_drivers;

/// What a grant's creates may spend: its pool's limit and its account's, each for the period
/// containing the marker's `now`.
#[derive(Clone, Debug, PartialEq)]
pub struct SpendTerms {
    /// The pool the grant is in (the ledger row's `pool`).
    pub pool: String,
    pub pool_limit: Option<SpendLimit>,
    /// `handler/account` of a named account with a spend limit (the ledger row's
    /// `spend_account`); `None` for the implicit account.
    pub account: Option<String>,
    pub account_limit: Option<SpendLimit>,
}

/// The start of the period containing `now` (a budget's and a spend limit's alike).
pub fn period_start(now: i64, period_ms: i64) -> i64 {
    if period_ms <= 0 {
        return now;
    }
    now - now.rem_euclid(period_ms)
}

/// A spend limit and its period.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpendLimit {
    pub limit: f64,
    pub period_ms: i64,
}

impl SpendLimit {
    /// The start of the period containing `now` and its end.
    pub fn period(&self, now: i64) -> (i64, i64) {
        let start = period_start(now, self.period_ms);
        (start, start.saturating_add(self.period_ms.max(1)))
    }
}

/// Which ledger rows a spend limit sums.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SpendScope {
    Pool(String),
    /// `handler/account`.
    Account(String),
}

impl SpendScope {
    pub(crate) fn lock_name(&self) -> String {
        match self {
            SpendScope::Pool(p) => format!("slotd-spend-pool:{p}"),
            SpendScope::Account(a) => format!("slotd-spend-account:{a}"),
        }
    }

    fn describe(&self) -> String {
        match self {
            SpendScope::Pool(p) => format!("pool {p}"),
            SpendScope::Account(a) => format!("account {a}"),
        }
    }
}

/// The scopes a grant's spend terms name, each with its limit.
pub(crate) fn scopes_of(t: &SpendTerms) -> Vec<(SpendScope, SpendLimit)> {
    let mut out = Vec::with_capacity(2);
    if let Some(l) = t.pool_limit {
        out.push((SpendScope::Pool(t.pool.clone()), l));
    }
    if let (Some(a), Some(l)) = (&t.account, t.account_limit) {
        out.push((SpendScope::Account(a.clone()), l));
    }
    out
}

/// One scope's room in the marker's check: its limit, what was used before and by the
/// grants that fit so far, and whether a grant of it was already refused (later ones then
/// wait too, keeping the fill order).
#[derive(Clone, Debug)]
pub(crate) struct Room {
    limit: SpendLimit,
    used: f64,
    blocked: bool,
    now: i64,
}

impl Room {
    /// A scope's room for the period containing `now`, `used` of `limit` spent before it.
    pub(crate) fn new(limit: SpendLimit, used: f64, now: i64) -> Room {
        Room {
            limit,
            used,
            blocked: false,
            now,
        }
    }
}

/// A grant refused for spend: why, and when it is due again.
#[derive(Clone, Debug)]
pub(crate) struct Refusal {
    pub detail: String,
    pub due: i64,
}

/// Check one grant against the rooms of its scopes: `Ok` reserves its estimate in each;
/// `Err` blocks the first scope it does not fit and says why.
pub(crate) fn take(
    rooms: &mut HashMap<SpendScope, Room>,
    terms: &SpendTerms,
    estimate: f64,
    retry_at: i64,
) -> Result<(), Refusal> {
    let scopes = scopes_of(terms);
    for (scope, _) in &scopes {
        let Some(r) = rooms.get_mut(scope) else {
            continue;
        };
        // Nothing is taken from a period already spent, not even by a unit without an
        // estimate (it reserves 0). A small tolerance: estimates are decimal fractions summed
        // in binary.
        let spent = r.limit.limit - r.used <= 1e-9;
        if r.blocked || spent || r.used + estimate > r.limit.limit + 1e-9 {
            r.blocked = true;
            let (_, end) = r.limit.period(r.now);
            let asked = if estimate > 0.0 {
                format!(", the estimate is {estimate}")
            } else {
                String::new()
            };
            return Err(Refusal {
                detail: format!(
                    "waiting: spend ({} has {:.4} of {} left this period{asked})",
                    scope.describe(),
                    (r.limit.limit - r.used).max(0.0),
                    r.limit.limit,
                ),
                // Settled submissions may leave room sooner than the period's end.
                due: end.min(retry_at),
            });
        }
    }
    for (scope, _) in &scopes {
        if let Some(r) = rooms.get_mut(scope) {
            r.used += estimate;
        }
    }
    Ok(())
}

on_both_drivers! {
    /// The reserved-or-spent cost of the ledger rows of `scope` made at or after `since`.
    pub(crate) async fn used_in(
        conn: &mut Conn,
        scope: &crate::terms::SpendScope,
        since: i64,
    ) -> StoreResult<f64> {
        let (column, name) = match scope {
            crate::terms::SpendScope::Pool(p) => ("pool", p),
            crate::terms::SpendScope::Account(a) => ("spend_account", a),
        };
        let used: Option<f64> = sqlx::query_scalar(&format!(
            "SELECT SUM(COALESCE(spent, reserved)) FROM budget_ledger \
             WHERE {column} = $1 AND created_at >= $2"
        ))
        .bind(name)
        .bind(since)
        .fetch_one(&mut *conn)
        .await?;
        Ok(used.unwrap_or(0.0))
    }

    /// [`used_in`] on a pooled connection (the pools view).
    pub(crate) async fn used(
        pool: &Pool,
        scope: &crate::terms::SpendScope,
        since: i64,
    ) -> StoreResult<f64> {
        let mut conn = pool.acquire().await?;
        used_in(&mut conn, scope, since).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn room(limit: f64, used: f64) -> Room {
        Room {
            limit: SpendLimit {
                limit,
                period_ms: 1_000,
            },
            used,
            blocked: false,
            now: 2_500,
        }
    }

    #[test]
    fn a_grant_fits_every_scope_or_blocks_the_first_it_does_not_fit() {
        let terms = SpendTerms {
            pool: "p".into(),
            pool_limit: Some(SpendLimit {
                limit: 10.0,
                period_ms: 1_000,
            }),
            account: Some("h/a".into()),
            account_limit: Some(SpendLimit {
                limit: 3.0,
                period_ms: 1_000,
            }),
        };
        let mut rooms = HashMap::from([
            (SpendScope::Pool("p".into()), room(10.0, 0.0)),
            (SpendScope::Account("h/a".into()), room(3.0, 1.0)),
        ]);
        assert!(take(&mut rooms, &terms, 2.0, 99_999).is_ok());
        let refused = take(&mut rooms, &terms, 0.5, 99_999).expect_err("the account is spent");
        assert_eq!(refused.due, 3_000, "due at the period's end, not later");
        assert!(refused.detail.contains("account h/a"), "{}", refused.detail);
        // The refused grant reserved nothing in the pool, and the account stays blocked.
        assert_eq!(rooms[&SpendScope::Pool("p".into())].used, 2.0);
        assert!(
            take(&mut rooms, &terms, 0.0, 99_999).is_err(),
            "fill order kept"
        );
    }

    #[test]
    fn nothing_is_taken_from_a_spent_period_not_even_by_a_unit_without_an_estimate() {
        let terms = SpendTerms {
            pool: "p".into(),
            pool_limit: Some(SpendLimit {
                limit: 3.0,
                period_ms: 1_000,
            }),
            account: None,
            account_limit: None,
        };
        let mut rooms = HashMap::from([(SpendScope::Pool("p".into()), room(3.0, 2.5))]);
        assert!(
            take(&mut rooms, &terms, 0.0, 99_999).is_ok(),
            "room left: a unit without an estimate goes, reserving nothing"
        );
        assert!(take(&mut rooms, &terms, 0.5, 99_999).is_ok());
        let refused = take(&mut rooms, &terms, 0.0, 99_999).expect_err("the pool is spent");
        assert!(
            refused
                .detail
                .ends_with("pool p has 0.0000 of 3 left this period)"),
            "{}",
            refused.detail
        );
    }
}
