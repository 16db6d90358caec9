//! Quarantine: a handler version whose calls crash K times in a row is taken out of service and
//! the previous good version of the same handler restored.
//!
//! Only the guest's own faults count ([`HandlerFault::is_crash`]): a trap (malformed output
//! included), the CPU budget, the memory cap, a deadline spent in guest code. A deadline hit
//! while the guest awaited host HTTP is the provider's slowness: it neither counts nor resets
//! the count. `on_callback` is not counted at all: outsiders choose when it runs and with what
//! body, so its faults say nothing about the guest's steady state (they are still logged and
//! measured, and the callback is answered with an error). `plan` counts only until the version
//! has answered one: after that its input (a tenant's payload) is what makes it crash.
//!
//! Counting happens on the call path ([`Health::record`], two atomics per call, no lock); the
//! decision is sent once per version as a [`Tripped`] to whoever supervises the registry (the
//! plugins watcher, see `watcher.rs`), which swaps the registry and records the new state.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use super::HandlerFault;

/// A version crossed its quarantine threshold.
#[derive(Clone, Debug)]
pub struct Tripped {
    /// The handler's name.
    pub name: String,
    /// The sha256 of the version to quarantine (the registry may have moved on already).
    pub sha256: String,
    /// The last fault, for the log line and the recorded reason.
    pub fault: HandlerFault,
    /// Consecutive crashing calls counted.
    pub count: u32,
}

/// The guest functions counted, each apart: a version whose `tick` always traps must not be
/// kept alive by the `plan` calls that succeed in between. `on_callback` is not among them.
const FUNCTIONS: [&str; 4] = ["describe", "plan", "tick", "finalize"];

/// Consecutive crashing calls of one loaded version, per guest function.
#[derive(Debug, Default)]
pub(crate) struct Health {
    consecutive: [AtomicU32; FUNCTIONS.len()],
    /// Set by the version's first `plan` that answered (accepted or refused): its `plan` is
    /// known to run, so a later crash of it is down to the payload, which a tenant chooses
    /// (the API answers it 502 `handler-fault`), and is not counted: one tenant's payloads
    /// must not take the handler out of service for every tenant.
    planned: AtomicBool,
    /// Set once the threshold is reached, so a version trips at most once.
    tripped: AtomicBool,
}

impl Health {
    /// Record how a call of `function` ended. Returns the count when this call makes the
    /// version trip (exactly once per version); a successful call or an ordinary `err` of the
    /// same function resets its count; the provider's slowness leaves it as it was.
    pub fn record(
        &self,
        function: &str,
        fault: Option<&HandlerFault>,
        threshold: u32,
    ) -> Option<u32> {
        // Functions outside the list (`on_callback`) are not counted.
        let slot = FUNCTIONS.iter().position(|f| *f == function)?;
        let counter = &self.consecutive[slot];
        let plan = function == "plan";
        match fault {
            Some(f) if f.is_provider_slowness() => None,
            Some(f) if plan && f.is_crash() && self.planned.load(Ordering::Acquire) => None,
            Some(f) if f.is_crash() => {
                let n = counter.fetch_add(1, Ordering::AcqRel) + 1;
                let trips = n >= threshold.max(1)
                    && self
                        .tripped
                        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok();
                trips.then_some(n)
            }
            _ => {
                if plan {
                    self.planned.store(true, Ordering::Release);
                }
                counter.store(0, Ordering::Release);
                None
            }
        }
    }

    /// The longest run of consecutive crashing calls of any function so far.
    pub fn consecutive(&self) -> u32 {
        self.consecutive
            .iter()
            .map(|c| c.load(Ordering::Acquire))
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trips_once_after_k_crashes_in_a_row() {
        let h = Health::default();
        let trap = HandlerFault::Trap("boom".into());
        let err = HandlerFault::Error("provider said no".into());
        assert_eq!(h.record("tick", Some(&trap), 3), None);
        assert_eq!(h.record("tick", Some(&trap), 3), None);
        // A success in between resets; so does an ordinary `err`.
        assert_eq!(h.record("tick", None, 3), None);
        assert_eq!(h.record("tick", Some(&trap), 3), None);
        assert_eq!(h.record("tick", Some(&err), 3), None);
        assert_eq!(h.consecutive(), 0);
        assert_eq!(h.record("tick", Some(&trap), 3), None);
        let deadline = HandlerFault::Deadline(Default::default());
        assert_eq!(h.record("tick", Some(&deadline), 3), None);
        // Successful calls of another function do not keep a crashing `tick` alive.
        assert_eq!(h.record("plan", None, 3), None);
        assert_eq!(h.record("tick", Some(&trap), 3), Some(3));
        // Never twice.
        assert_eq!(h.record("tick", Some(&trap), 3), None);
    }

    /// A `plan` that crashes from the start (a broken release) trips the version; once a plan
    /// has answered, crashes of `plan` are the payloads' doing and never trip it, however
    /// many come in a row. Other functions still count as before.
    #[test]
    fn plan_crashes_count_only_until_a_plan_answered() {
        let trap = HandlerFault::Trap("boom".into());
        let broken = Health::default();
        assert_eq!(broken.record("plan", Some(&trap), 3), None);
        assert_eq!(broken.record("plan", Some(&trap), 3), None);
        assert_eq!(broken.record("plan", Some(&trap), 3), Some(3));

        let h = Health::default();
        assert_eq!(h.record("plan", Some(&trap), 3), None);
        // A refused payload is an answer too: the code runs.
        let refused = HandlerFault::Error("payload refused".into());
        assert_eq!(h.record("plan", Some(&refused), 3), None);
        for _ in 0..20 {
            assert_eq!(h.record("plan", Some(&trap), 3), None);
        }
        assert_eq!(h.consecutive(), 0);
        assert_eq!(h.record("tick", Some(&trap), 3), None);
        assert_eq!(h.record("tick", Some(&trap), 3), None);
        assert_eq!(h.record("tick", Some(&trap), 3), Some(3));
    }

    #[test]
    fn provider_slowness_and_callbacks_do_not_count() {
        let h = Health::default();
        let slow = HandlerFault::ProviderDeadline(Default::default());
        let trap = HandlerFault::Trap("boom".into());
        for _ in 0..10 {
            assert_eq!(h.record("tick", Some(&slow), 3), None);
            assert_eq!(h.record("on_callback", Some(&trap), 3), None);
        }
        assert_eq!(h.consecutive(), 0);
        // Slowness in between neither counts nor hides the guest's own crashes.
        assert_eq!(h.record("tick", Some(&trap), 3), None);
        assert_eq!(h.record("tick", Some(&slow), 3), None);
        assert_eq!(h.record("tick", Some(&trap), 3), None);
        let cpu = HandlerFault::CpuBudget(Default::default());
        assert_eq!(h.record("tick", Some(&cpu), 3), Some(3));
        let cap = HandlerFault::ResourceCap("memory cap".into());
        assert!(cap.is_crash());
    }
}
