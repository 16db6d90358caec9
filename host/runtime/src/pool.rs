//! The pooling instance allocator handler calls run on (docs/handlers.md): its shape, derived
//! from `[limits]`, and the permits that keep it from ever running out under a call.
//!
//! wasmtime's default allocator maps (and unmaps) every memory, table and fiber stack of every
//! instance, which dominated a handler call; the pool reserves slots once, per engine, and
//! resets a slot when the call's store drops: memories go back to the component's initial image
//! (dirty pages copied back or zeroed, the rest released to the OS), tables to their initial
//! contents, fiber stacks to zeros. Nothing of one call is visible to the next.
//!
//! The pool's size is fixed when the engine is built, so two things run on the on-demand engine
//! instead, each counted (`slotd_handler_fallbacks_total`) and logged:
//!
//! - a component that does not fit a pool slot (more core instances, memories or tables than a
//!   slot has, a memory starting above `memory_mb`, a table above [`TABLE_ELEMENTS`]): decided at
//!   load, when its compiled code does or does not deserialize into the pooling engine;
//! - a call of a pooled handler that finds every [`POOLED_CALLS`] permit taken. A call holds a
//!   permit from before its store exists until after it is dropped, and the pool holds
//!   [`POOLED_CALLS`] times what one fitting component can take, so a call with a permit always
//!   finds its slots free.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::{Enabled, PoolingAllocationConfig};

use slotd_core::config::RuntimeLimits;

/// Calls that may run on the pool at once; more run on demand. Sized above what one instance
/// usually runs at once (a tick per pool and account, `finalize_concurrency` finalizations,
/// callbacks and plans of API requests), bounded because every slot reserves address space.
pub(crate) const POOLED_CALLS: u32 = 64;
/// Core instances one pooled call may create. The plugins' components have three (the
/// handler, and wit-component's shim and fixup modules); a count only, it reserves nothing.
pub(crate) const CORE_INSTANCES_PER_CALL: u32 = 16;
/// Linear memories one pooled call may create (each module may define one). The plugins'
/// components define one; the second is room for an adapter's. Each reserves address space
/// (`Config::memory_reservation` plus its guard, 4 GiB on 64-bit hosts), never memory.
pub(crate) const MEMORIES_PER_CALL: u32 = 2;
/// Tables one pooled call may create (each module may define one). The plugins' components
/// define two (the handler's function table and the shim's).
pub(crate) const TABLES_PER_CALL: u32 = 4;
/// Elements of a pooled table (wasmtime's default): the plugins' tables have at most 500.
pub(crate) const TABLE_ELEMENTS: usize = 20_000;
/// Bytes of a linear memory reset in place when its slot is returned, rather than released to
/// the OS and faulted in again by the next call: a Rust handler's stack, data and the heap a
/// call touches. With `PAGEMAP_SCAN` only the dirty pages among them are copied back, without it
/// all of them are (the benchmark's empty `tick` of the fixture: 12 µs with the scan, 21 µs
/// resetting all 2 MiB, 23 µs releasing everything to the OS).
const MEMORY_KEEP_RESIDENT: usize = 2 * 1024 * 1024;
/// Bytes of a table reset in place when its slot is returned: a whole pooled table (releasing
/// tables to the OS made a call 9 µs slower).
const TABLE_KEEP_RESIDENT: usize = TABLE_ELEMENTS * std::mem::size_of::<usize>();
/// Bytes at the top of a fiber stack zeroed in place when it is returned; the rest is released
/// to the OS. Zeroing costs about 1.5 µs a call.
const STACK_KEEP_RESIDENT: usize = 64 * 1024;
/// Returned slots kept warm (their image mapped, their kept bytes resident) beyond those in use:
/// enough for every loaded handler's recent calls, bounding what idle slots keep resident to
/// about `WARM_SLOTS * MEMORY_KEEP_RESIDENT`.
const WARM_SLOTS: u32 = 16;
/// A wasm page: linear memories grow by these.
const WASM_PAGE: usize = 64 * 1024;

/// The shape of the pool: how many calls, and what one call may take from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PoolSizing {
    /// Calls on the pool at once ([`POOLED_CALLS`]).
    pub calls: u32,
    pub core_instances_per_call: u32,
    pub memories_per_call: u32,
    pub tables_per_call: u32,
    /// Largest size of one pooled linear memory: `memory_mb` (the call's cap over all its
    /// memories, so no one memory can pass it), in whole pages.
    pub memory_bytes: usize,
    /// Elements of one pooled table.
    pub table_elements: usize,
}

