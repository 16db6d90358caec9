//! Configuration: one typed [`Config`] with named defaults, read from `slotd.toml` (optional)
//! and `SLOTD_*` environment overrides, validated at start-up with messages that name the key
//! (docs/interfaces.md).
//!
//! The file deserializes straight into these types: a key it leaves out keeps its `*_DEFAULT`,
//! an unknown key is refused so that a typo does not silently do nothing. Then the environment
//! overrides beat the file, and [`Config::validate`] refuses what parses but makes no sense.
//!
//! - `settings.rs`: [`Config`] itself and the top-level keys; `pools.rs`: `[pools.NAME]`.
//! - `file.rs`: reading the file (`{ env = "VAR" }` references) into a [`Config`], then the
//!   overrides and the checks ([`Config::load`], [`Config::from_parts`]); `values.rs`: values
//!   written as text (durations, addresses).
//! - `env.rs`: the one table of `SLOTD_*` overrides.
//! - `scheduler.rs`, `limits.rs`, `api.rs`, `handler.rs`: the sections, each with its checks.
//! - `validate.rs`: the checks that span sections.

mod api;
mod env;
mod file;
mod handler;
mod limits;
mod pools;
mod provider_accounts;
mod quotas;
mod routes;
mod scheduler;
mod settings;
mod tenants;
#[cfg(test)]
mod tests;
mod validate;
mod values;
mod webhooks;

pub use self::api::{
    ApiConfig, HEADER_READ_TIMEOUT_DEFAULT, MAX_CONCURRENT_REQUESTS_DEFAULT,
    RATE_LIMIT_BURST_DEFAULT, RATE_LIMIT_PER_SECOND_DEFAULT, RateLimit,
};
pub use self::handler::{Account, ApiKey, HandlerConfig, Secret};
pub use self::limits::{
    HANDLER_CPU_BUDGET_DEFAULT, HANDLER_DEADLINE_DEFAULT, HANDLER_MEMORY_DEFAULT,
    HTTP_BATCH_CONCURRENCY_DEFAULT, HTTP_MAX_RESPONSE_DEFAULT, HTTP_TIMEOUT_DEFAULT,
    QUARANTINE_AFTER_DEFAULT, RuntimeLimits,
};
pub use self::pools::PoolConfig;
pub use self::provider_accounts::{ProviderAccountConfig, ShareConfig, check_provider_accounts};
pub use self::quotas::{QUOTA_WINDOW_MAX, Quota, Window, calendar_day, parse_rate};
pub use self::routes::{
    ROUTE_NAME_MAX, ROUTE_TARGETS_MAX, RouteConfig, RoutePolicy, RouteTarget, check_routes,
};
pub use self::scheduler::{
    ARTIFACT_MAX_BYTES_DEFAULT, ARTIFACT_TIMEOUT_DEFAULT, FINALIZE_ATTEMPTS_DEFAULT,
    FINALIZE_CONCURRENCY_DEFAULT, FINALIZE_LEASE_DEFAULT, LEASE_TTL_DEFAULT, MAX_BATCH_DEFAULT,
    MIN_REST_DEFAULT, POLL_FACTOR_DEFAULT, POLL_INITIAL_DEFAULT, POLL_MAX_DEFAULT,
    RECONCILE_INTERVAL_DEFAULT, RETRY_BASE_DEFAULT, RETRY_BUDGET_DEFAULT, RETRY_MAX_DEFAULT,
    STAGE_DEADLINE_DEFAULT, SchedulerConfig, TICK_INTERVAL_DEFAULT,
};
pub use self::settings::{
    Config, DATABASE_URL_DEFAULT, LISTEN_DEFAULT, MAX_BODY_BYTES_DEFAULT,
    MAX_UNITS_PER_TASK_DEFAULT, OBJECT_STORE_DEFAULT, PLUGINS_DIR_DEFAULT, REDIS_PREFIX_DEFAULT,
    Role,
};
pub use self::tenants::{BudgetConfig, TenantConfig};
pub use self::validate::{TENANT_NAME_MAX, check_tenant_name};
pub use self::values::parse_duration;
pub use self::webhooks::WebhooksConfig;
