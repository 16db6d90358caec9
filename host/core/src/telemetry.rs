//! Where one slotd instance's metrics go.
//!
//! Every metric slotd records goes through a [`Metrics`] handle that the instance owns, not
//! through a process-wide recorder: a process that hosts several instances (the test suites
//! start dozens in one process) keeps one registry per instance, so "this counter moved" is
//! about this instance only. The `metrics` macros are used unchanged inside
//! [`Metrics::record`], which routes them to the instance's recorder for the duration of the
//! closure (`metrics::with_local_recorder`); the closure is synchronous, so the routing does
//! not depend on which thread or task runs it.

use std::sync::Arc;

/// One instance's metrics registry (cheap to clone: every clone records into the same one).
#[derive(Clone, Default)]
pub struct Metrics {
    recorder: Option<Arc<dyn metrics::Recorder + Send + Sync>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("registry", &self.recorder.is_some())
            .finish()
    }
}

impl Metrics {
    /// Record into `recorder`.
    pub fn new(recorder: Arc<dyn metrics::Recorder + Send + Sync>) -> Metrics {
        Metrics {
            recorder: Some(recorder),
        }
    }

    /// Record nowhere (`plugin check`, tools and tests that do not read metrics).
    pub fn discard() -> Metrics {
        Metrics { recorder: None }
    }

    /// Run `f`, sending every metric it records to this instance's registry. Without one,
    /// what `f` records is dropped (no process-wide recorder is ever installed).
    pub fn record<T>(&self, f: impl FnOnce() -> T) -> T {
        match &self.recorder {
            Some(r) => metrics::with_local_recorder(r.as_ref(), f),
            None => metrics::with_local_recorder(&metrics::NoopRecorder, f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Counts every counter increment it is given.
    struct Counting(Arc<AtomicU64>);

    struct Inc(Arc<AtomicU64>);
    impl metrics::CounterFn for Inc {
        fn increment(&self, value: u64) {
            self.0.fetch_add(value, Ordering::SeqCst);
        }
        fn absolute(&self, _: u64) {}
    }

    impl metrics::Recorder for Counting {
        fn describe_counter(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn describe_gauge(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn describe_histogram(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn register_counter(
            &self,
            _: &metrics::Key,
            _: &metrics::Metadata<'_>,
        ) -> metrics::Counter {
            metrics::Counter::from_arc(Arc::new(Inc(self.0.clone())))
        }
        fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
            metrics::Gauge::noop()
        }
        fn register_histogram(
            &self,
            _: &metrics::Key,
            _: &metrics::Metadata<'_>,
        ) -> metrics::Histogram {
            metrics::Histogram::noop()
        }
    }

    #[test]
    fn two_instances_keep_their_own_counts_across_threads() {
        let (a_seen, b_seen) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let a = Metrics::new(Arc::new(Counting(a_seen.clone())));
        let b = Metrics::new(Arc::new(Counting(b_seen.clone())));
        let worker = {
            let b = b.clone();
            std::thread::spawn(move || b.record(|| metrics::counter!("x").increment(5)))
        };
        a.record(|| metrics::counter!("x").increment(2));
        worker.join().expect("worker");
        Metrics::discard().record(|| metrics::counter!("x").increment(100));
        assert_eq!(a_seen.load(Ordering::SeqCst), 2);
        assert_eq!(b_seen.load(Ordering::SeqCst), 5);
    }
}
