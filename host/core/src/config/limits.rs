//! `[limits]`: the sandbox every handler call runs in (docs/handlers.md).

use std::time::Duration;

use anyhow::bail;
use serde::Deserialize;

use super::values;

pub const HANDLER_MEMORY_DEFAULT: usize = 64 * 1024 * 1024;
pub const HANDLER_DEADLINE_DEFAULT: Duration = Duration::from_secs(30);
pub const HTTP_TIMEOUT_DEFAULT: Duration = Duration::from_secs(15);
pub const HTTP_MAX_RESPONSE_DEFAULT: u64 = 8 * 1024 * 1024;
pub const HTTP_BATCH_CONCURRENCY_DEFAULT: usize = 16;
/// Guest CPU a call may burn (epoch ticks while guest code runs), below the wall deadline so a
/// spinning guest is cut off before it holds a worker for the whole deadline.
pub const HANDLER_CPU_BUDGET_DEFAULT: Duration = Duration::from_secs(10);
/// Consecutive crashing calls (trap, CPU budget, memory cap, a deadline spent in guest code)
/// after which a handler version is quarantined; the provider's slowness does not count.
pub const QUARANTINE_AFTER_DEFAULT: u32 = 5;
/// Largest handler component file loaded or published (the built handlers are a few MiB).
pub const HANDLER_FILE_DEFAULT: usize = 64 * 1024 * 1024;

/// Sandbox limits applied to every handler call (docs/handlers.md). The file's `[limits]` keys
/// are these fields' names, but for `memory_mb`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeLimits {
    /// Linear memory a call's store may grow to; written in MiB (`memory_mb`).
    #[serde(rename = "memory_mb", deserialize_with = "values::mebibytes")]
    pub memory_bytes: usize,
    /// Wall-clock deadline for one call, awaited HTTP included.
    #[serde(deserialize_with = "values::duration")]
    pub call_deadline: Duration,
    /// Default and maximum per-request HTTP timeout.
    #[serde(deserialize_with = "values::duration")]
    pub http_timeout: Duration,
    /// Largest HTTP response body a handler may receive.
    pub http_max_response_bytes: u64,
    /// Requests of one `send-batch` in flight at once.
    pub http_batch_concurrency: usize,
    /// Guest CPU time one call may use (awaited host I/O not counted).
    #[serde(deserialize_with = "values::duration")]
    pub cpu_budget: Duration,
    /// Consecutive faulting calls after which a version is quarantined and the previous good
    /// version restored (`[limits] quarantine_after`).
    pub quarantine_after: u32,
    /// Largest handler component file loaded from the plugins directory or published; written
    /// in MiB (`handler_file_mb`).
    #[serde(rename = "handler_file_mb", deserialize_with = "values::mebibytes")]
    pub handler_file_bytes: usize,
}

impl Default for RuntimeLimits {
    fn default() -> Self {
        RuntimeLimits {
            memory_bytes: HANDLER_MEMORY_DEFAULT,
            call_deadline: HANDLER_DEADLINE_DEFAULT,
            http_timeout: HTTP_TIMEOUT_DEFAULT,
            http_max_response_bytes: HTTP_MAX_RESPONSE_DEFAULT,
            http_batch_concurrency: HTTP_BATCH_CONCURRENCY_DEFAULT,
            cpu_budget: HANDLER_CPU_BUDGET_DEFAULT,
            quarantine_after: QUARANTINE_AFTER_DEFAULT,
            handler_file_bytes: HANDLER_FILE_DEFAULT,
        }
    }
}

impl RuntimeLimits {
    /// Check values that parse but make no sense, naming the key.
    pub(super) fn validate(&self) -> anyhow::Result<()> {
        if self.memory_bytes < 1024 * 1024 {
            bail!("limits.memory_mb must be at least 1");
        }
        if self.http_batch_concurrency == 0 {
            bail!("limits.http_batch_concurrency must be at least 1");
        }
        if self.handler_file_bytes < 1024 * 1024 {
            bail!("limits.handler_file_mb must be at least 1");
        }
        if self.quarantine_after == 0 {
            bail!("limits.quarantine_after must be at least 1");
        }
        if self.cpu_budget < Duration::from_millis(10) {
            bail!("limits.cpu_budget must be at least 10ms");
        }
        Ok(())
    }
}
