//! `GET /v1/pools`: every pool known from configuration and loaded handlers, with its limit,
//! the slots in use and its units by status, so an operator sees at a glance where work waits.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Tenant;
use super::error::{ApiError, log_store_error};

use slotd_units::services::Services;

/// Routes under `/v1/pools`.
pub fn router() -> OpenApiRouter<Services> {
    OpenApiRouter::new().routes(routes!(list))
}

/// One pool as shown.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PoolView {
    pub name: String,
    /// The effective maximum; `None` for a pool that only stored units still name (its handler
    /// is not loaded and no operator setting mentions it).
    pub max_slots: Option<u32>,
    /// Where `max_slots` comes from: `config` (the operator's `[pools]`, or the handler's
    /// proposal) or `discovered` (the provider published a lower limit, contract 1.3);
    /// `None` with `max_slots`.
    pub max_slots_source: Option<&'static str>,
    /// The limit the scheduler fills to now: `max_slots`, or lower while the provider has shown
    /// less room than configured (adaptive capacity after over-capacity answers).
    pub effective_max_slots: Option<u32>,
    /// What the provider's capacity refusals taught about the pool's own slot set (the
    /// implicit account; named accounts show theirs): the learned ceiling, a refusal's
    /// back-off in force, the next probe, the last decision and the refusals read as noise or
    /// as a ceiling. `None` while nothing was refused.
    pub capacity: Option<slotd_pools::pool_state::capacity::EstimateView>,
    /// Slots held now; `None` when the slot store could not be asked (it is reported, not
    /// fatal: the database still answers everything else).
    pub used: Option<u32>,
    /// Unit counts by status (every status present, zeros included).
    #[schema(value_type = BTreeMap<String, u64>)]
    pub units: BTreeMap<&'static str, u64>,
    pub task_types: Vec<String>,
    pub handlers: Vec<String>,
    /// In a cluster (Redis configured): which scheduler drives the pool and how long it has
    /// gone without one between holders; `None` embedded, or when Redis could not be asked.
    pub lease: Option<slotd_coord::lease::LeaseView>,
    /// The provider accounts the pool draws on (`[[handlers.NAME.accounts]]`); for a handler
    /// with one implicit account, empty, or while that account is drained, one entry named
    /// `default`. The pool's figures are their sums.
    pub accounts: Vec<AccountView>,
    /// Its quotas on creates (`[pools."NAME"] rate`, `daily`): each dimension's limit, use,
    /// room and when it resets. Empty for a pool with slots only.
    pub quotas: Vec<slotd_pools::pool_state::QuotaView>,
    /// While quotas hold every new submit back (a full window, or the provider's refusal
    /// closed every slot set of the pool): until when (Unix ms); pending units wait until then.
    pub closed_until: Option<i64>,
    /// The provider's refusal that closed the pool's own slot set (the implicit account), with
    /// its words; named accounts show theirs in `accounts`.
    pub closure: Option<slotd_pools::pool_state::Closure>,
    /// Its spend limit (`[pools."NAME"] spend`): the period's limit, reserved-or-spent cost,
    /// what is left and when the period ends. A spent pool is `closed_until` then too.
    pub spend: Option<slotd_pools::pool_state::SpendView>,
    /// The provider accounts whose limit the pool shares with other pools
    /// (`[provider_accounts.NAME]`): the account's slots in use over all its pools, this
    /// pool's share and what it holds of it, borrowed included.
    pub shared_accounts: Vec<ShareView>,
}

/// A pool's share of a provider account that spans pools.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ShareView {
    /// The provider account (`[provider_accounts.NAME]`).
    pub account: String,
    /// Which of the pool's handler accounts is on it (`None`: the handler's implicit one).
    pub handler_account: Option<String>,
    /// The account's limit over every pool on it.
    pub max_slots: u32,
    /// Slots held over every pool on it now.
    pub used: u32,
    /// Kept for this pool while it has work waiting.
    pub min: u32,
    /// The most this pool may hold.
    pub max: u32,
    /// Slots this pool holds on the account now.
    pub held: u32,
    /// Of those, above its `min`: borrowed from the other pools' idle share, given back as
    /// they free.
    pub borrowed: u32,
    /// The pool has work waiting for a slot on the account (the other pools keep its unmet
    /// `min` free).
    pub waiting: bool,
    /// What the account would let the pool take now.
    pub room: u32,
}

