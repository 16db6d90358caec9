//! The grant a submit marker is written for: its unit, tenant and account, the budget
//! reservation and spend limits the marker checks, and a routed unit's binding. Read by the
//! marker's account grouping (`accounts.rs`), its budget checks (`budgets.rs`) and the
//! binding of routed units (`routes.rs`).

/// One slot grant to write as a submit marker.
#[derive(Clone, Debug)]
pub struct Grant {
    pub unit_id: String,
    pub tenant: String,
    /// The account it is submitted on (`None`: the implicit account).
    pub account: Option<String>,
    /// What to reserve against the tenant's budget (the handler's estimate; unknown: 0).
    pub estimate: f64,
    /// `{stage}-{submit_attempt}`: the submission the reservation belongs to.
    pub submission: String,
    /// When a grant refused for budget is due again (its tenant's room may grow when running
    /// submissions settle below their estimates; a raised limit makes it due at once).
    pub budget_retry_at: i64,
    /// The pool whose create log records this grant once marked (a pool with a `rate` or
    /// `daily` quota); `None`: not recorded.
    pub quota_pool: Option<String>,
    /// The spend limits of its pool and account, if either has one: the marker checks the
    /// estimate against them and writes a ledger row named by both.
    pub spend: Option<std::sync::Arc<super::SpendTerms>>,
    /// A routed unit: bind it to the target whose pool granted the slot, in the marker's
    /// transaction (see `routes.rs`).
    pub bind: Option<Bind>,
}

/// What binding a granted routed unit writes.
#[derive(Clone, Debug, PartialEq)]
pub struct Bind {
    /// The route's pool the unit waits in (`route:NAME`): the guard.
    pub route_pool: String,
    pub pool: String,
    pub task_type: String,
    pub stage: String,
    pub spec: String,
    pub state: String,
    pub estimate: Option<f64>,
    /// The unit's routing with the chosen option bound (JSON `UnitRouting`).
    pub routing: String,
    /// The event row's text ("route clip: bound to kling-video/kling-v1-6 in pool …").
    pub detail: String,
}