impl PoolSizing {
    /// The pool for calls under `limits`, whose memories the engine reserves `reservation`
    /// bytes of address space for (a pooled memory cannot be larger).
    pub fn for_limits(limits: &RuntimeLimits, reservation: u64) -> PoolSizing {
        let reservation = usize::try_from(reservation).unwrap_or(usize::MAX);
        // A memory of more pages than the reservation holds could never be pooled anyway.
        let memory_bytes = limits
            .memory_bytes
            .div_ceil(WASM_PAGE)
            .saturating_mul(WASM_PAGE)
            .min(reservation / WASM_PAGE * WASM_PAGE);
        PoolSizing {
            calls: POOLED_CALLS,
            core_instances_per_call: CORE_INSTANCES_PER_CALL,
            memories_per_call: MEMORIES_PER_CALL,
            tables_per_call: TABLES_PER_CALL,
            memory_bytes,
            table_elements: TABLE_ELEMENTS,
        }
    }

    /// wasmtime's configuration of this pool: totals are `calls` times one call's share.
    /// (wasmtime's `memory-protection-keys` feature is not built: no striping of slots by
    /// protection key, every memory slot keeps its own guard region.)
    pub fn config(&self) -> PoolingAllocationConfig {
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(self.calls)
            .total_core_instances(self.calls.saturating_mul(self.core_instances_per_call))
            .total_memories(self.calls.saturating_mul(self.memories_per_call))
            .total_tables(self.calls.saturating_mul(self.tables_per_call))
            // One fiber per call: instantiation and the call share the store's stack.
            .total_stacks(self.calls)
            .max_core_instances_per_component(self.core_instances_per_call)
            .max_memories_per_component(self.memories_per_call)
            .max_tables_per_component(self.tables_per_call)
            .max_memories_per_module(1)
            .max_tables_per_module(1)
            .max_memory_size(self.memory_bytes)
            .table_elements(self.table_elements)
            .linear_memory_keep_resident(MEMORY_KEEP_RESIDENT.min(self.memory_bytes))
            .table_keep_resident(TABLE_KEEP_RESIDENT)
            .async_stack_keep_resident(STACK_KEEP_RESIDENT)
            // Reset only the pages a call dirtied, found with Linux's `PAGEMAP_SCAN` (6.7+;
            // off by default in wasmtime). Without it the kept bytes are reset whole.
            .pagemap_scan(Enabled::Auto)
            .max_unused_warm_slots(WARM_SLOTS);
        pool
    }
}

/// The pool's call permits: [`PoolSizing::calls`] of them.
pub(crate) struct Pool {
    pub plan: PoolSizing,
    permits: Arc<Semaphore>,
}

impl Pool {
    pub fn new(plan: PoolSizing) -> Pool {
        let permits = Arc::new(Semaphore::new(plan.calls as usize));
        Pool { plan, permits }
    }

    /// A permit to run one call on the pool, if one is free now.
    pub fn try_enter(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().ok()
    }

    /// A permit, waiting for one to be free (when the on-demand engine cannot be used).
    pub async fn enter(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().acquire_owned().await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memories_are_capped_at_memory_mb_in_whole_pages_within_the_reservation() {
        let limits = |mb: usize| RuntimeLimits {
            memory_bytes: mb * 1024 * 1024 + 1,
            ..RuntimeLimits::default()
        };
        let four_gib = 4u64 << 30;
        let plan = PoolSizing::for_limits(&limits(64), four_gib);
        assert_eq!(plan.memory_bytes, 64 * 1024 * 1024 + WASM_PAGE);
        assert_eq!(plan.calls, POOLED_CALLS);
        // Beyond the reservation no memory can be pooled: the reservation bounds it.
        let plan = PoolSizing::for_limits(&limits(8192), four_gib);
        assert_eq!(plan.memory_bytes, 4 << 30);
        let plan = PoolSizing::for_limits(&limits(8192), four_gib - 1);
        assert_eq!(plan.memory_bytes, (4 << 30) - WASM_PAGE);
    }

    #[test]
    fn permits_run_out_and_come_back() {
        let pool = Pool::new(PoolSizing {
            calls: 2,
            ..PoolSizing::for_limits(&RuntimeLimits::default(), 4 << 30)
        });
        let a = pool.try_enter().expect("first");
        let _b = pool.try_enter().expect("second");
        assert!(pool.try_enter().is_none(), "two calls fill a pool of two");
        drop(a);
        assert!(
            pool.try_enter().is_some(),
            "a finished call frees its permit"
        );
    }
}