impl PoolView {
    /// A pool known only by name (stored units still name it): no limit, nothing counted yet.
    fn unconfigured(name: &str) -> PoolView {
        PoolView {
            name: name.to_string(),
            max_slots: None,
            max_slots_source: None,
            effective_max_slots: None,
            capacity: None,
            used: None,
            units: slotd_core::model::UnitStatus::ALL
                .iter()
                .map(|s| (s.as_str(), 0u64))
                .collect(),
            task_types: Vec::new(),
            handlers: Vec::new(),
            lease: None,
            accounts: Vec::new(),
            quotas: Vec::new(),
            closed_until: None,
            closure: None,
            spend: None,
            shared_accounts: Vec::new(),
        }
    }
}

/// One provider account's share of a pool.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AccountView {
    pub name: String,
    /// Its limit in this pool: the configured one, or the provider's when it published less.
    pub max_slots: u32,
    /// `config` or `discovered` (see the pool's).
    pub max_slots_source: &'static str,
    /// The limit filled to now (adaptive capacity, per account).
    pub effective_max_slots: u32,
    /// What its capacity refusals taught (see the pool's `capacity`).
    pub capacity: Option<slotd_pools::pool_state::capacity::EstimateView>,
    /// Slots its units hold now; `None` when the slot store could not be asked.
    pub used: Option<u32>,
    /// `active`, or `drained`: no new submits (its in-flight units finish).
    pub state: &'static str,
    /// Why it is drained and when it is probed next.
    pub drained: Option<slotd_pools::pool_state::Drain>,
    /// The provider's quota refusal that closed its slot set, and until when.
    pub closure: Option<slotd_pools::pool_state::Closure>,
    /// The account's own quotas in this pool (`[[handlers.NAME.accounts]]` `rate`, `daily`).
    pub quotas: Vec<slotd_pools::pool_state::QuotaView>,
    /// The account's spend limit, over every pool it serves (`[[handlers.NAME.accounts]]`
    /// `spend`).
    pub spend: Option<slotd_pools::pool_state::SpendView>,
}

