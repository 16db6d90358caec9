//! Where a limit in force comes from, as `GET /v1/pools` names it: the configuration, or what
//! the provider published (`discovered.rs`). Named by the limits, the quotas and the
//! discovered limits alike.

/// Set by the operator (or a handler's proposal).
pub const SOURCE_CONFIG: &str = "config";
/// Published by the provider and lower than the configured limit.
pub const SOURCE_DISCOVERED: &str = "discovered";
