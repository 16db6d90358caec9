//! [`CallLimiter`]: the memory cap of one call, over the whole store.
//!
//! wasmtime's `StoreLimits` caps each linear memory on its own, so a component declaring (or
//! growing) several memories, or a huge table, could take a multiple of `memory_mb`. This
//! limiter keeps one running total for the store: every linear memory's bytes plus every table
//! element at a pointer's worth of bytes (what wasmtime allocates per element), and refuses the
//! growth that would pass the cap. It also bounds how many instances, memories and tables a
//! call may create, so zero-sized memories cannot reserve address space without limit.
//!
//! A refusal is an error, not a quiet `-1` from `memory.grow`: the call traps with a
//! [`ResourceCapHit`] that says which limit was hit, and the fault is the guest's own (it counts
//! towards quarantine).

use wasmtime::ResourceLimiter;

/// Core instances one call may create (a handler component has a handful).
pub(crate) const INSTANCES_MAX: usize = 64;
/// Linear memories one call may create (a Rust handler has one or two).
pub(crate) const MEMORIES_MAX: usize = 16;
/// Tables one call may create (each shim module of a component has one).
pub(crate) const TABLES_MAX: usize = 64;
/// What one table element costs against the cap: wasmtime stores a pointer per element.
pub(crate) const TABLE_ELEMENT_BYTES: usize = std::mem::size_of::<usize>();

/// Raised when a call would pass its memory cap or one of its count limits.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ResourceCapHit(pub String);

/// The running totals of one call's store.
#[derive(Debug)]
pub(crate) struct CallLimiter {
    /// `[limits] memory_mb`, in bytes, for all memories and tables of the call together.
    cap: usize,
    /// Bytes granted so far.
    used: usize,
    /// The last grant, taken back when wasmtime reports that the growth failed after all.
    last_grant: usize,
}

impl CallLimiter {
    pub fn new(cap: usize) -> CallLimiter {
        CallLimiter {
            cap,
            used: 0,
            last_grant: 0,
        }
    }

    /// Bytes granted so far (memories and tables together).
    #[cfg(test)]
    pub fn used(&self) -> usize {
        self.used
    }

    fn grant(&mut self, what: &str, delta: usize) -> wasmtime::Result<bool> {
        let total = self.used.saturating_add(delta);
        if total > self.cap {
            return Err(wasmtime::Error::new(ResourceCapHit(format!(
                "memory cap of {} exceeded {what}: the call's memories and tables would take {}",
                mib(self.cap),
                mib(total)
            ))));
        }
        self.used = total;
        self.last_grant = delta;
        Ok(true)
    }

    fn take_back(&mut self) {
        self.used = self.used.saturating_sub(self.last_grant);
        self.last_grant = 0;
    }
}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grant("by a linear memory", desired.saturating_sub(current))
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        // The guest sees `memory.grow` fail (-1); the bytes were never taken.
        self.take_back();
        Ok(())
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let elements = desired.saturating_sub(current);
        self.grant(
            &format!("by a table of {desired} elements"),
            elements.saturating_mul(TABLE_ELEMENT_BYTES),
        )
    }

    fn table_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        self.take_back();
        Ok(())
    }

    fn instances(&self) -> usize {
        INSTANCES_MAX
    }

    fn tables(&self) -> usize {
        TABLES_MAX
    }

    fn memories(&self) -> usize {
        MEMORIES_MAX
    }
}

/// A byte count as MiB for messages (`64 MiB`, `64.1 MiB`).
fn mib(bytes: usize) -> String {
    let m = bytes as f64 / (1024.0 * 1024.0);
    if m.fract() == 0.0 {
        format!("{m:.0} MiB")
    } else {
        format!("{m:.1} MiB")
    }
}

/// Whether a failed instantiation or call ran into a limit of the store: the limiter's own
/// error, or wasmtime's count check ("resource limit exceeded: memory count too high at 17"),
/// which carries no type to downcast to. Returns the message to report.
pub(crate) fn cap_message(e: &wasmtime::Error) -> Option<String> {
    if let Some(hit) = e.downcast_ref::<ResourceCapHit>() {
        return Some(hit.0.clone());
    }
    let text = format!("{e:#}");
    text.contains("resource limit exceeded").then(|| {
        format!(
            "{text} (a call may create at most {INSTANCES_MAX} instances, {MEMORIES_MAX} \
             memories and {TABLES_MAX} tables)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memories_and_tables_share_one_total() {
        let mut l = CallLimiter::new(1024 * 1024);
        assert!(l.memory_growing(0, 512 * 1024, None).expect("half"));
        // A second memory counts against the same total.
        let err = l
            .memory_growing(0, 768 * 1024, None)
            .expect_err("over the total");
        assert!(
            err.to_string().contains("memory cap of 1 MiB exceeded"),
            "{err}"
        );
        assert_eq!(l.used(), 512 * 1024);
        // Tables too, at a pointer per element.
        let elements = 256 * 1024 / TABLE_ELEMENT_BYTES;
        assert!(l.table_growing(0, elements, None).expect("fits"));
        let err = l
            .table_growing(elements, elements * 4, None)
            .expect_err("over");
        assert!(err.to_string().contains("by a table"), "{err}");
        // A growth wasmtime could not carry out is taken back.
        assert!(
            l.memory_growing(512 * 1024, 576 * 1024, None)
                .expect("fits")
        );
        l.memory_grow_failed(wasmtime::Error::msg("os said no"))
            .expect("not a trap");
        assert_eq!(l.used(), 768 * 1024);
    }
}