/// List pools
///
/// Every pool, by name: its limit, the limit filled to now, slots in use, units by status.
/// Any authenticated tenant may look: pools are shared, not per tenant.
#[utoipa::path(
    get,
    path = "/v1/pools",
    tag = "pools",
    operation_id = "list_pools",
    responses((status = 200, description = "The pools", body = Vec<PoolView>)),
)]
async fn list(
    State(services): State<Services>,
    Tenant(_tenant): Tenant,
) -> Result<Json<Vec<PoolView>>, ApiError> {
    let counts = services
        .store
        .unit_count_by_pool()
        .await
        .map_err(log_store_error("counting units by pool"))?;
    slotd_units::pools_now::refresh_discovered(&services).await;
    let limits = slotd_units::pools_now::pool_limits_now(&services);

    let mut keys: BTreeMap<String, Vec<slotd_pools::pool_state::PoolAccount>> = BTreeMap::new();
    let mut quotas: BTreeMap<String, Vec<slotd_pools::pool_state::PoolQuota>> = BTreeMap::new();
    let mut spends: BTreeMap<String, slotd_pools::pool_state::PoolLimit> = BTreeMap::new();
    let mut pools: BTreeMap<String, PoolView> = limits
        .into_values()
        .map(|l| {
            let effective: u32 = l
                .accounts
                .iter()
                .map(|a| {
                    services
                        .capacity
                        .effective(&a.slot_key(&l.name), a.max_slots)
                })
                .sum();
            keys.insert(l.name.clone(), l.accounts.clone());
            quotas.insert(l.name.clone(), l.quotas.clone());
            spends.insert(l.name.clone(), l.clone());
            let view = PoolView {
                max_slots: Some(l.max_slots),
                max_slots_source: Some(l.max_slots_source),
                effective_max_slots: Some(effective.min(l.max_slots)),
                task_types: l.task_types,
                handlers: l.handlers,
                ..PoolView::unconfigured(&l.name)
            };
            (l.name, view)
        })
        .collect();
    for c in counts {
        let view = pools
            .entry(c.pool.clone())
            .or_insert_with(|| PoolView::unconfigured(&c.pool));
        *view.units.entry(c.status.as_str()).or_default() += c.count;
    }
    for view in pools.values_mut() {
        let accounts = keys.remove(&view.name).unwrap_or_else(|| {
            vec![slotd_pools::pool_state::PoolAccount {
                name: None,
                handler: None,
                max_slots: 0,
                max_slots_source: slotd_pools::pool_state::source::SOURCE_CONFIG,
                quotas: Vec::new(),
                spend: None,
                share: None,
            }]
        });
        account_views(&services, view, &accounts).await;
        quota_views(
            &services,
            view,
            quotas.remove(&view.name).unwrap_or_default(),
        )
        .await;
        if let Some(limit) = spends.remove(&view.name) {
            let now = services.clock.now_ms();
            view.spend = slotd_pools::pool_state::spend::pool_view(
                &services.metrics,
                &services.store,
                &limit,
                now,
            )
            .await;
            if let Some(until) = view
                .spend
                .as_ref()
                .filter(|v| v.exhausted())
                .map(|v| v.resets_at)
            {
                view.closed_until = Some(view.closed_until.map_or(until, |c| c.max(until)));
            }
        }
        if let Some(keys) = &services.keyspace {
            // The scheduler driving the pool may be another process: its figure counts.
            if let (Some(max), [account], Ok(Some(shared))) = (
                view.max_slots,
                accounts.as_slice(),
                slotd_pools::pool_state::shared_capacity(keys, &view.name).await,
            ) && account.name.is_none()
            {
                view.effective_max_slots = Some(shared.effective.min(max));
                view.capacity.get_or_insert(shared.estimate);
            }
            match slotd_coord::lease::lease_view(keys, &view.name).await {
                Ok(lease) => view.lease = Some(lease),
                Err(e) => {
                    tracing::warn!(pool = %view.name, error = %e, "reading the pool lease failed")
                }
            }
        }
    }
    Ok(Json(pools.into_values().collect()))
}

/// Each account's slots in use (summed into the pool's `used`, `None` if any could not be
/// read) and, for named accounts and a drained implicit one, its entry.
async fn account_views(
    services: &Services,
    view: &mut PoolView,
    accounts: &[slotd_pools::pool_state::PoolAccount],
) {
    view.used = Some(0);
    // Until when every slot set of the pool is closed (`None` as soon as one is open).
    let mut all_closed: Option<i64> = Some(i64::MAX);
    for a in accounts {
        let key = a.slot_key(&view.name);
        let used = match services.slots.used(&key).await {
            Ok(n) => Some(n),
            Err(e) => {
                tracing::warn!(pool = %view.name, error = %e, "reading slots in use failed");
                None
            }
        };
        view.used = view.used.zip(used).map(|(a, b)| a + b);
        let drained = a
            .handler
            .as_ref()
            .and_then(|h| services.accounts.drain_of(h, a.health_name()));
        let closure = closure_of(services, &key).await;
        if a.name.is_none() {
            view.closure = closure.clone();
        }
        let closed = closure.as_ref().map(|c| c.until);
        if a.name.is_none() {
            view.capacity = services
                .capacity
                .view(&key, a.max_slots, services.clock.now_ms());
        }
        // The implicit account is listed only while drained: then it says why nothing is
        // submitted.
        if a.name.is_some() || drained.is_some() {
            view.accounts.push(AccountView {
                name: a.health_name().to_string(),
                max_slots: a.max_slots,
                max_slots_source: a.max_slots_source,
                effective_max_slots: services.capacity.effective(&key, a.max_slots),
                capacity: services
                    .capacity
                    .view(&key, a.max_slots, services.clock.now_ms()),
                used,
                state: if drained.is_some() {
                    "drained"
                } else {
                    "active"
                },
                drained,
                closure,
                quotas: account_quotas(services, &key, &a.quotas).await,
                spend: slotd_pools::pool_state::spend::account_view(
                    &services.metrics,
                    &services.store,
                    a,
                    services.clock.now_ms(),
                )
                .await,
            });
        }
        all_closed = all_closed.zip(closed).map(|(a, b)| a.min(b));
    }
    view.closed_until = all_closed.filter(|_| !accounts.is_empty());
    for a in accounts {
        if let Some(share) = &a.share {
            view.shared_accounts
                .push(share_view(services, share, a.name.clone()).await);
        }
    }
}

/// One slot set's share of a provider account as the slot store has it now (counts read as
/// zero where the store could not be asked: that is logged).
async fn share_view(
    services: &Services,
    share: &slotd_pools::pool_state::AccountShare,
    handler_account: Option<String>,
) -> ShareView {
    let a = &share.account;
    let keys: Vec<String> = a.members.iter().map(|m| m.key.clone()).collect();
    let used: Vec<u32> = match services.slots.used_many(&keys).await {
        Ok(n) => n.into_iter().map(Option::unwrap_or_default).collect(),
        Err(e) => {
            tracing::warn!(account = %a.name, error = %e, "reading the shared account's slots failed");
            vec![0; keys.len()]
        }
    };
    let flags = services.slots.waiting(&a.name).await.unwrap_or_default();
    let waiting = a.waiting_now(&flags, services.clock.now_ms());
    let held = used.get(share.this).copied().unwrap_or(0);
    let (min, max) = share.mine().map_or((0, 0), |m| (m.min, m.max));
    ShareView {
        account: a.name.clone(),
        handler_account,
        max_slots: a.limit,
        used: used.iter().sum(),
        min,
        max,
        held,
        borrowed: held.saturating_sub(min),
        waiting: waiting.get(share.this).copied().unwrap_or(false),
        room: a.room(share.this, &used, &waiting),
    }
}

/// An account's own quotas as counted in its create log now (empty when it has none, or when
/// the log cannot be read: that is logged).
async fn account_quotas(
    services: &Services,
    key: &str,
    quotas: &[slotd_pools::pool_state::PoolQuota],
) -> Vec<slotd_pools::pool_state::QuotaView> {
    if quotas.is_empty() {
        return Vec::new();
    }
    let now = services.clock.now_ms();
    slotd_pools::pool_state::quotas::views(&services.metrics, &services.slots, key, quotas, now)
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(slots = key, error = %e, "reading the create log failed");
            Vec::new()
        })
}

/// A slot set's closure: this process's, or in a cluster the one its scheduler shared.
async fn closure_of(services: &Services, key: &str) -> Option<slotd_pools::pool_state::Closure> {
    if let Some(c) = services.closures.closure_of(key) {
        return Some(c);
    }
    let keys = services.keyspace.as_ref()?;
    match slotd_pools::pool_state::quotas::shared(keys, key).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(slots = key, error = %e, "reading a shared closure failed");
            None
        }
    }
}

/// The pool's quotas as counted in its create log now; a full window closes the pool until
/// it frees a create (the later of that and a closure by the provider).
async fn quota_views(
    services: &Services,
    view: &mut PoolView,
    quotas: Vec<slotd_pools::pool_state::PoolQuota>,
) {
    if quotas.is_empty() {
        return;
    }
    let now = services.clock.now_ms();
    match slotd_pools::pool_state::quotas::views(
        &services.metrics,
        &services.slots,
        &view.name,
        &quotas,
        now,
    )
    .await
    {
        Ok(views) => {
            if let Some((_, until)) = slotd_pools::pool_state::quotas::full_until(&views) {
                view.closed_until = Some(view.closed_until.map_or(until, |c| c.max(until)));
            }
            view.quotas = views;
        }
        Err(e) => tracing::warn!(pool = %view.name, error = %e, "reading the create log failed"),
    }
}
